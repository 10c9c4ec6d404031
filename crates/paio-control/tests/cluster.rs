//! Cluster mode end to end: a real 3-member etcd cluster on loopback ports,
//! three real paiod "nodes" (each with its own socket), and stages in this
//! process whose requests never stop. Waits are bounded polls for events,
//! never timing assertions; how long a failover took is printed, and
//! measured in `make experiment-cluster`.

mod support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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

/// A 3-member etcd cluster in a temporary directory, stopped on drop.
struct Etcd {
    dir: PathBuf,
    client: Vec<u16>,
    peer: Vec<u16>,
    members: Vec<Option<Child>>,
}

impl Etcd {
    fn start(dir: &Path) -> Etcd {
        let n = 3;
        std::fs::create_dir_all(dir).unwrap();
        let mut e = Etcd {
            dir: dir.to_path_buf(),
            client: (0..n).map(|_| support::free_port()).collect(),
            peer: (0..n).map(|_| support::free_port()).collect(),
            members: (0..n).map(|_| None).collect(),
        };
        for i in 0..n {
            e.start_member(i);
        }
        for i in 0..n {
            e.wait_healthy(i);
        }
        e
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

    fn wait_healthy(&self, i: usize) {
        let port = self.client[i];
        wait_for(&format!("etcd member {i}"), Duration::from_secs(30), || {
            http_get(port, "/health").is_some_and(|b| b.contains("\"health\":\"true\""))
        });
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

/// A TCP relay that can cut a node off from etcd (a partition).
struct Relay {
    port: u16,
    open: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl Relay {
    fn start(to: u16) -> Relay {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let open = Arc::new(AtomicBool::new(true));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (o, c) = (open.clone(), conns.clone());
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(a) = s else { continue };
                if !o.load(Ordering::SeqCst) {
                    drop(a);
                    continue;
                }
                let Ok(b) = TcpStream::connect(("127.0.0.1", to)) else {
                    continue;
                };
                let mut list = c.lock().unwrap();
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
        Relay { port, open, conns }
    }

    fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        for s in self.conns.lock().unwrap().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    fn mend(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

struct Node {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
    metrics: u16,
}

impl Node {
    fn start(dir: &Path, name: &str, endpoints: &[String]) -> Node {
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
lease = "1s"
period = "200ms"
"#,
                metrics,
                eps.join(", ")
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
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            eprintln!("--- {}:", self.log.display());
            for l in tail.iter().rev() {
                eprintln!("{l}");
            }
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
    ctl::request(
        &n2.socket,
        CtlCommand::Set {
            group: "b".into(),
            key: "demand".into(),
            value: "50MiB/s".into(),
        },
        Duration::from_secs(10),
    )
    .unwrap();
    wait_for("the new shares", Duration::from_secs(30), || {
        let t = job_totals(&all);
        t.get("a").is_some_and(|&a| near(a, 50.0 * MIB))
            && t.get("b").is_some_and(|&b| near(b, 50.0 * MIB))
    });
    ctl::request(
        &n0.socket,
        CtlCommand::Set {
            group: "b".into(),
            key: "demand".into(),
            value: "10MiB/s".into(),
        },
        Duration::from_secs(10),
    )
    .unwrap();
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
    let gone = format!("n{leader}");
    wait_for(
        "the shares over the nodes left",
        Duration::from_secs(30),
        || {
            shares_hold(&rest)
                && rest.iter().all(|n| {
                    n.cluster()
                        .summary
                        .is_some_and(|s| !s.nodes.contains(&gone))
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
