//! `paiod`: the paio control plane daemon. Thin glue over `paio_control`.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use clap::Parser;
use paio_control::cli::{Args, LogFormat};
use paio_control::config::PaiodConfig;
use paio_control::conns::Limits;
use paio_control::server::{self, State};

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(path) = &args.check_config {
        return check_config(path, args.socket.clone());
    }
    // Taken first, while paiod has one thread: it unsets LISTEN_FDS.
    let activated = activated_socket()?;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&args.log));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => logs.json().init(),
    }

    let config = match &args.config {
        Some(path) => PaiodConfig::from_file(path)?,
        None => PaiodConfig::parse("", "<default>")?,
    };
    let descriptors = raise_descriptor_limit();
    let limits = Limits::resolve(&config.connections, descriptors)?;
    tracing::info!(
        "descriptor limit {descriptors}: up to {} stages ({} per uid), {} waiting connections",
        limits.max_stages,
        limits.max_stages_per_uid,
        limits.max_waiting
    );
    let socket = match &activated {
        Some(l) => l
            .local_addr()
            .ok()
            .and_then(|a| a.as_pathname().map(PathBuf::from))
            .context("the socket systemd passed has no path")?,
        None => server::socket_path(args.socket.clone(), &config),
    };
    let metrics = args.metrics.or(config.metrics);
    let socket_activated = activated.is_some();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let listener = match activated {
            Some(l) => {
                tracing::info!("socket {} passed by systemd", socket.display());
                l.set_nonblocking(true)
                    .and_then(|()| tokio::net::UnixListener::from_std(l))
                    .context("using the socket systemd passed")?
            }
            None => server::bind(&socket)?,
        };
        let bound = server::socket_id(&socket);
        let state = Arc::new(Mutex::new(State::new(
            config.policy.build(),
            config.period,
            config.collect_timeout,
            limits,
        )));
        if let Some(path) = &args.record {
            let r = paio_control::record::Recorder::create(path).context("--record")?;
            lock(&state).set_recorder(r);
            tracing::info!("recording every period into {}", path.display());
        }
        match &args.config {
            Some(path) => {
                lock(&state).set_config_path(path);
                let reload = Reload {
                    path: path.clone(),
                    socket: socket.clone(),
                    socket_from_cli: args.socket.is_some(),
                    metrics,
                    metrics_from_cli: args.metrics.is_some(),
                    descriptors,
                    cluster: config.cluster.clone(),
                    policy: config.policy.clone(),
                };
                tokio::spawn(reload.on_sighup(state.clone()));
            }
            None => {
                tokio::spawn(ignore_sighup());
            }
        }
        let mut leaver = None;
        if let Some(c) = &config.cluster {
            let agent = paio_control::cluster::node::Agent::install(
                c.clone(),
                state.clone(),
                &config.policy,
            );
            leaver = Some(agent.leaver());
            tracing::info!(
                "cluster {}: node {} with etcd at {}",
                c.name,
                c.node,
                c.endpoints.join(", ")
            );
            tokio::spawn(agent.run());
        }
        if let Some(addr) = metrics {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("--metrics {addr}"))?;
            if !addr.ip().is_loopback() {
                tracing::warn!("metrics served on {addr}, which is not a loopback address");
            }
            tracing::info!("metrics on http://{addr}/metrics");
            tokio::spawn(paio_control::metrics::serve(l, state.clone()));
        }
        tracing::info!(
            "paiod {} listening on {} (policy {}, period {:?})",
            env!("CARGO_PKG_VERSION"),
            socket.display(),
            lock_kind(&state),
            config.period
        );
        let shutdown = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut term) => {
                    tokio::select! {
                        _ = tokio::signal::ctrl_c() => {}
                        _ = term.recv() => {}
                    }
                }
                Err(e) => {
                    tracing::warn!("cannot handle SIGTERM ({e}); stop paiod with SIGINT");
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
            tracing::info!("shutting down");
            // The path goes while the listener still takes connections: a
            // paiod started on it meanwhile found it in use, so the file
            // removed is this paiod's, never a successor's. A socket
            // systemd passed stays: it is systemd's, and keeps taking
            // connections while paiod is down.
            if !socket_activated {
                server::remove_socket(&socket, bound);
            }
        };
        server::serve(listener, state, &config, shutdown).await;
        // Cluster mode: give the lease back, so the others need not wait
        // for it to expire.
        if let Some(l) = leaver {
            l.leave(std::time::Duration::from_secs(1)).await;
        }
        // Let the goodbyes go out before the process ends.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        anyhow::Ok(())
    })
}

/// The listening socket systemd passed (socket activation, `paiod.socket`),
/// if any: exactly one Unix stream socket.
fn activated_socket() -> anyhow::Result<Option<std::os::unix::net::UnixListener>> {
    let mut fds = listenfd::ListenFd::from_env();
    match fds.len() {
        0 => Ok(None),
        1 => fds
            .take_unix_listener(0)
            .context("LISTEN_FDS: the socket passed to paiod is not a Unix stream socket"),
        n => anyhow::bail!(
            "LISTEN_FDS={n}: paiod takes one socket (its .socket unit must list one ListenStream)"
        ),
    }
}

/// Raises the soft descriptor limit to the hard one (the usual soft 1,024
/// would cap paiod at about 700 stages); returns the limit in force.
fn raise_descriptor_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    let soft = lim.current;
    if lim.current != lim.maximum {
        lim.current = lim.maximum;
        match setrlimit(Resource::Nofile, lim) {
            Ok(()) => tracing::info!(
                "descriptor soft limit raised from {} to {}",
                soft.map_or("unlimited".into(), |v| v.to_string()),
                lim.maximum.map_or("unlimited".into(), |v| v.to_string())
            ),
            Err(e) => {
                tracing::warn!("cannot raise the descriptor soft limit to the hard limit: {e}");
                return soft.unwrap_or(u64::MAX);
            }
        }
    }
    lim.current.unwrap_or(u64::MAX)
}

fn lock(state: &server::Shared) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

fn lock_kind(state: &server::Shared) -> String {
    lock(state).status().policy
}

/// `--check-config FILE`: loads it as paiod would, says what it sets up.
fn check_config(path: &std::path::Path, socket: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    let config = match PaiodConfig::from_file(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("paiod: {e}");
            std::process::exit(1);
        }
    };
    let descriptors = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .maximum
        .unwrap_or(u64::MAX);
    let limits = match Limits::resolve(&config.connections, descriptors) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("paiod: {}: {e}", path.display());
            std::process::exit(1);
        }
    };
    let socket = server::socket_path(socket, &config);
    if let Err(e) = paio_control::config::check_socket_path(&socket) {
        eprintln!("paiod: socket {e}");
        std::process::exit(1);
    }
    let policy = config.policy.build();
    println!("{}: valid", path.display());
    println!("  policy: {}", policy.kind());
    println!(
        "  period: {:?}, collect timeout {:?}",
        config.period, config.collect_timeout
    );
    println!("  socket: {}", socket.display());
    match config.metrics {
        Some(a) => println!("  metrics: http://{a}/metrics"),
        None => println!("  metrics: not served"),
    }
    println!(
        "  connections: up to {} stages ({} per uid), {} waiting, with a descriptor limit of {}",
        limits.max_stages, limits.max_stages_per_uid, limits.max_waiting, descriptors
    );
    Ok(())
}

/// What a SIGHUP reloads from, and what it cannot change in a running
/// paiod.
struct Reload {
    path: PathBuf,
    /// The socket paiod listens on, and whether `--socket` set it.
    socket: PathBuf,
    socket_from_cli: bool,
    metrics: Option<std::net::SocketAddr>,
    metrics_from_cli: bool,
    descriptors: u64,
    /// `[cluster]`, which only a restart changes.
    cluster: Option<paio_control::cluster::ClusterConfig>,
    /// The `[policy]` last loaded (in cluster mode its kind, max_bandwidth
    /// and groups are the cluster's: a reload changing them says so).
    policy: paio_control::config::PolicyConfig,
}

impl Reload {
    /// Reloads the configuration on every SIGHUP. An unreadable or invalid
    /// file is refused as a whole (logged, counted in status and metrics);
    /// the running configuration stays.
    async fn on_sighup(mut self, state: server::Shared) {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = match signal(SignalKind::hangup()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cannot handle SIGHUP ({e}): the configuration cannot be reloaded");
                return;
            }
        };
        while hup.recv().await.is_some() {
            self.once(&state);
        }
    }

    fn once(&mut self, state: &server::Shared) {
        let loaded = PaiodConfig::from_file(&self.path)
            .map_err(|e| e.to_string())
            .and_then(|c| {
                Limits::resolve(&c.connections, self.descriptors)
                    .map(|l| (c, l))
                    .map_err(|e| format!("{}: {e}", self.path.display()))
            });
        let loaded = loaded.and_then(|(c, l)| {
            if c.cluster == self.cluster {
                Ok((c, l))
            } else {
                Err(format!(
                    "{}: [cluster] differs from the running one; it changes only when paiod \
                     restarts",
                    self.path.display()
                ))
            }
        });
        let (config, limits) = match loaded {
            Ok(x) => x,
            Err(e) => {
                tracing::error!("reload refused, the running configuration stays: {e}");
                lock(state).reload_refused(e);
                return;
            }
        };
        let changes = lock(state).reload(&config, limits);
        tracing::info!("configuration reloaded from {}", self.path.display());
        for c in changes {
            tracing::info!("  {c}");
        }
        if self.cluster.is_some() {
            if let Some(w) =
                paio_control::cluster::unapplied_policy_changes(&self.policy, &config.policy)
            {
                tracing::warn!("{}: {w}", self.path.display());
            }
        }
        self.policy = config.policy.clone();
        let socket = server::socket_path(None, &config);
        if !self.socket_from_cli && socket != self.socket {
            tracing::warn!(
                "socket {} takes effect only when paiod restarts; still listening on {}",
                socket.display(),
                self.socket.display()
            );
        }
        if !self.metrics_from_cli && config.metrics != self.metrics {
            tracing::warn!(
                "metrics {} take effect only when paiod restarts; still {}",
                config.metrics.map_or("off".to_string(), |a| a.to_string()),
                self.metrics
                    .map_or("off".to_string(), |a| format!("on {a}"))
            );
        }
    }
}

/// Without a configuration file a SIGHUP has nothing to reload: paiod says
/// so and runs on (instead of dying, SIGHUP's default).
async fn ignore_sighup() {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        return;
    };
    while hup.recv().await.is_some() {
        tracing::warn!("SIGHUP: paiod was started without --config, so there is nothing to reload");
    }
}
