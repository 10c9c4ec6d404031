//! One paiod's side of cluster mode: its etcd session, the report it
//! publishes, the allocation it applies and, while it leads, the global
//! allocation ([`super::leader`]).
//!
//! A session is: connect to a member that answers, grant the lease, seed
//! the cluster's configuration, read `alloc/<node>`, `leader` and `summary`
//! at one revision and watch them from there, campaign (and again whenever
//! `leader` is deleted). Every cluster period the node puts its report (a
//! plain put bound to the lease, a node's only write), and between periods
//! too when its use changes shape (a job starts or stops, or becomes held
//! back: [`UseChange::Shape`], looked for [`CHECKS_PER_PERIOD`] times a
//! period, at most one early report per period / [`EARLY_GAP`]); the lease
//! is renewed every third of its time by a task of its own (`renew`), so
//! that nothing else the session waits for (a write stalled by an etcd
//! election, streams opened again) delays a renewal. A broken stream opens
//! the streams again on another member while the lease lives. When etcd
//! says the lease is gone (it expired, say while paiod was starved) the
//! node starts a new session at once, staying connected; when no member
//! answers, the session ends: the node keeps its last allocation (its
//! local policy goes on with it), says so in its status, and starts a new
//! session after a back-off of up to one lease.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, KeyValue, PutOptions, Txn,
    TxnOp, TxnOpResponse, WatchOptions, WatchStream,
};
use tokio::sync::{mpsc, oneshot};

use super::keys::Keys;
use super::leader::{self, Summary};
use super::{
    use_change, ClusterConfig, GlobalKind, JobRecord, JobUse, LeaderRecord, NodeAllocation,
    NodeReport, PolicyRecord, UseChange,
};
use crate::config::{PolicyConfig, PolicyKind};
use crate::server::{lock, Shared};

/// Why a session ended.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// An etcd call failed.
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    /// etcd answered something paio did not expect.
    #[error("{0}")]
    Protocol(String),
    /// etcd no longer has the session's lease: it expired or was revoked.
    #[error("etcd lost lease {0:x} (it expired or was revoked)")]
    LeaseGone(i64),
    /// Another session holds this node's name: another paiod with the
    /// same `node`, or this node's previous process (killed) within its
    /// lease.
    #[error(
        "node name {node:?} is held by another session (lease {lease:x}): another paiod with \
         the same `node` in [cluster] (give each its own), or this node's previous process, \
         whose lease expires within its time to live; retrying"
    )]
    NameTaken {
        /// The node's name.
        node: String,
        /// The lease the name's report is bound to.
        lease: i64,
    },
    /// No member renewed the lease for a while: etcd is out of reach.
    #[error("no etcd member renewed lease {id:x}: {last}")]
    LeaseLapsed {
        /// The lease.
        id: i64,
        /// Why the last try failed.
        last: String,
    },
}

impl ClusterError {
    /// `e`, or [`ClusterError::LeaseGone`] when it says lease `id` is gone.
    fn about_lease(e: etcd_client::Error, id: i64) -> Self {
        if lease_not_found(&e) {
            Self::LeaseGone(id)
        } else {
            Self::Etcd(e)
        }
    }
}

/// Whether etcd answered that a lease does not exist: a write bound to it
/// (`requested lease not found`) or a keep-alive answered with no time left.
fn lease_not_found(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => s.message().contains("requested lease not found"),
        etcd_client::Error::LeaseKeepAliveError(m) => m == "lease not found",
        _ => false,
    }
}

/// A `paio ctl set` for the cluster's configuration.
#[derive(Debug)]
pub struct SetCommand {
    /// `*` (the policy) or a job.
    pub group: String,
    /// `demand`, `weight` or `max_bandwidth`.
    pub key: String,
    /// The value, already checked by the local policy (bytes/s or weight).
    pub value: f64,
    /// Ok once etcd has it, Err with the reason.
    pub done: oneshot::Sender<Result<(), String>>,
}

/// What the node seeds the cluster's configuration with when it does not
/// exist yet: its own `[policy]`.
#[derive(Debug, Clone)]
pub struct Seed {
    /// `policy`.
    pub policy: PolicyRecord,
    /// `job/<job>` per configured group.
    pub jobs: Vec<(String, JobRecord)>,
}

/// The node's view of the cluster, for `paio status` (kept in paiod's
/// state, updated by the agent).
#[derive(Debug, Clone, Default)]
pub struct ClusterView {
    /// Whether the current session is up.
    pub connected: bool,
    /// When etcd became unreachable (none while connected).
    pub unreachable_since: Option<Instant>,
    /// The last session error.
    pub last_error: Option<String>,
    /// The leader and its epoch, as last read.
    pub leader: Option<(String, i64)>,
    /// Whether this node leads.
    pub leading: bool,
    /// The allocation applied, and when it arrived.
    pub allocation: Option<(NodeAllocation, Instant)>,
    /// The leader's last summary of the cluster.
    pub summary: Option<Summary>,
    /// Sessions started.
    pub sessions: u64,
}

/// The node's view of the cluster as `paio status` reports it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClusterStatus {
    /// Whether the node's etcd session is up.
    pub connected: bool,
    /// Seconds since etcd became unreachable (none while connected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreachable_s: Option<f64>,
    /// The last session error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The leader's node, as last read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    /// The leader's epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<i64>,
    /// Whether this node leads.
    pub leading: bool,
    /// Bytes/s per job allocated to this node (the last allocation, kept
    /// while etcd is unreachable).
    pub allocation: BTreeMap<String, f64>,
    /// The epoch of the leader that wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_epoch: Option<i64>,
    /// Seconds since it arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_age_s: Option<f64>,
    /// etcd sessions started.
    pub sessions: u64,
    /// The leader's last summary of the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
}

impl ClusterView {
    /// The view as of `now`.
    pub fn status(&self, now: Instant) -> ClusterStatus {
        ClusterStatus {
            connected: self.connected,
            unreachable_s: self
                .unreachable_since
                .map(|t| now.saturating_duration_since(t).as_secs_f64()),
            last_error: self.last_error.clone(),
            leader: self.leader.as_ref().map(|(n, _)| n.clone()),
            epoch: self.leader.as_ref().map(|(_, e)| *e),
            leading: self.leading,
            allocation: self
                .allocation
                .as_ref()
                .map(|(a, _)| a.jobs.clone())
                .unwrap_or_default(),
            allocation_epoch: self.allocation.as_ref().map(|(a, _)| a.epoch),
            allocation_age_s: self
                .allocation
                .as_ref()
                .map(|(_, t)| now.saturating_duration_since(*t).as_secs_f64()),
            sessions: self.sessions,
            summary: self.summary.clone(),
        }
    }
}

/// The agent: run it with [`Agent::run`] on paiod's runtime.
pub struct Agent {
    cfg: ClusterConfig,
    keys: Keys,
    state: Shared,
    seed: Seed,
    commands: mpsc::Receiver<SetCommand>,
    seq: u64,
    /// The jobs of the last report put.
    reported: BTreeMap<String, JobUse>,
    /// The endpoint in use (an index into `cfg.endpoints`).
    endpoint: usize,
    /// Job names already said to be refused (at most [`MAX_REFUSED`]).
    refused: std::collections::HashSet<String>,
    /// The lease of this agent's last session, whose report may outlive it
    /// (a session ended by a lost connection): a new session takes the
    /// name over from it.
    last_lease: Option<i64>,
    /// Whether the last look at the local jobs found more than
    /// [`super::MAX_JOBS_PER_NODE`] (and said so).
    over_said: bool,
    /// Requests to leave the cluster (paiod stopping).
    leaves: mpsc::Receiver<oneshot::Sender<()>>,
    leave_tx: mpsc::Sender<oneshot::Sender<()>>,
}

/// Makes a node leave the cluster when paiod stops: see [`Agent::leaver`].
#[derive(Clone)]
pub struct Leaver(mpsc::Sender<oneshot::Sender<()>>);

impl Leaver {
    /// Revokes the node's lease, so that its report (and its leadership,
    /// if it leads) goes at once instead of when the lease expires; waits
    /// at most `timeout` for etcd. Afterwards the agent does nothing more.
    pub async fn leave(&self, timeout: Duration) {
        let (tx, rx) = oneshot::channel();
        if self.0.send(tx).await.is_ok() {
            let _ = tokio::time::timeout(timeout, rx).await;
        }
    }
}

/// How often a period the node looks for a change of shape in its use
/// ([`UseChange::Shape`]: a job started or stopped, or became held back),
/// to report it before the period ends. More often reports such a change
/// sooner, at the cost of reading the local policy's targets more often.
pub const CHECKS_PER_PERIOD: u32 = 10;
/// An early report comes at least a period / `EARLY_GAP` after the last
/// report: a node whose jobs flap writes at most `EARLY_GAP` + 1 reports a
/// period instead of one, which bounds etcd's load.
pub const EARLY_GAP: u32 = 4;

/// Refused job names remembered, so each is said once.
const MAX_REFUSED: usize = 1024;

/// `paio ctl set`s queued for the agent at most.
const MAX_QUEUED_SETS: usize = 16;

/// What to do about an etcd error that says etcd wants credentials
/// (authentication enabled), which paiod does not send; empty otherwise.
fn auth_hint(error: &str) -> &'static str {
    if error.contains("user name is empty")
        || error.contains("invalid auth token")
        || error.contains("authentication failed")
        || error.contains("permission denied")
    {
        " [etcd has authentication enabled; paiod connects without credentials: \
         use an etcd without authentication for the cluster]"
    } else {
        ""
    }
}

impl Agent {
    /// The agent of node `cfg.node` for paiod's `state`, which from now on
    /// sends it the `paio ctl set`s that change the cluster's
    /// configuration; `policy` (paiod's `[policy]`, kind max_min or
    /// proportional) seeds that configuration when etcd has none.
    pub fn install(cfg: ClusterConfig, state: Shared, policy: &PolicyConfig) -> Self {
        let (tx, commands) = mpsc::channel(MAX_QUEUED_SETS);
        lock(&state).set_cluster(tx);
        let seed = Seed {
            policy: PolicyRecord {
                kind: if policy.kind == PolicyKind::Proportional {
                    GlobalKind::Proportional
                } else {
                    GlobalKind::MaxMin
                },
                max_bandwidth: policy.max_bandwidth.unwrap_or(0.0),
            },
            jobs: policy
                .groups
                .iter()
                .map(|g| {
                    (
                        g.name.clone(),
                        JobRecord {
                            demand: g.demand,
                            weight: g.weight,
                        },
                    )
                })
                .collect(),
        };
        // Nodes start on different members, so losing one member moves
        // only some of them.
        let endpoint = cfg_start(&cfg);
        let (leave_tx, leaves) = mpsc::channel(1);
        Self {
            keys: Keys::new(&cfg.name),
            cfg,
            state,
            seed,
            commands,
            seq: 0,
            reported: BTreeMap::new(),
            endpoint,
            refused: Default::default(),
            last_lease: None,
            over_said: false,
            leaves,
            leave_tx,
        }
    }

    /// The way to make this node leave the cluster when paiod stops.
    pub fn leaver(&self) -> Leaver {
        Leaver(self.leave_tx.clone())
    }

    /// Runs sessions one after another until paiod stops; returns early
    /// only when asked to leave (see [`Leaver`]) while not connected.
    pub async fn run(mut self) {
        let mut backoff = Duration::from_millis(100);
        // When a session last started at once after a lost lease.
        let mut again_at: Option<Instant> = None;
        loop {
            let started = Instant::now();
            let Err(err) = self.session().await;
            // etcd answers but lost the lease (it expired while the node
            // was starved, say): a new session at once, still connected;
            // at most once a lease, should leases keep getting lost.
            if matches!(err, ClusterError::LeaseGone(_))
                && again_at.is_none_or(|t| t.elapsed() > self.cfg.lease)
            {
                let mut st = lock(&self.state);
                let v = st.cluster_view_mut();
                if v.connected {
                    again_at = Some(Instant::now());
                    tracing::warn!(
                        "cluster {}: {err}; starting a new session at once",
                        self.cfg.name
                    );
                    v.leading = false;
                    v.last_error = Some(err.to_string());
                    continue;
                }
            }
            {
                let mut st = lock(&self.state);
                let v = st.cluster_view_mut();
                let why = format!("{err}{}", auth_hint(&err.to_string()));
                let what = match err {
                    ClusterError::NameTaken { .. } => "cannot join",
                    _ => "etcd unreachable",
                };
                // Said once when etcd goes away (or is not there at the
                // start), not at every retry.
                if v.connected || v.unreachable_since.is_none() {
                    tracing::warn!(
                        "cluster {}: {what} ({why}); keeping the last allocation",
                        self.cfg.name
                    );
                } else {
                    tracing::debug!("cluster {}: still: {what} ({why})", self.cfg.name);
                }
                v.connected = false;
                v.leading = false;
                v.unreachable_since.get_or_insert_with(Instant::now);
                v.last_error = Some(why);
            }
            if started.elapsed() > self.cfg.lease {
                backoff = Duration::from_millis(100);
            }
            // Refuse what is asked meanwhile rather than let it wait.
            while let Ok(c) = self.commands.try_recv() {
                let _ = c.done.send(Err(format!("etcd is unreachable: {err}")));
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                Some(done) = self.leaves.recv() => {
                    // Not connected: there is no lease to give back.
                    let _ = done.send(());
                    return;
                }
            }
            backoff = (backoff * 2).min(self.cfg.lease);
        }
    }

    /// One etcd session; it ends only with an error.
    async fn session(&mut self) -> Result<std::convert::Infallible, ClusterError> {
        let lease = self.cfg.lease;
        let mut client = self.connect_any().await?;
        let asked = Instant::now();
        let granted = client.lease_grant(lease.as_secs() as i64, None).await?;
        let lease_id = granted.id();
        if granted.ttl() as u64 != lease.as_secs() {
            tracing::info!(
                "cluster {}: etcd granted a lease of {} s (asked {} s)",
                self.cfg.name,
                granted.ttl(),
                lease.as_secs()
            );
        }
        // It lives at least its time to live from when it was asked for.
        let ttl = Duration::from_secs(granted.ttl().max(1) as u64);
        let mut renewer = Renewer::start(
            &self.cfg,
            (self.endpoint, client.clone()),
            lease_id,
            asked + ttl,
            ttl,
        );
        self.claim_name(&mut client, lease_id).await?;
        self.seed_config(&mut client).await?;
        {
            let mut st = lock(&self.state);
            let v = st.cluster_view_mut();
            v.sessions += 1;
            tracing::info!(
                "cluster {}: node {} connected to etcd at {} (lease {lease_id:x})",
                self.cfg.name,
                self.cfg.node,
                self.cfg.endpoints[self.endpoint]
            );
            v.connected = true;
            v.unreachable_since = None;
        }
        let mut lead = Lead::default();
        let end = loop {
            let Err(e) = self
                .streams(&mut client, lease_id, &mut lead, &mut renewer.end)
                .await;
            if matches!(
                e,
                ClusterError::LeaseGone(_) | ClusterError::LeaseLapsed { .. }
            ) {
                break e;
            }
            // A broken stream (the member it ran over is gone, say) does
            // not end the session while the lease lives: the streams are
            // opened again on a member that answers.
            self.endpoint = (self.endpoint + 1) % self.cfg.endpoints.len();
            tokio::select! {
                c = self.reconnect(lease_id) => client = c,
                end = &mut renewer.end => break lease_end(end, lease_id),
            }
            tracing::info!(
                "cluster {}: {e}; the lease lives, so the session goes on with {}",
                self.cfg.name,
                self.cfg.endpoints[self.endpoint]
            );
        };
        // The leadership ends with the session (its lease is not renewed):
        // `lead` and `renewer` are dropped here.
        Err(end)
    }

    /// A client of the first member that answers, from the current one
    /// on (see [`connect_first`]).
    async fn connect_any(&mut self) -> Result<Client, ClusterError> {
        let (i, c) = connect_first(&self.cfg.endpoints, self.endpoint, self.cfg.lease).await?;
        self.endpoint = i;
        Ok(c)
    }

    /// A client of a member that answers, trying until one does (the
    /// caller gives up when the lease ends).
    async fn reconnect(&mut self, lease_id: i64) -> Client {
        loop {
            match self.connect_any().await {
                Ok(c) => return c,
                Err(e) => tracing::debug!("lease {lease_id:x}: no member answers: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Opens the session's streams (this node's allocation, the leader,
    /// the summary) and serves them until one fails or the lease ends.
    async fn streams(
        &mut self,
        client: &mut Client,
        lease_id: i64,
        lead: &mut Lead,
        end: &mut oneshot::Receiver<ClusterError>,
    ) -> Result<std::convert::Infallible, ClusterError> {
        let alloc_key = self.keys.alloc(&self.cfg.node);
        let (leader_key, summary_key) = (self.keys.leader(), self.keys.summary());
        // The three keys as of one revision, then their changes from there.
        let current = client
            .txn(Txn::new().and_then([
                TxnOp::get(alloc_key.as_str(), None),
                TxnOp::get(leader_key.as_str(), None),
                TxnOp::get(summary_key.as_str(), None),
            ]))
            .await?;
        let rev = current.header().map_or(0, |h| h.revision());
        let mut got = current.op_responses().into_iter().map(|op| match op {
            TxnOpResponse::Get(g) => g.kvs().first().cloned(),
            _ => None,
        });
        let (alloc, leader, summary) = (
            got.next().flatten(),
            got.next().flatten(),
            got.next().flatten(),
        );
        if let Some(kv) = alloc {
            self.apply(kv.value());
        }
        self.leader_changed(leader.as_ref());
        if let Some(kv) = summary {
            self.summary_changed(kv.value());
        }
        let from = WatchOptions::new().with_start_revision(rev + 1);
        let mut allocs = client.watch(alloc_key.as_str(), Some(from.clone())).await?;
        let mut leaders = client
            .watch(leader_key.as_str(), Some(from.clone()))
            .await?;
        let mut summaries = client.watch(summary_key.as_str(), Some(from)).await?;
        self.serve(
            client,
            lease_id,
            end,
            Watches {
                allocs: &mut allocs,
                leaders: &mut leaders,
                summaries: &mut summaries,
            },
            lead,
        )
        .await
    }

    /// The session's loop: returns only with the error that ends it.
    async fn serve(
        &mut self,
        client: &mut Client,
        lease_id: i64,
        end: &mut oneshot::Receiver<ClusterError>,
        w: Watches<'_>,
        lead: &mut Lead,
    ) -> Result<std::convert::Infallible, ClusterError> {
        let me = self.cfg.node.clone();
        self.campaign(client, lease_id, lead).await?;
        let mut publish = tokio::time::interval(self.cfg.period);
        publish.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut check = tokio::time::interval(self.cfg.period / CHECKS_PER_PERIOD);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut published = Instant::now();
        loop {
            tokio::select! {
                _ = publish.tick() => {
                    let jobs = self.local_use();
                    self.publish(client, lease_id, jobs).await?;
                    published = Instant::now();
                }
                // A change of shape goes out at once (at most one early
                // report per EARLY_GAP of a period), not a period later.
                // (The gap is checked here: a select's condition is read
                // only when the select starts, and it may wait long.)
                _ = check.tick() => {
                    if published.elapsed() >= self.cfg.period / EARLY_GAP {
                        let jobs = self.local_use();
                        if use_change(&self.reported, &jobs) == UseChange::Shape {
                            self.publish(client, lease_id, jobs).await?;
                            published = Instant::now();
                            publish.reset();
                        }
                    }
                }
                r = &mut *end => return Err(lease_end(r, lease_id)),
                m = w.allocs.message() => {
                    for kv in puts(m, "allocation")? {
                        self.apply(kv.value());
                    }
                }
                m = w.summaries.message() => {
                    for kv in puts(m, "summary")? {
                        self.summary_changed(kv.value());
                    }
                }
                m = w.leaders.message() => {
                    let m = m?.ok_or_else(|| gone("leader"))?;
                    if m.canceled() {
                        return Err(gone("leader"));
                    }
                    for e in m.events() {
                        let put = e.event_type() == EventType::Put;
                        self.leader_changed(e.kv().filter(|_| put));
                    }
                    if lock(&self.state).cluster_view_mut().leader.is_none() {
                        self.campaign(client, lease_id, lead).await?;
                    }
                }
                Some(c) = self.commands.recv() => {
                    match self.set(client, &c).await {
                        Ok(answer) => {
                            let _ = c.done.send(answer);
                        }
                        // An etcd error: said, and the streams start again.
                        Err(e) => {
                            let _ = c.done.send(Err(e.to_string()));
                            return Err(e);
                        }
                    }
                }
                Some(done) = self.leaves.recv() => {
                    if let Err(e) = client.lease_revoke(lease_id).await {
                        tracing::warn!("cluster {}: leaving: {e}", self.cfg.name);
                    } else {
                        tracing::info!("cluster {}: node {me} left (lease revoked)", self.cfg.name);
                    }
                    let _ = done.send(());
                    // paiod is stopping: nothing more to do.
                    std::future::pending::<()>().await;
                }
                r = wait_lead(lead) => {
                    lead.0 = None;
                    lock(&self.state).cluster_view_mut().leading = false;
                    match r {
                        Ok(()) => tracing::warn!("cluster {}: node {me} is no longer the leader", self.cfg.name),
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }

    /// Creates `policy` and each `job/<job>` of the seed that does not
    /// exist yet.
    async fn seed_config(&self, client: &mut Client) -> Result<(), ClusterError> {
        let mut puts = vec![(self.keys.policy(), json(&self.seed.policy))];
        for (job, rec) in &self.seed.jobs {
            puts.push((self.keys.job(job), json(rec)));
        }
        for (key, value) in puts {
            client
                .txn(
                    Txn::new()
                        .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                        .and_then([TxnOp::put(key.as_str(), value, None)]),
                )
                .await?;
        }
        Ok(())
    }

    /// Becomes the leader if there is none: creates `leader` bound to the
    /// lease; the epoch is the transaction's revision.
    async fn campaign(
        &self,
        client: &mut Client,
        lease_id: i64,
        lead: &mut Lead,
    ) -> Result<(), ClusterError> {
        if lead.0.is_some() {
            return Ok(());
        }
        let key = self.keys.leader();
        let record = json(&LeaderRecord {
            node: self.cfg.node.clone(),
        });
        let r = client
            .txn(
                Txn::new()
                    .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(
                        key.as_str(),
                        record,
                        Some(PutOptions::new().with_lease(lease_id)),
                    )])
                    .or_else([TxnOp::get(key.as_str(), None)]),
            )
            .await
            .map_err(|e| ClusterError::about_lease(e, lease_id))?;
        let epoch = if r.succeeded() {
            r.header()
                .map(|h| h.revision())
                .ok_or_else(|| ClusterError::Protocol("a transaction without a header".into()))?
        } else {
            // The key exists: this node's own (bound to its lease) when its
            // leader task ended on a broken stream; then it leads on.
            let own = r.op_responses().into_iter().find_map(|op| match op {
                TxnOpResponse::Get(g) => g
                    .kvs()
                    .first()
                    .filter(|kv| kv.lease() == lease_id)
                    .map(|kv| kv.create_revision()),
                _ => None,
            });
            match own {
                Some(epoch) => epoch,
                None => return Ok(()),
            }
        };
        tracing::info!(
            "cluster {}: node {} leads (epoch {epoch})",
            self.cfg.name,
            self.cfg.node
        );
        {
            let mut st = lock(&self.state);
            let v = st.cluster_view_mut();
            v.leading = true;
            v.leader = Some((self.cfg.node.clone(), epoch));
        }
        let leader = leader::Leader::new(
            self.keys.clone(),
            self.cfg.node.clone(),
            epoch,
            self.cfg.period,
        );
        lead.0 = Some(tokio::spawn(leader.run(client.clone())));
        Ok(())
    }

    /// Takes the node's name for the session of `lease_id`: puts its last
    /// report bound to the lease, if no report holds the name or this
    /// agent's previous session's does; another live session's is
    /// [`ClusterError::NameTaken`] (two nodes of one name would both take
    /// its allocation, over the cluster's limit).
    async fn claim_name(&mut self, client: &mut Client, lease_id: i64) -> Result<(), ClusterError> {
        let key = self.keys.node(&self.cfg.node);
        self.seq += 1;
        let report = json(&NodeReport {
            node: self.cfg.node.clone(),
            seq: self.seq,
            jobs: self.reported.clone(),
        });
        let put = TxnOp::put(
            key.as_str(),
            report,
            Some(PutOptions::new().with_lease(lease_id)),
        );
        let mut holders = vec![Compare::create_revision(key.as_str(), CompareOp::Equal, 0)];
        holders.extend(
            self.last_lease
                .map(|old| Compare::lease(key.as_str(), CompareOp::Equal, old)),
        );
        let mut held = None;
        for holder in holders {
            let r = client
                .txn(
                    Txn::new()
                        .when([holder])
                        .and_then([put.clone()])
                        .or_else([TxnOp::get(key.as_str(), None)]),
                )
                .await
                .map_err(|e| ClusterError::about_lease(e, lease_id))?;
            if r.succeeded() {
                self.last_lease = Some(lease_id);
                return Ok(());
            }
            // The compare failed: the get of the same transaction says who
            // holds the name (none: it went since the previous try).
            held = r.op_responses().into_iter().find_map(|op| match op {
                TxnOpResponse::Get(g) => g.kvs().first().map(KeyValue::lease),
                _ => None,
            });
        }
        match held {
            Some(lease) => Err(ClusterError::NameTaken {
                node: self.cfg.node.clone(),
                lease,
            }),
            None => Err(ClusterError::Protocol(format!(
                "node key {key} went while it was claimed; trying again"
            ))),
        }
    }

    /// Puts the node's report of `jobs`, bound to its lease (a plain put:
    /// the leader and the summary come through the session's watches).
    async fn publish(
        &mut self,
        client: &mut Client,
        lease_id: i64,
        jobs: BTreeMap<String, JobUse>,
    ) -> Result<(), ClusterError> {
        self.seq += 1;
        let report = NodeReport {
            node: self.cfg.node.clone(),
            seq: self.seq,
            jobs,
        };
        client
            .put(
                self.keys.node(&self.cfg.node),
                json(&report),
                Some(PutOptions::new().with_lease(lease_id)),
            )
            .await
            .map_err(|e| ClusterError::about_lease(e, lease_id))?;
        self.reported = report.jobs;
        Ok(())
    }

    /// Takes the `leader` key as read or put (none: deleted or absent).
    fn leader_changed(&self, kv: Option<&KeyValue>) {
        let leader = kv.and_then(|kv| {
            serde_json::from_slice::<LeaderRecord>(kv.value())
                .ok()
                .map(|l| (l.node, kv.create_revision()))
        });
        lock(&self.state).cluster_view_mut().leader = leader;
    }

    /// Takes a new `summary` (an unreadable one is said, and the last kept).
    fn summary_changed(&self, value: &[u8]) {
        match serde_json::from_slice::<Summary>(value) {
            Ok(s) => lock(&self.state).cluster_view_mut().summary = Some(s),
            Err(e) => tracing::warn!("cluster {}: an unreadable summary: {e}", self.cfg.name),
        }
    }

    /// The node's jobs, from the local policy's last period. A job whose
    /// name cannot be a cluster job (see [`super::check_name`]) is left
    /// out, and said once.
    fn local_use(&mut self) -> BTreeMap<String, JobUse> {
        let targets = lock(&self.state).group_targets();
        let mut over = false;
        let mut jobs = BTreeMap::new();
        for t in targets.into_iter().filter(|t| t.stages > 0) {
            if let Err(e) = super::check_name(&t.group) {
                if self.refused.len() < MAX_REFUSED && self.refused.insert(t.group.clone()) {
                    tracing::warn!(
                        "cluster {}: job {e}: its stages are controlled on this node only",
                        self.cfg.name
                    );
                }
                continue;
            }
            if jobs.len() == super::MAX_JOBS_PER_NODE {
                over = true;
                if !self.over_said {
                    tracing::warn!(
                        "cluster {}: more than {} jobs on this node; the others are \
                         controlled on this node only",
                        self.cfg.name,
                        super::MAX_JOBS_PER_NODE
                    );
                }
                break;
            }
            jobs.insert(
                t.group,
                JobUse {
                    stages: t.stages as u32,
                    achieved: Some(t.achieved_bytes_per_sec),
                    hungry: t.hungry,
                },
            );
        }
        // Said once each time the node goes over (the checks run ten times
        // a period).
        self.over_said = over;
        jobs
    }

    /// Hands an allocation (a `alloc/<node>` value) to the local policy.
    fn apply(&self, value: &[u8]) {
        let alloc: NodeAllocation = match serde_json::from_slice(value) {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!("cluster {}: an unreadable allocation: {e}", self.cfg.name);
                return;
            }
        };
        let mut st = lock(&self.state);
        st.apply_cluster_allocation(&alloc.jobs);
        st.cluster_view_mut().allocation = Some((alloc, Instant::now()));
    }

    /// Writes a `paio ctl set` into the cluster's configuration
    /// (read, change, write if unchanged meanwhile).
    /// Err: etcd failed; Ok(Err): the change is refused, with the reason.
    async fn set(
        &self,
        client: &mut Client,
        c: &SetCommand,
    ) -> Result<Result<(), String>, ClusterError> {
        if c.group != "*" {
            if let Err(e) = super::check_name(&c.group) {
                return Ok(Err(format!("job {e}")));
            }
        }
        let key = if c.group == "*" {
            self.keys.policy()
        } else {
            self.keys.job(&c.group)
        };
        for _ in 0..8 {
            let got = client.get(key.as_str(), None).await?;
            let (rev, value) = match got.kvs().first() {
                Some(kv) => (kv.mod_revision(), kv.value().to_vec()),
                None => (0, Vec::new()),
            };
            let new = if c.group == "*" {
                let mut p: PolicyRecord =
                    serde_json::from_slice(&value).unwrap_or_else(|_| self.seed.policy.clone());
                p.max_bandwidth = c.value;
                json(&p)
            } else {
                let mut j: JobRecord = serde_json::from_slice(&value).unwrap_or_default();
                match c.key.as_str() {
                    "demand" => j.demand = Some(c.value),
                    "weight" => j.weight = Some(c.value),
                    other => {
                        return Ok(Err(format!(
                            "{other} is not a cluster setting (demand, weight, max_bandwidth)"
                        )))
                    }
                }
                json(&j)
            };
            let r = client
                .txn(
                    Txn::new()
                        .when([Compare::mod_revision(key.as_str(), CompareOp::Equal, rev)])
                        .and_then([TxnOp::put(key.as_str(), new, None)]),
                )
                .await?;
            if r.succeeded() {
                return Ok(Ok(()));
            }
        }
        Ok(Err(format!(
            "{key} kept changing under 8 attempts to set it"
        )))
    }
}

fn json<T: serde::Serialize>(v: &T) -> Vec<u8> {
    // Records are plain structs of strings, numbers and maps.
    serde_json::to_vec(v).expect("cluster records serialize")
}

/// The session's watches besides the lease's.
struct Watches<'a> {
    allocs: &'a mut WatchStream,
    leaders: &'a mut WatchStream,
    summaries: &'a mut WatchStream,
}

/// The values put in a watch message of `what`; Err when the watch ended.
fn puts(
    m: Result<Option<etcd_client::WatchResponse>, etcd_client::Error>,
    what: &str,
) -> Result<Vec<KeyValue>, ClusterError> {
    let m = m?.ok_or_else(|| gone(what))?;
    if m.canceled() {
        return Err(gone(what));
    }
    Ok(m.events()
        .iter()
        .filter(|e| e.event_type() == EventType::Put)
        .filter_map(|e| e.kv().cloned())
        .collect())
}

fn gone(what: &str) -> ClusterError {
    ClusterError::Protocol(format!("etcd ended the watch of the {what}"))
}

async fn wait_lead(lead: &mut Lead) -> Result<(), ClusterError> {
    match &mut lead.0 {
        Some(h) => match h.await {
            Ok(r) => r,
            Err(e) => Err(ClusterError::Protocol(format!(
                "the leader task ended: {e}"
            ))),
        },
        None => std::future::pending().await,
    }
}

/// The member a node tries first: spread over the members by node name.
fn cfg_start(cfg: &ClusterConfig) -> usize {
    let h = cfg
        .node
        .bytes()
        .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize));
    h % cfg.endpoints.len().max(1)
}

/// Connect options for one member: every call waits at most a lease.
fn connect_options(lease: Duration) -> ConnectOptions {
    ConnectOptions::new()
        .with_connect_timeout(lease)
        .with_timeout(lease)
        .with_keep_alive(lease / 2, lease)
}

/// A client of the member that answers first (its index and the client),
/// the members tried from `start` on: each a tenth of a lease after the one
/// before, or at once when the one before failed, so a member that hangs
/// delays the others by that much only. One client per member: a client of
/// several members sends some requests to a member that is gone.
async fn connect_first(
    endpoints: &[String],
    start: usize,
    lease: Duration,
) -> Result<(usize, Client), ClusterError> {
    let n = endpoints.len();
    let mut tries = tokio::task::JoinSet::new();
    let try_member = |tries: &mut tokio::task::JoinSet<_>, k: usize| {
        let i = (start + k) % n;
        let endpoint = endpoints[i].clone();
        tries.spawn(async move {
            let mut c = Client::connect([endpoint], Some(connect_options(lease))).await?;
            c.status().await?;
            Ok::<_, etcd_client::Error>((i, c))
        });
    };
    let mut next = 0;
    let mut last = None;
    loop {
        if next < n && tries.is_empty() {
            try_member(&mut tries, next);
            next += 1;
        }
        if tries.is_empty() {
            return Err(last.unwrap_or_else(|| ClusterError::Protocol("no etcd endpoint".into())));
        }
        tokio::select! {
            r = tries.join_next() => match r {
                // The other tries are aborted when `tries` is dropped.
                Some(Ok(Ok(found))) => return Ok(found),
                Some(Ok(Err(e))) => last = Some(e.into()),
                Some(Err(e)) => last = Some(ClusterError::Protocol(format!("connecting: {e}"))),
                None => {}
            },
            _ = tokio::time::sleep(lease / 10), if next < n => {
                try_member(&mut tries, next);
                next += 1;
            }
        }
    }
}

/// How a session's lease ended, as its [`Renewer`] said.
fn lease_end(r: Result<ClusterError, oneshot::error::RecvError>, id: i64) -> ClusterError {
    r.unwrap_or_else(|_| ClusterError::LeaseLapsed {
        id,
        last: "its renewals stopped".into(),
    })
}

/// The task that keeps a session's lease alive (see [`renew`]); dropping
/// it stops the task.
struct Renewer {
    task: tokio::task::JoinHandle<()>,
    /// Why the lease ended, once it has.
    end: oneshot::Receiver<ClusterError>,
}

impl Renewer {
    /// Renews lease `id` of `cfg`'s cluster over `first` (a member and a
    /// client of it) until it fails; the lease lives at least until
    /// `alive_until`, and `ttl` after each renewal.
    fn start(
        cfg: &ClusterConfig,
        first: (usize, Client),
        id: i64,
        alive_until: Instant,
        ttl: Duration,
    ) -> Self {
        let (tx, end) = oneshot::channel();
        let (endpoints, lease) = (cfg.endpoints.clone(), cfg.lease);
        let task = tokio::spawn(async move {
            let why = renew(&endpoints, first, lease, id, alive_until, ttl).await;
            let _ = tx.send(why);
        });
        Self { task, end }
    }
}

impl Drop for Renewer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Renews lease `id` every third of its `ttl` over one member, until etcd
/// says it is gone ([`ClusterError::LeaseGone`]) or no member renewed it
/// for two `ttl`s after it may have expired ([`ClusterError::LeaseLapsed`]:
/// an etcd election extends every lease, so only etcd can say it expired).
/// It moves to the next member that answers when its member breaks or does
/// not answer a renewal within a third of the `ttl`; it starts over
/// `first`. `lease` bounds each call, as for the session's client.
async fn renew(
    endpoints: &[String],
    first: (usize, Client),
    lease: Duration,
    id: i64,
    mut alive_until: Instant,
    ttl: Duration,
) -> ClusterError {
    let third = ttl / 3;
    let mut last = String::from("no member answered");
    let mut start = first.0;
    let mut first = Some(first);
    loop {
        if Instant::now() >= alive_until + ttl * 2 {
            return ClusterError::LeaseLapsed { id, last };
        }
        // A member, and its answer to a first renewal.
        let opened = tokio::time::timeout(ttl, async {
            let (i, mut c) = match first.take() {
                Some(f) => f,
                None => connect_first(endpoints, start, lease).await?,
            };
            let sent = Instant::now();
            let (keeper, renewals) = c
                .lease_keep_alive(id)
                .await
                .map_err(|e| ClusterError::about_lease(e, id))?;
            Ok::<_, ClusterError>((i, c, keeper, renewals, sent))
        })
        .await;
        let (i, _client, mut keeper, mut renewals, sent) = match opened {
            Ok(Ok(o)) => o,
            Ok(Err(ClusterError::LeaseGone(_))) => return ClusterError::LeaseGone(id),
            Ok(Err(e)) => {
                last = e.to_string();
                start = (start + 1) % endpoints.len();
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(_) => {
                last = format!("no answer to a renewal within {ttl:?}");
                start = (start + 1) % endpoints.len();
                continue;
            }
        };
        alive_until = alive_until.max(sent + ttl);
        // When each renewal not yet answered was sent.
        let mut pending = std::collections::VecDeque::new();
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + third, third);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        last = loop {
            let overdue = pending.front().map(|&s: &Instant| s + third);
            tokio::select! {
                _ = tick.tick() => {
                    if let Err(e) = keeper.keep_alive().await {
                        break e.to_string();
                    }
                    pending.push_back(Instant::now());
                }
                r = renewals.message() => match r {
                    Ok(Some(r)) if r.ttl() > 0 => {
                        if let Some(sent) = pending.pop_front() {
                            alive_until = alive_until.max(sent + Duration::from_secs(r.ttl() as u64));
                        }
                    }
                    Ok(Some(_)) => return ClusterError::LeaseGone(id),
                    Ok(None) => break "the member ended the renewals".into(),
                    Err(e) => break e.to_string(),
                },
                _ = sleep_until(overdue) => break format!("no answer to a renewal within {third:?}"),
            }
        };
        tracing::debug!("lease {id:x}: {last}; renewing over another member");
        start = (i + 1) % endpoints.len();
    }
}

/// Sleeps until `t`, or for ever when none.
async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

/// The leader task, while this node leads; dropping it stops the task
/// (so a session that ends, or an agent that is dropped, leads no more).
#[derive(Default)]
struct Lead(Option<tokio::task::JoinHandle<Result<(), ClusterError>>>);

impl Drop for Lead {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.abort();
        }
    }
}

/// Range options that make a get cover every key starting with the key
/// it is given.
pub(super) fn prefixed() -> Option<GetOptions> {
    Some(GetOptions::new().with_prefix())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// etcd's answers when its authentication is on get a hint; others not.
    #[test]
    fn an_etcd_wanting_credentials_is_named() {
        let e = "grpc request error: status: InvalidArgument, message: \"etcdserver: user name is empty\"";
        assert!(auth_hint(e).contains("authentication enabled"));
        assert!(auth_hint("etcdserver: invalid auth token").contains("without credentials"));
        assert_eq!(auth_hint("transport error: connection refused"), "");
    }
}
