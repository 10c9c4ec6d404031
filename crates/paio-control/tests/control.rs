//! paiod end to end: real daemon processes, stages in this process, a Python
//! stage written from docs/protocol.md, raw protocol abuse, and a kill and
//! restart under load. Waits are bounded polls for events, never timing
//! assertions.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use paio::protocol::{self, Message};
use paio::{Context, ObjectConfig, RequestType, Stage};
use paio_control::ctl::{self, CtlCommand, StatusReport};
use support::client;

struct Paiod {
    child: Child,
    socket: PathBuf,
}

impl Paiod {
    fn start(dir: &Path, config: &str) -> Paiod {
        Paiod::start_with(dir, config, None, None)
    }

    /// paiod with a descriptor soft limit of `soft_nofile` (when given)
    /// and its `info` log written to `log` (when given).
    fn start_with(dir: &Path, config: &str, soft_nofile: Option<u32>, log: Option<&Path>) -> Paiod {
        let cfg = dir.join("paiod.toml");
        std::fs::write(&cfg, config).unwrap();
        let socket = dir.join("paiod.sock");
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(match soft_nofile {
                Some(n) => format!("ulimit -Sn {n} && exec \"$0\" \"$@\""),
                None => "exec \"$0\" \"$@\"".to_string(),
            })
            .arg(env!("CARGO_BIN_EXE_paiod"))
            .arg("--config")
            .arg(&cfg)
            .arg("--socket")
            .arg(&socket)
            .arg("--log")
            .arg(if log.is_some() { "info" } else { "warn" })
            .stdout(Stdio::null());
        match log {
            Some(path) => cmd.stderr(std::fs::File::create(path).unwrap()),
            None => cmd.stderr(Stdio::inherit()),
        };
        let child = cmd.spawn().unwrap();
        let p = Paiod { child, socket };
        wait_for("paiod to listen", || UnixStream::connect(&p.socket).is_ok());
        p
    }

    fn status(&self) -> StatusReport {
        *ctl::request(&self.socket, CtlCommand::Status, Duration::from_secs(10))
            .unwrap()
            .status
            .unwrap()
    }

    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Paiod {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn static_config(rate: &str) -> String {
    format!(
        r#"
period = "50ms"
[policy]
kind = "static"
group_by = "job"
channel = "read"
[[policy.group]]
name = "t"
rate = "{rate}"
"#
    )
}

fn stage(job: &str) -> Arc<Stage> {
    support::stage("control-test", job)
}

/// The configured rate of the `paiod` object in channel `read`.
fn paiod_rate(stage: &Stage) -> Option<u64> {
    let info = stage.info();
    let ch = info.channels.iter().find(|c| c.name == "read")?;
    let o = ch.objects.iter().find(|o| o.name == "paiod")?;
    (ch.default_object == "paiod").then_some(())?;
    match &o.config {
        Some(ObjectConfig::Drl(d)) => Some(d.rate.per_second),
        _ => None,
    }
}

const MIB: u64 = 1 << 20;

#[test]
fn a_stage_keeps_its_rules_when_paiod_dies_and_gets_them_again_when_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let paiod = Paiod::start(dir.path(), &static_config("400MiB/s"));
    let stage = stage("t");
    let client = client(&stage, &paiod.socket);
    wait_for("the static rate", || paiod_rate(&stage) == Some(400 * MIB));

    // Load: 4 KiB reads, counted on our side.
    let stop = Arc::new(AtomicBool::new(false));
    let issued = Arc::new(AtomicU64::new(0));
    let load = {
        let (stage, stop, issued) = (stage.clone(), stop.clone(), issued.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                stage
                    .enforce(&Context::new(RequestType::READ, 4096), None)
                    .unwrap();
                issued.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    wait_for("load", || issued.load(Ordering::Relaxed) > 1000);

    let socket = paiod.socket.clone();
    paiod.kill();
    wait_for("the client to notice", || !client.status().connected);
    // The stage keeps enforcing the last rules it received.
    assert_eq!(paiod_rate(&stage), Some(400 * MIB));
    let before = issued.load(Ordering::Relaxed);
    wait_for("requests while paiod is away", || {
        issued.load(Ordering::Relaxed) > before + 1000
    });

    // paiod returns with another rate: the stage re-registers and gets it,
    // without its existing object being created twice.
    let paiod = Paiod::start(dir.path(), &static_config("300MiB/s"));
    assert_eq!(paiod.socket, socket);
    wait_for("re-registration", || client.status().sessions == 2);
    wait_for("the new rate", || paiod_rate(&stage) == Some(300 * MIB));
    let st = paiod.status();
    assert_eq!(st.stages.len(), 1);
    assert_eq!(st.stages[0].pid, std::process::id());

    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    // Nothing lost, nothing counted twice.
    let stats = stage.collect();
    let read = stats.channels.iter().find(|c| c.name == "read").unwrap();
    let total = issued.load(Ordering::Relaxed);
    assert_eq!(read.counts.ops, total);
    assert_eq!(read.counts.bytes, total * 4096);
    let by_objects: u64 = read.objects.iter().map(|o| o.counts.ops).sum();
    assert_eq!(by_objects, total);
    client.stop();
}

#[test]
fn a_stage_that_goes_away_leaves_paiods_view_and_ctl_set_changes_rates() {
    let dir = tempfile::tempdir().unwrap();
    let paiod = Paiod::start(
        dir.path(),
        r#"
period = "50ms"
[policy]
kind = "max_min"
group_by = "job"
channel = "read"
max_bandwidth = "100MiB/s"
[[policy.group]]
name = "a"
demand = "30MiB/s"
"#,
    );
    let a = stage("a");
    let ca = client(&a, &paiod.socket);
    // Alone, group a gets all of MaxB (leftover redistribution).
    wait_for("a's allocation", || paiod_rate(&a) == Some(100 * MIB));
    let b = stage("b");
    let cb = client(&b, &paiod.socket);
    // A group added at run time.
    support::ctl_set(&paiod.socket, "b", "demand", "50MiB/s").unwrap();
    wait_for("both allocations", || {
        let (ra, rb) = (paiod_rate(&a), paiod_rate(&b));
        matches!((ra, rb), (Some(x), Some(y)) if x >= 30 * MIB && y >= 50 * MIB && x + y <= 100 * MIB + MIB)
    });
    assert_eq!(paiod.status().stages.len(), 2);
    // Bad ctl input is refused with a reason.
    let e = support::ctl_set(&paiod.socket, "a", "demand", "fast")
        .unwrap_err()
        .to_string();
    assert!(e.contains("fast"), "{e}");
    // b leaves: paiod forgets it and a gets everything again.
    cb.stop();
    wait_for("b to leave", || paiod.status().stages.len() == 1);
    wait_for("a's full allocation", || paiod_rate(&a) == Some(100 * MIB));
    ca.stop();
}

fn raw_frame(s: &mut UnixStream, payload: &[u8]) {
    let mut f = (payload.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(payload);
    s.write_all(&f).unwrap();
}

/// Connects to `socket` and says hello with `info`, as a stage does; the
/// answer is left to read.
fn hello(socket: &Path, info: paio::StageInfo) -> UnixStream {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    protocol::write_message(
        &mut s,
        &Message::Hello(Box::new(protocol::Hello {
            version: protocol::VERSION,
            ppid: 1,
            user: "t".into(),
            exe: None,
            info,
        })),
    )
    .unwrap();
    s
}

fn read_msg(s: &mut UnixStream) -> Message {
    let p = protocol::read_frame(s, protocol::DEFAULT_MAX_FRAME)
        .unwrap()
        .expect("a reply");
    protocol::decode(&p).unwrap()
}

#[test]
fn bad_and_oversized_messages_get_errors_and_paiod_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let paiod = Paiod::start(dir.path(), "");
    let mut s = UnixStream::connect(&paiod.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    raw_frame(&mut s, b"not json");
    assert!(matches!(
        read_msg(&mut s),
        Message::Error {
            code: protocol::ErrorCode::BadMessage,
            ..
        }
    ));
    // 2 MiB announced and sent: skipped, answered, stream still in sync.
    raw_frame(&mut s, &vec![b' '; 2 << 20]);
    assert!(matches!(
        read_msg(&mut s),
        Message::Error {
            code: protocol::ErrorCode::TooLarge,
            ..
        }
    ));
    raw_frame(
        &mut s,
        br#"{"type":"hello","version":99,"ppid":1,"user":"x","info":{}}"#,
    );
    let m = read_msg(&mut s);
    assert!(
        matches!(
            m,
            Message::Error {
                code: protocol::ErrorCode::BadMessage | protocol::ErrorCode::Version,
                ..
            }
        ),
        "{m:?}"
    );
    // A connection that dies mid-frame does not hurt paiod either.
    let mut t = UnixStream::connect(&paiod.socket).unwrap();
    t.write_all(&[0, 0, 1]).unwrap();
    drop(t);
    assert_eq!(paiod.status().stages.len(), 0);
    let mut rest = Vec::new();
    drop(s.read_to_end(&mut rest));
}

#[test]
fn the_python_stage_from_the_protocol_doc_registers_and_is_controlled() {
    let dir = tempfile::tempdir().unwrap();
    let paiod = Paiod::start(dir.path(), &static_config("20MiB/s"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/python_stage.py");
    let mut py = Command::new("python3")
        .arg(&script)
        .arg(&paiod.socket)
        .args(["--seconds", "30", "--label", "job=t"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(py.stdout.take().unwrap()).lines();
    let mut next = || -> serde_json::Value {
        serde_json::from_str(&lines.next().expect("a line").unwrap()).unwrap()
    };
    assert_eq!(next()["event"], "registered");
    let rate = next();
    assert_eq!(rate["event"], "rate", "{rate}");
    assert_eq!(rate["object"], "paiod");
    assert_eq!(rate["rate"], "20971520 B/s");
    wait_for("python's statistics", || {
        let st = paiod.status();
        st.stages.first().is_some_and(|s| {
            s.name == "python-stage"
                && s.channels
                    .iter()
                    .any(|c| c.name == "read" && c.bytes_per_sec > 0.0)
        })
    });
    py.kill().unwrap();
    py.wait().unwrap();
    wait_for("python to leave", || paiod.status().stages.is_empty());
}

#[test]
fn metrics_are_served_in_the_openmetrics_format() {
    let dir = tempfile::tempdir().unwrap();
    let port = support::free_port();
    let paiod = Paiod::start(
        dir.path(),
        &format!(
            "metrics = \"127.0.0.1:{port}\"\n{}",
            static_config("10MiB/s")
        ),
    );
    let stage = stage("t");
    let client = client(&stage, &paiod.socket);
    // A second stage of the same name in this process (issue 14: its
    // series duplicated the first one's).
    let twin = self::stage("u");
    let twin_client = self::client(&twin, &paiod.socket);
    wait_for("the static rate and both stages", || {
        paiod_rate(&stage) == Some(10 * MIB) && paiod.status().stages.len() == 2
    });
    for _ in 0..10 {
        stage
            .enforce(&Context::new(RequestType::READ, 4096), None)
            .unwrap();
    }
    let get_as = |path: &str, accept: &str| -> String {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n{accept}\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    // What Prometheus sends.
    let openmetrics =
        "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n";
    let get = |path: &str| get_as(path, openmetrics);
    let mut body = String::new();
    // Both stages' statistics, once collected (the twin's may come a period
    // after the first one's).
    wait_for("the counts in the metrics", || {
        body = get("/metrics");
        body.contains(r#"paio_object_bytes_total{stage="control-test",pid=""#)
            && body.contains(r#",channel="read",object="paiod"} 40960"#)
            && body
                .lines()
                .filter(|l| {
                    l.starts_with(r#"paio_channel_bytes_total{stage="control-test""#)
                        && l.contains(r#"channel="read""#)
                })
                .count()
                == 2
    });
    assert!(body.starts_with("HTTP/1.0 200 OK"), "{body}");
    assert!(body.contains("paio_stages 2"), "{body}");
    assert!(
        body.contains(r#"paio_object_rate{"#) && body.contains(r#"unit="bytes"} 10485760.0"#),
        "{body}"
    );
    assert!(
        body.contains(r#"paio_object_wait_seconds_bucket{"#),
        "{body}"
    );
    assert!(
        body.lines().any(
            |l| l.starts_with(r#"paio_object_wait_seconds_bucket{le="+Inf""#)
                && l.contains(r#"object="paiod""#)
                && l.ends_with("} 10")
        ),
        "{body}"
    );
    assert!(
        body.contains(r#"paio_group_target_bytes_per_second{group="t"} 10485760.0"#),
        "{body}"
    );
    assert!(body.trim_end().ends_with("# EOF"), "{body}");
    // paiod's own loop and CPU (issue 14).
    for series in [
        "paiod_loop_period_seconds{stat=\"p99\"}",
        "paiod_loop_period_seconds{stat=\"target\"} 0.05",
        "paiod_loop_overruns_total",
        "paiod_cpu_seconds_total",
        "paiod_config_reloads_total{result=\"applied\"} 0",
        "paiod_config_reloads_total{result=\"refused\"} 0",
        "paiod_config_last_reload_successful 1",
    ] {
        assert!(body.contains(series), "{series} in\n{body}");
    }
    let l = paiod.status().control_loop.expect("the loop's figures");
    assert!(l.ticks > 0 && l.period_p50_ms.is_some(), "{l:?}");
    assert!(get("/nope").starts_with("HTTP/1.0 404"));
    // Every series is unique, the two stages of one name included.
    let samples: Vec<&str> = body
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains(' '))
        .filter_map(|l| l.rsplit_once(' ').map(|(series, _)| series))
        .collect();
    let unique: std::collections::HashSet<&&str> = samples.iter().collect();
    assert_eq!(unique.len(), samples.len(), "duplicate series in\n{body}");
    assert_eq!(
        samples
            .iter()
            .filter(
                |s| s.starts_with("paio_channel_bytes_total{stage=\"control-test\"")
                    && s.contains("channel=\"read\"")
            )
            .count(),
        2,
        "{body}"
    );
    // Without an OpenMetrics Accept (curl, promtool): the Prometheus text
    // format, which `promtool check metrics` accepts.
    let plain = get_as("/metrics", "");
    assert!(
        plain.contains("Content-Type: text/plain; version=0.0.4"),
        "{plain}"
    );
    let text = plain.split_once("\r\n\r\n").unwrap().1;
    assert!(
        text.contains("# TYPE paio_channel_bytes_total counter"),
        "{text}"
    );
    assert!(!text.contains("# EOF"), "{text}");
    support::promtool_check(text);
    twin_client.stop();
    client.stop();
}

#[test]
fn a_stage_that_stops_answering_is_dropped_after_the_collect_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let paiod = Paiod::start(
        dir.path(),
        "period = \"20ms\"\ncollect_timeout = \"200ms\"\n",
    );
    // A stage that registers, then never reads again (a hung process).
    let mut s = UnixStream::connect(&paiod.socket).unwrap();
    let info = stage("t").info();
    protocol::write_message(
        &mut s,
        &Message::Hello(Box::new(protocol::Hello {
            version: protocol::VERSION,
            ppid: 1,
            user: "test".into(),
            exe: None,
            info,
        })),
    )
    .unwrap();
    wait_for("registration", || paiod.status().stages.len() == 1);
    wait_for("the hung stage to be dropped", || {
        paiod.status().stages.is_empty()
    });
    // paiod said why and closed the connection.
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut saw_goodbye = false;
    while let Ok(Some(p)) = protocol::read_frame(&mut s, protocol::DEFAULT_MAX_FRAME) {
        if let Ok(Message::Goodbye { reason }) = protocol::decode(&p) {
            assert!(reason.unwrap().contains("collect"));
            saw_goodbye = true;
        }
    }
    assert!(saw_goodbye);
}

#[test]
fn a_stage_started_before_paiod_runs_its_own_policy_then_registers() {
    let dir = tempfile::tempdir().unwrap();
    let stage = stage("t");
    let client = client(&stage, &dir.path().join("paiod.sock"));
    // No paiod: requests flow through the stage's own policy.
    for _ in 0..100 {
        stage
            .enforce(&Context::new(RequestType::READ, 4096), None)
            .unwrap();
    }
    assert!(!client.status().connected);
    assert_eq!(paiod_rate(&stage), None);
    let paiod = Paiod::start(dir.path(), &static_config("100MiB/s"));
    wait_for("registration", || client.status().connected);
    wait_for("the static rate", || paiod_rate(&stage) == Some(100 * MIB));
    assert_eq!(paiod.status().stages.len(), 1);
    client.stop();
}

/// The `yield` priority object's (depth, busy_depth, rate) in `stage`.
fn yield_config(stage: &Stage) -> (u32, u32, Option<u64>) {
    let info = stage.info();
    let o = info.channels[0]
        .objects
        .iter()
        .find(|o| o.name == "yield")
        .unwrap();
    match &o.config {
        Some(ObjectConfig::Priority(p)) => (p.depth, p.busy_depth, p.rate.map(|r| r.per_second)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_criticality_policy_cuts_background_while_critical_requests_miss_their_target() {
    let dir = tempfile::tempdir().unwrap();
    let port = support::free_port();
    let paiod = Paiod::start(
        dir.path(),
        &format!(
            r#"
period = "50ms"
metrics = "127.0.0.1:{port}"
[policy]
kind = "criticality"
latency_target = "1ms"
window = "100ms"
"#
        ),
    );
    // A background process's stage: one priority object, depth 4.
    let background = Arc::new(
        Stage::from_policy_str(
            r#"
            [stage]
            name = "background"
            [[channel]]
            name = "background"
            match = {}
            default_object = "yield"
            [[channel.object]]
            name = "yield"
            kind = "priority"
            "#,
            "<test>",
        )
        .unwrap(),
    );
    // A critical process's stage, on a fake clock: each critical request
    // takes exactly `latency_us` of it.
    let clock = paio::FakeClock::new();
    let critical = Arc::new(
        Stage::builder("critical")
            .clock(Arc::new(clock.clone()))
            .build(),
    );
    let bg_client = client(&background, &paiod.socket);
    let fg_client = client(&critical, &paiod.socket);
    let latency_us = Arc::new(AtomicU64::new(5_000));
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (critical, stop, latency_us) = (critical.clone(), stop.clone(), latency_us.clone());
        std::thread::spawn(move || {
            let ctx =
                Context::new(RequestType::READ, 4096).with_criticality(paio::Criticality::Critical);
            while !stop.load(Ordering::Relaxed) {
                let a = critical.admit(&ctx).unwrap();
                clock.advance(Duration::from_micros(latency_us.load(Ordering::Relaxed)));
                critical.complete(a, 4096).unwrap();
                std::thread::sleep(Duration::from_micros(500));
            }
        })
    };
    // 5 ms against a 1 ms target: depth 4 -> 2 -> 1, then a rate.
    wait_for("the background cut to depth 1 and a rate", || {
        matches!(yield_config(&background), (1, 1, Some(_)))
    });
    let l = paiod.status().latency.unwrap();
    assert_eq!(
        l.verdict,
        paio_control::policy::criticality::Verdict::Missed
    );
    assert!(l.measured_ns >= 5_000_000, "{l:?}");
    assert!(l.samples >= 20, "{l:?}");
    let mut body = String::new();
    std::net::TcpStream::connect(("127.0.0.1", port))
        .and_then(|mut c| {
            write!(c, "GET /metrics HTTP/1.0\r\n\r\n")?;
            c.read_to_string(&mut body)
        })
        .unwrap();
    for line in [
        "paio_critical_latency_target_seconds 0.001",
        "paio_background_depth 1.0",
        "paio_background_busy_depth 1.0",
        "paio_background_rate_bytes_per_second ",
    ] {
        assert!(body.contains(line), "{line:?} in {body}");
    }
    // 100 µs: the rate is lifted and depth restored step by step.
    latency_us.store(100, Ordering::Relaxed);
    wait_for("the background restored", || {
        yield_config(&background) == (4, 1, None)
    });
    let l = paiod.status().latency.unwrap();
    assert_eq!(l.verdict, paio_control::policy::criticality::Verdict::Met);
    assert!(l.measured_ns <= 1_000_000, "{l:?}");
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    // paiod goes away: the stages keep the last configuration.
    paiod.kill();
    wait_for("the client to notice", || !bg_client.status().connected);
    assert_eq!(yield_config(&background), (4, 1, None));
    bg_client.stop();
    fg_client.stop();
}

/// The DRL rate of `channel/object`, if that object is a DRL.
fn drl_rate(stage: &Stage, channel: &str, object: &str) -> Option<u64> {
    let info = stage.info();
    let ch = info.channels.iter().find(|c| c.name == channel)?;
    match &ch.objects.iter().find(|o| o.name == object)?.config {
        Some(ObjectConfig::Drl(d)) => Some(d.rate.per_second),
        _ => None,
    }
}

/// Issue 13: a paiod rate on the RocksDB plugin's `compaction` channel
/// reaches the requests that the layout's own objects used to take, and
/// `paio ctl set-rate` sets one object's rate, refusing what it cannot do.
#[test]
fn a_static_rate_governs_the_rocksdb_layout_and_set_rate_sets_one_object() {
    let dir = tempfile::tempdir().unwrap();
    let paiod = Paiod::start(
        dir.path(),
        r#"
period = "50ms"
[policy]
kind = "static"
group_by = "db"
channel = "compaction"
match = { request_context = "compaction_l0" }
[[policy.group]]
name = "a"
rate = "20MiB/s"
"#,
    );
    let layout = include_str!("../../../integrations/rocksdb/paio-rocksdb.toml").replace(
        "name = \"rocksdb\"\n",
        "name = \"rocksdb\"\nlabels = { db = \"a\" }\n",
    );
    let s = Arc::new(Stage::from_policy_str(&layout, "<plugin>").unwrap());
    let c = client(&s, &paiod.socket);
    wait_for("paiod's compaction rate", || {
        drl_rate(&s, "compaction", "paiod") == Some(20 * MIB)
    });
    for (ctx, rt) in [
        ("compaction_l0", RequestType::WRITE),
        ("compaction_ln", RequestType::WRITE),
        ("compaction_ln", RequestType::READ),
    ] {
        let req = Context::explicit(1, rt, paio::RequestContext::named(ctx).unwrap(), 4096);
        assert_eq!(
            s.route(&req),
            Some(("compaction".to_string(), "paiod".to_string())),
            "{ctx} {rt:?}"
        );
    }
    let set_rate = |stage: &str, channel: &str, object: &str, rate: &str| {
        ctl::request(
            &paiod.socket,
            CtlCommand::SetRate {
                stage: stage.into(),
                channel: channel.into(),
                object: object.into(),
                rate: rate.into(),
            },
            Duration::from_secs(10),
        )
    };
    let done = set_rate("rocksdb", "flush", "limit", "5MiB/s")
        .unwrap()
        .done
        .unwrap();
    assert!(done.contains("flush/limit = 5MiB/s"), "{done}");
    wait_for("flush/limit at 5 MiB/s", || {
        drl_rate(&s, "flush", "limit") == Some(5 * MIB)
    });
    let id = paiod.status().stages[0].id.to_string();
    set_rate(&id, "flush", "limit", "6MiB/s").unwrap();
    wait_for("flush/limit at 6 MiB/s", || {
        drl_rate(&s, "flush", "limit") == Some(6 * MIB)
    });
    for (args, expected) in [
        (
            ["nope", "flush", "limit", "1MiB/s"],
            "registered: 1 (rocksdb)",
        ),
        (
            ["rocksdb", "flsh", "limit", "1MiB/s"],
            "has no channel \"flsh\" (it has: foreground, flush",
        ),
        (
            ["rocksdb", "flush", "limt", "1MiB/s"],
            "no object \"limt\" (it has: default, limit, reads)",
        ),
        (
            ["rocksdb", "foreground", "default", "1MiB/s"],
            "is a noop object",
        ),
        (
            ["rocksdb", "compaction", "paiod", "1MiB/s"],
            "policy static sets compaction/paiod",
        ),
        (
            ["rocksdb", "compaction", "l0", "1MiB/s"],
            "no request reaches compaction/l0 (the channel's default object is \"paiod\"",
        ),
        (["rocksdb", "flush", "limit", "fast"], "rate \"fast\""),
    ] {
        let e = set_rate(args[0], args[1], args[2], args[3])
            .unwrap_err()
            .to_string();
        assert!(e.contains(expected), "{args:?}: {e}");
    }
    assert_eq!(drl_rate(&s, "flush", "limit"), Some(6 * MIB));
    c.stop();
}

/// Resident memory of `pid` in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/<pid>/status");
    kb * 1024
}

fn connections(paiod: &Paiod) -> ctl::ConnectionStatus {
    paiod
        .status()
        .connections
        .expect("paiod reports connections")
}

/// Issue 14: 16 MiB of 5-byte invalid frames from a client that never
/// reads its replies took paiod from 4 MB to 568 MB. Now paiod stops
/// reading that client once 1 MiB of replies is queued, closes it after
/// the drain timeout, and keeps serving everyone else.
#[test]
fn a_client_that_never_reads_its_replies_cannot_grow_paiod() {
    let dir = tempfile::tempdir().unwrap();
    let paiod = Paiod::start(dir.path(), "[connections]\ndrain_timeout = \"1s\"\n");
    let pid = paiod.child.id();
    let before = rss(pid);
    let mut s = UnixStream::connect(&paiod.socket).unwrap();
    s.set_write_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let chunk: Vec<u8> = [0u8, 0, 0, 1, b'x'].repeat(64 * 1024 / 5);
    let (mut sent, mut peak) = (0usize, before);
    let deadline = Instant::now() + Duration::from_secs(30);
    let closed = loop {
        assert!(Instant::now() < deadline, "paiod neither read nor closed");
        match s.write(&chunk) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => break true, // EPIPE / ECONNRESET: paiod closed it
        }
        peak = peak.max(rss(pid));
        if sent >= 16 << 20 {
            break false;
        }
    };
    assert!(
        closed,
        "paiod read all {sent} bytes without ever pushing back"
    );
    assert!(
        sent < 16 << 20,
        "paiod read {sent} bytes from a client that reads nothing"
    );
    assert!(
        peak < before + 48 * MIB,
        "paiod grew from {before} to {peak} bytes"
    );
    // Everyone else is still served, and the close is accounted.
    let c = connections(&paiod);
    assert_eq!(c.closed.get("unread"), Some(&1), "{c:?}");
    let st = stage("t");
    let _c = client(&st, &paiod.socket);
    wait_for("the stage to register", || paiod.status().stages.len() == 1);
}

/// Issue 14: with the usual soft limit of 1,024 descriptors, 1,100 idle
/// connections locked out `paio status` and new stages. paiod raises its
/// soft limit to the hard one, caps connections that never speak (the
/// oldest is closed for a new one) and times them out.
#[test]
fn idle_connections_do_not_lock_out_status_or_stages() {
    let dir = tempfile::tempdir().unwrap();
    let paiod = Paiod::start_with(
        dir.path(),
        "[connections]\nmax_waiting = 16\nhello_timeout = \"2s\"\n",
        Some(128),
        None,
    );
    let c = connections(&paiod);
    let hard = std::fs::read_to_string(format!("/proc/{}/limits", paiod.child.id()))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(4).map(str::to_string))
        .unwrap();
    assert_eq!(
        c.descriptor_limit.to_string(),
        hard,
        "soft limit raised to the hard one"
    );
    assert!(c.descriptor_limit > 128, "{c:?}");
    let idle: Vec<UnixStream> = (0..300)
        .map(|_| UnixStream::connect(&paiod.socket).unwrap())
        .collect();
    let st = stage("t");
    let _client = client(&st, &paiod.socket);
    wait_for("the stage to register", || paiod.status().stages.len() == 1);
    let c = connections(&paiod);
    assert!(c.waiting <= 16, "{c:?}");
    assert!(
        c.closed.get("waiting_cap").copied().unwrap_or(0) >= 284,
        "{c:?}"
    );
    drop(idle);
    // Below the cap, connections that never speak are closed once their
    // time to speak is up (status requests do not evict them here).
    wait_for("no connection waiting", || connections(&paiod).waiting == 0);
    let timed_out = |p: &Paiod| connections(p).closed.get("hello_timeout").copied();
    let before = timed_out(&paiod).unwrap_or(0);
    let idle: Vec<UnixStream> = (0..3)
        .map(|_| UnixStream::connect(&paiod.socket).unwrap())
        .collect();
    wait_for("idle connections to time out", || {
        timed_out(&paiod) == Some(before + 3)
    });
    assert_eq!(connections(&paiod).waiting, 0);
    drop(idle);
}

/// 32 ctl sessions that asked once and then stayed connected locked out
/// `paio status` and `paio ctl` for as long as they stayed. A ctl session
/// without a request for `hello_timeout` is now closed, and accounted.
#[test]
fn idle_ctl_sessions_do_not_lock_out_status() {
    let dir = tempfile::tempdir().unwrap();
    let paiod = Paiod::start(dir.path(), "[connections]\nhello_timeout = \"2s\"\n");
    let request = protocol::encode_value(&ctl::CtlRequest {
        kind: ctl::CtlType::Ctl,
        id: 1,
        command: CtlCommand::Status,
    });
    let idle: Vec<UnixStream> = (0..32)
        .map(|_| {
            let mut s = UnixStream::connect(&paiod.socket).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(&request).unwrap();
            let reply = protocol::read_frame(&mut s, 64 << 20).unwrap().unwrap();
            let reply: ctl::CtlReply = serde_json::from_slice(&reply).unwrap();
            assert!(reply.ok, "{reply:?}");
            s
        })
        .collect();
    // Every ctl slot is held: a new request is refused, saying why.
    match ctl::request(&paiod.socket, CtlCommand::Status, Duration::from_secs(10)) {
        Err(ctl::CtlError::Refused(e)) => assert!(e.contains("ctl sessions"), "{e}"),
        other => panic!("expected the ctl cap's refusal, got {other:?}"),
    }
    // Within hello_timeout of their answers the idle sessions are closed.
    wait_for("status to be served again", || {
        ctl::request(&paiod.socket, CtlCommand::Status, Duration::from_secs(10)).is_ok()
    });
    wait_for("all 32 idle sessions closed", || {
        connections(&paiod).closed.get("ctl_idle") == Some(&32)
    });
    for mut s in idle {
        let mut b = [0u8; 1];
        assert_eq!(s.read(&mut b).unwrap(), 0, "paiod closed the session");
    }
}

/// A paiod started on the path of one that is stopping finds the path in
/// use, or gets it once the stopping one has let it go: the stopping one
/// never removes its successor's socket (it did, 3 times in 3, when it
/// removed its path after closing its listener).
#[test]
fn a_paiod_restarted_at_once_keeps_its_socket() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = Paiod::start(dir.path(), "");
    let cfg = dir.path().join("paiod.toml");
    let spawn = || {
        Command::new(env!("CARGO_BIN_EXE_paiod"))
            .arg("--config")
            .arg(&cfg)
            .arg("--socket")
            .arg(&first.socket)
            .args(["--log", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    assert!(Command::new("kill")
        .args(["-TERM", &first.child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let second = loop {
        assert!(Instant::now() < deadline, "no successor ever got the path");
        let mut c = spawn();
        // One that found the path in use exits at once; one that bound it
        // stays.
        std::thread::sleep(Duration::from_millis(300));
        match c.try_wait().unwrap() {
            Some(_) => continue,
            None => break c,
        }
    };
    first.child.wait().unwrap();
    let second = Paiod {
        child: second,
        socket: first.socket.clone(),
    };
    assert_eq!(second.status().pid, second.child.id());
}

/// `paio status` against a server that takes the request and then sends
/// its reply a byte at a time hung for as long as the bytes kept coming
/// (the timeout was per read); against a stopped one whose queue is full it
/// hung in `connect`. Both now end within the timeout, saying so.
#[test]
fn status_against_a_hung_server_ends_within_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trickle.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        // A frame header announcing 100 bytes, then one byte every 50 ms.
        let _ = s.write_all(&100u32.to_be_bytes());
        for _ in 0..100 {
            if s.write_all(b" ").is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let t = Instant::now();
    let e = ctl::request(&path, CtlCommand::Status, Duration::from_millis(500)).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    assert!(matches!(e, ctl::CtlError::Timeout { .. }), "{e:?}");
    assert!(e.to_string().contains("did not answer within 500ms"), "{e}");
    server.join().unwrap();

    // A server that is not paiod (an HTTP server, say) answers at once with
    // bytes that announce a huge frame: said at once, not read for 5 s.
    let path = dir.path().join("http.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
        std::thread::sleep(Duration::from_secs(2));
    });
    let t = Instant::now();
    let e = ctl::request(&path, CtlCommand::Status, Duration::from_secs(5)).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert!(
        e.to_string()
            .contains("is the server at this socket paiod?"),
        "{e}"
    );
    server.join().unwrap();
}

/// Peers keeping frames unfinished made paiod hold what they sent (150
/// stages at a 1 MiB frame each: 306 MB). Unfinished frames over all
/// connections are capped (`max_buffered`): the connection taking the total
/// over it is closed and counted, the others are served.
#[test]
fn unfinished_frames_are_capped_over_all_connections() {
    let dir = tempfile::tempdir().unwrap();
    let paiod = Paiod::start(dir.path(), "[connections]\nmax_buffered = \"2MiB\"\n");
    let unfinished = |n: usize| {
        let mut s = UnixStream::connect(&paiod.socket).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut frame = (1u32 << 20).to_be_bytes().to_vec();
        frame.extend(vec![b' '; n]);
        let _ = s.write_all(&frame); // the last one is closed meanwhile
        s
    };
    // Three of 800 KiB: the one whose bytes take the total over 2 MiB is
    // closed, the other two stay.
    let held: Vec<UnixStream> = (0..3).map(|_| unfinished(800 << 10)).collect();
    wait_for("one to be closed", || {
        connections(&paiod).closed.get("max_buffered") == Some(&1)
    });
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(connections(&paiod).closed.get("max_buffered"), Some(&1));
    drop(held);
    // Served as before.
    let st = stage("t");
    let _c = client(&st, &paiod.socket);
    wait_for("the stage to register", || paiod.status().stages.len() == 1);
}

/// A peer of another uid than paiod's and root is refused, whatever the
/// socket's mode lets through (a socket made 0600 after its bind was open
/// to everyone in between, and paiod served another user's `ctl set`).
#[test]
fn another_users_peer_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    assert!(
        rustix::process::geteuid().is_root(),
        "this test connects as another uid (nobody) with setpriv: run it as root"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let paiod = Paiod::start(dir.path(), "");
    // The socket's mode must not be what refuses nobody here.
    std::fs::set_permissions(&paiod.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let script = "import socket,struct,sys\ns=socket.socket(socket.AF_UNIX)\n\
         s.connect(sys.argv[1])\nb=b'{\"type\":\"ctl\",\"id\":1,\"command\":{\"command\":\"status\"}}'\n\
         s.sendall(struct.pack('>I',len(b))+b)\nd=b''\n\
         while True:\n c=s.recv(65536)\n if not c: break\n d+=c\nprint(d[4:].decode())\n";
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            script,
        ])
        .arg(&paiod.socket)
        .output()
        .expect("setpriv (util-linux) and /usr/bin/python3, which uid nobody can run");
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("paiod serves uid 0 and root, not uid 65534"),
        "{said}"
    );
    assert_eq!(connections(&paiod).closed.get("foreign_uid"), Some(&1));
}

/// A report of 34,816 tiny objects (1 MB) made paiod keep 13.5 MB, for
/// every stage sending one. A report over the objects a stage may have is
/// refused, and what all stages make paiod keep is capped
/// (`max_stage_bytes`): the stage whose report takes the total over is
/// told so and closed, the others stay.
#[test]
fn what_stages_make_paiod_keep_is_capped() {
    let objects = |channels: usize| {
        let chans: Vec<serde_json::Value> = (0..channels)
            .map(|c| {
                let objs: Vec<serde_json::Value> = (0..256)
                    .map(|o| serde_json::json!({"name": format!("o{o}"), "kind": "noop"}))
                    .collect();
                serde_json::json!({"name": format!("c{c}"), "objects": objs})
            })
            .collect();
        serde_json::json!({"stage": "t", "collected_at_ns": 1, "channels": chans})
    };
    let report = objects(16); // 4,096 objects, what a stage may have
    let held = paio_control::peer::held_by_stats(&serde_json::from_value(report.clone()).unwrap());
    // Room for two such stages, not three.
    let cap = 2 * held + held / 2;
    let dir = tempfile::tempdir().unwrap();
    let paiod = Paiod::start(
        dir.path(),
        &format!("[connections]\nmax_stage_bytes = \"{cap}B\"\n"),
    );
    let register = |name: &str| {
        let mut s = hello(&paiod.socket, stage(name).info());
        assert!(matches!(read_msg(&mut s), Message::Welcome { .. }));
        s
    };
    // Answers the next collect with `stats`; returns paiod's error, if any.
    let answer = |s: &mut UnixStream, stats: &serde_json::Value| loop {
        if let Message::Collect { id } = read_msg(s) {
            let msg = serde_json::json!({"type": "stats", "id": id, "stats": stats});
            raw_frame(s, msg.to_string().as_bytes());
            s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            let reply = protocol::read_frame(s, protocol::DEFAULT_MAX_FRAME);
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            return match reply {
                Ok(Some(p)) => match protocol::decode(&p).unwrap() {
                    Message::Error { message, .. } => Some(message),
                    _ => None,
                },
                _ => None,
            };
        }
    };
    let mut over = register("over");
    let e = answer(&mut over, &objects(17)).expect("4,352 objects refused");
    assert!(e.contains("objects over all channels: at most 4096"), "{e}");
    let mut kept: Vec<UnixStream> = (0..2).map(|i| register(&format!("k{i}"))).collect();
    for s in &mut kept {
        assert_eq!(answer(s, &report), None);
    }
    let mut third = register("third");
    let e = answer(&mut third, &report).expect("the third report refused");
    assert!(e.contains("max_stage_bytes"), "{e}");
    wait_for("the third to be closed", || {
        connections(&paiod).closed.get("max_stage_bytes") == Some(&1)
    });
    let c = connections(&paiod);
    assert!(c.stage_bytes <= cap as u64, "{} > {cap}", c.stage_bytes);
    assert!(c.stage_bytes >= 2 * held as u64, "{c:?}");
    assert_eq!(paiod.status().stages.len(), 3, "over and the two kept");
    // A stage that leaves gives its share back: the next one fits.
    drop(kept.pop());
    wait_for("k1 to leave", || paiod.status().stages.len() == 2);
    let mut fourth = register("fourth");
    assert_eq!(answer(&mut fourth, &report), None);
}

/// `paio ctl set team=I1 ...` on a paiod grouping by `job` set group `I1`
/// and said nothing: the label is checked against the policy's group_by.
#[test]
fn ctl_set_with_another_label_than_group_by_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let paiod = Paiod::start(dir.path(), &static_config("10MiB/s"));
    let set = |label: Option<&str>| {
        ctl::request(
            &paiod.socket,
            CtlCommand::Set {
                label: label.map(str::to_string),
                group: "t".into(),
                key: "rate".into(),
                value: "20MiB/s".into(),
            },
            Duration::from_secs(10),
        )
    };
    match set(Some("team")) {
        Err(ctl::CtlError::Refused(e)) => assert!(
            e.contains("groups stages by label \"job\", not \"team\": set job=t"),
            "{e}"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    set(Some("job")).unwrap();
    set(None).unwrap();
}

/// Stages over `max_stages_per_uid` are refused with a `limit` error that
/// says which cap, and are accounted.
#[test]
fn stages_over_the_per_uid_cap_are_refused_with_the_cap_named() {
    let dir = tempfile::tempdir().unwrap();
    let paiod = Paiod::start(dir.path(), "[connections]\nmax_stages_per_uid = 1\n");
    let st = stage("t");
    let _client = client(&st, &paiod.socket);
    wait_for("the stage to register", || paiod.status().stages.len() == 1);
    let mut s = UnixStream::connect(&paiod.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let hello = Message::Hello(Box::new(protocol::Hello {
        version: protocol::VERSION,
        ppid: 1,
        user: "t".into(),
        exe: None,
        info: stage("u").info(),
    }));
    protocol::write_message(&mut s, &hello).unwrap();
    match read_msg(&mut s) {
        Message::Error { code, message, .. } => {
            assert_eq!(code, protocol::ErrorCode::Limit);
            assert!(message.contains("max_stages_per_uid"), "{message}");
        }
        m => panic!("expected a limit error, got {m:?}"),
    }
    assert_eq!(paiod.status().stages.len(), 1);
    assert_eq!(connections(&paiod).closed.get("uid_cap"), Some(&1));
}

/// Issue 14: a stage could forge lines in paiod's log with a newline in its
/// name. Names with control characters are refused at hello (as `paio run
/// --name` refuses them), and every other peer text that reaches the log
/// (labels, goodbye reasons, error messages) is escaped.
#[test]
fn a_stage_cannot_forge_a_log_line() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("paiod.log");
    let paiod = Paiod::start_with(dir.path(), "", None, Some(&log));
    let hello = |info: paio::StageInfo| {
        Message::Hello(Box::new(protocol::Hello {
            version: protocol::VERSION,
            ppid: 1,
            user: "t".into(),
            exe: None,
            info,
        }))
    };
    let refused = |info: paio::StageInfo| {
        let mut s = UnixStream::connect(&paiod.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        protocol::write_message(&mut s, &hello(info)).unwrap();
        match read_msg(&mut s) {
            Message::Error { code, message, .. } => {
                assert_eq!(code, protocol::ErrorCode::BadMessage);
                assert!(message.contains("control characters"), "{message}");
            }
            m => panic!("expected the hello to be refused, got {m:?}"),
        }
    };
    let mut info = stage("t").info();
    info.identity.name = "evil\nFORGED name".into();
    refused(info);
    let mut info = stage("t").info();
    info.identity
        .labels
        .insert("job".into(), "x\nFORGED label\u{1b}[2J".into());
    refused(info);
    let mut s = UnixStream::connect(&paiod.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    protocol::write_message(&mut s, &hello(stage("t").info())).unwrap();
    assert!(matches!(read_msg(&mut s), Message::Welcome { .. }));
    protocol::write_message(
        &mut s,
        &Message::error(
            Some(1),
            protocol::ErrorCode::Internal,
            "no\nFORGED error\u{1b}[2J",
        ),
    )
    .unwrap();
    protocol::write_message(
        &mut s,
        &Message::Goodbye {
            reason: Some("bye\nFORGED reason".into()),
        },
    )
    .unwrap();
    wait_for("the goodbye in the log", || {
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("said goodbye")
    });
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains(r"no\nFORGED error\u{1b}[2J"), "{text}");
    assert!(text.contains(r"bye\nFORGED reason"), "{text}");
    assert!(
        !text.lines().any(|l| l.starts_with("FORGED")) && !text.contains('\u{1b}'),
        "{text}"
    );
}

/// Issue 14: a `ctl set` with a 900 KB group name was stored and echoed in
/// every status reply. Every string a peer sends has a cap.
#[test]
fn oversized_names_are_refused_with_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let paiod = Paiod::start(dir.path(), &static_config("10MiB/s"));
    let e = support::ctl_set(&paiod.socket, &"g".repeat(900_000), "rate", "1MiB/s")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("group") && e.contains("128") && e.contains("900000"),
        "{e}"
    );
    let mut info = stage("t").info();
    info.identity.name = "n".repeat(300);
    let mut s = hello(&paiod.socket, info);
    match read_msg(&mut s) {
        Message::Error { message, .. } => {
            assert!(
                message.contains("1 to 128 bytes, this one 300"),
                "{message}"
            )
        }
        m => panic!("expected the hello to be refused, got {m:?}"),
    }
    assert!(paiod.status().stages.is_empty());
}

fn sighup(paiod: &Paiod) {
    let ok = Command::new("kill")
        .arg("-HUP")
        .arg(paiod.child.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -HUP paiod");
}

#[test]
fn sighup_reloads_the_configuration_without_dropping_a_stage() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("paiod.log");
    let paiod = Paiod::start_with(dir.path(), &static_config("400MiB/s"), None, Some(&log));
    let cfg = dir.path().join("paiod.toml");
    let stage = stage("t");
    let client = client(&stage, &paiod.socket);
    wait_for("the static rate", || paiod_rate(&stage) == Some(400 * MIB));
    let id = paiod.status().stages[0].id;

    // A new rate and period: applied, the same registration kept.
    std::fs::write(&cfg, static_config("100MiB/s").replace("50ms", "20ms")).unwrap();
    sighup(&paiod);
    wait_for("the reloaded rate", || {
        paiod_rate(&stage) == Some(100 * MIB)
    });
    let s = paiod.status();
    assert_eq!(s.stages.len(), 1);
    assert_eq!(
        s.stages[0].id, id,
        "the stage was not dropped and re-registered"
    );
    assert_eq!(s.period_ms, 20);
    let c = s.config.unwrap();
    assert_eq!((c.reloads, c.refused), (1, 0));
    assert!(c.path.unwrap().ends_with("paiod.toml"));

    // An invalid file is refused as a whole: nothing changes, and status
    // says why.
    std::fs::write(&cfg, "period = \"1x\"\n[policy]\nkind = \"static\"\n").unwrap();
    sighup(&paiod);
    wait_for("the refusal", || {
        paiod.status().config.is_some_and(|c| c.refused == 1)
    });
    let s = paiod.status();
    let c = s.config.unwrap();
    let why = c.last_error.unwrap();
    assert!(
        why.contains("paiod.toml:1:10") && why.contains("period"),
        "{why}"
    );
    assert_eq!(s.period_ms, 20);
    assert_eq!(paiod_rate(&stage), Some(100 * MIB));

    // A policy that no longer sets the stage's rate leaves it as it was,
    // and says so.
    std::fs::write(&cfg, "period = \"20ms\"\n[policy]\nkind = \"static\"\n").unwrap();
    sighup(&paiod);
    wait_for("the third reload", || {
        paiod
            .status()
            .config
            .is_some_and(|c| c.reloads == 2 && c.last_error.is_none())
    });
    wait_for("the log line", || {
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("keeps the last rate")
    });
    assert_eq!(paiod_rate(&stage), Some(100 * MIB));
    assert_eq!(paiod.status().stages[0].id, id);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("reload refused"), "{text}");
    client.stop();
}

#[test]
fn check_config_says_what_a_file_sets_up_or_where_it_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(&good, static_config("10MiB/s")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_paiod"))
        .arg("--check-config")
        .arg(&good)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("valid") && text.contains("policy: static"),
        "{text}"
    );
    assert!(text.contains("period: 50ms"), "{text}");

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[policy]\nkind = \"max_min\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_paiod"))
        .arg("--check-config")
        .arg(&bad)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("bad.toml:"), "{err}");
    assert!(out.stdout.is_empty());

    // A socket path too long for a Unix socket: from the file (at its
    // line) or from --socket, which is the one shown when valid.
    let long = format!("/tmp/{}.sock", "s".repeat(130));
    let far = dir.path().join("far.toml");
    std::fs::write(&far, format!("socket = {long:?}\n")).unwrap();
    let check = |file: &Path, socket: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_paiod"));
        c.arg("--check-config").arg(file);
        if let Some(s) = socket {
            c.args(["--socket", s]);
        }
        c.output().unwrap()
    };
    let out = check(&far, None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("far.toml:1:") && err.contains("more than a Unix socket"),
        "{err}"
    );
    let out = check(&good, Some(&long));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("more than a Unix socket"), "{err}");
    let out = check(&good, Some("/tmp/elsewhere.sock"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("socket: /tmp/elsewhere.sock"), "{text}");
}

/// systemd's socket activation (paiod.socket), with systemd's own tool:
/// the socket exists before paiod runs, a stage's connection starts paiod
/// with it, the stage registers and gets its rule, and paiod leaves the
/// socket (systemd's) in place when it stops.
#[test]
fn a_socket_passed_by_systemd_serves_stages_that_came_first() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("paiod.toml");
    std::fs::write(&cfg, static_config("300MiB/s")).unwrap();
    let socket = dir.path().join("paiod.sock");
    let mut activate = Command::new("systemd-socket-activate")
        .arg("-l")
        .arg(&socket)
        .arg(env!("CARGO_BIN_EXE_paiod"))
        .arg("--config")
        .arg(&cfg)
        .arg("--log")
        .arg("warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("systemd-socket-activate (Debian package systemd; make setup installs it)");
    wait_for("the socket", || socket.exists());
    let stage = stage("t");
    let client = client(&stage, &socket);
    wait_for("the static rate", || paiod_rate(&stage) == Some(300 * MIB));
    let s = *ctl::request(&socket, CtlCommand::Status, Duration::from_secs(10))
        .unwrap()
        .status
        .unwrap();
    assert_eq!(s.pid, activate.id(), "paiod runs in the activator's place");
    assert_eq!(s.stages.len(), 1);
    client.stop();
    let ok = Command::new("kill")
        .arg("-TERM")
        .arg(activate.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    activate.wait().unwrap();
    assert!(socket.exists(), "paiod removed the socket systemd passed");
}

#[test]
fn json_logs_are_one_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("paiod.sock");
    let log = dir.path().join("paiod.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_paiod"))
        .arg("--socket")
        .arg(&socket)
        .arg("--log-format")
        .arg("json")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_for("paiod to listen", || UnixStream::connect(&socket).is_ok());
    let stage = stage("json-job");
    let client = client(&stage, &socket);
    wait_for("the registration line", || {
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("registered")
    });
    client.stop();
    child.kill().unwrap();
    child.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    for line in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            v["level"].is_string() && v["timestamp"].is_string(),
            "{line}"
        );
        assert!(v["fields"]["message"].is_string(), "{line}");
    }
    assert!(text.contains("json-job"), "{text}");
}
