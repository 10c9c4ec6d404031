//! `paiod`: the paio control plane daemon. Thin glue over `paio_control`.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use clap::Parser;
use paio_control::config::PaiodConfig;
use paio_control::conns::Limits;
use paio_control::server::{self, State};

/// The paio control plane: stages register over a Unix socket and receive
/// rules from the configured policy every control period.
#[derive(Parser, Debug)]
#[command(name = "paiod", version, about)]
struct Args {
    /// paiod's TOML configuration (policy, period, socket, metrics). Without
    /// it: observe only (stages register and report, no rules).
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// The Unix socket stages and `paio ctl` connect to (overrides the
    /// configuration). Default: $XDG_RUNTIME_DIR/paio/paiod.sock, or
    /// /run/paio/paiod.sock for root.
    #[arg(long, short = 's', value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9464;
    /// overrides the configuration).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// Log filter (error, warn, info, debug), also from RUST_LOG.
    #[arg(long, default_value = "info")]
    log: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&args.log));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();

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
    let socket = server::socket_path(args.socket.clone(), &config);
    let metrics = args.metrics.or(config.metrics);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let listener = server::bind(&socket)?;
        let state = Arc::new(Mutex::new(State::new(
            config.policy.build(),
            config.period,
            config.collect_timeout,
            limits,
        )));
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
        };
        server::serve(listener, state, &config, shutdown).await;
        // Let the goodbyes go out before the socket disappears.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let _ = std::fs::remove_file(&socket);
        anyhow::Ok(())
    })
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

fn lock_kind(state: &server::Shared) -> String {
    state
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .status()
        .policy
}
