//! `paio-cluster-sim`: many paiod nodes in one process, against a real etcd
//! (issue 15's scale benchmark; `make experiment-cluster` drives it).
//!
//! Each simulated node is paiod's own cluster agent
//! (`paio_control::cluster::node::Agent`) with its own etcd session, lease
//! and watches, over a paiod state whose policy stands in for the node's
//! stages: it reports `--stages` stages spread over two jobs per node, and
//! records when the allocations the agent hands it arrive. One of the
//! agents wins the election and runs the real leader.
//!
//! Every `--change` seconds the stages' demand changes on every node (which
//! jobs are held back and how much the others achieve), so every node's
//! allocation changes. The expected allocation is computed with the
//! leader's own function (`cluster::alloc::allocate`) from the same inputs.
//! A change's *cycle* is the time from the last node publishing the new
//! demand to the last node having applied the matching allocation; its
//! *reaction*, the time from the change itself (nodes report it at their
//! next period, or at once when it changes a job's shape, as here) to the
//! last node having applied it.
//!
//! Meanwhile a probe puts one small key every 100 ms over a connection of
//! its own: etcd's own put latency under that load (`etcd_put_*`), which
//! each step of a cycle pays.
//!
//! At the end the leading agent is stopped (its lease is no longer
//! renewed) and the time until another node leads is the failover time.
//! Prints one `key=value` line per figure.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use paio::Rule;
use paio_control::cluster::alloc::{allocate, GlobalKind, JobDemand, NodeUse};
use paio_control::cluster::keys::Keys;
use paio_control::cluster::{ClusterConfig, LeaderRecord};
use paio_control::config::{GroupConfig, PolicyConfig, PolicyKind};
use paio_control::conns::Limits;
use paio_control::policy::common::DEADBAND;
use paio_control::policy::{ControlPolicy, GroupTarget, PolicyError, StageId, StageView};
use paio_control::server::State;

const MIB: f64 = 1048576.0;

struct Args {
    endpoints: Vec<String>,
    nodes: usize,
    stages: u32,
    jobs: usize,
    seconds: f64,
    change: f64,
    period: Duration,
    lease: Duration,
    capacity: f64,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        endpoints: Vec::new(),
        nodes: 10,
        stages: 100,
        jobs: 10,
        seconds: 30.0,
        change: 3.0,
        period: Duration::from_secs(1),
        lease: Duration::from_secs(2),
        capacity: 100.0 * 1024.0 * MIB,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it.next().ok_or_else(|| format!("{k} needs a value"))?;
        let num = |v: &str| {
            v.parse::<f64>()
                .map_err(|_| format!("{k}: not a number: {v}"))
        };
        match k.as_str() {
            "--etcd" => a.endpoints = v.split(',').map(str::to_string).collect(),
            "--nodes" => a.nodes = num(&v)? as usize,
            "--stages" => a.stages = num(&v)? as u32,
            "--jobs" => a.jobs = num(&v)? as usize,
            "--seconds" => a.seconds = num(&v)?,
            "--change" => a.change = num(&v)?,
            "--period" => a.period = Duration::from_secs_f64(num(&v)?),
            "--lease" => a.lease = Duration::from_secs(num(&v)? as u64),
            _ => return Err(format!("unknown option {k}")),
        }
    }
    if a.endpoints.is_empty() || a.nodes == 0 || a.jobs < 2 || a.stages < 2 {
        return Err(
            "usage: paio-cluster-sim --etcd URL[,URL] [--nodes N] [--stages S] \
                    [--jobs J>=2] [--seconds T] [--change C] [--period P] [--lease L]"
                .into(),
        );
    }
    Ok(a)
}

/// What every simulated node reports and expects, shared with the driver.
#[derive(Default)]
struct World {
    /// Per node: job → (stages, achieved, hungry) of the current generation.
    use_: Vec<BTreeMap<String, (u32, f64, bool)>>,
    /// Per node: the allocation expected for the current generation.
    expected: Vec<BTreeMap<String, f64>>,
    /// Per node: when it first published the current generation.
    published: Vec<Option<Instant>>,
    /// Per node: when it first had the expected allocation.
    applied: Vec<Option<Instant>>,
}

/// A node's stages, as the agent sees them through paiod's policy.
struct SimPolicy {
    node: usize,
    world: Arc<Mutex<World>>,
}

impl ControlPolicy for SimPolicy {
    fn kind(&self) -> &'static str {
        "max_min"
    }
    fn setup(&self, _stage: &StageView) -> Vec<Rule> {
        Vec::new()
    }
    fn period(&mut self, _now: Duration, _stages: &[StageView]) -> Vec<(StageId, Vec<Rule>)> {
        Vec::new()
    }
    fn set(&mut self, _group: &str, _key: &str, _value: &str) -> Result<(), PolicyError> {
        Ok(())
    }
    fn controls(&self, _stage: &StageView, _channel: &str, _object: &str) -> bool {
        false
    }
    /// Called by the agent right before it publishes.
    fn targets(&self) -> Vec<GroupTarget> {
        let mut w = self.world.lock().unwrap();
        w.published[self.node].get_or_insert_with(Instant::now);
        w.use_[self.node]
            .iter()
            .map(|(job, &(stages, achieved, hungry))| GroupTarget {
                group: job.clone(),
                demand_bytes_per_sec: 0.0,
                target_bytes_per_sec: 0.0,
                achieved_bytes_per_sec: achieved,
                stages: stages as usize,
                hungry,
            })
            .collect()
    }
    fn set_node_allocation(&mut self, rates: &BTreeMap<String, f64>) -> Result<(), PolicyError> {
        let mut w = self.world.lock().unwrap();
        let want = &w.expected[self.node];
        // The leader leaves a node's allocation as it is while the new one
        // is within the dead band of what it sent.
        let matches = want.len() == rates.len()
            && want.iter().zip(rates).all(|((j0, r0), (j1, r1))| {
                j0 == j1 && (r1 - r0).abs() <= DEADBAND * r1.abs() + 1.0
            });
        if matches && w.published[self.node].is_some() {
            w.applied[self.node].get_or_insert_with(Instant::now);
        }
        Ok(())
    }
}

/// The demand of generation `g`: node `i` has its stages on jobs `i % J`
/// and `(i + 1) % J`; a job is held back on even generations when its
/// index is even, and on odd ones when it is odd; the others achieve an
/// amount that depends on the node and the generation.
fn demand(a: &Args, g: u64, i: usize) -> BTreeMap<String, (u32, f64, bool)> {
    let mut m = BTreeMap::new();
    for (k, j) in [i % a.jobs, (i + 1) % a.jobs].into_iter().enumerate() {
        let stages = if k == 0 {
            a.stages / 2
        } else {
            a.stages - a.stages / 2
        };
        let hungry = (j as u64 + g).is_multiple_of(2);
        let achieved = (1 + (i as u64 * 7 + g * 13) % 50) as f64 * MIB;
        m.insert(format!("j{j}"), (stages, achieved, hungry));
    }
    m
}

/// The leader's allocation of `use_` (the same inputs, in the same order).
fn expected(
    a: &Args,
    use_: &[BTreeMap<String, (u32, f64, bool)>],
    names: &[String],
) -> Vec<BTreeMap<String, f64>> {
    // Reports in the order of node names, as the leader keeps them.
    let mut order: Vec<usize> = (0..use_.len()).collect();
    order.sort_by(|x, y| names[*x].cmp(&names[*y]));
    let mut by_job: BTreeMap<String, Vec<NodeUse>> = BTreeMap::new();
    for &i in &order {
        for (job, &(stages, achieved, hungry)) in &use_[i] {
            by_job.entry(job.clone()).or_default().push(NodeUse {
                node: names[i].clone(),
                stages,
                achieved: Some(achieved),
                hungry,
            });
        }
    }
    let jobs: Vec<JobDemand> = by_job
        .into_iter()
        .map(|(job, nodes)| JobDemand {
            demand: job_demand(&job),
            weight: 1.0,
            job,
            nodes,
        })
        .collect();
    let mut out = vec![BTreeMap::new(); use_.len()];
    let index: BTreeMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    for j in allocate(GlobalKind::MaxMin, a.capacity, &jobs) {
        for (node, r) in j.nodes {
            out[index[node.as_str()]].insert(j.job.clone(), r);
        }
    }
    out
}

/// Job `jK`'s configured demand: (K + 1) GiB/s.
fn job_demand(job: &str) -> f64 {
    let k: f64 = job[1..].parse().unwrap_or(0.0);
    (k + 1.0) * 1024.0 * MIB
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let k = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[k]
}

/// Puts one small key every [`PROBE_EVERY`] while `probing`, over a
/// connection and a runtime thread of its own (so the simulated nodes'
/// runtime does not delay it), and returns each put's latency in ms:
/// etcd's own latency under the cluster's load, which every step of a
/// cycle pays (a report, the leader's write). The key is outside the
/// cluster's prefix, so nothing watches it. A failed connection or put
/// ends the probe with its error: the run's figures would be incomplete.
fn probe_etcd(
    endpoints: Vec<String>,
    probing: &std::sync::atomic::AtomicBool,
) -> Result<Vec<f64>, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("the probe's runtime: {e}"))?;
    rt.block_on(async {
        let mut latencies = Vec::new();
        let mut c = etcd_client::Client::connect(&endpoints, None)
            .await
            .map_err(|e| format!("the probe's connection to etcd: {e}"))?;
        let mut tick = tokio::time::interval(PROBE_EVERY);
        while probing.load(std::sync::atomic::Ordering::Relaxed) {
            tick.tick().await;
            let t = Instant::now();
            c.put("/paio-cluster-sim/probe", "x", None)
                .await
                .map_err(|e| format!("the probe's put {}: {e}", latencies.len() + 1))?;
            latencies.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok(latencies)
    })
}

/// How often [`probe_etcd`] puts.
const PROBE_EVERY: Duration = Duration::from_millis(100);

fn cpu_seconds() -> f64 {
    paio_control::loopstats::process_cpu_time().map_or(f64::NAN, |d| d.as_secs_f64())
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("paio-cluster-sim: {e}");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(run(a));
}

async fn run(a: Args) {
    let names: Vec<String> = (0..a.nodes).map(|i| format!("sim{i:05}")).collect();
    let world = Arc::new(Mutex::new(World {
        use_: (0..a.nodes).map(|i| demand(&a, 0, i)).collect(),
        expected: Vec::new(),
        published: vec![None; a.nodes],
        applied: vec![None; a.nodes],
    }));
    {
        let mut w = world.lock().unwrap();
        w.expected = expected(&a, &w.use_, &names);
    }
    let policy = PolicyConfig {
        kind: PolicyKind::MaxMin,
        max_bandwidth: Some(a.capacity),
        groups: (0..a.jobs)
            .map(|k| GroupConfig {
                name: format!("j{k}"),
                demand: Some(job_demand(&format!("j{k}"))),
                ..GroupConfig::default()
            })
            .collect(),
        ..PolicyConfig::default()
    };
    let limits = Limits::resolve(&Default::default(), 4096).expect("limits");
    let cluster = format!("sim{}", std::process::id());
    let mut agents = Vec::new();
    let started = Instant::now();
    for (i, name) in names.iter().enumerate() {
        let state = Arc::new(Mutex::new(State::new(
            Box::new(SimPolicy {
                node: i,
                world: world.clone(),
            }),
            Duration::from_secs(1),
            Duration::from_secs(2),
            limits,
        )));
        let cfg = ClusterConfig {
            endpoints: a.endpoints.clone(),
            name: cluster.clone(),
            node: name.clone(),
            lease: a.lease,
            period: a.period,
        };
        let agent = paio_control::cluster::node::Agent::install(cfg, state, &policy);
        agents.push(tokio::spawn(agent.run()));
        // Connect in batches, as nodes that boot over some seconds would.
        if i % 50 == 49 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let mut etcd = etcd_client::Client::connect(&a.endpoints, None)
        .await
        .expect("etcd");
    let keys = Keys::new(&cluster);
    // Settled: every node applied the first allocation.
    let settle = Instant::now();
    loop {
        let done = world
            .lock()
            .unwrap()
            .applied
            .iter()
            .filter(|t| t.is_some())
            .count();
        if done == a.nodes {
            break;
        }
        if settle.elapsed() > Duration::from_secs(120) {
            println!(
                "error=only {done} of {} nodes applied the first allocation in 120 s",
                a.nodes
            );
            std::process::exit(1);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("startup_s={:.2}", started.elapsed().as_secs_f64());
    let rev0 = etcd
        .get(keys.leader(), None)
        .await
        .expect("get")
        .header()
        .map_or(0, |h| h.revision());
    let probing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let probe = {
        let (endpoints, probing) = (a.endpoints.clone(), probing.clone());
        std::thread::spawn(move || probe_etcd(endpoints, &probing))
    };
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let mut cycles = Vec::new();
    let mut reactions = Vec::new();
    let mut incomplete = 0;
    let mut g = 0;
    while t0.elapsed().as_secs_f64() < a.seconds {
        g += 1;
        {
            let mut w = world.lock().unwrap();
            w.use_ = (0..a.nodes).map(|i| demand(&a, g, i)).collect();
            w.expected = expected(&a, &w.use_, &names);
            w.published = vec![None; a.nodes];
            w.applied = vec![None; a.nodes];
        }
        let changed = Instant::now();
        tokio::time::sleep(Duration::from_secs_f64(a.change)).await;
        let w = world.lock().unwrap();
        let last_pub = w.published.iter().flatten().max().copied();
        let last_app = w.applied.iter().flatten().max().copied();
        let all = w.applied.iter().all(|t| t.is_some()) && w.published.iter().all(|t| t.is_some());
        match (all, last_pub, last_app) {
            (true, Some(p), Some(ap)) => {
                cycles.push(ap.saturating_duration_since(p).as_secs_f64() * 1e3);
                reactions.push(ap.saturating_duration_since(changed).as_secs_f64() * 1e3);
            }
            _ => incomplete += 1,
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    probing.store(false, std::sync::atomic::Ordering::Relaxed);
    let mut puts = match probe.join() {
        Ok(Ok(puts)) => puts,
        Ok(Err(e)) => {
            println!("error={e}");
            std::process::exit(1);
        }
        Err(_) => {
            println!("error=the etcd probe's thread panicked");
            std::process::exit(1);
        }
    };
    let rev1 = etcd
        .get(keys.leader(), None)
        .await
        .expect("get")
        .header()
        .map_or(0, |h| h.revision());
    let n = cycles.len();
    let (p50, p99, max) = (
        percentile(&mut cycles.clone(), 50.0),
        percentile(&mut cycles.clone(), 99.0),
        cycles.iter().cloned().fold(f64::NAN, f64::max),
    );
    println!("nodes={}", a.nodes);
    println!("stages={}", a.nodes as u64 * a.stages as u64);
    println!("changes={n}");
    println!("incomplete={incomplete}");
    println!("cycle_p50_ms={p50:.1}");
    println!("cycle_p99_ms={p99:.1}");
    println!("cycle_max_ms={max:.1}");
    println!(
        "cycles_ms={}",
        cycles
            .iter()
            .map(|c| format!("{c:.1}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    println!(
        "reaction_p50_ms={:.1}",
        percentile(&mut reactions.clone(), 50.0)
    );
    println!(
        "reaction_p99_ms={:.1}",
        percentile(&mut reactions.clone(), 99.0)
    );
    // The probe's own puts are not the cluster's writes.
    let cluster_writes = (rev1 - rev0) as f64 - puts.len() as f64;
    println!("etcd_writes_per_s={:.1}", cluster_writes / elapsed);
    println!("etcd_puts={}", puts.len());
    println!("etcd_put_p50_ms={:.1}", percentile(&mut puts, 50.0));
    println!("etcd_put_p99_ms={:.1}", percentile(&mut puts, 99.0));
    println!(
        "etcd_put_max_ms={:.1}",
        puts.iter().cloned().fold(f64::NAN, f64::max)
    );
    println!("sim_cpu_share={:.3}", cpu / elapsed);
    println!(
        "cpu_ms_per_node_per_s={:.3}",
        cpu / elapsed / a.nodes as f64 * 1e3
    );

    // Failover: stop the leading agent; time until another one leads.
    let leader = etcd.get(keys.leader(), None).await.expect("get");
    let Some(kv) = leader.kvs().first() else {
        println!("error=no leader at the end");
        std::process::exit(1);
    };
    let old = kv.create_revision();
    let rec: LeaderRecord = serde_json::from_slice(kv.value()).expect("leader record");
    let i = names
        .iter()
        .position(|n| *n == rec.node)
        .expect("a simulated leader");
    agents[i].abort();
    let killed = Instant::now();
    loop {
        let l = etcd.get(keys.leader(), None).await.expect("get");
        if l.kvs()
            .first()
            .is_some_and(|kv| kv.create_revision() != old)
        {
            break;
        }
        if killed.elapsed() > Duration::from_secs(60) {
            println!("error=no new leader within 60 s");
            std::process::exit(1);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!("failover_s={:.3}", killed.elapsed().as_secs_f64());
    for h in &agents {
        h.abort();
    }
}
