//! Prometheus metrics (`paiod --metrics 127.0.0.1:9464`), in the OpenMetrics
//! text format of the `prometheus-client` crate, rendered from paiod's
//! state at each scrape:
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `paio_stages` | gauge | |
//! | `paio_channel_operations_total`, `paio_channel_bytes_total` | counter | stage, pid, stage_id, channel |
//! | `paio_channel_bytes_per_second` | gauge (last period) | stage, pid, stage_id, channel |
//! | `paio_object_operations_total`, `paio_object_bytes_total` | counter | stage, pid, stage_id, channel, object |
//! | `paio_object_wait_seconds` | histogram of request waits | stage, pid, stage_id, channel, object |
//! | `paio_object_rate` | gauge: a DRL's configured rate (bytes or ops per second) | stage, pid, stage_id, channel, object, unit |
//! | `paio_process_read_bytes_per_second`, `..._write_...` | gauge, from `/proc/<pid>/io` | stage, pid, stage_id |
//! | `paio_group_demand_bytes_per_second`, `..._target_...`, `..._achieved_...` | gauge | group |
//! | `paio_critical_latency_target_seconds`, `..._measured_seconds` | gauge (policy `criticality`) | |
//! | `paio_background_depth`, `paio_background_busy_depth`, `paio_background_rate_bytes_per_second` | gauge (policy `criticality`; the rate only while limited) | |
//! | `paiod_descriptor_limit` | gauge | |
//! | `paiod_connections` | gauge | state (`stage`, `waiting`, `ctl`) |
//! | `paiod_connection_cap` | gauge | cap (`max_stages`, `max_stages_per_uid`, `max_waiting`, `max_ctl`, `max_stage_bytes`) |
//! | `paiod_stage_bytes` | gauge, bytes of stages' registrations and statistics paiod keeps (estimated) | |
//! | `paiod_connections_closed_total` | counter | reason (`stage_cap`, `uid_cap`, `ctl_cap`, `waiting_cap`, `hello_timeout`, `ctl_idle`, `max_buffered`, `max_stage_bytes`, `foreign_uid`, `unread`) |
//! | `paiod_loop_period_seconds` | gauge, achieved control period over the last 100 ticks | stat (`p50`, `p99`, `max`, `target`) |
//! | `paiod_loop_work_seconds` | gauge, a tick's work | stat (`p99`) |
//! | `paiod_loop_overruns_total` | counter, periods more than 10 % late | |
//! | `paiod_cpu_share`, `paiod_cpu_seconds_total` | gauge (last 100 ticks), counter | |
//! | `paiod_cluster_connected`, `paiod_cluster_leading` | gauge 0/1 (cluster mode) | |
//! | `paiod_cluster_sessions_total` | counter (cluster mode) | |
//! | `paiod_cluster_node_allocation_bytes_per_second` | gauge: this node's part (cluster mode) | job |
//! | `paiod_cluster_allocation_age_seconds`, `paiod_cluster_nodes` | gauge (cluster mode) | |
//! | `paiod_cluster_job_allocation_bytes_per_second`, `..._achieved_...`, `..._demand_...` | gauge, the leader's summary (cluster mode) | job |
//!
//! Every per-stage series also has the label `stage_id` (paiod's id of the
//! registration), so two stages of one name in one process stay apart.
//!
//! The endpoint answers `GET /metrics` (and `/`) with HTTP/1.0 and closes
//! the connection; it reads at most 8 KiB of request head. It serves
//! OpenMetrics when the request's `Accept` names it (Prometheus does), and
//! the Prometheus text format 0.0.4 otherwise (curl, promtool).

use std::fmt::Write as _;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::ctl::StatusReport;
use crate::server::Shared;

/// Renders the metrics of `state` in the OpenMetrics text format.
pub fn render(state: &Shared) -> String {
    let snapshot = {
        let st = state.lock().unwrap_or_else(|e| e.into_inner());
        Snapshot {
            report: st.status(),
            stats: st.stats(),
        }
    };
    let mut registry = Registry::default();
    registry.register_collector(Box::new(snapshot));
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

/// What one scrape renders: the status report and each stage's cumulative
/// statistics.
#[derive(Debug)]
struct Snapshot {
    report: StatusReport,
    stats: Vec<((String, u32, u64), paio::StageStats)>,
}

type Labels = Vec<(String, String)>;

/// A stage's labels: `stage_id` (paiod's id of the registration) keeps
/// series unique when one process has two stages of the same name.
fn stage_labels(name: &str, pid: u32, id: u64) -> Labels {
    vec![
        ("stage".to_string(), name.to_string()),
        ("pid".to_string(), pid.to_string()),
        ("stage_id".to_string(), id.to_string()),
    ]
}

fn with(mut l: Labels, k: &str, v: &str) -> Labels {
    l.push((k.to_string(), v.to_string()));
    l
}

fn counters(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: Vec<(Labels, u64)>,
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in rows {
        ConstCounter::new(v).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

fn gauges(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: Vec<(Labels, f64)>,
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in rows {
        ConstGauge::new(v).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

impl prometheus_client::collector::Collector for Snapshot {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let r = &self.report;
        let g = ConstGauge::new(r.stages.len() as i64);
        g.encode(enc.encode_descriptor(
            "paio_stages",
            "Registered stages",
            None,
            g.metric_type(),
        )?)?;

        let mut counter =
            |name: &str, help: &str, rows: Vec<(Labels, u64)>| counters(&mut enc, name, help, rows);
        let mut ch_ops = Vec::new();
        let mut ch_bytes = Vec::new();
        let mut ob_ops = Vec::new();
        let mut ob_bytes = Vec::new();
        for (v, s) in &self.stats {
            for ch in &s.channels {
                let l = with(stage_labels(&v.0, v.1, v.2), "channel", &ch.name);
                ch_ops.push((l.clone(), ch.counts.ops));
                ch_bytes.push((l.clone(), ch.counts.bytes));
                for o in &ch.objects {
                    let lo = with(l.clone(), "object", &o.name);
                    ob_ops.push((lo.clone(), o.counts.ops));
                    ob_bytes.push((lo, o.counts.bytes));
                }
            }
        }
        counter(
            "paio_channel_operations",
            "Requests through a channel",
            ch_ops,
        )?;
        counter("paio_channel_bytes", "Bytes through a channel", ch_bytes)?;
        counter(
            "paio_object_operations",
            "Requests through an object",
            ob_ops,
        )?;
        counter("paio_object_bytes", "Bytes through an object", ob_bytes)?;

        let mut gauge =
            |name: &str, help: &str, rows: Vec<(Labels, f64)>| gauges(&mut enc, name, help, rows);
        let mut ch_bw = Vec::new();
        let mut rates = Vec::new();
        let mut proc_r = Vec::new();
        let mut proc_w = Vec::new();
        for s in &r.stages {
            let base = stage_labels(&s.name, s.pid, s.id);
            if let Some(x) = s.proc_read_bytes_per_sec {
                proc_r.push((base.clone(), x));
            }
            if let Some(x) = s.proc_write_bytes_per_sec {
                proc_w.push((base.clone(), x));
            }
            for ch in &s.channels {
                let l = with(base.clone(), "channel", &ch.name);
                ch_bw.push((l.clone(), ch.bytes_per_sec));
                for o in &ch.objects {
                    if let Some(paio::ObjectConfig::Drl(d)) = &o.config {
                        let unit = match d.rate.unit {
                            paio::units::RateUnit::Bytes => "bytes",
                            paio::units::RateUnit::Ops => "ops",
                        };
                        let lo = with(with(l.clone(), "object", &o.name), "unit", unit);
                        rates.push((lo, d.rate.per_second as f64));
                    }
                }
            }
        }
        gauge(
            "paio_channel_bytes_per_second",
            "Channel throughput over the last control period",
            ch_bw,
        )?;
        gauge(
            "paio_object_rate",
            "Configured rate of a DRL object, per second",
            rates,
        )?;
        gauge(
            "paio_process_read_bytes_per_second",
            "read_bytes of /proc/<pid>/io per second over the last period",
            proc_r,
        )?;
        gauge(
            "paio_process_write_bytes_per_second",
            "write_bytes of /proc/<pid>/io per second over the last period",
            proc_w,
        )?;
        let group = |f: fn(&crate::policy::GroupTarget) -> f64| {
            r.groups
                .iter()
                .map(|t| (vec![("group".to_string(), t.group.clone())], f(t)))
                .collect::<Vec<_>>()
        };
        gauge(
            "paio_group_demand_bytes_per_second",
            "A group's configured demand",
            group(|t| t.demand_bytes_per_sec),
        )?;
        gauge(
            "paio_group_target_bytes_per_second",
            "The rate the policy allocated to a group",
            group(|t| t.target_bytes_per_sec),
        )?;
        gauge(
            "paio_group_achieved_bytes_per_second",
            "The bandwidth a group achieved over the last period",
            group(|t| t.achieved_bytes_per_sec),
        )?;
        if let Some(l) = &r.latency {
            let mut single = |name: &str, help: &str, v: Option<f64>| {
                let Some(v) = v else { return Ok(()) };
                unlabeled(&mut enc, name, help, v)
            };
            single(
                "paio_critical_latency_target_seconds",
                "The latency target of critical requests (policy criticality)",
                Some(l.target_ns as f64 / 1e9),
            )?;
            single(
                "paio_critical_latency_measured_seconds",
                "The judged percentile of critical requests' latency, last window",
                Some(l.measured_ns as f64 / 1e9),
            )?;
            single(
                "paio_background_depth",
                "Non-critical requests each priority object lets in flight",
                Some(f64::from(l.depth)),
            )?;
            single(
                "paio_background_busy_depth",
                "Non-critical requests in flight while critical I/O is active",
                Some(f64::from(l.busy_depth)),
            )?;
            single(
                "paio_background_rate_bytes_per_second",
                "Total non-critical rate of the priority objects (absent: unlimited)",
                l.rate_bytes_per_sec,
            )?;
        }

        if let Some(c) = &r.connections {
            let one = |k: &str, v: &str, x: u64| (vec![(k.to_string(), v.to_string())], x as f64);
            unlabeled(
                &mut enc,
                "paiod_descriptor_limit",
                "Descriptors paiod may open (its soft limit, raised to the hard one at start)",
                c.descriptor_limit as f64,
            )?;
            gauges(
                &mut enc,
                "paiod_connections",
                "Open connections by state (stage: registered; waiting: no first message yet)",
                vec![
                    one("state", "stage", r.stages.len() as u64),
                    one("state", "waiting", c.waiting),
                    one("state", "ctl", c.ctl),
                ],
            )?;
            gauges(
                &mut enc,
                "paiod_connection_cap",
                "Caps on connections ([connections] in paiod's configuration)",
                vec![
                    one("cap", "max_stages", c.max_stages),
                    one("cap", "max_stages_per_uid", c.max_stages_per_uid),
                    one("cap", "max_waiting", c.max_waiting),
                    one("cap", "max_ctl", c.max_ctl),
                    one("cap", "max_stage_bytes", c.max_stage_bytes),
                ],
            )?;
            unlabeled(
                &mut enc,
                "paiod_stage_bytes",
                "Bytes of stages' registrations and statistics paiod keeps (estimated)",
                c.stage_bytes as f64,
            )?;
            counters(
                &mut enc,
                "paiod_connections_closed",
                "Connections paiod closed, by reason (a cap, a timeout, unread replies)",
                c.closed
                    .iter()
                    .map(|(k, v)| (vec![("reason".to_string(), k.clone())], *v))
                    .collect(),
            )?;
        }

        if let Some(c) = &r.config {
            counters(
                &mut enc,
                "paiod_config_reloads",
                "Configuration reloads (SIGHUP) since paiod started, applied or refused",
                vec![
                    (
                        vec![("result".to_string(), "applied".to_string())],
                        c.reloads,
                    ),
                    (
                        vec![("result".to_string(), "refused".to_string())],
                        c.refused,
                    ),
                ],
            )?;
            gauges(
                &mut enc,
                "paiod_config_last_reload_successful",
                "1 unless the latest reload was refused (the running configuration stayed)",
                vec![(Vec::new(), if c.last_error.is_some() { 0.0 } else { 1.0 })],
            )?;
        }

        if let Some(l) = &r.control_loop {
            let stat = |v: &str, x: Option<f64>| {
                x.map(|x| (vec![("stat".to_string(), v.to_string())], x / 1e3))
            };
            gauges(
                &mut enc,
                "paiod_loop_period_seconds",
                "The control loop's achieved period over its last ticks (p50, p99, max) and target",
                [
                    stat("p50", l.period_p50_ms),
                    stat("p99", l.period_p99_ms),
                    stat("max", l.period_max_ms),
                    stat("target", Some(l.target_ms)),
                ]
                .into_iter()
                .flatten()
                .collect(),
            )?;
            gauges(
                &mut enc,
                "paiod_loop_work_seconds",
                "A control tick's work (policy, rules, collects), p99 over the last ticks",
                stat("p99", l.work_p99_ms).into_iter().collect(),
            )?;
            counters(
                &mut enc,
                "paiod_loop_overruns",
                "Control ticks whose period exceeded the target by more than 10 %",
                vec![(vec![], l.overruns)],
            )?;
            if let Some(share) = l.cpu_share {
                unlabeled(
                    &mut enc,
                    "paiod_cpu_share",
                    "paiod's CPU time over the last ticks, as a fraction of one core",
                    share,
                )?;
            }
            if let Some(secs) = l.cpu_seconds {
                let c = ConstCounter::new(secs);
                c.encode(enc.encode_descriptor(
                    "paiod_cpu_seconds",
                    "paiod's CPU time (user + system) since it started",
                    None,
                    c.metric_type(),
                )?)?;
            }
        }

        if let Some(c) = &r.cluster {
            cluster(&mut enc, c)?;
        }

        let mut m = enc.encode_descriptor(
            "paio_object_wait_seconds",
            "Time requests waited in an object",
            None,
            MetricType::Histogram,
        )?;
        for ((name, pid, id), stats) in &self.stats {
            for ch in &stats.channels {
                for o in &ch.objects {
                    let labels = with(
                        with(stage_labels(name, *pid, *id), "channel", &ch.name),
                        "object",
                        &o.name,
                    );
                    // The encoder takes per-bucket counts and accumulates them.
                    let mut buckets = Vec::with_capacity(o.counts.wait_buckets.len() + 1);
                    let mut below = 0;
                    for &(le_ns, cumulative) in &o.counts.wait_buckets {
                        buckets.push((le_ns as f64 / 1e9, cumulative.saturating_sub(below)));
                        below = below.max(cumulative);
                    }
                    buckets.push((f64::INFINITY, o.counts.ops.saturating_sub(below)));
                    let sum = o.counts.wait_total.total_ns as f64 / 1e9;
                    m.encode_family(&labels)?.encode_histogram::<Labels>(
                        sum,
                        o.counts.ops,
                        &buckets,
                        None,
                    )?;
                }
            }
        }
        Ok(())
    }
}

/// Cluster mode's series: the node's connection, leadership and
/// allocation, and the leader's last summary of every job.
fn cluster(
    enc: &mut DescriptorEncoder,
    c: &crate::cluster::node::ClusterStatus,
) -> Result<(), std::fmt::Error> {
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    unlabeled(
        enc,
        "paiod_cluster_connected",
        "1 while this node's etcd session is up (0: it keeps its last allocation)",
        flag(c.connected),
    )?;
    unlabeled(
        enc,
        "paiod_cluster_leading",
        "1 while this node is the cluster's leader",
        flag(c.leading),
    )?;
    let n = ConstCounter::new(c.sessions);
    n.encode(enc.encode_descriptor(
        "paiod_cluster_sessions",
        "etcd sessions this node started",
        None,
        n.metric_type(),
    )?)?;
    let job = |j: &str| vec![("job".to_string(), j.to_string())];
    gauges(
        enc,
        "paiod_cluster_node_allocation_bytes_per_second",
        "This node's part of each job's allocation",
        c.allocation.iter().map(|(j, r)| (job(j), *r)).collect(),
    )?;
    if let Some(age) = c.allocation_age_s {
        unlabeled(
            enc,
            "paiod_cluster_allocation_age_seconds",
            "Time since this node's allocation last changed",
            age,
        )?;
    }
    if let Some(s) = &c.summary {
        unlabeled(
            enc,
            "paiod_cluster_nodes",
            "Live nodes in the leader's last summary",
            f64::from(s.nodes),
        )?;
        gauges(
            enc,
            "paiod_cluster_job_allocation_bytes_per_second",
            "Each job's global allocation (leader's last summary)",
            s.jobs.iter().map(|j| (job(&j.job), j.allocation)).collect(),
        )?;
        gauges(
            enc,
            "paiod_cluster_job_achieved_bytes_per_second",
            "Each job's bandwidth over all nodes (leader's last summary)",
            s.jobs.iter().map(|j| (job(&j.job), j.achieved)).collect(),
        )?;
        gauges(
            enc,
            "paiod_cluster_job_demand_bytes_per_second",
            "Each job's configured demand (leader's last summary; max_min)",
            s.jobs
                .iter()
                .filter_map(|j| Some((job(&j.job), j.config.demand?)))
                .collect(),
        )?;
    }
    Ok(())
}

/// One gauge without labels.
fn unlabeled(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: f64,
) -> Result<(), std::fmt::Error> {
    let g = ConstGauge::new(v);
    g.encode(enc.encode_descriptor(name, help, None, g.metric_type())?)
}

/// Whether an HTTP request head asks for OpenMetrics (`Accept:
/// application/openmetrics-text`, as Prometheus sends).
fn accepts_openmetrics(head: &[u8]) -> bool {
    String::from_utf8_lossy(head).lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("accept:") && l.contains("application/openmetrics-text")
    })
}

/// The Prometheus text format (0.0.4) of an OpenMetrics exposition as
/// [`render`] makes it: a counter family's `# HELP` and `# TYPE` name its
/// `_total` samples, and `# EOF` is dropped. (promtool and older scrapers
/// read this format; Prometheus asks for OpenMetrics.)
pub fn prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 64);
    for line in openmetrics.lines() {
        if line == "# EOF" {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .iter()
            .find_map(|p| Some((*p, line.strip_prefix(p)?)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let suffix = if counters.contains(name) {
                    "_total"
                } else {
                    ""
                };
                let _ = writeln!(out, "{prefix}{name}{suffix} {tail}");
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// Serves `GET /metrics` on `listener` until the task is dropped: OpenMetrics
/// when the request accepts it, else the Prometheus text format.
pub async fn serve(listener: TcpListener, state: Shared) {
    loop {
        let Ok((mut sock, _)) = listener.accept().await else {
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            let mut head = Vec::with_capacity(1024);
            let mut buf = [0u8; 1024];
            let deadline = tokio::time::sleep(std::time::Duration::from_secs(5));
            tokio::pin!(deadline);
            loop {
                tokio::select! {
                    _ = &mut deadline => return,
                    n = sock.read(&mut buf) => match n {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                if head.windows(4).any(|w| w == b"\r\n\r\n") || head.len() >= 8192 {
                    break;
                }
            }
            let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
            let line = String::from_utf8_lossy(line);
            let mut parts = line.split_whitespace();
            let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let (status, ctype, body) = if method != "GET" {
                (
                    "405 Method Not Allowed",
                    "text/plain",
                    "GET only\n".to_string(),
                )
            } else if path == "/metrics" || path == "/" {
                // Off the runtime thread: at thousands of stages a scrape
                // takes long to encode, and the control loop shares the thread.
                let Ok(body) = tokio::task::spawn_blocking(move || render(&state)).await else {
                    return;
                };
                if accepts_openmetrics(&head) {
                    (
                        "200 OK",
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        body,
                    )
                } else {
                    (
                        "200 OK",
                        "text/plain; version=0.0.4; charset=utf-8",
                        prometheus_text(&body),
                    )
                }
            } else {
                ("404 Not Found", "text/plain", "try /metrics\n".to_string())
            };
            let mut resp = String::new();
            let _ = write!(
                resp,
                "HTTP/1.0 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = sock.write_all(resp.as_bytes()).await;
            let _ = sock.shutdown().await;
        });
    }
}
