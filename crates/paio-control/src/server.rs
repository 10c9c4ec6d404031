//! The daemon: the socket, stage sessions, administration sessions and the
//! control loop.
//!
//! - One task per connection. A stage's session registers it on `hello`,
//!   records pid/uid/gid from the kernel (`SO_PEERCRED`), sends `welcome`
//!   and the policy's setup rules (without creations of what the stage
//!   already has), then stores each `stats` answer.
//! - The control loop runs every period: it drops stages that left or did
//!   not answer a collect within the collect timeout, reads each process's
//!   `/proc/<pid>/io`, gives the policy every stage's view, sends the rules
//!   it returns, and asks every stage to collect.
//! - State is behind one mutex held only between awaits, never across one.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use paio::protocol::{self, ErrorCode, FrameDecoder, FrameError, Hello, Message};
use paio::stats::Counts;
use paio::{ObjectConfig, Rule, StageStats};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

use crate::cluster::node::{ClusterView, SetCommand};
use crate::config::PaiodConfig;
use crate::conns::{Closed, Conns, Limits};
use crate::ctl::{
    ChannelStatus, ConfigStatus, CtlCommand, CtlReply, CtlRequest, ObjectStatus, StageStatus,
    StatusReport,
};
use crate::loopstats::{self, LoopStats};
use crate::outbox::{self, Outbox};
use crate::peer::{self, Escaped};
use crate::policy::{ControlPolicy, GroupTarget, ProcIo, StageId, StageView};
use crate::record::{self, ChannelSample, Recorder, Sample};

/// Errors that stop the daemon from starting.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Another paiod answers on the socket.
    #[error("{path}: another paiod is already listening there")]
    InUse {
        /// The socket.
        path: String,
    },
    /// A server holds the socket but does not accept connections.
    #[error(
        "{path}: a server listens there but accepts no connection ({error}): stop it (or \
         `kill -CONT` a stopped paiod), or choose another --socket"
    )]
    NotAccepting {
        /// The socket.
        path: String,
        /// What connecting met.
        error: io::Error,
    },
    /// The socket's directory or an existing file at the socket's path is
    /// not paiod's own (socket squatting, or a misconfigured path).
    #[error("{path}: {reason}")]
    NotOwn {
        /// The directory or file.
        path: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// The socket or its directory could not be set up.
    #[error("{path}: {source}")]
    Socket {
        /// The socket.
        path: String,
        /// The error.
        source: io::Error,
    },
}

/// Kernel-reported credentials of a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    /// Process id (0 if the kernel did not say).
    pub pid: u32,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

struct StageEntry {
    view: StageView,
    cred: PeerCred,
    registered_at: Instant,
    /// The stage's connection (closing it ends the connection task).
    out: Outbox,
    /// When `view.stats` arrived (its cumulative totals are the base of
    /// the next report's rates).
    last_stats_at: Option<Instant>,
    /// The collect request outstanding, with when it was sent.
    outstanding: Option<(u64, Instant)>,
    /// Last `/proc/<pid>/io` sample: time, read_bytes, write_bytes.
    proc_prev: Option<(Instant, u64, u64)>,
    next_request: u64,
    /// This stage's share of what paiod keeps of stages
    /// ([`Conns::hold`]): its registration and latest statistics.
    held: usize,
}

impl StageEntry {
    /// Logs that stage `id`, this entry, left (its connection ended).
    fn say_left(&self, id: StageId) {
        tracing::info!(
            "stage {id} ({} pid {}) left",
            Escaped(&self.view.info.identity.name),
            self.cred.pid
        );
    }

    fn send(&mut self, make: impl FnOnce(u64) -> Message) -> u64 {
        self.next_request += 1;
        let id = self.next_request;
        self.out.send(&make(id));
        id
    }
}

/// How long `paio ctl set` waits for etcd in cluster mode.
const CLUSTER_SET_TIMEOUT: Duration = Duration::from_secs(5);

/// Everything the tasks share.
pub struct State {
    policy: Box<dyn ControlPolicy>,
    stages: BTreeMap<StageId, StageEntry>,
    next_id: StageId,
    started: Instant,
    period: Duration,
    collect_timeout: Duration,
    conns: Conns,
    loop_stats: LoopStats,
    /// When `/proc/<pid>/io` was last sampled.
    proc_sampled: Option<Instant>,
    /// The configuration file and its reloads.
    config: ConfigStatus,
    /// `--record`: a line per period.
    recorder: Option<Recorder>,
    /// Cluster mode: the node's view of the cluster, and the way to its
    /// agent (for `paio ctl set`).
    cluster: Option<(ClusterView, mpsc::Sender<SetCommand>)>,
}

/// The daemon's shared state, for the metrics endpoint and tests.
pub type Shared = Arc<Mutex<State>>;

/// Locks `state`; a panic elsewhere does not poison it for the others.
pub(crate) fn lock(state: &Shared) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    /// A state running `policy` every `period`, serving connections
    /// within `limits`.
    pub fn new(
        policy: Box<dyn ControlPolicy>,
        period: Duration,
        collect_timeout: Duration,
        limits: Limits,
    ) -> Self {
        Self {
            policy,
            stages: BTreeMap::new(),
            next_id: 0,
            started: Instant::now(),
            period,
            collect_timeout,
            conns: Conns::new(limits),
            loop_stats: LoopStats::new(period),
            proc_sampled: None,
            config: ConfigStatus::default(),
            recorder: None,
            cluster: None,
        }
    }

    /// Cluster mode: `paio ctl set` goes to the agent through `commands`
    /// (see [`crate::cluster::node::Agent`]).
    pub fn set_cluster(&mut self, commands: mpsc::Sender<SetCommand>) {
        self.cluster = Some((ClusterView::default(), commands));
    }

    /// The node's view of the cluster. Panics outside cluster mode (only
    /// the agent calls it, after [`State::set_cluster`]).
    pub(crate) fn cluster_view_mut(&mut self) -> &mut ClusterView {
        &mut self
            .cluster
            .as_mut()
            .expect("the cluster agent runs only in cluster mode")
            .0
    }

    /// The policy's per-group figures of its last period.
    pub(crate) fn group_targets(&self) -> Vec<GroupTarget> {
        self.policy.targets()
    }

    /// Hands the node's cluster allocation to the policy (which takes it
    /// from its next period on).
    pub(crate) fn apply_cluster_allocation(&mut self, rates: &BTreeMap<String, f64>) {
        if let Err(e) = self.policy.set_node_allocation(rates) {
            tracing::error!("cluster allocation not applied: {e}");
        }
    }

    /// Records every stage's channels into `recorder` after each control
    /// period from now on (`paiod --record`): paiod's latest figures of
    /// each stage, one line per period.
    pub fn set_recorder(&mut self, recorder: Recorder) {
        self.recorder = Some(recorder);
    }

    /// Queues the period's line of `--record`, if recording.
    fn record_period(&mut self) {
        if self.recorder.is_none() {
            return;
        }
        let report = self.status();
        let sample = Sample {
            v: record::VERSION,
            t_s: report.uptime_s,
            unix_ms: record::unix_ms(std::time::SystemTime::now()),
            dropped: 0,
            channels: ChannelSample::of_report(&report),
        };
        if let Some(Err(e)) = self.recorder.as_mut().map(|r| r.record(sample)) {
            tracing::warn!("--record: {e}; recording stops here");
        }
    }

    /// Records the configuration file paiod runs from, for status.
    pub fn set_config_path(&mut self, path: &Path) {
        self.config.path = Some(path.display().to_string());
    }

    /// Puts a reloaded configuration in force without dropping a stage: the
    /// policy is rebuilt from it (run-time `paio ctl set` changes give way
    /// to the file's values) and every registered stage gets the new
    /// policy's setup rules at once; the period, the collect timeout and
    /// `limits` take effect from the next tick. Returns one line per
    /// change, including each DRL object the previous policy set and the
    /// new one does not, which keeps its last rate (the stage is not
    /// touched behind the new policy's back).
    pub fn reload(&mut self, config: &PaiodConfig, limits: Limits) -> Vec<String> {
        let mut said = Vec::new();
        let new = config.policy.build();
        said.push(format!(
            "policy {} rebuilt from the file (changes made with `paio ctl set` are replaced)",
            new.kind()
        ));
        for e in self.stages.values() {
            for c in &e.view.info.channels {
                for o in c.objects.iter().filter(|o| o.kind == "drl") {
                    if self.policy.controls(&e.view, &c.name, &o.name)
                        && !new.controls(&e.view, &c.name, &o.name)
                    {
                        said.push(format!(
                            "stage {} ({}): {}/{} keeps the last rate the previous policy set \
                             (change it with `paio ctl set-rate`)",
                            e.view.id,
                            Escaped(&e.view.info.identity.name),
                            Escaped(&c.name),
                            Escaped(&o.name)
                        ));
                    }
                }
            }
        }
        self.policy = new;
        // Cluster mode: the node's allocation stays in force.
        let allocation = self
            .cluster
            .as_ref()
            .and_then(|(v, _)| v.allocation.as_ref())
            .map(|(a, _)| a.jobs.clone());
        if let Some(jobs) = allocation {
            self.apply_cluster_allocation(&jobs);
        }
        for e in self.stages.values_mut() {
            let setup = missing(self.policy.setup(&e.view), &e.view);
            if !setup.is_empty() {
                apply_to_view(&mut e.view, &setup);
                e.send(|rid| Message::Rules {
                    id: rid,
                    rules: setup,
                });
            }
        }
        if self.period != config.period {
            said.push(format!("period {:?} -> {:?}", self.period, config.period));
            self.period = config.period;
            self.loop_stats.set_target(config.period);
        }
        if self.collect_timeout != config.collect_timeout {
            said.push(format!(
                "collect_timeout {:?} -> {:?}",
                self.collect_timeout, config.collect_timeout
            ));
            self.collect_timeout = config.collect_timeout;
        }
        if *self.conns.limits() != limits {
            said.push(format!(
                "[connections]: max_stages {}, max_stages_per_uid {}, max_waiting {}, \
                 hello_timeout {:?}, drain_timeout {:?}",
                limits.max_stages,
                limits.max_stages_per_uid,
                limits.max_waiting,
                limits.hello_timeout,
                limits.drain_timeout
            ));
            self.conns.set_limits(limits);
        }
        self.config.reloads += 1;
        self.config.last_error = None;
        said
    }

    /// Records a refused reload: the running configuration stays.
    pub fn reload_refused(&mut self, why: String) {
        self.config.refused += 1;
        self.config.last_error = Some(why);
    }

    /// The control period in force.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Removes stage `id` and gives back its connection slot.
    fn remove_stage(&mut self, id: StageId) -> Option<StageEntry> {
        let e = self.stages.remove(&id)?;
        self.conns.stage_left(e.cred.uid);
        // Giving back never fails.
        let _ = self.conns.hold(e.held, 0);
        Some(e)
    }

    /// `paio ctl set-rate`: sets `channel/object`'s DRL rate in every stage
    /// `selector` names (an id or a name), after checking all of them, so
    /// either every one gets the rule or none does. Returns what was done.
    pub fn set_rate(
        &mut self,
        selector: &str,
        channel: &str,
        object: &str,
        rate: &str,
    ) -> Result<String, String> {
        let parsed = paio::units::parse_rate(rate)
            .map_err(|e| format!("rate {rate:?}: {e} (e.g. 20MiB/s or 500 iops)"))?;
        let ids: Vec<StageId> = self
            .stages
            .iter()
            .filter(|(id, e)| id.to_string() == selector || e.view.info.identity.name == selector)
            .map(|(id, _)| *id)
            .collect();
        if ids.is_empty() {
            let known: Vec<String> = self
                .stages
                .iter()
                .map(|(id, e)| format!("{id} ({})", e.view.info.identity.name))
                .collect();
            return Err(format!(
                "no registered stage has id or name {selector:?} (registered: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ));
        }
        let mut batch = Vec::new();
        for id in &ids {
            let view = &self.stages[id].view;
            let who = format!(
                "stage {id} ({} pid {})",
                view.info.identity.name, view.info.identity.pid
            );
            let ch = view.info.channels.iter().find(|c| c.name == channel);
            let Some(ch) = ch else {
                let names: Vec<&str> = view.info.channels.iter().map(|c| c.name.as_str()).collect();
                return Err(format!(
                    "{who} has no channel {channel:?} (it has: {})",
                    names.join(", ")
                ));
            };
            let Some(obj) = ch.objects.iter().find(|o| o.name == object) else {
                let names: Vec<&str> = ch.objects.iter().map(|o| o.name.as_str()).collect();
                return Err(format!(
                    "{who}: channel {channel:?} has no object {object:?} (it has: {})",
                    names.join(", ")
                ));
            };
            let Some(paio::ObjectConfig::Drl(current)) = &obj.config else {
                return Err(format!(
                    "{who}: {channel}/{object} is a {} object; set-rate changes DRL objects",
                    obj.kind
                ));
            };
            if self.policy.controls(view, channel, object) {
                return Err(format!(
                    "{who}: policy {} sets {channel}/{object} every period and would overwrite \
                     the rate: change the policy's parameters with `paio ctl set` instead",
                    self.policy.kind()
                ));
            }
            if ch.default_object != object && !ch.object_rules.iter().any(|(_, o)| o == object) {
                return Err(format!(
                    "{who}: no request reaches {channel}/{object} (the channel's default object \
                     is {:?} and no mapping sends requests to {object:?}), so its rate would \
                     change nothing{}",
                    ch.default_object,
                    if ch.default_object == crate::policy::common::OBJECT {
                        "; paiod's DRL took its place, with the limits it had as its ceiling \
                         (max_rate), which only the stage's own policy sets"
                    } else {
                        ""
                    }
                ));
            }
            let mut config = current.clone();
            config.rate = parsed;
            batch.push((
                *id,
                Rule::Configure {
                    channel: channel.to_string(),
                    object: object.to_string(),
                    config: paio::ObjectConfig::Drl(config),
                },
            ));
        }
        for (id, rule) in batch {
            let entry = self.stages.get_mut(&id).expect("checked above");
            let rules = vec![rule];
            apply_to_view(&mut entry.view, &rules);
            entry.send(|rid| Message::Rules { id: rid, rules });
        }
        let pause = if parsed.per_second == 0 {
            " (rate 0: the object holds every request until a later rate)"
        } else {
            ""
        };
        Ok(format!(
            "{channel}/{object} = {rate} in stage(s) {}{pause}",
            ids.iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }

    /// paiod's view as `paio status` reports it.
    pub fn status(&self) -> StatusReport {
        let now = Instant::now();
        StatusReport {
            pid: std::process::id(),
            uptime_s: now.duration_since(self.started).as_secs_f64(),
            period_ms: self.period.as_millis() as u64,
            policy: self.policy.kind().to_string(),
            groups: self.policy.targets(),
            latency: self.policy.latency(),
            stages: self.stages.values().map(|e| stage_status(e, now)).collect(),
            stages_omitted: 0,
            connections: Some(self.conns.status()),
            control_loop: Some(self.loop_stats.status()),
            config: Some(self.config.clone()),
            cluster: self.cluster.as_ref().map(|(v, _)| v.status(now)),
        }
    }

    /// Each registered stage's last cumulative statistics, keyed by its
    /// name, pid and id; stages that have sent none yet are left out.
    pub fn stats(&self) -> Vec<((String, u32, u64), StageStats)> {
        self.stages
            .values()
            .filter_map(|e| {
                let v = &e.view;
                let id = &v.info.identity;
                Some(((id.name.clone(), id.pid, v.id), v.stats.clone()?))
            })
            .collect()
    }
}

fn stage_status(e: &StageEntry, now: Instant) -> StageStatus {
    let info = &e.view.info;
    let stats = e.view.stats.as_ref();
    let channels = info
        .channels
        .iter()
        .map(|c| {
            let cs = stats.and_then(|s| s.channels.iter().find(|x| x.name == c.name));
            ChannelStatus {
                name: c.name.clone(),
                bytes_per_sec: cs.map_or(0.0, |x| x.counts.bytes_per_sec),
                ops_per_sec: cs.map_or(0.0, |x| x.counts.ops_per_sec),
                wait: cs.map_or_else(Default::default, |x| x.counts.wait),
                latency: cs.map_or_else(Default::default, |x| x.counts.latency),
                objects: c
                    .objects
                    .iter()
                    .map(|o| ObjectStatus {
                        name: o.name.clone(),
                        kind: o.kind.clone(),
                        config: o.config.clone(),
                        bytes_per_sec: cs
                            .and_then(|x| x.objects.iter().find(|y| y.name == o.name))
                            .map_or(0.0, |y| y.counts.bytes_per_sec),
                    })
                    .collect(),
            }
        })
        .collect();
    StageStatus {
        id: e.view.id,
        name: info.identity.name.clone(),
        pid: e.cred.pid,
        uid: e.cred.uid,
        host: info.identity.host.clone(),
        labels: info.identity.labels.clone(),
        registered_s: now.duration_since(e.registered_at).as_secs_f64(),
        proc_read_bytes_per_sec: e.view.proc_io.map(|p| p.read_bytes_per_sec),
        proc_write_bytes_per_sec: e.view.proc_io.map(|p| p.write_bytes_per_sec),
        channels,
    }
}

/// Why paiod, running as `me`, must not put its socket in a directory
/// owned by `owner` with permission bits `mode`: it is another user's
/// (who could replace the socket), or others may write to it without the
/// sticky bit (so they could delete or replace the socket). None: safe.
pub fn unsafe_socket_dir(owner: u32, mode: u32, me: u32) -> Option<String> {
    if owner != me && owner != 0 {
        return Some(format!(
            "the socket's directory belongs to uid {owner}, not to paiod's uid {me}: another \
             user could replace the socket; use a directory of your own (the default is \
             $XDG_RUNTIME_DIR/paio)"
        ));
    }
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Some(format!(
            "the socket's directory has mode {:o}: writable by others without the sticky bit, \
             so another user could replace the socket; use a directory only you can write to",
            mode & 0o7777
        ));
    }
    None
}

/// Creates the socket's directory (mode 0700) if missing, refuses a
/// directory that is not safely paiod's ([`unsafe_socket_dir`]) and a file
/// at the path that is not paiod's own socket, refuses to start when
/// another paiod answers, removes a stale socket of its own, binds, and
/// makes the socket 0600: only paiod's user (and root) may connect.
pub fn bind(path: &Path) -> Result<UnixListener, ServerError> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let err = |source| ServerError::Socket {
        path: path.display().to_string(),
        source,
    };
    let me = rustix::process::geteuid().as_raw();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            // Created 0700 at once, not chmod-ed after: nobody else may
            // enter it meanwhile.
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(err)?;
        }
        // The directory itself, not what a symbolic link there names:
        // another user's link at the default /tmp/paio-<uid> would let them
        // move the socket away later.
        let meta = std::fs::symlink_metadata(dir).map_err(err)?;
        if meta.file_type().is_symlink() {
            return Err(ServerError::NotOwn {
                path: dir.display().to_string(),
                reason: "the socket's directory is a symbolic link, which another user could \
                         point elsewhere: use the directory itself, or a directory of your own"
                    .into(),
            });
        }
        if let Some(reason) = unsafe_socket_dir(meta.uid(), meta.mode(), me) {
            return Err(ServerError::NotOwn {
                path: dir.display().to_string(),
                reason,
            });
        }
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let not_own = |reason: String| ServerError::NotOwn {
            path: path.display().to_string(),
            reason,
        };
        if !meta.file_type().is_socket() {
            return Err(not_own(
                "exists and is not a socket: paiod will not replace it; choose another --socket"
                    .into(),
            ));
        }
        if meta.uid() != me {
            return Err(not_own(format!(
                "a socket of uid {}, not paiod's uid {me} (another user's paiod, or a socket \
                 squatted at this path): choose another --socket",
                meta.uid()
            )));
        }
        // One try: a paiod whose queue is full (stopped, hung) still holds
        // the path, and a blocking connect would wait for it forever.
        match crate::unixconn::connect(path, Duration::ZERO) {
            Ok(_) => {
                return Err(ServerError::InUse {
                    path: path.display().to_string(),
                })
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                return Err(ServerError::NotAccepting {
                    path: path.display().to_string(),
                    error: e,
                })
            }
            Err(_) => std::fs::remove_file(path).map_err(err)?,
        }
    }
    // Created 0600: between a bind under the caller's umask and a chmod
    // after it, another user connected (and paiod served them).
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let bound = UnixListener::bind(path);
    rustix::process::umask(old);
    let listener = bound.map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    Ok(listener)
}

/// The identity (device, inode) of the socket file at `path`: taken after
/// [`bind`], so that [`remove_socket`] removes that file only.
pub fn socket_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// Removes the socket file at `path` if it is still the one whose
/// [`socket_id`] is `id`; true if removed. Called while the listener is
/// open (a paiod started meanwhile finds the path in use and binds none),
/// so a file replaced by hand is all the check can meet.
pub fn remove_socket(path: &Path, id: Option<(u64, u64)>) -> bool {
    id.is_some() && socket_id(path) == id && std::fs::remove_file(path).is_ok()
}

/// Runs the daemon on `listener` until `shutdown` completes.
pub async fn serve(
    listener: UnixListener,
    state: Shared,
    config: &PaiodConfig,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let accept = {
        let state = state.clone();
        async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        let state = state.clone();
                        tokio::spawn(serve_stream(stream, state));
                    }
                    Err(e) => {
                        tracing::warn!("accept: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }
    };
    let control = control_loop(state.clone(), config.period);
    tokio::select! {
        _ = accept => {}
        _ = control => {}
        _ = shutdown => {}
    }
    // Tell stages we are leaving; they keep their rules and reconnect.
    let mut st = lock(&state);
    for e in st.stages.values() {
        e.out.send(&Message::Goodbye {
            reason: Some("paiod shutting down".into()),
        });
    }
    if let Some(Err(e)) = st.recorder.take().map(Recorder::finish) {
        tracing::warn!("--record: {e}; the recording stopped before the end");
    }
}

/// Bytes a connection reads at once at first; doubled up to
/// [`MAX_READ_BUF`] while reads fill it. Idle connections hold none.
const FIRST_READ_BUF: usize = 4 * 1024;
/// The largest read buffer of a connection.
const MAX_READ_BUF: usize = 64 * 1024;
/// How often `/proc/<pid>/io` is sampled when the policy does not
/// calibrate with it.
const PROC_IO_INTERVAL: Duration = Duration::from_secs(1);
/// How long a closing connection's writer may take to send what is queued
/// (at most; never longer than the drain timeout).
const WRITER_GRACE: Duration = Duration::from_secs(1);

/// Serves one accepted connection until it ends, as [`serve`] does for
/// each: a stage or an administration client, told apart by the first
/// message, within the caps of [`Conns`]. When it returns, the peer's
/// stage (if any) is gone from `state` and its slots are free.
pub async fn serve_stream(stream: UnixStream, state: Shared) {
    let cred = match stream.peer_cred() {
        Ok(c) => PeerCred {
            pid: c.pid().map_or(0, |p| p as u32),
            uid: c.uid(),
            gid: c.gid(),
        },
        Err(e) => {
            tracing::warn!("SO_PEERCRED: {e}; closing");
            return;
        }
    };
    // Only paiod's own user and root: the socket's mode says so too, but a
    // socket passed by systemd, or a directory others can enter, must not
    // be all that stands between another user and this paiod's rules.
    let me = rustix::process::geteuid().as_raw();
    if cred.uid != me && cred.uid != 0 {
        lock(&state).conns.count(Closed::ForeignUid);
        tracing::warn!(
            "connection of pid {} uid {} refused: paiod serves uid {me} and root",
            cred.pid,
            cred.uid
        );
        refuse(
            stream,
            &format!("paiod serves uid {me} and root, not uid {}", cred.uid),
        )
        .await;
        return;
    }
    let (r, w) = stream.into_split();
    let (out, rx) = Outbox::new();
    let writer = tokio::spawn(rx.write_all_to(w));
    let (conn, limits) = {
        let mut st = lock(&state);
        (st.conns.wait(out.clone()), *st.conns.limits())
    };
    let mut session = Session::New { conn };
    let end = serve_connection(&r, &out, &state, cred, &mut session).await;
    {
        let mut st = lock(&state);
        match session {
            Session::New { conn } => st.conns.done_waiting(conn),
            Session::Ctl => st.conns.ctl_left(),
            Session::Stage { id } => {
                if let Some(e) = st.remove_stage(id) {
                    e.say_left(id);
                }
            }
        }
        if let Some(why) = end {
            st.conns.count(why);
            // Counted either way; only a peer that stops reading or holds
            // the buffer budget is worth a warning (idle peers would flood
            // the log).
            let level_warn = matches!(why, Closed::Unread | Closed::Buffered);
            let message = format!(
                "connection of pid {} uid {} closed: {}",
                cred.pid,
                cred.uid,
                match why {
                    Closed::HelloTimeout =>
                        format!("no hello or ctl within {:?}", limits.hello_timeout),
                    Closed::CtlIdle => format!(
                        "ctl session without a request for {:?}",
                        limits.hello_timeout
                    ),
                    Closed::Buffered => format!(
                        "its unfinished frame took the unfinished frames paiod holds over \
                         [connections] max_buffered = {} bytes",
                        limits.max_buffered
                    ),
                    _ => format!(
                        "it did not read its replies (over {} bytes queued for {:?}, or over {})",
                        outbox::SOFT_LIMIT,
                        limits.drain_timeout,
                        outbox::HARD_LIMIT
                    ),
                }
            );
            if level_warn {
                tracing::warn!("{message}");
            } else {
                tracing::debug!("{message}");
            }
        }
    }
    // Frames still queued get a moment to go out (a goodbye); a peer that
    // does not read them does not keep the task, its buffers and the
    // socket alive.
    out.close();
    drop(out);
    let abort = writer.abort_handle();
    let grace = WRITER_GRACE.min(limits.drain_timeout);
    if tokio::time::timeout(grace, writer).await.is_err() {
        abort.abort();
    }
}

/// How long a refused connection is kept to be told why.
const REFUSE_GRACE: Duration = Duration::from_millis(100);

/// Answers a connection that will not be served with an `error` frame
/// saying why, and closes it: what it sent is read first (at most 64 KiB,
/// within [`REFUSE_GRACE`], so refused peers cannot hold descriptors for
/// long), since closing a Unix socket with unread bytes makes the peer's
/// read fail before it sees the answer.
async fn refuse(mut stream: UnixStream, why: &str) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let refusal = protocol::encode(&Message::error(None, ErrorCode::Limit, why.to_string()));
    let _ = tokio::time::timeout(REFUSE_GRACE, async {
        stream.write_all(&refusal).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut left = 64 * 1024;
        while left > 0 {
            match stream.read(&mut sink).await? {
                0 => break,
                n => left -= n.min(left),
            }
        }
        Ok::<(), io::Error>(())
    })
    .await;
}

/// Reads and handles `r`'s frames until the peer leaves, the connection is
/// closed from elsewhere, or a cap ends it (the returned reason). A
/// connection must send its first message within `hello_timeout` of the
/// accept, and a ctl session its next request within `hello_timeout` of
/// its last answer (clients send one request per connection: an idle
/// session only holds one of the few ctl slots); a stage has no deadline.
/// Bytes of an unfinished frame do not move a deadline.
async fn serve_connection(
    r: &tokio::net::unix::OwnedReadHalf,
    out: &Outbox,
    state: &Shared,
    cred: PeerCred,
    session: &mut Session,
) -> Option<Closed> {
    let limits = *lock(state).conns.limits();
    let mut deadline = tokio::time::Instant::now() + limits.hello_timeout;
    let mut decoder = FrameDecoder::new(protocol::DEFAULT_MAX_FRAME);
    let mut buf: Vec<u8> = Vec::new();
    let mut held = Buffered::default();
    loop {
        // The unfinished frame this connection holds, in paiod's total: the
        // connection whose new bytes take the total over the budget is
        // closed (not the others, whose shares did not grow).
        if held.set(decoder.buffered()) && held.over(limits.max_buffered) {
            return Some(Closed::Buffered);
        }
        let timeout = match session {
            Session::New { .. } => Some(Closed::HelloTimeout),
            Session::Ctl => Some(Closed::CtlIdle),
            Session::Stage { .. } => None,
        };
        tokio::select! {
            ready = r.readable() => if ready.is_err() { return None },
            _ = out.closing() => return out.overflowed().then_some(Closed::Unread),
            _ = tokio::time::sleep_until(deadline), if timeout.is_some() => return timeout,
        }
        if buf.is_empty() {
            buf = vec![0; FIRST_READ_BUF];
        }
        let n = match r.try_read(&mut buf) {
            Ok(0) => return None,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(_) => return None,
        };
        decoder.push(&buf[..n]);
        if n == buf.len() && buf.len() < MAX_READ_BUF {
            buf = vec![0; buf.len() * 2];
        }
        loop {
            let payload = match decoder.next_frame() {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(FrameError::TooLarge { len, max }) => {
                    out.send(&Message::error(
                        None,
                        ErrorCode::TooLarge,
                        format!("frame of {len} bytes exceeds paiod's limit of {max}"),
                    ));
                    continue;
                }
                Err(_) => return None,
            };
            match session.handle(&payload, state, cred, out) {
                Step::Next => {}
                Step::Close => return None,
                Step::Answer(answer) => {
                    // A status report of thousands of stages takes long to
                    // encode: off the runtime thread, so the control loop
                    // keeps its period; awaited, so answers keep their order.
                    let out = out.clone();
                    let sent = tokio::task::spawn_blocking(move || {
                        out.send_frame(crate::ctl::encode_reply(
                            *answer,
                            crate::ctl::MAX_STATUS_BYTES,
                        ))
                    });
                    if sent.await.is_err() {
                        return None;
                    }
                }
                Step::Cluster { id, done } => {
                    let answer = match tokio::time::timeout(CLUSTER_SET_TIMEOUT, done).await {
                        Ok(Ok(Ok(()))) => CtlReply::ok(id),
                        Ok(Ok(Err(e))) => CtlReply::refused(
                            id,
                            format!("set on this node only; the cluster did not take it: {e}"),
                        ),
                        Ok(Err(_)) | Err(_) => CtlReply::refused(
                            id,
                            format!(
                                "set on this node only; etcd did not confirm it within \
                                 {CLUSTER_SET_TIMEOUT:?}"
                            ),
                        ),
                    };
                    out.send_frame(protocol::encode_value(&answer));
                }
            }
            if matches!(session, Session::Ctl) {
                deadline = tokio::time::Instant::now() + limits.hello_timeout;
            }
            // Backpressure: no more requests from a peer that does not read.
            if out.queued() > outbox::SOFT_LIMIT && !out.drained(limits.drain_timeout).await {
                return (out.overflowed() || !out.is_closed()).then_some(Closed::Unread);
            }
        }
    }
}

/// Bytes of unfinished frames held over all connections.
static BUFFERED: AtomicUsize = AtomicUsize::new(0);

/// One connection's share of [`BUFFERED`], given back when it ends.
#[derive(Default)]
struct Buffered(usize);

impl Buffered {
    /// Makes the connection's share `now`; true if it grew (the bytes
    /// that may have taken the total over are this connection's).
    fn set(&mut self, now: usize) -> bool {
        let grew = now > self.0;
        if grew {
            BUFFERED.fetch_add(now - self.0, Ordering::Relaxed);
        } else {
            BUFFERED.fetch_sub(self.0 - now, Ordering::Relaxed);
        }
        self.0 = now;
        grew
    }

    /// Whether all connections together hold more than `max`.
    fn over(&self, max: usize) -> bool {
        BUFFERED.load(Ordering::Relaxed) > max
    }
}

impl Drop for Buffered {
    fn drop(&mut self) {
        BUFFERED.fetch_sub(self.0, Ordering::Relaxed);
    }
}

enum Session {
    /// Waiting for its first message; `conn` is its id in [`Conns`].
    New {
        conn: u64,
    },
    Stage {
        id: StageId,
    },
    Ctl,
}

/// What the connection does after one payload.
enum Step {
    /// Reads the next payload.
    Next,
    /// Closes the connection.
    Close,
    /// Sends this ctl answer (encoded off the runtime thread), then reads on.
    Answer(Box<CtlReply>),
    /// Answers ctl request `id` once the cluster agent says whether etcd
    /// took the change, then reads on.
    Cluster {
        id: u64,
        done: oneshot::Receiver<Result<(), String>>,
    },
}

impl Session {
    /// Handles one payload.
    fn handle(&mut self, payload: &[u8], state: &Shared, cred: PeerCred, out: &Outbox) -> Step {
        let reply = |m: Message| {
            out.send(&m);
        };
        match self {
            Session::New { conn } => {
                let conn = *conn;
                let kind = serde_json::from_slice::<serde_json::Value>(payload)
                    .ok()
                    .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_string));
                if kind.as_deref() == Some("ctl") {
                    let admitted = {
                        let mut st = lock(state);
                        st.conns.done_waiting(conn);
                        let admitted = st.conns.admit_ctl();
                        if admitted.is_ok() {
                            *self = Session::Ctl;
                        }
                        admitted
                    };
                    if let Err(e) = admitted {
                        out.send_frame(protocol::encode_value(&CtlReply::refused(0, e)));
                        return Step::Close;
                    }
                    return self.handle(payload, state, cred, out);
                }
                match protocol::decode(payload) {
                    Ok(Message::Hello(hello)) => {
                        if hello.version != protocol::VERSION {
                            reply(Message::error(
                                None,
                                ErrorCode::Version,
                                format!(
                                    "protocol version {} is not supported; paiod speaks {}",
                                    hello.version,
                                    protocol::VERSION
                                ),
                            ));
                            return Step::Close;
                        }
                        if let Err(e) = peer::check_hello(&hello) {
                            lock(state).conns.done_waiting(conn);
                            reply(Message::error(
                                None,
                                ErrorCode::BadMessage,
                                format!("hello refused: {e}"),
                            ));
                            return Step::Close;
                        }
                        match register(state, *hello, cred, out.clone(), conn) {
                            Ok(id) => {
                                *self = Session::Stage { id };
                                Step::Next
                            }
                            Err(e) => {
                                reply(Message::error(None, ErrorCode::Limit, e));
                                Step::Close
                            }
                        }
                    }
                    Ok(other) => {
                        reply(Message::error(
                            None,
                            ErrorCode::Unexpected,
                            format!(
                                "expected hello (or ctl) first, got `{}`",
                                paio::control::message_type(&other)
                            ),
                        ));
                        Step::Close
                    }
                    Err(e) => {
                        reply(Message::error(None, ErrorCode::BadMessage, e.to_string()));
                        Step::Next
                    }
                }
            }
            Session::Stage { id } => {
                let id = *id;
                match protocol::decode(payload) {
                    Ok(Message::Stats { id: req, stats }) => {
                        if let Err(e) = peer::check_stats(&stats) {
                            reply(Message::error(
                                Some(req),
                                ErrorCode::BadMessage,
                                format!("stats refused: {e}"),
                            ));
                            return Step::Next;
                        }
                        if let Err(e) = on_stats(state, id, req, *stats) {
                            tracing::warn!("stage {id} closed: {e}");
                            reply(Message::error(Some(req), ErrorCode::Limit, e));
                            return Step::Close;
                        }
                        Step::Next
                    }
                    Ok(Message::Ack { .. }) => Step::Next,
                    Ok(Message::Error {
                        id: req,
                        code,
                        message,
                        ..
                    }) => {
                        tracing::warn!(
                            "stage {id} refused request {req:?} ({code:?}): {}",
                            Escaped(&message)
                        );
                        Step::Next
                    }
                    Ok(Message::Goodbye { reason }) => {
                        tracing::info!(
                            "stage {id} said goodbye: {}",
                            Escaped(&reason.unwrap_or_default())
                        );
                        Step::Close
                    }
                    Ok(other) => {
                        reply(Message::error(
                            None,
                            ErrorCode::Unexpected,
                            format!(
                                "paiod does not accept `{}` from a registered stage",
                                paio::control::message_type(&other)
                            ),
                        ));
                        Step::Next
                    }
                    Err(e) => {
                        reply(Message::error(None, ErrorCode::BadMessage, e.to_string()));
                        Step::Next
                    }
                }
            }
            Session::Ctl => {
                let answer = match serde_json::from_slice::<CtlRequest>(payload) {
                    Ok(req) => match peer::check_ctl(&req.command) {
                        Ok(()) => ctl(state, req),
                        Err(e) => CtlOutcome::Now(CtlReply::refused(req.id, e)),
                    },
                    Err(e) => {
                        CtlOutcome::Now(CtlReply::refused(0, format!("bad ctl request: {e}")))
                    }
                };
                match answer {
                    CtlOutcome::Now(a) => Step::Answer(Box::new(a)),
                    CtlOutcome::Cluster { id, done } => Step::Cluster { id, done },
                }
            }
        }
    }
}

/// The answer to a ctl request: now, or once the cluster has the change.
enum CtlOutcome {
    Now(CtlReply),
    Cluster {
        id: u64,
        done: oneshot::Receiver<Result<(), String>>,
    },
}

fn ctl(state: &Shared, req: CtlRequest) -> CtlOutcome {
    let mut st = lock(state);
    let reply = match req.command {
        CtlCommand::Status => CtlReply {
            status: Some(Box::new(st.status())),
            ..CtlReply::ok(req.id)
        },
        CtlCommand::Set {
            label: Some(label),
            group,
            ..
        } if group != "*" && st.policy.group_label().is_some_and(|by| by != label) => {
            CtlReply::refused(
                req.id,
                format!(
                    "this paiod's policy groups stages by label {by:?}, not {label:?}: set \
                     {by}={group}",
                    by = st.policy.group_label().unwrap_or_default()
                ),
            )
        }
        CtlCommand::Set {
            group, key, value, ..
        } => match st.policy.set(&group, &key, &value) {
            Ok(()) => {
                tracing::info!(
                    "ctl: set {} {}={}",
                    Escaped(&group),
                    Escaped(&key),
                    Escaped(&value)
                );
                // Cluster mode: the change is the cluster's too.
                if let Some((_, agent)) = &st.cluster {
                    if let Some(v) = cluster_value(&key, &value) {
                        let (tx, done) = oneshot::channel();
                        let cmd = SetCommand {
                            group,
                            key,
                            value: v,
                            done: tx,
                        };
                        return match agent.try_send(cmd) {
                            Ok(()) => CtlOutcome::Cluster { id: req.id, done },
                            Err(_) => CtlOutcome::Now(CtlReply::refused(
                                req.id,
                                "set on this node only: the cluster agent is busy; try again"
                                    .to_string(),
                            )),
                        };
                    }
                }
                CtlReply::ok(req.id)
            }
            Err(e) => CtlReply::refused(req.id, e.to_string()),
        },
        CtlCommand::SetRate {
            stage,
            channel,
            object,
            rate,
        } => match st.set_rate(&stage, &channel, &object, &rate) {
            Ok(done) => {
                tracing::info!("ctl: set-rate {}", Escaped(&done));
                CtlReply {
                    done: Some(done),
                    ..CtlReply::ok(req.id)
                }
            }
            Err(e) => CtlReply::refused(req.id, e),
        },
    };
    CtlOutcome::Now(reply)
}

/// The number a cluster-wide `paio ctl set` stores (bytes/s or a weight),
/// for the keys that are the cluster's (`demand`, `weight`,
/// `max_bandwidth`); `value` was accepted by the local policy already.
fn cluster_value(key: &str, value: &str) -> Option<f64> {
    match key {
        "demand" | "max_bandwidth" => crate::policy::common::parse_byte_rate(value).ok(),
        "weight" => value.trim().parse().ok(),
        _ => None,
    }
}

/// Registers a stage: welcome, then the policy's setup rules minus the
/// creations of what the stage already has. Err: the stage caps are
/// reached (the message says which).
fn register(
    state: &Shared,
    hello: Hello,
    cred: PeerCred,
    out: Outbox,
    conn: u64,
) -> Result<StageId, String> {
    let mut st = lock(state);
    st.conns.done_waiting(conn);
    st.conns.admit_stage(cred.uid)?;
    let held = peer::held_by_info(&hello.info);
    if let Err(e) = st.conns.hold(0, held) {
        st.conns.stage_left(cred.uid);
        return Err(e);
    }
    st.next_id += 1;
    let id = st.next_id;
    let mut info = hello.info;
    if cred.pid != 0 && info.identity.pid != cred.pid {
        tracing::warn!(
            "stage {id} says pid {} but the kernel says {}; using the kernel's",
            info.identity.pid,
            cred.pid
        );
        info.identity.pid = cred.pid;
    }
    let view = StageView {
        id,
        info,
        stats: None,
        proc_io: None,
    };
    let setup = missing(st.policy.setup(&view), &view);
    tracing::info!(
        "stage {id} registered: {} pid {} uid {} labels {:?}",
        Escaped(&view.info.identity.name),
        cred.pid,
        cred.uid,
        view.info.identity.labels
    );
    let period_ms = st.period.as_millis() as u64;
    let mut entry = StageEntry {
        view,
        cred,
        registered_at: Instant::now(),
        out,
        last_stats_at: None,
        outstanding: None,
        proc_prev: None,
        next_request: 0,
        held,
    };
    entry.out.send(&Message::Welcome {
        version: protocol::VERSION,
        stage_id: id,
        period_ms,
    });
    if !setup.is_empty() {
        apply_to_view(&mut entry.view, &setup);
        entry.send(|rid| Message::Rules {
            id: rid,
            rules: setup,
        });
    }
    // The first report is only the baseline of the stage's rates (paiod
    // computes them between two of its own collections): asked for now, so
    // the first period counts from registration, not from the next tick
    // (a stage's bytes until then were in no figure).
    let rid = entry.send(|rid| Message::Collect { id: rid });
    entry.outstanding = Some((rid, Instant::now()));
    st.stages.insert(id, entry);
    Ok(id)
}

/// `rules` without the creation of channels and objects `view` already has
/// (a stage that outlived a paiod restart keeps its state), read in order:
/// a channel or object the batch removes before creating it again (a policy
/// replacing an object of another kind) is created.
pub fn missing(rules: Vec<Rule>, view: &StageView) -> Vec<Rule> {
    let mut channels: HashSet<String> = view.info.channels.iter().map(|c| c.name.clone()).collect();
    let mut objects: HashSet<(String, String)> = view
        .info
        .channels
        .iter()
        .flat_map(|c| {
            c.objects
                .iter()
                .map(move |o| (c.name.clone(), o.name.clone()))
        })
        .collect();
    rules
        .into_iter()
        .filter(|r| match r {
            Rule::CreateChannel { name } => channels.insert(name.clone()),
            Rule::RemoveChannel { name } => {
                channels.remove(name);
                objects.retain(|(c, _)| c != name);
                true
            }
            Rule::CreateObject { channel, name, .. } => {
                objects.insert((channel.clone(), name.clone()))
            }
            Rule::RemoveObject { channel, name } => {
                objects.remove(&(channel.clone(), name.clone()));
                true
            }
            _ => true,
        })
        .collect()
}

/// Keeps paiod's copy of a stage's configuration in step with the rules it
/// sent (channels, objects, object mappings, object configurations), so
/// status and the policy see what the stage has.
fn apply_to_view(view: &mut StageView, rules: &[Rule]) {
    use paio::stage::{ChannelInfo, ObjectInfo};
    let channels = &mut view.info.channels;
    for r in rules {
        match r {
            Rule::CreateChannel { name } if !channels.iter().any(|c| &c.name == name) => {
                channels.push(ChannelInfo {
                    name: name.clone(),
                    objects: vec![ObjectInfo {
                        name: "default".into(),
                        kind: "noop".into(),
                        config: Some(paio::ObjectConfig::Noop),
                    }],
                    object_rules: Vec::new(),
                    default_object: "default".into(),
                });
            }
            Rule::RemoveChannel { name } => channels.retain(|c| &c.name != name),
            Rule::CreateObject {
                channel,
                name,
                config,
            } => {
                if let Some(c) = channels.iter_mut().find(|c| &c.name == channel) {
                    if !c.objects.iter().any(|o| &o.name == name) {
                        c.objects.push(ObjectInfo {
                            name: name.clone(),
                            kind: config.kind().to_string(),
                            config: Some(config.clone()),
                        });
                    }
                }
            }
            Rule::RemoveObject { channel, name } => {
                if let Some(c) = channels.iter_mut().find(|c| &c.name == channel) {
                    c.objects.retain(|o| &o.name != name);
                }
            }
            Rule::SetDefaultObject { channel, object } => {
                if let Some(c) = channels.iter_mut().find(|c| &c.name == channel) {
                    c.default_object = object.clone();
                }
            }
            Rule::MapObject {
                channel,
                pattern,
                object,
            } => {
                if let Some(c) = channels.iter_mut().find(|c| &c.name == channel) {
                    match c.object_rules.iter_mut().find(|(p, _)| p == pattern) {
                        Some(rule) => rule.1 = object.clone(),
                        None => c.object_rules.push((*pattern, object.clone())),
                    }
                }
            }
            Rule::UnmapObject { channel, pattern } => {
                if let Some(c) = channels.iter_mut().find(|c| &c.name == channel) {
                    c.object_rules.retain(|(p, _)| p != pattern);
                }
            }
            Rule::Configure {
                channel,
                object,
                config,
            } => {
                if let Some(o) = channels
                    .iter_mut()
                    .find(|c| &c.name == channel)
                    .and_then(|c| c.objects.iter_mut().find(|o| &o.name == object))
                {
                    // As the stage applies it: a DRL keeps its bucket and
                    // ceiling, and its rate is capped.
                    o.config = Some(match (&o.config, config) {
                        (Some(ObjectConfig::Drl(now)), ObjectConfig::Drl(next)) => {
                            ObjectConfig::Drl(now.reconfigured(next))
                        }
                        _ => config.clone(),
                    });
                }
            }
            _ => {}
        }
    }
}

/// A stage answered collect `req`: rates over paiod's own interval between
/// two answers, from the cumulative totals (so other collectors in the
/// stage's process do not skew them).
/// Err: keeping the report would take what paiod keeps of stages over
/// `max_stage_bytes` (the report is dropped; the caller closes the stage).
fn on_stats(state: &Shared, id: StageId, req: u64, mut stats: StageStats) -> Result<(), String> {
    let now = Instant::now();
    let mut st = lock(state);
    let st = &mut *st;
    let Some(e) = st.stages.get_mut(&id) else {
        return Ok(());
    };
    let held = peer::held_by_info(&e.view.info) + peer::held_by_stats(&stats);
    st.conns.hold(e.held, held)?;
    e.held = held;
    if e.outstanding.is_some_and(|(r, _)| r == req) {
        e.outstanding = None;
    }
    // rebase rewrites only interval figures, so the previous report still
    // holds the cumulative totals it arrived with.
    match (e.last_stats_at, &e.view.stats) {
        (Some(at), Some(prev)) => rebase(&mut stats, prev, now.duration_since(at).as_secs_f64()),
        _ => rebase(&mut stats, &StageStats::default(), 0.0),
    }
    e.last_stats_at = Some(now);
    e.view.stats = Some(stats);
    Ok(())
}

/// Rewrites the interval figures of `cur` as the difference to `prev` over
/// `secs` seconds (zero rates when `secs` is 0).
pub fn rebase(cur: &mut StageStats, prev: &StageStats, secs: f64) {
    fn counts(c: &mut Counts, p: Option<&Counts>, secs: f64) {
        let (po, pb) = p.map_or((0, 0), |p| (p.ops, p.bytes));
        c.interval_ops = c.ops.saturating_sub(po);
        c.interval_bytes = c.bytes.saturating_sub(pb);
        if secs > 0.0 {
            c.ops_per_sec = c.interval_ops as f64 / secs;
            c.bytes_per_sec = c.interval_bytes as f64 / secs;
        } else {
            c.ops_per_sec = 0.0;
            c.bytes_per_sec = 0.0;
        }
    }
    cur.interval_ns = (secs * 1e9) as u64;
    let mut channel_index = None;
    for (i, ch) in cur.channels.iter_mut().enumerate() {
        let pch = same_name(&prev.channels, i, &ch.name, |c| &c.name, &mut channel_index);
        counts(&mut ch.counts, pch.map(|p| &p.counts), secs);
        let mut object_index = None;
        for (j, o) in ch.objects.iter_mut().enumerate() {
            let po =
                pch.and_then(|p| same_name(&p.objects, j, &o.name, |x| &x.name, &mut object_index));
            counts(&mut o.counts, po.map(|p| &p.counts), secs);
        }
    }
    counts(&mut cur.unmatched, Some(&prev.unmatched), secs);
    counts(&mut cur.removed, Some(&prev.removed), secs);
    counts(&mut cur.critical, Some(&prev.critical), secs);
}

/// A view without anything, to hold a stage's place (allocates nothing).
fn empty_view(id: StageId) -> StageView {
    StageView {
        id,
        info: paio::StageInfo {
            identity: paio::stage::StageIdentity {
                name: String::new(),
                pid: 0,
                host: String::new(),
                labels: BTreeMap::new(),
            },
            classifiers: Vec::new(),
            channels: Vec::new(),
            channel_rules: Vec::new(),
            default_channel: None,
        },
        stats: None,
        proc_io: None,
    }
}

/// The item of `prev` named `name`: the one at position `i` when its name
/// matches (reports usually keep their order), else found through `index`,
/// built from `prev` on first need. Linear in `prev` whatever the order.
fn same_name<'a, T>(
    prev: &'a [T],
    i: usize,
    name: &str,
    name_of: impl Fn(&T) -> &String,
    index: &mut Option<HashMap<&'a str, usize>>,
) -> Option<&'a T> {
    if let Some(p) = prev.get(i).filter(|p| name_of(p) == name) {
        return Some(p);
    }
    let index = index.get_or_insert_with(|| {
        prev.iter()
            .enumerate()
            .map(|(k, p)| (name_of(p).as_str(), k))
            .collect()
    });
    index.get(name).map(|&k| &prev[k])
}

/// `read_bytes` and `write_bytes` of `/proc/<pid>/io`.
pub fn read_proc_io(pid: u32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    parse_proc_io(&text)
}

/// Parses the text of `/proc/<pid>/io`.
pub fn parse_proc_io(text: &str) -> Option<(u64, u64)> {
    let mut read = None;
    let mut write = None;
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        match k.trim() {
            "read_bytes" => read = v.trim().parse().ok(),
            "write_bytes" => write = v.trim().parse().ok(),
            _ => {}
        }
    }
    Some((read?, write?))
}

/// One control period: drop unresponsive stages, sample `/proc`, run the
/// policy, send its rules, ask for statistics.
pub fn tick(state: &Shared) {
    let now = Instant::now();
    let mut st = lock(state);
    let timeout = st.collect_timeout;
    let dead: Vec<StageId> = st
        .stages
        .iter()
        .filter(|(_, e)| {
            e.out.is_closed()
                || e.outstanding
                    .is_some_and(|(_, at)| now.duration_since(at) > timeout)
        })
        .map(|(id, _)| *id)
        .collect();
    for id in dead {
        let Some(e) = st.remove_stage(id) else {
            continue;
        };
        if e.out.is_closed() {
            // Its connection ended (the stage left, or stopped reading and
            // was cut off, which its connection's task reports): nothing
            // to say to it, and nothing unusual to log.
            e.say_left(id);
            continue;
        }
        tracing::warn!(
            "stage {id} ({} pid {}) stopped answering; dropped",
            Escaped(&e.view.info.identity.name),
            e.cred.pid
        );
        e.out.send(&Message::Goodbye {
            reason: Some(format!("no answer to collect within {timeout:?}")),
        });
        e.out.close();
    }
    // /proc/<pid>/io: every period when the policy calibrates with it,
    // else once a second (for status); one read per process.
    let sample = st.policy.uses_proc_io()
        || st
            .proc_sampled
            .is_none_or(|at| now.duration_since(at) >= PROC_IO_INTERVAL);
    if sample {
        st.proc_sampled = Some(now);
    }
    let mut read: HashMap<u32, Option<(u64, u64)>> = HashMap::new();
    for e in st.stages.values_mut().filter(|_| sample) {
        if e.cred.pid == 0 {
            continue;
        }
        let io = *read
            .entry(e.cred.pid)
            .or_insert_with(|| read_proc_io(e.cred.pid));
        if let Some((r, w)) = io {
            if let Some((at, pr, pw)) = e.proc_prev {
                let secs = now.duration_since(at).as_secs_f64();
                if secs > 0.0 {
                    e.view.proc_io = Some(ProcIo {
                        read_bytes_per_sec: r.saturating_sub(pr) as f64 / secs,
                        write_bytes_per_sec: w.saturating_sub(pw) as f64 / secs,
                    });
                }
            }
            e.proc_prev = Some((now, r, w));
        }
    }
    // The policy sees every view; they are moved out and back, not cloned
    // (at 1,000 stages the clones were a tenth of paiod's CPU).
    let views: Vec<StageView> = st
        .stages
        .values_mut()
        .map(|e| {
            let id = e.view.id;
            std::mem::replace(&mut e.view, empty_view(id))
        })
        .collect();
    let elapsed = now.duration_since(st.started);
    let out = st.policy.period(elapsed, &views);
    for (e, v) in st.stages.values_mut().zip(views) {
        e.view = v;
    }
    for (id, rules) in out {
        if rules.is_empty() {
            continue;
        }
        if let Some(e) = st.stages.get_mut(&id) {
            apply_to_view(&mut e.view, &rules);
            e.send(|rid| Message::Rules { id: rid, rules });
        }
    }
    for e in st.stages.values_mut() {
        if e.outstanding.is_none() {
            let rid = e.send(|rid| Message::Collect { id: rid });
            e.outstanding = Some((rid, now));
        }
    }
}

async fn control_loop(state: Shared, period: Duration) {
    let every = |period| {
        let mut i = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        i
    };
    let mut period = period;
    let mut interval = tokio::time::interval(period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let start = Instant::now();
        tick(&state);
        // `--record`'s line is part of the period's work (and of its time).
        lock(&state).record_period();
        let work = start.elapsed();
        let cpu = loopstats::process_cpu_time();
        let mut st = lock(&state);
        st.loop_stats.record(start, work, cpu);
        // A reload changed the period: the next tick is one new period on.
        if st.period != period {
            period = st.period;
            interval = every(period);
        }
    }
}

/// The socket path: the configured one, else the default
/// ([`paio::control::default_socket_path`]).
pub fn socket_path(cli: Option<PathBuf>, config: &PaiodConfig) -> PathBuf {
    cli.or_else(|| config.socket.clone())
        .unwrap_or_else(paio::control::default_socket_path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log writer into a shared buffer.
    #[derive(Clone, Default)]
    struct LogBuf(Arc<Mutex<Vec<u8>>>);

    impl io::Write for LogBuf {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A stage whose connection ended is said to have left, not to have
    /// stopped answering (10,565 stages that disconnected together were
    /// logged as collect timeouts and sent a goodbye saying so).
    #[test]
    fn a_stage_whose_connection_ended_left_and_a_silent_one_timed_out() {
        let config = crate::config::PaiodConfig::parse("", "<test>").unwrap();
        let limits = Limits::resolve(&config.connections, 1 << 16).unwrap();
        let state: Shared = Arc::new(Mutex::new(State::new(
            config.policy.build(),
            config.period,
            Duration::ZERO,
            limits,
        )));
        let stage = |name: &str| {
            let s = paio::Stage::from_policy_str(
                &format!("[stage]\nname = \"{name}\"\ndefault_channel = \"read\"\n[[channel]]\nname = \"read\"\n"),
                "<t>",
            )
            .unwrap();
            let hello = Hello {
                version: protocol::VERSION,
                ppid: 1,
                user: "t".into(),
                exe: None,
                info: s.info(),
            };
            let (out, rx) = Outbox::new();
            let conn = lock(&state).conns.wait(out.clone());
            let cred = PeerCred {
                pid: 0,
                uid: 0,
                gid: 0,
            };
            register(&state, hello, cred, out, conn).unwrap();
            rx
        };
        let gone = stage("gone");
        let silent = stage("silent");
        drop(gone);
        let log = LogBuf::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer({
                let log = log.clone();
                move || log.clone()
            })
            .with_ansi(false)
            .finish();
        // The first tick asks for statistics; the second finds the silent
        // stage past its (zero) collect timeout.
        tracing::subscriber::with_default(subscriber, || {
            tick(&state);
            std::thread::sleep(Duration::from_millis(2));
            tick(&state);
        });
        let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        assert!(text.contains("(gone pid 0) left"), "{text}");
        assert!(!text.contains("(gone pid 0) stopped answering"), "{text}");
        assert!(text.contains("(silent pid 0) stopped answering"), "{text}");
        assert!(lock(&state).stages.is_empty());
        drop(silent);
    }

    #[test]
    fn proc_io_parses_the_kernel_format() {
        let text = "rchar: 10\nwchar: 20\nsyscr: 1\nsyscw: 2\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n";
        assert_eq!(parse_proc_io(text), Some((4096, 8192)));
        assert_eq!(parse_proc_io("rchar: 1\n"), None);
        assert!(read_proc_io(std::process::id()).is_some());
    }

    #[test]
    fn only_a_socket_directory_of_paiods_own_is_safe() {
        assert_eq!(unsafe_socket_dir(1000, 0o700, 1000), None);
        assert_eq!(unsafe_socket_dir(0, 0o1777, 1000), None); // /tmp
        assert_eq!(unsafe_socket_dir(0, 0o755, 0), None);
        let e = unsafe_socket_dir(1001, 0o777, 1000).unwrap();
        assert!(e.contains("uid 1001") && e.contains("uid 1000"), "{e}");
        let e = unsafe_socket_dir(1000, 0o777, 1000).unwrap();
        assert!(e.contains("mode 777") && e.contains("sticky"), "{e}");
        assert!(unsafe_socket_dir(1000, 0o720, 1000).is_some());
    }

    #[test]
    fn bind_refuses_unsafe_places_and_replaces_only_its_own_stale_socket() {
        let d = tempfile::tempdir().unwrap();
        let open = d.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = bind(&open.join("paiod.sock")).unwrap_err().to_string();
        assert!(e.contains("mode 777"), "{e}");
        let file = d.path().join("notes.txt");
        std::fs::write(&file, "keep me").unwrap();
        let e = bind(&file).unwrap_err().to_string();
        assert!(e.contains("not a socket"), "{e}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
        // A symbolic link as the directory (another user's at the default
        // /tmp/paio-<uid> could be pointed elsewhere later).
        let link = d.path().join("link");
        std::os::unix::fs::symlink(d.path(), &link).unwrap();
        let e = bind(&link.join("paiod.sock")).unwrap_err().to_string();
        assert!(e.contains("is a symbolic link"), "{e}");
        // A stale socket of paiod's own user is replaced; a new directory is 0700.
        let sock = d.path().join("run/paiod.sock");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            drop(bind(&sock).unwrap());
            let l = bind(&sock).unwrap();
            use std::os::unix::fs::MetadataExt;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
            assert_eq!((mode(sock.parent().unwrap()), mode(&sock)), (0o700, 0o600));
            let e = bind(&sock).unwrap_err().to_string();
            assert!(e.contains("already listening"), "{e}");
            drop(l);
        });
    }

    /// A server that holds the socket but accepts nothing (a stopped
    /// paiod, its queue full) is not taken for a stale socket, and the
    /// check does not wait for it.
    #[test]
    fn bind_says_when_the_socket_is_held_by_a_server_that_accepts_nothing() {
        let d = tempfile::tempdir().unwrap();
        let sock = d.path().join("paiod.sock");
        let _l = crate::unixconn::listener_that_never_accepts(&sock, 0);
        let _queued: Vec<_> =
            std::iter::from_fn(|| crate::unixconn::connect(&sock, Duration::ZERO).ok())
                .take(100)
                .collect();
        let e = bind(&sock).unwrap_err().to_string();
        assert!(e.contains("accepts no connection"), "{e}");
        assert!(sock.exists());
    }

    #[test]
    fn rebase_computes_rates_from_totals() {
        let stage = paio::Stage::from_policy_str(
            "[[channel]]\nname = \"read\"\nmatch = { request_type = \"read\" }\n",
            "<t>",
        )
        .unwrap();
        let before = stage.collect();
        for _ in 0..10 {
            stage
                .enforce(&paio::Context::new(paio::RequestType::READ, 1000), None)
                .unwrap();
        }
        let mut after = stage.collect();
        rebase(&mut after, &before, 2.0);
        let ch = &after.channels[0];
        assert_eq!(ch.counts.interval_bytes, 10_000);
        assert_eq!(ch.counts.bytes_per_sec, 5_000.0);
        assert_eq!(ch.counts.ops_per_sec, 5.0);
    }

    /// Channels and objects are matched by name whatever their order (the
    /// index that made rebase linear must not pair them by position).
    #[test]
    fn rebase_matches_reordered_channels_and_objects_by_name() {
        let report = |order: &[usize]| {
            let mut s = StageStats::default();
            for &i in order {
                let mut ch = paio::stats::ChannelStats {
                    name: format!("c{i}"),
                    counts: Counts::default(),
                    objects: Vec::new(),
                    histograms: None,
                };
                ch.counts.bytes = 1000 * i as u64 + 5;
                for &j in order {
                    let mut o = paio::stats::ObjectStats {
                        name: format!("o{j}"),
                        kind: "noop".into(),
                        counts: Counts::default(),
                    };
                    o.counts.ops = (10 * i + j) as u64 + 1;
                    ch.objects.push(o);
                }
                s.channels.push(ch);
            }
            s
        };
        let prev = report(&[0, 1, 2, 3]);
        let mut cur = report(&[3, 1, 0, 2]);
        for ch in &mut cur.channels {
            ch.counts.bytes += 7;
            for o in &mut ch.objects {
                o.counts.ops += 3;
            }
        }
        cur.channels.push(paio::stats::ChannelStats {
            name: "new".into(),
            counts: Counts {
                bytes: 11,
                ..Default::default()
            },
            objects: Vec::new(),
            histograms: None,
        });
        rebase(&mut cur, &prev, 1.0);
        for ch in &cur.channels[..4] {
            assert_eq!(ch.counts.interval_bytes, 7, "{}", ch.name);
            assert!(ch.objects.iter().all(|o| o.counts.interval_ops == 3));
        }
        assert_eq!(cur.channels[4].counts.interval_bytes, 11);
    }
}
