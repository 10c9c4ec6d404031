//! Cluster mode end to end: a real 3-member etcd cluster on loopback ports,
//! three real paiod "nodes" (each with its own socket), and as the jobs'
//! stages either stages in this process whose requests never stop or real
//! programs (dd) under `paio run`. Waits are bounded polls for events,
//! never timing assertions; how long a failover took is printed, and
//! measured in `make experiment-cluster`.

mod support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use paio::control::ControlClient;
use paio::{Context, ObjectConfig, RequestType, Stage};
use paio_control::cluster::node::ClusterStatus;
use paio_control::ctl::{self, CtlCommand, StatusReport};

const MIB: f64 = 1048576.0;

fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The last `lines` lines of the log file `path` (empty if unreadable).
fn log_tail(path: &Path, lines: usize) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let mut tail: Vec<&str> = log.lines().rev().take(lines).collect();
    tail.reverse();
    tail.join("\n")
}

/// A 3-member etcd cluster in a temporary directory, stopped on drop.
struct Etcd {
    dir: PathBuf,
    client: Vec<u16>,
    peer: Vec<u16>,
    members: Vec<Option<Child>>,
}

impl Etcd {
    /// Starts the cluster in `dir`. Its ports were free when chosen, but
    /// another process (an outgoing connection of a test running beside
    /// this one) may take one before etcd binds it: a cluster with a member
    /// that could not bind starts again on new ports, at most 3 times.
    fn start(dir: &Path) -> Etcd {
        let n = 3;
        for attempt in 1..=3 {
            let sub = dir.join(format!("attempt{attempt}"));
            std::fs::create_dir_all(&sub).unwrap();
            let mut e = Etcd {
                dir: sub,
                client: (0..n).map(|_| support::free_port()).collect(),
                peer: (0..n).map(|_| support::free_port()).collect(),
                members: (0..n).map(|_| None).collect(),
            };
            for i in 0..n {
                e.start_member(i);
            }
            match (0..n).try_for_each(|i| e.healthy(i)) {
                Ok(()) => return e,
                Err(why) if why.contains("address already in use") && attempt < 3 => {
                    eprintln!("etcd, attempt {attempt}: {why}; new ports");
                }
                Err(why) => panic!("{why}"),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    fn start_member(&mut self, i: usize) {
        let initial: Vec<String> = (0..self.peer.len())
            .map(|k| format!("m{k}=http://127.0.0.1:{}", self.peer[k]))
            .collect();
        let data = self.dir.join(format!("m{i}"));
        let state = if data.exists() { "existing" } else { "new" };
        let log = std::fs::File::create(self.dir.join(format!("m{i}.log"))).unwrap();
        let child = Command::new("etcd")
            .args(["--name", &format!("m{i}")])
            .arg("--data-dir")
            .arg(&data)
            .args([
                "--listen-client-urls",
                &format!("http://127.0.0.1:{}", self.client[i]),
                "--advertise-client-urls",
                &format!("http://127.0.0.1:{}", self.client[i]),
                "--listen-peer-urls",
                &format!("http://127.0.0.1:{}", self.peer[i]),
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{}", self.peer[i]),
                "--initial-cluster",
                &initial.join(","),
                "--initial-cluster-state",
                state,
                "--initial-cluster-token",
                "paio-test",
                // Faster elections make etcd's shortest lease 1 s.
                "--heartbeat-interval",
                "50",
                "--election-timeout",
                "500",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd (Debian's etcd-server; `make setup` installs it)");
        self.members[i] = Some(child);
    }

    fn wait_healthy(&mut self, i: usize) {
        if let Err(why) = self.healthy(i) {
            panic!("{why}");
        }
    }

    /// Waits up to 30 s for member `i` to say it is healthy; the error
    /// says why not, with the end of the member's log (it exited, or is
    /// still unhealthy).
    fn healthy(&mut self, i: usize) -> Result<(), String> {
        let port = self.client[i];
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if http_get(port, "/health").is_some_and(|b| b.contains("\"health\":\"true\"")) {
                return Ok(());
            }
            let exited = self.members[i]
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() >= deadline {
                let state = match exited {
                    Some(status) => format!("exited ({status})"),
                    None => "not healthy within 30 s".to_string(),
                };
                return Err(format!(
                    "etcd member {i} {state}; the end of its log:\n{}",
                    log_tail(&self.dir.join(format!("m{i}.log")), 10)
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn endpoints(&self) -> Vec<String> {
        self.client
            .iter()
            .map(|p| format!("http://127.0.0.1:{p}"))
            .collect()
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// A TCP relay that can cut a node off from etcd (a partition), or hang:
/// accept connections and never answer (a member that hangs).
struct Relay {
    port: u16,
    open: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    hang: Arc<AtomicBool>,
}

impl Relay {
    fn start(to: u16) -> Relay {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let open = Arc::new(AtomicBool::new(true));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let hang = Arc::new(AtomicBool::new(false));
        let (o, c, h) = (open.clone(), conns.clone(), hang.clone());
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for s in l.incoming() {
                let Ok(a) = s else { continue };
                if h.load(Ordering::SeqCst) {
                    held.push(a);
                    continue;
                }
                if !o.load(Ordering::SeqCst) {
                    drop(a);
                    continue;
                }
                let Ok(b) = TcpStream::connect(("127.0.0.1", to)) else {
                    continue;
                };
                let mut list = c.lock().unwrap();
                // Checked again under the lock `cut` drains with: a
                // connection accepted while it ran would outlive the cut
                // (a partitioned node that never notices).
                if !o.load(Ordering::SeqCst) {
                    continue;
                }
                list.push(a.try_clone().unwrap());
                list.push(b.try_clone().unwrap());
                for (mut from, mut into) in
                    [(a.try_clone().unwrap(), b.try_clone().unwrap()), (b, a)]
                {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut into);
                        let _ = into.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Relay {
            port,
            open,
            conns,
            hang,
        }
    }

    /// From now on, holds the connections it accepts without a word.
    fn hang(&self) {
        self.hang.store(true, Ordering::SeqCst);
    }

    fn cut(&self) {
        let mut conns = self.conns.lock().unwrap();
        self.open.store(false, Ordering::SeqCst);
        for s in conns.drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    fn mend(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

struct Node {
    name: String,
    child: Child,
    socket: PathBuf,
    log: PathBuf,
    metrics: u16,
}

impl Node {
    fn start(dir: &Path, name: &str, endpoints: &[String]) -> Node {
        Node::start_leased(dir, name, endpoints, "1s")
    }

    /// A node whose cluster lease is `lease`.
    fn start_leased(dir: &Path, name: &str, endpoints: &[String], lease: &str) -> Node {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        let cfg = d.join("paiod.toml");
        let metrics = support::free_port();
        let eps: Vec<String> = endpoints.iter().map(|e| format!("{e:?}")).collect();
        std::fs::write(
            &cfg,
            format!(
                r#"
period = "100ms"
metrics = "127.0.0.1:{}"
[policy]
kind = "max_min"
group_by = "job"
channel = "read"
max_bandwidth = "100MiB/s"
[[policy.group]]
name = "a"
demand = "60MiB/s"
[[policy.group]]
name = "b"
demand = "10MiB/s"
[cluster]
endpoints = [{}]
name = "t"
node = "{name}"
lease = "{}"
period = "200ms"
"#,
                metrics,
                eps.join(", "),
                lease
            ),
        )
        .unwrap();
        let socket = d.join("paiod.sock");
        let log_path = d.join("paiod.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_paiod"))
            .arg("--config")
            .arg(&cfg)
            .arg("--socket")
            .arg(&socket)
            .args(["--log", "info"])
            .env("RUST_LOG", "info,paio_control=debug")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let n = Node {
            name: name.to_string(),
            child,
            socket,
            log: log_path,
            metrics,
        };
        wait_for("paiod to listen", Duration::from_secs(30), || {
            UnixStream::connect(&n.socket).is_ok()
        });
        n
    }

    fn status(&self) -> StatusReport {
        *ctl::request(&self.socket, CtlCommand::Status, Duration::from_secs(10))
            .unwrap()
            .status
            .unwrap()
    }

    fn cluster(&self) -> ClusterStatus {
        self.status().cluster.expect("paiod runs in cluster mode")
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("--- {}:\n{}", self.log.display(), log_tail(&self.log, 15));
        }
    }
}

/// A stage of `job` registered with `node`, and a thread that reads
/// through it without pause (so paiod's DRL holds it back: it is hungry).
struct Load {
    stage: Arc<Stage>,
    client: ControlClient,
    stop: Arc<AtomicBool>,
    calls: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Load {
    fn start(job: &str, node: &Node) -> Load {
        let stage = support::stage("cluster-test", job);
        let client = support::client(&stage, &node.socket);
        let stop = Arc::new(AtomicBool::new(false));
        let calls = Arc::new(AtomicU64::new(0));
        let (s, st, c) = (stage.clone(), stop.clone(), calls.clone());
        let thread = std::thread::spawn(move || {
            let ctx = Context::new(RequestType::READ, 64 * 1024);
            while !st.load(Ordering::Relaxed) {
                s.enforce(&ctx, None).unwrap();
                c.fetch_add(1, Ordering::Relaxed);
            }
        });
        Load {
            stage,
            client,
            stop,
            calls,
            thread: Some(thread),
        }
    }

    /// The rate of the `paiod` DRL in channel `read`, bytes/s.
    fn rate(&self) -> Option<f64> {
        let info = self.stage.info();
        let ch = info.channels.iter().find(|c| c.name == "read")?;
        let o = ch.objects.iter().find(|o| o.name == "paiod")?;
        match &o.config {
            Some(ObjectConfig::Drl(d)) => Some(d.rate.per_second as f64),
            _ => None,
        }
    }

    /// Stops the requests; checks that the stage counted each exactly once.
    fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
        let stats = self.stage.collect();
        let ops: u64 = stats.channels.iter().map(|c| c.counts.ops).sum::<u64>()
            + stats.unmatched.ops
            + stats.removed.ops;
        assert_eq!(
            ops,
            self.calls.load(Ordering::Relaxed),
            "the stage lost or duplicated requests"
        );
        self.client.stop();
    }
}

/// Bytes/s per job over `nodes`' current allocations.
fn job_totals(nodes: &[&Node]) -> BTreeMap<String, f64> {
    let mut t = BTreeMap::new();
    for n in nodes {
        for (job, r) in n.cluster().allocation {
            *t.entry(job).or_insert(0.0) += r;
        }
    }
    t
}

/// n's cluster series are exposed, and promtool accepts the exposition.
fn check_metrics(n: &Node) {
    let series = [
        "paiod_cluster_connected 1.0",
        "paiod_cluster_nodes 3.0",
        "paiod_cluster_node_allocation_bytes_per_second{job=\"b\"}",
        "paiod_cluster_job_allocation_bytes_per_second{job=\"a\"} 78643200",
        "paiod_cluster_job_demand_bytes_per_second{job=\"b\"} 10485760",
    ];
    let mut text = String::new();
    wait_for("the cluster's metrics", Duration::from_secs(30), || {
        let reply = http_get(n.metrics, "/metrics").expect("paiod serves /metrics");
        text = reply.split_once("\r\n\r\n").unwrap().1.to_string();
        series.iter().all(|s| text.contains(s))
    });
    support::promtool_check(&text);
}

fn near(x: f64, want: f64) -> bool {
    (x - want).abs() <= 0.01 * want
}

/// Jobs a (60 MiB/s guaranteed) and b (10) share 100 MiB/s: max-min gives
/// b 10 and a 60, and both are hungry, so the 30 left go 15 to each.
fn shares_hold(nodes: &[&Node]) -> bool {
    let t = job_totals(nodes);
    t.get("a").is_some_and(|&a| near(a, 75.0 * MIB))
        && t.get("b").is_some_and(|&b| near(b, 25.0 * MIB))
}

/// `paio ctl set` through the node at `socket`, until the cluster takes
/// it. The node refuses, saying so, when its etcd request times out (one
/// lease, 1 s here), as it can on a loaded 2-core machine while etcd syncs
/// its log; a user would run the command again. Fails after 30 s.
fn cluster_set(socket: &Path, group: &str, key: &str, value: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match support::ctl_set(socket, group, key, value) {
            Ok(_) => return,
            Err(paio_control::ctl::CtlError::Refused(why))
                if why.contains("etcd is unreachable") && Instant::now() < deadline =>
            {
                eprintln!("ctl set {group} {key}: {why}; again");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => panic!("ctl set {group} {key} {value}: {e}"),
        }
    }
}

#[test]
fn jobs_share_one_back_end_across_nodes_and_survive_failures() {
    let dir = tempfile::tempdir().unwrap();
    let mut etcd = Etcd::start(&dir.path().join("etcd"));
    let endpoints = etcd.endpoints();
    // n2 reaches etcd through relays, to be cut off later.
    let relays: Vec<Relay> = etcd.client.iter().map(|&p| Relay::start(p)).collect();
    let relayed: Vec<String> = relays
        .iter()
        .map(|r| format!("http://127.0.0.1:{}", r.port))
        .collect();
    let mut nodes = [
        Node::start(dir.path(), "n0", &endpoints),
        Node::start(dir.path(), "n1", &endpoints),
        Node::start(dir.path(), "n2", &relayed),
    ];
    // Job a on n0 and n1, job b on n1 and n2.
    let loads = vec![
        Load::start("a", &nodes[0]),
        Load::start("a", &nodes[1]),
        Load::start("b", &nodes[1]),
        Load::start("b", &nodes[2]),
    ];
    let (n0, n1, n2) = (&nodes[0], &nodes[1], &nodes[2]);
    let all = [n0, n1, n2];
    wait_for("the global shares", Duration::from_secs(60), || {
        shares_hold(&all)
    });
    // A job's total is the sum of its stages' rates, node by node.
    wait_for("the stages' rates", Duration::from_secs(30), || {
        let a: f64 = loads[..2].iter().filter_map(|l| l.rate()).sum();
        let b: f64 = loads[2..].iter().filter_map(|l| l.rate()).sum();
        near(a, 75.0 * MIB) && near(b, 25.0 * MIB)
    });
    // Enforced: over 2 s no job's stages went more than 20 % above its
    // allocation (a loaded machine can only make them slower).
    let c0: Vec<u64> = loads
        .iter()
        .map(|l| l.calls.load(Ordering::Relaxed))
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let bytes: Vec<f64> = loads
        .iter()
        .zip(&c0)
        .map(|(l, c)| (l.calls.load(Ordering::Relaxed) - c) as f64 * 64.0 * 1024.0)
        .collect();
    let (a, b) = ((bytes[0] + bytes[1]) / 2.0, (bytes[2] + bytes[3]) / 2.0);
    assert!(
        a <= 1.2 * 75.0 * MIB && b <= 1.2 * 25.0 * MIB,
        "a {a} B/s, b {b} B/s"
    );
    let leaders: Vec<bool> = all.iter().map(|n| n.cluster().leading).collect();
    assert_eq!(leaders.iter().filter(|&&l| l).count(), 1, "{leaders:?}");
    check_metrics(n1);

    // `paio ctl set` on any node changes the cluster's configuration: b's
    // guarantee of 50 leaves 50 for a, then 0 left over (a 50, b 50).
    cluster_set(&n2.socket, "b", "demand", "50MiB/s");
    wait_for("the new shares", Duration::from_secs(30), || {
        let t = job_totals(&all);
        t.get("a").is_some_and(|&a| near(a, 50.0 * MIB))
            && t.get("b").is_some_and(|&b| near(b, 50.0 * MIB))
    });
    cluster_set(&n0.socket, "b", "demand", "10MiB/s");
    wait_for("the shares again", Duration::from_secs(30), || {
        shares_hold(&all)
    });

    // An etcd member lost: nothing changes.
    let epoch = n1.cluster().epoch;
    etcd.kill(2);
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        for n in &all {
            let c = n.cluster();
            assert!(c.connected, "a node lost etcd with one member down: {c:?}");
            assert_eq!(
                c.epoch, epoch,
                "the leadership changed with one member down"
            );
        }
        assert!(shares_hold(&all));
        std::thread::sleep(Duration::from_millis(100));
    }
    etcd.start_member(2);
    etcd.wait_healthy(2);

    // n2 cut off from etcd: it keeps its allocation and says so; the
    // others see it gone and b's share moves to n1.
    let before = n2.cluster().allocation;
    for r in &relays {
        r.cut();
    }
    wait_for("n2 to notice", Duration::from_secs(30), || {
        !n2.cluster().connected
    });
    let c2 = n2.cluster();
    assert_eq!(c2.allocation, before, "n2 dropped its allocation");
    assert!(
        c2.unreachable_s.is_some() && c2.last_error.is_some(),
        "{c2:?}"
    );
    wait_for("b's share to move to n1", Duration::from_secs(30), || {
        n1.cluster()
            .allocation
            .get("b")
            .is_some_and(|&b| near(b, 25.0 * MIB))
    });
    for r in &relays {
        r.mend();
    }
    wait_for("n2 to rejoin", Duration::from_secs(30), || {
        n2.cluster().connected
    });

    wait_for(
        "the shares over three nodes",
        Duration::from_secs(30),
        || shares_hold(&all) && n2.cluster().allocation.contains_key("b"),
    );

    // All of etcd gone: every node keeps its allocation and says so.
    let kept: Vec<_> = all.iter().map(|n| n.cluster().allocation).collect();
    for i in 0..3 {
        etcd.kill(i);
    }
    wait_for("the nodes to notice", Duration::from_secs(30), || {
        all.iter().all(|n| !n.cluster().connected)
    });
    for (n, k) in all.iter().zip(&kept) {
        assert_eq!(&n.cluster().allocation, k);
    }
    for i in 0..3 {
        etcd.start_member(i);
    }
    for i in 0..3 {
        etcd.wait_healthy(i);
    }
    let before = all.iter().filter_map(|n| n.cluster().epoch).max();
    wait_for(
        "the nodes to rejoin under a new leader",
        Duration::from_secs(60),
        || {
            let c: Vec<ClusterStatus> = all.iter().map(|n| n.cluster()).collect();
            c.iter().all(|c| c.connected)
                && c.iter().filter(|c| c.leading).count() == 1
                && c.iter().all(|c| c.allocation_epoch > before)
        },
    );
    wait_for(
        "the shares after etcd's return",
        Duration::from_secs(30),
        || shares_hold(&all),
    );

    // The leader killed: another node takes over within a few leases, and
    // the jobs' shares hold over the nodes that are left (each job still
    // has stages on one of them).
    let leader = all.iter().position(|n| n.cluster().leading).unwrap();
    let old = all[leader].cluster().epoch;
    let killed = Instant::now();
    nodes[leader].kill();
    let rest: Vec<&Node> = (0..3).filter(|&i| i != leader).map(|i| &nodes[i]).collect();
    wait_for("a new leader", Duration::from_secs(30), || {
        rest.iter().any(|n| {
            let c = n.cluster();
            c.leading && c.epoch != old
        })
    });
    eprintln!("failover took {:?}", killed.elapsed());
    wait_for(
        "the shares over the nodes left",
        Duration::from_secs(30),
        || {
            shares_hold(&rest)
                && rest.iter().all(|n| {
                    n.cluster()
                        .summary
                        .is_some_and(|s| s.nodes as usize == rest.len())
                })
        },
    );
    // A node stopped (SIGTERM) gives its lease back on the way out.
    let last = rest[0];
    let pid = last.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    wait_for("the node to stop", Duration::from_secs(10), || {
        !Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z')))
    });
    let log = std::fs::read_to_string(&last.log).unwrap();
    assert!(log.contains("left (lease revoked)"), "{log}");
    for l in loads {
        l.finish();
    }
}

/// A previous leader's allocation of a node that is gone (its leader
/// stopped before deleting it) is deleted by the next leader, so a node of
/// that name starting later does not read it.
#[test]
fn a_new_leader_deletes_a_gone_nodes_allocation() {
    use paio_control::cluster::keys::Keys;
    use paio_control::cluster::NodeAllocation;
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(&dir.path().join("etcd"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ghost = Keys::new("t").alloc("ghost");
    let mut client = rt
        .block_on(etcd_client::Client::connect(etcd.endpoints(), None))
        .unwrap();
    let stale = NodeAllocation {
        epoch: 1,
        leader: "old".into(),
        based_on: 1,
        jobs: BTreeMap::from([("a".to_string(), 1e6)]),
    };
    rt.block_on(client.put(ghost.as_str(), serde_json::to_vec(&stale).unwrap(), None))
        .unwrap();
    let node = Node::start(dir.path(), "n0", &etcd.endpoints());
    let load = Load::start("a", &node);
    wait_for("n0 to lead and allocate", Duration::from_secs(30), || {
        let c = node.cluster();
        c.leading && c.allocation.contains_key("a")
    });
    wait_for(
        "the ghost's allocation to go",
        Duration::from_secs(30),
        || {
            rt.block_on(client.get(ghost.as_str(), None))
                .unwrap()
                .kvs()
                .is_empty()
        },
    );
    load.finish();
}

/// A second paiod with a node name in use does not join (both took the
/// name's allocation, 79 MiB/s against a 60 MiB/s limit, with no word): it
/// says why and joins once the name is free.
#[test]
fn a_second_node_of_the_same_name_waits_for_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(&dir.path().join("etcd"));
    let mut first = Node::start(&dir.path().join("a"), "n1", &etcd.endpoints());
    wait_for("the first to connect", Duration::from_secs(30), || {
        first.cluster().connected
    });
    let second = Node::start(&dir.path().join("b"), "n1", &etcd.endpoints());
    wait_for("the second to say why", Duration::from_secs(30), || {
        second
            .cluster()
            .last_error
            .is_some_and(|e| e.contains("node name \"n1\" is held by another session"))
    });
    assert!(!second.cluster().connected);
    assert!(first.cluster().connected);
    let log = std::fs::read_to_string(&second.log).unwrap();
    assert!(log.contains("cannot join (node name"), "{log}");
    // The first leaves (its lease revoked): the name is free.
    assert!(Command::new("kill")
        .args(["-TERM", &first.child.id().to_string()])
        .status()
        .unwrap()
        .success());
    first.child.wait().unwrap();
    wait_for("the second to join", Duration::from_secs(30), || {
        second.cluster().connected
    });
    first.kill();
}

/// A node that cannot reach etcd says so once, not at every retry (it
/// said so every 2 s while it had never connected).
#[test]
fn an_unreachable_etcd_is_said_once() {
    let dir = tempfile::tempdir().unwrap();
    let port = support::free_port();
    let n = Node::start(dir.path(), "n1", &[format!("http://127.0.0.1:{port}")]);
    let log = || std::fs::read_to_string(&n.log).unwrap();
    wait_for("three retries", Duration::from_secs(60), || {
        log().matches("still: etcd unreachable (").count() >= 3
    });
    assert_eq!(
        log()
            .lines()
            .filter(|l| l.contains(" WARN ") && l.contains("etcd unreachable ("))
            .count(),
        1,
        "{}",
        log_tail(&n.log, 40)
    );
    assert!(!n.cluster().connected);
}

#[test]
fn a_deposed_leaders_writes_are_rejected() {
    use paio_control::cluster::keys::Keys;
    use paio_control::cluster::leader::Leader;
    use paio_control::cluster::NodeAllocation;
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(&dir.path().join("etcd"));
    let node = Node::start(dir.path(), "n0", &etcd.endpoints());
    let load = Load::start("a", &node);
    wait_for("n0 to lead and allocate", Duration::from_secs(30), || {
        let c = node.cluster();
        c.leading && c.allocation.contains_key("a")
    });
    let epoch = node.cluster().epoch.unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = etcd_client::Client::connect(etcd.endpoints(), None)
            .await
            .unwrap();
        // A leader of an older epoch (one that lost its lease and came
        // back): its first write is refused and it stops.
        let stale = Leader::new(
            Keys::new("t"),
            "ghost".into(),
            epoch - 1,
            Duration::from_millis(200),
        );
        let ended = tokio::time::timeout(Duration::from_secs(10), stale.run(client.clone())).await;
        assert!(matches!(ended, Ok(Ok(()))), "{ended:?}");
        let mut client = client;
        let got = client.get(Keys::new("t").alloc("n0"), None).await.unwrap();
        let alloc: NodeAllocation = serde_json::from_slice(got.kvs()[0].value()).unwrap();
        assert_eq!((alloc.leader.as_str(), alloc.epoch), ("n0", epoch));
    });
    load.finish();
}

/// The member a node's session runs over, from its log (the last
/// `connected to etcd at` or `goes on with`).
fn member_in_use(n: &Node) -> String {
    let log = std::fs::read_to_string(&n.log).unwrap();
    log.lines()
        .rev()
        .find_map(|l| {
            l.split_once("connected to etcd at ")
                .map(|(_, r)| r.split(' ').next().unwrap_or(r))
                .or_else(|| l.split_once("goes on with ").map(|(_, r)| r))
        })
        .expect("the node connected")
        .to_string()
}

#[test]
fn a_node_keeps_its_lease_when_its_member_is_cut_off_and_the_next_hangs() {
    use paio_control::cluster::keys::Keys;
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(&dir.path().join("etcd"));
    let relays: Vec<Relay> = etcd.client.iter().map(|&p| Relay::start(p)).collect();
    let relayed: Vec<String> = relays
        .iter()
        .map(|r| format!("http://127.0.0.1:{}", r.port))
        .collect();
    // A lease of 2 s leaves a loaded machine time to move; a member that
    // hangs costs a whole lease without the fix all the same.
    let node = Node::start_leased(dir.path(), "n0", &relayed, "2s");
    wait_for("n0 to lead", Duration::from_secs(30), || {
        node.cluster().leading
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut client = rt
        .block_on(etcd_client::Client::connect(etcd.endpoints(), None))
        .unwrap();
    let mut revoker = client.clone();
    let report = Keys::new("t").node("n0");
    // The node's lease and the revision of its last report.
    let mut last = || {
        let got = rt.block_on(client.get(report.as_str(), None)).unwrap();
        got.kvs().first().map(|kv| (kv.lease(), kv.mod_revision()))
    };
    wait_for("n0 to report", Duration::from_secs(30), || last().is_some());
    let (lease, _) = last().unwrap();
    let epoch = node.cluster().epoch;

    // The node's member cut off, and the next one it would try hangs: it
    // renews over the third one before its lease runs out.
    let used = member_in_use(&node);
    let i = relayed.iter().position(|e| *e == used).unwrap();
    relays[(i + 1) % 3].hang();
    relays[i].cut();
    let (_, cut_at) = last().unwrap();
    let third = &relayed[(i + 2) % 3];
    wait_for(
        "n0 to go on over the third member",
        Duration::from_secs(30),
        || member_in_use(&node) == *third || node.cluster().sessions > 1,
    );
    wait_for("a report after the cut", Duration::from_secs(30), || {
        last().is_some_and(|(_, rev)| rev > cut_at)
    });
    let c = node.cluster();
    assert!(
        c.connected && c.sessions == 1 && c.epoch == epoch,
        "n0 lost its session: {c:?}"
    );
    assert_eq!(last().unwrap().0, lease, "n0 reports under another lease");

    // Its lease revoked behind its back (as when it expired): a new
    // session at once, and the node never says etcd is unreachable.
    rt.block_on(revoker.lease_revoke(lease)).unwrap();
    wait_for("n0's new session", Duration::from_secs(30), || {
        node.cluster().sessions > 1
    });
    wait_for("n0 to report again", Duration::from_secs(30), || {
        last().is_some_and(|(l, _)| l != lease)
    });
    let c = node.cluster();
    assert!(c.connected && c.unreachable_s.is_none(), "{c:?}");
    let log = std::fs::read_to_string(&node.log).unwrap();
    assert!(!log.contains("etcd unreachable"), "{log}");
}

/// `paio` and `libpaio_preload.so`, built with `cargo build` into paiod's
/// target directory and profile (so they land next to paiod), once per
/// test binary: `cargo test -p paio-control` builds neither. Fails if
/// they do not build.
fn paio_and_preload() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        // <target>/<profile>/paiod
        let profile = Path::new(env!("CARGO_BIN_EXE_paiod")).parent().unwrap();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut build = Command::new(cargo);
        build
            .args(["build", "-q", "-p", "paio-cli", "--bin", "paio"])
            .args(["-p", "paio-preload", "--lib"])
            .env("CARGO_TARGET_DIR", profile.parent().unwrap())
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile.file_name() == Some("release".as_ref()) {
            build.arg("--release");
        }
        let built = build.status().expect("run cargo build").success();
        assert!(built, "cargo build of paio and libpaio_preload.so failed");
        let out = (profile.join("paio"), profile.join("libpaio_preload.so"));
        for f in [&out.0, &out.1] {
            assert!(f.is_file(), "{} missing after the build", f.display());
        }
        out
    })
}

/// The jobs' shared back end: a sparse file of 1 TiB, on /dev/shm when
/// it can (tmpfs: reading a hole copies the zero page and allocates
/// nothing), else in the temporary directory. Reading it costs page-cache
/// copies only, so paio is what bounds a reader. Removed on drop.
struct BackEnd {
    _dir: tempfile::TempDir,
    file: PathBuf,
}

impl BackEnd {
    fn create() -> BackEnd {
        let dir = tempfile::Builder::new()
            .prefix("paio-cluster-test-")
            .tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        let file = dir.path().join("back-end");
        std::fs::File::create(&file)
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        BackEnd { _dir: dir, file }
    }

    /// Truncates the file: every reader's next read finds its end, so dd
    /// reports what it copied and exits normally (and the interposer
    /// writes its final statistics on the way out).
    fn end(&self) {
        std::fs::File::options()
            .write(true)
            .open(&self.file)
            .unwrap()
            .set_len(0)
            .unwrap();
    }
}

/// A reader of `job` on a node: `paio run --control SOCKET --label
/// job=JOB -- dd if=BACK-END of=/dev/null bs=64k`, an unmodified program
/// under the real interposer, whose stage registers with the node's paiod.
/// paio (and with it dd) runs in a process group of its own, killed on
/// drop unless the reader finished: no dd outlives the test.
struct Reader {
    name: String,
    /// The node and the job.
    node: String,
    job: String,
    paio: Child,
    /// Where dd's statistics files go (`NAME.%p.json`).
    dir: PathBuf,
    /// paio's and dd's stderr.
    stderr: PathBuf,
    /// paio has been reaped (its process group may be gone).
    reaped: bool,
}

impl Reader {
    fn start(name: &str, job: &str, node: &Node, back_end: &BackEnd, dir: &Path) -> Reader {
        let (paio, lib) = paio_and_preload();
        let stderr = dir.join(format!("{name}.stderr"));
        let mut c = Command::new(paio);
        // Only what this test sets reaches the interposer.
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("PAIO_") {
                c.env_remove(k);
            }
        }
        c.env_remove("LD_PRELOAD")
            .env("PAIO_LIB", lib)
            .env("LC_ALL", "C")
            .args(["run", "--name", name, "--label", &format!("job={job}")])
            // Until paiod's rules arrive, the stage's own limit keeps dd
            // from spinning on the 2 cores; it stays the ceiling of
            // paiod's rates, so it is above every part (PARTS).
            .args(["--limit", "read=64MiB/s", "--control"])
            .arg(&node.socket)
            .arg("--stats")
            .arg(dir.join(format!("{name}.%p.json")))
            .args(["--", "dd"])
            .arg(format!("if={}", back_end.file.display()))
            .args(["of=/dev/null", "bs=64k"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .process_group(0);
        Reader {
            name: name.to_string(),
            node: node.name.clone(),
            job: job.to_string(),
            paio: c.spawn().unwrap(),
            dir: dir.to_path_buf(),
            stderr,
            reaped: false,
        }
    }

    /// The bytes dd has read so far, as the kernel counts them (`rchar` of
    /// /proc/PID/io).
    fn read_so_far(&self) -> u64 {
        let paio = self.paio.id();
        let children =
            std::fs::read_to_string(format!("/proc/{paio}/task/{paio}/children")).unwrap();
        let dd = children
            .split_whitespace()
            .next()
            .unwrap_or_else(|| panic!("reader {}: dd is not running", self.name));
        let io = std::fs::read_to_string(format!("/proc/{dd}/io")).unwrap();
        io.lines()
            .find_map(|l| l.strip_prefix("rchar:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no rchar in /proc/{dd}/io: {io}"))
    }

    /// Waits (at most 30 s) for `paio run` to return after dd found the end
    /// of the back end, and checks that the stage counted each of dd's
    /// requests exactly once: its `read` channel has the bytes dd says it
    /// copied, in one request per record dd read plus the read that found
    /// the end; its `write` channel the same bytes in one request per
    /// record written; and paiod's DRL passed some of them (the reader was
    /// governed by paiod). Returns the bytes.
    fn finish(mut self) -> u64 {
        let mut status = None;
        wait_for(
            &format!("reader {} to end", self.name),
            Duration::from_secs(30),
            || {
                status = self.paio.try_wait().unwrap();
                status.is_some()
            },
        );
        self.reaped = true;
        let err = std::fs::read_to_string(&self.stderr).unwrap();
        assert!(status.unwrap().success(), "{}: {err}", self.name);
        // "N+M records in", "N+M records out", "B bytes (...) copied, ..."
        let records = |what: &str| -> u64 {
            let line = err
                .lines()
                .find(|l| l.ends_with(what))
                .unwrap_or_else(|| panic!("{}: no \"{what}\" from dd: {err}", self.name));
            let (full, partial) = line
                .split_whitespace()
                .next()
                .unwrap()
                .split_once('+')
                .unwrap();
            full.parse::<u64>().unwrap() + partial.parse::<u64>().unwrap()
        };
        let (records_in, records_out) = (records(" records in"), records(" records out"));
        // dd's three status lines, each one write to (unbuffered) stderr.
        let status: u64 = err
            .lines()
            .filter(|l| {
                l.ends_with(" records in") || l.ends_with(" records out") || l.contains(" copied")
            })
            .map(|l| l.len() as u64 + 1)
            .sum();
        let copied: u64 = err
            .lines()
            .find(|l| l.contains(" copied"))
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("{}: no byte count from dd: {err}", self.name));
        let files: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                let f = p.file_name().unwrap().to_string_lossy();
                f.starts_with(&format!("{}.", self.name)) && f.ends_with(".json")
            })
            .collect();
        assert_eq!(files.len(), 1, "{}: statistics files {files:?}", self.name);
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
        let channel = |name: &str| {
            v["stats"]["channels"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == name)
                .unwrap_or_else(|| panic!("{}: no channel {name} in {v}", self.name))
                .clone()
        };
        let (read, write) = (channel("read"), channel("write"));
        let counted = |c: &serde_json::Value| (c["ops"].as_u64(), c["bytes"].as_u64());
        assert_eq!(
            counted(&read),
            (Some(records_in + 1), Some(copied)),
            "{}: the stage lost or duplicated reads (dd: {records_in} records in, \
             {copied} bytes)",
            self.name
        );
        assert_eq!(
            counted(&write),
            (Some(records_out + 3), Some(copied + status)),
            "{}: the stage lost or duplicated writes (dd: {records_out} records out, \
             {copied} bytes, and {status} bytes of status on stderr)",
            self.name
        );
        let paiod = read["objects"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["name"] == "paiod")
            .unwrap_or_else(|| panic!("{}: no paiod object in {read}", self.name));
        assert!(
            paiod["bytes"].as_u64().is_some_and(|b| b > 0),
            "{}: paiod's DRL passed nothing: {read}",
            self.name
        );
        copied
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = rustix::process::kill_process_group(
                rustix::process::Pid::from_child(&self.paio),
                rustix::process::Signal::KILL,
            );
            let _ = self.paio.wait();
        }
        if std::thread::panicking() {
            let err = std::fs::read_to_string(&self.stderr).unwrap_or_default();
            eprintln!("--- reader {}:\n{err}", self.name);
        }
    }
}

/// Each node's part of each job, MiB/s, with the readers of
/// `paio_run_readers_share_one_back_end_across_nodes`: every reader is
/// held back, so each node of a job wants all it can get and the job's
/// total ([`shares_hold`]) is split evenly over its nodes.
const PARTS: [(&str, &str, f64); 4] = [
    ("n0", "a", 37.5),
    ("n1", "a", 37.5),
    ("n1", "b", 12.5),
    ("n2", "b", 12.5),
];

/// Every node's allocation is its [`PARTS`], and nothing else.
fn split_holds(nodes: &[&Node]) -> bool {
    nodes.iter().all(|n| {
        let got = n.cluster().allocation;
        let want: Vec<_> = PARTS
            .iter()
            .filter(|(node, _, _)| *node == n.name)
            .collect();
        got.len() == want.len()
            && want
                .iter()
                .all(|(_, job, r)| got.get(*job).is_some_and(|&x| near(x, r * MIB)))
    })
}

/// Whether every node enforces its part on its own readers: per job, the
/// rates paiod set on the job's stages there (their `paiod` DRLs in
/// channel `read`) add up to the node's allocation.
fn rates_follow_allocation(nodes: &[&Node]) -> bool {
    nodes.iter().all(|n| {
        let s = n.status();
        let alloc = s.cluster.expect("paiod runs in cluster mode").allocation;
        !alloc.is_empty()
            && alloc.iter().all(|(job, &r)| {
                let set: f64 = s
                    .stages
                    .iter()
                    .filter(|st| st.labels.get("job") == Some(job))
                    .flat_map(|st| &st.channels)
                    .filter(|c| c.name == "read")
                    .flat_map(|c| &c.objects)
                    .filter(|o| o.name == "paiod")
                    .filter_map(|o| match &o.config {
                        Some(ObjectConfig::Drl(d)) => Some(d.rate.per_second as f64),
                        _ => None,
                    })
                    .sum();
                near(set, r)
            })
    })
}

/// paiod's control periods so far, node by node.
fn ticks(nodes: &[&Node]) -> Vec<u64> {
    nodes
        .iter()
        .map(|n| n.status().control_loop.map_or(0, |l| l.ticks))
        .collect()
}

/// What a node's readers of a job achieved over one window, bytes/s.
#[derive(Debug, Default, Clone, Copy)]
struct Achieved {
    /// The node's allocation for the job (the mean over the window's
    /// status reports).
    allocated: f64,
    /// paiod's figure for the job's group, its stages' bytes over its
    /// last period (the mean over the window's status reports).
    reported: f64,
    /// What the kernel counted the readers reading over the window. A
    /// reader that stalls shows here at once, while paiod reports a
    /// silent stage's last figures until it drops it (`collect_timeout`,
    /// 2 s, later).
    read: f64,
}

/// One window: `samples` status reports of every node, one control
/// period (100 ms) apart, and the readers' reads from the first to the
/// last; by (node, job).
fn achieved(
    nodes: &[&Node],
    readers: &[Reader],
    samples: u32,
) -> BTreeMap<(String, String), Achieved> {
    let mut w: BTreeMap<(String, String), Achieved> = BTreeMap::new();
    let start = Instant::now();
    let before: Vec<u64> = readers.iter().map(Reader::read_so_far).collect();
    for i in 0..samples {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(100));
        }
        for n in nodes {
            let s = n.status();
            for (job, rate) in s.cluster.expect("paiod runs in cluster mode").allocation {
                let got = s
                    .groups
                    .iter()
                    .find(|g| g.group == job)
                    .map_or(0.0, |g| g.achieved_bytes_per_sec);
                let e = w.entry((n.name.clone(), job)).or_default();
                e.allocated += rate / f64::from(samples);
                e.reported += got / f64::from(samples);
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    for (r, b) in readers.iter().zip(before) {
        w.entry((r.node.clone(), r.job.clone())).or_default().read +=
            (r.read_so_far() - b) as f64 / secs;
    }
    w
}

/// The jobs' processes are real programs: dd under `paio run`, job a on
/// n0 and n1, job b on n1 and n2, all reading one back end. The global
/// shares hold across the nodes, a job's total is the sum of its nodes'
/// parts, what the readers achieve on each node follows its part, and
/// when the back end ends every reader's stage counted exactly the
/// requests dd made.
#[test]
fn paio_run_readers_share_one_back_end_across_nodes() {
    let started = Instant::now();
    paio_and_preload();
    let built = started.elapsed();
    let dir = tempfile::tempdir().unwrap();
    let back_end = BackEnd::create();
    let etcd = Etcd::start(&dir.path().join("etcd"));
    let endpoints = etcd.endpoints();
    let nodes = [
        Node::start(dir.path(), "n0", &endpoints),
        Node::start(dir.path(), "n1", &endpoints),
        Node::start(dir.path(), "n2", &endpoints),
    ];
    let all = [&nodes[0], &nodes[1], &nodes[2]];
    let stats = dir.path().join("readers");
    std::fs::create_dir(&stats).unwrap();
    let readers = [
        ("a0", "a", 0),
        ("a1", "a", 1),
        ("b1", "b", 1),
        ("b2", "b", 2),
    ]
    .map(|(name, job, n)| Reader::start(name, job, &nodes[n], &back_end, &stats));
    wait_for("the global shares", Duration::from_secs(60), || {
        shares_hold(&all)
    });
    wait_for(
        "each job's split over its nodes",
        Duration::from_secs(30),
        || split_holds(&all),
    );
    wait_for(
        "every node to enforce its part on its readers",
        Duration::from_secs(30),
        || rates_follow_allocation(&all),
    );
    // paiod reports the figures of its last period: from two periods on,
    // none began before the rates above were sent.
    let sent = ticks(&all);
    wait_for("two more control periods", Duration::from_secs(10), || {
        ticks(&all).iter().zip(&sent).all(|(t, s)| *t >= s + 2)
    });
    // What the readers achieve, as paiod reports it and as the kernel
    // counts dd's reads, over windows of 2 s: never more than 20 % above a
    // job's allocation (a loaded machine can only make them slower), and
    // on every node at least half of its part (a reader that stalls fails
    // this, also when the leader moves its part to the job's other node).
    let mut windows = 0;
    wait_for(
        "every node's readers to achieve half its part",
        Duration::from_secs(30),
        || {
            windows += 1;
            let w = achieved(&all, &readers, 20);
            let mib = |x: f64| (x / MIB * 10.0).round() / 10.0;
            eprintln!("window {windows} (MiB/s, allocated, reported, read):");
            for ((node, job), a) in &w {
                eprintln!(
                    "  {node} {job}: {} {} {}",
                    mib(a.allocated),
                    mib(a.reported),
                    mib(a.read)
                );
            }
            for job in ["a", "b"] {
                let mut t = Achieved::default();
                for a in w.iter().filter(|((_, j), _)| j == job).map(|(_, a)| a) {
                    t.allocated += a.allocated;
                    t.reported += a.reported;
                    t.read += a.read;
                }
                assert!(
                    t.reported <= 1.2 * t.allocated && t.read <= 1.2 * t.allocated,
                    "job {job} went over its allocation of {} MiB/s: paiod reports {}, \
                     its readers read {}",
                    mib(t.allocated),
                    mib(t.reported),
                    mib(t.read)
                );
            }
            PARTS.iter().all(|(node, job, part)| {
                w.get(&(node.to_string(), job.to_string()))
                    .is_some_and(|a| a.reported.min(a.read) >= 0.5 * part * MIB)
            })
        },
    );
    back_end.end();
    for r in readers {
        let name = r.name.clone();
        eprintln!("reader {name}: {} bytes, each counted once", r.finish());
    }
    eprintln!(
        "took {:?} (building paio and the interposer {built:?})",
        started.elapsed()
    );
}
