//! `paio status` and `paio ctl`: talking to a running paiod.

use std::fmt::Write as _;

use paio_control::cluster::node::ClusterStatus;
use paio_control::ctl::{CtlCommand, StatusReport};
use paio_control::policy::criticality::Verdict;

use crate::args::ArgError;

/// `paio ctl set GROUP KEY=VALUE...` parsed: the group (the value of
/// paiod's grouping label; `job=I3` and `I3` both name group `I3`; `*` is
/// the policy as a whole) and one `set` command per assignment.
pub fn set_commands(group: &str, assignments: &[String]) -> Result<Vec<CtlCommand>, ArgError> {
    let (label, group) = match group.split_once('=') {
        Some((k, v)) if !k.is_empty() && !v.is_empty() => (Some(k), v),
        Some(_) => {
            return Err(ArgError::Ctl(format!(
                "{group:?}: expected a group such as job=I3, I3 or *"
            )))
        }
        None if !group.is_empty() => (None, group),
        None => {
            return Err(ArgError::Ctl(
                "empty group: expected job=I3, I3 or *".into(),
            ))
        }
    };
    if assignments.is_empty() {
        return Err(ArgError::Ctl(
            "nothing to set: expected KEY=VALUE, e.g. demand=300MiB/s".into(),
        ));
    }
    assignments
        .iter()
        .map(|a| match a.split_once('=') {
            Some((k, v)) if !k.is_empty() && !v.is_empty() => Ok(CtlCommand::Set {
                label: label.map(str::to_string),
                group: group.to_string(),
                key: k.to_string(),
                value: v.to_string(),
            }),
            _ => Err(ArgError::Ctl(format!(
                "{a:?}: expected KEY=VALUE, e.g. demand=300MiB/s"
            ))),
        })
        .collect()
}

/// `bps` in MiB/s with one decimal; a value that rounds to zero is `0.0`
/// (a rate a hair below zero from float arithmetic said `-0.0`).
fn mib(bps: f64) -> String {
    let v = bps / (1024.0 * 1024.0);
    format!("{:.1} MiB/s", if v.abs() < 0.05 { 0.0 } else { v })
}

/// The one-screen text of `paio status`.
pub fn format_status(r: &StatusReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "paiod pid {}, up {:.0} s, policy {}, period {} ms, {} stage(s)",
        r.pid,
        r.uptime_s,
        r.policy,
        r.period_ms,
        r.stages.len() as u64 + r.stages_omitted
    );
    if let Some(l) = &r.control_loop {
        let ms = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"));
        let _ =
            writeln!(
            out,
            "loop: period p50 {} / p99 {} / max {} ms over the last {} ticks (target {:.0} ms), \
             work p99 {} ms, {} overrun(s); paiod CPU {}",
            ms(l.period_p50_ms),
            ms(l.period_p99_ms),
            ms(l.period_max_ms),
            l.window,
            l.target_ms,
            ms(l.work_p99_ms),
            l.overruns,
            l.cpu_share
                .map_or_else(|| "-".to_string(), |s| format!("{:.1} % of a core", s * 100.0))
        );
    }
    if let Some(c) = &r.connections {
        let closed: Vec<String> = c.closed.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(
            out,
            "connections: stages cap {} ({} per uid), {} waiting (cap {}), {} ctl (cap {}), \
             descriptor limit {}, stages' state {} (cap {}); closed by paiod: {}",
            c.max_stages,
            c.max_stages_per_uid,
            c.waiting,
            c.max_waiting,
            c.ctl,
            c.max_ctl,
            c.descriptor_limit,
            crate::summary::human_bytes(c.stage_bytes),
            crate::summary::human_bytes(c.max_stage_bytes),
            if closed.is_empty() {
                "none".to_string()
            } else {
                closed.join(", ")
            }
        );
    }
    if let Some(c) = &r.config {
        if c.path.is_some() || c.reloads + c.refused > 0 {
            let _ = writeln!(
                out,
                "configuration: {}; reloads: {} applied, {} refused{}",
                c.path
                    .as_deref()
                    .map_or("none".into(), |p| format!("{p:?}")),
                c.reloads,
                c.refused,
                c.last_error
                    .as_deref()
                    .map_or(String::new(), |e| format!(" (latest refused: {e})"))
            );
        }
    }
    if let Some(c) = &r.cluster {
        out.push_str(&cluster_line(c));
    }
    if !r.groups.is_empty() {
        let _ = writeln!(
            out,
            "\n{:<12} {:>7} {:>14} {:>14} {:>14}",
            "GROUP", "STAGES", "DEMAND", "TARGET", "ACHIEVED"
        );
        for g in &r.groups {
            let _ = writeln!(
                out,
                "{:<12} {:>7} {:>14} {:>14} {:>14}",
                g.group,
                g.stages,
                mib(g.demand_bytes_per_sec),
                mib(g.target_bytes_per_sec),
                mib(g.achieved_bytes_per_sec)
            );
        }
    }
    if let Some(l) = &r.latency {
        let ms = |ns: u64| ns as f64 / 1e6;
        let _ = writeln!(
            out,
            "\ncritical p{} {:.2} ms (target {:.2} ms, {} requests, {}); background depth {}, \
             busy {}, rate {} over {} priority object(s)",
            l.percentile,
            ms(l.measured_ns),
            ms(l.target_ns),
            l.samples,
            match l.verdict {
                Verdict::None => "not judged yet",
                Verdict::Missed => "missed: cut",
                Verdict::Met => "met: raised",
                Verdict::Idle => "no critical I/O: raised",
            },
            l.depth,
            l.busy_depth,
            l.rate_bytes_per_sec
                .map_or_else(|| "unlimited".to_string(), mib),
            l.objects
        );
    }
    for s in &r.stages {
        let labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            out,
            "\nstage {} \"{}\" pid {} uid {} [{}] registered {:.0} s ago{}",
            s.id,
            s.name,
            s.pid,
            s.uid,
            labels.join(","),
            s.registered_s,
            s.proc_read_bytes_per_sec
                .map(|r| format!(", kernel reads {}", mib(r)))
                .unwrap_or_default()
        );
        for c in &s.channels {
            let _ = writeln!(
                out,
                "  channel {:<12} {:>14} {:>10.0} ops/s",
                c.name,
                mib(c.bytes_per_sec),
                c.ops_per_sec
            );
            for o in &c.objects {
                let config = match &o.config {
                    Some(paio::ObjectConfig::Drl(d)) => format!(
                        "drl {}{}{}",
                        d.rate,
                        d.max_rate
                            .map(|m| format!(" max_rate {m}"))
                            .unwrap_or_default(),
                        d.shared
                            .as_deref()
                            .map(|b| format!(" shared {b}"))
                            .unwrap_or_default(),
                    ),
                    Some(paio::ObjectConfig::Priority(p)) => format!(
                        "priority depth {} busy {}{}{}",
                        p.depth,
                        p.busy_depth,
                        p.shared_busy_depth
                            .map(|s| format!(" shared {s}"))
                            .unwrap_or_default(),
                        p.rate.map(|r| format!(" rate {r}")).unwrap_or_default()
                    ),
                    Some(other) => other.kind().to_string(),
                    None => o.kind.clone(),
                };
                let _ = writeln!(
                    out,
                    "    object {:<12} {:>14}  {}",
                    o.name,
                    mib(o.bytes_per_sec),
                    config
                );
            }
        }
    }
    if r.stages_omitted > 0 {
        let _ = writeln!(
            out,
            "\n{} more stage(s) not shown: the report of every stage would exceed the {} MiB \
             paiod sends",
            r.stages_omitted,
            paio_control::ctl::MAX_STATUS_BYTES >> 20
        );
    }
    out
}

/// One line on the node's place in the cluster.
fn cluster_line(c: &ClusterStatus) -> String {
    let leader = match (&c.leader, c.epoch) {
        (Some(l), Some(e)) if c.leading => format!("this node leads (epoch {e}, {l})"),
        (Some(l), Some(e)) => format!("leader {l} (epoch {e})"),
        _ => "no leader known".to_string(),
    };
    let etcd = if c.connected {
        "connected to etcd".to_string()
    } else {
        format!(
            "etcd UNREACHABLE for {:.0} s ({}); keeping the last allocation",
            c.unreachable_s.unwrap_or(0.0),
            c.last_error.as_deref().unwrap_or("not connected yet")
        )
    };
    let alloc = match c.allocation_age_s {
        Some(age) => format!(
            "allocation of epoch {} ({:.1} s old): {}",
            c.allocation_epoch.unwrap_or(0),
            age,
            c.allocation
                .iter()
                .map(|(j, r)| format!("{j} {}", mib(*r)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => "no allocation yet".to_string(),
    };
    format!("cluster: {etcd}; {leader}; {alloc}\n")
}

/// The text of `paio status --cluster`.
pub fn format_cluster(c: &ClusterStatus) -> String {
    let mut out = cluster_line(c);
    let Some(s) = &c.summary else {
        out.push_str("no summary from a leader yet\n");
        return out;
    };
    let policy = s.policy.as_ref().map_or("none".to_string(), |p| {
        format!("{} over {}", p.kind.name(), mib(p.max_bandwidth))
    });
    let _ = writeln!(
        out,
        "leader {} (epoch {}), policy {}; {} live node(s)",
        s.leader, s.epoch, policy, s.nodes
    );
    let _ = writeln!(
        out,
        "\n{:<12} {:>6} {:>7} {:>14} {:>7} {:>14} {:>14}",
        "JOB", "NODES", "STAGES", "DEMAND", "WEIGHT", "ALLOCATION", "ACHIEVED"
    );
    for j in &s.jobs {
        let _ = writeln!(
            out,
            "{:<12} {:>6} {:>7} {:>14} {:>7} {:>14} {:>14}{}",
            j.job,
            j.nodes,
            j.stages,
            j.config.demand.map_or("-".to_string(), mib),
            j.config.weight.map_or("-".to_string(), |w| format!("{w}")),
            mib(j.allocation),
            mib(j.achieved),
            if j.hungry { "  held back" } else { "" }
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use paio_control::ctl::{ChannelStatus, ObjectStatus, StageStatus};
    use paio_control::policy::GroupTarget;

    #[test]
    fn a_rate_that_rounds_to_zero_has_no_sign() {
        assert_eq!(mib(-1e-9), "0.0 MiB/s");
        assert_eq!(mib(-0.0), "0.0 MiB/s");
        assert_eq!(mib(1.5 * 1048576.0), "1.5 MiB/s");
    }

    #[test]
    fn set_parses_groups_and_assignments() {
        let c = set_commands("job=I3", &["demand=300MiB/s".into()]).unwrap();
        assert_eq!(
            c,
            vec![CtlCommand::Set {
                label: Some("job".into()),
                group: "I3".into(),
                key: "demand".into(),
                value: "300MiB/s".into()
            }]
        );
        assert_eq!(
            set_commands("*", &["max_bandwidth=1GiB/s".into()])
                .unwrap()
                .len(),
            1
        );
        assert!(set_commands("job=", &["a=b".into()]).is_err());
        assert!(set_commands("I3", &[]).is_err());
        let e = set_commands("I3", &["demand".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("KEY=VALUE"), "{e}");
    }

    #[test]
    fn status_shows_groups_stages_and_rates() {
        let r = StatusReport {
            pid: 7,
            uptime_s: 12.0,
            period_ms: 100,
            policy: "max_min".into(),
            groups: vec![GroupTarget {
                group: "I1".into(),
                demand_bytes_per_sec: 150.0 * 1048576.0,
                target_bytes_per_sec: 250.0 * 1048576.0,
                achieved_bytes_per_sec: 249.0 * 1048576.0,
                stages: 1,
                hungry: false,
            }],
            stages_omitted: 0,
            stages: vec![StageStatus {
                id: 1,
                name: "fio".into(),
                pid: 42,
                uid: 0,
                host: "h".into(),
                labels: [("job".to_string(), "I1".to_string())].into(),
                registered_s: 3.0,
                proc_read_bytes_per_sec: Some(1048576.0),
                proc_write_bytes_per_sec: None,
                channels: vec![ChannelStatus {
                    name: "read".into(),
                    bytes_per_sec: 2.0 * 1048576.0,
                    ops_per_sec: 2.0,
                    wait: Default::default(),
                    latency: Default::default(),
                    objects: vec![ObjectStatus {
                        name: "paiod".into(),
                        kind: "drl".into(),
                        config: Some(paio::ObjectConfig::Drl(
                            paio::object::DrlConfig::new(paio::Rate::bytes_per_sec(1 << 20))
                                .with_max_rate(paio::Rate::bytes_per_sec(1 << 20))
                                .shared_as("read"),
                        )),
                        bytes_per_sec: 2.0 * 1048576.0,
                    }],
                }],
            }],
            latency: None,
            connections: Some(paio_control::ctl::ConnectionStatus {
                descriptor_limit: 524_288,
                max_stages: 523_936,
                max_stages_per_uid: 523_936,
                max_waiting: 256,
                max_ctl: 32,
                waiting: 3,
                ctl: 1,
                stage_bytes: 3 << 10,
                max_stage_bytes: 512 << 20,
                closed: [("hello_timeout".to_string(), 2)].into(),
            }),
            control_loop: Some(paio_control::ctl::LoopStatus {
                target_ms: 100.0,
                ticks: 120,
                window: 100,
                overruns: 1,
                period_p50_ms: Some(100.0),
                period_p99_ms: Some(101.25),
                period_max_ms: Some(180.0),
                work_p99_ms: Some(2.5),
                cpu_share: Some(0.012),
                cpu_seconds: Some(0.4),
            }),
            config: Some(paio_control::ctl::ConfigStatus {
                path: Some("/etc/paio/paiod.toml".into()),
                reloads: 2,
                refused: 1,
                last_error: Some("/etc/paio/paiod.toml:1:10: period: invalid".into()),
            }),
            cluster: None,
        };
        let text = format_status(&r);
        assert!(
            text.contains(
                "configuration: \"/etc/paio/paiod.toml\"; reloads: 2 applied, 1 refused \
                 (latest refused: /etc/paio/paiod.toml:1:10: period: invalid)"
            ),
            "{text}"
        );
        assert!(
            text.contains("3 waiting (cap 256)")
                && text.contains("closed by paiod: hello_timeout 2"),
            "{text}"
        );
        assert!(
            text.contains(
                "loop: period p50 100.0 / p99 101.2 / max 180.0 ms over the last 100 ticks"
            ) && text.contains("1 overrun(s); paiod CPU 1.2 % of a core"),
            "{text}"
        );
        assert!(text.contains("policy max_min"), "{text}");
        assert!(
            text.contains("I1") && text.contains("150.0 MiB/s") && text.contains("249.0 MiB/s"),
            "{text}"
        );
        assert!(text.contains("pid 42") && text.contains("job=I1"), "{text}");
        assert!(
            text.contains("object paiod")
                && text.contains("drl 1048576 B/s max_rate 1048576 B/s shared read"),
            "{text}"
        );
        assert!(text.contains("kernel reads 1.0 MiB/s"), "{text}");
        assert!(!text.contains("critical p"), "{text}");
    }

    #[test]
    fn status_shows_the_latency_target_and_priority_objects() {
        use paio_control::policy::criticality::{LatencyStatus, Verdict};
        let r = StatusReport {
            pid: 7,
            uptime_s: 12.0,
            period_ms: 100,
            policy: "criticality".into(),
            groups: vec![],
            latency: Some(LatencyStatus {
                target_ns: 2_000_000,
                percentile: 99.0,
                measured_ns: 5_500_000,
                samples: 120,
                verdict: Verdict::Missed,
                depth: 1,
                busy_depth: 1,
                rate_bytes_per_sec: Some(8.0 * 1048576.0),
                objects: 2,
            }),
            stages_omitted: 0,
            stages: vec![StageStatus {
                id: 1,
                name: "backup".into(),
                pid: 42,
                uid: 0,
                host: "h".into(),
                labels: Default::default(),
                registered_s: 3.0,
                proc_read_bytes_per_sec: None,
                proc_write_bytes_per_sec: None,
                channels: vec![ChannelStatus {
                    name: "background".into(),
                    bytes_per_sec: 0.0,
                    ops_per_sec: 0.0,
                    wait: Default::default(),
                    latency: Default::default(),
                    objects: vec![ObjectStatus {
                        name: "yield".into(),
                        kind: "priority".into(),
                        config: Some(paio::ObjectConfig::Priority(paio::object::PriorityConfig {
                            depth: 1,
                            shared_busy_depth: Some(2),
                            rate: Some(paio::Rate::bytes_per_sec(4 << 20)),
                            ..Default::default()
                        })),
                        bytes_per_sec: 0.0,
                    }],
                }],
            }],
            connections: None,
            control_loop: None,
            config: None,
            cluster: None,
        };
        let text = format_status(&r);
        assert!(!text.contains("connections:"), "{text}");
        assert!(
            text.contains("critical p99 5.50 ms (target 2.00 ms, 120 requests, missed: cut)"),
            "{text}"
        );
        assert!(
            text.contains("background depth 1, busy 1, rate 8.0 MiB/s over 2 priority object(s)"),
            "{text}"
        );
        assert!(
            text.contains("priority depth 1 busy 1 shared 2 rate 4194304 B/s"),
            "{text}"
        );
    }

    #[test]
    fn the_cluster_view_shows_the_leader_the_nodes_and_each_job() {
        use paio_control::cluster::leader::{JobSummary, Summary};
        use paio_control::cluster::{GlobalKind, JobRecord, PolicyRecord};
        let mut c = ClusterStatus {
            connected: true,
            unreachable_s: None,
            last_error: None,
            leader: Some("n1".into()),
            epoch: Some(42),
            leading: false,
            allocation: [("a".to_string(), 30.0 * 1048576.0)].into(),
            allocation_epoch: Some(42),
            allocation_age_s: Some(0.4),
            sessions: 1,
            summary: Some(Summary {
                epoch: 42,
                leader: "n1".into(),
                policy: Some(PolicyRecord {
                    kind: GlobalKind::MaxMin,
                    max_bandwidth: 100.0 * 1048576.0,
                }),
                nodes: 2,
                jobs: vec![JobSummary {
                    job: "a".into(),
                    nodes: 2,
                    stages: 3,
                    config: JobRecord {
                        demand: Some(60.0 * 1048576.0),
                        weight: None,
                    },
                    achieved: 74.0 * 1048576.0,
                    hungry: true,
                    allocation: 75.0 * 1048576.0,
                }],
            }),
        };
        let text = format_cluster(&c);
        assert!(
            text.starts_with(
                "cluster: connected to etcd; leader n1 (epoch 42); allocation of epoch 42 \
                 (0.4 s old): a 30.0 MiB/s\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("leader n1 (epoch 42), policy max_min over 100.0 MiB/s; 2 live node(s)"),
            "{text}"
        );
        assert!(
            text.contains(
                "a                 2       3     60.0 MiB/s       -     75.0 MiB/s     74.0 MiB/s  held back"
            ),
            "{text}"
        );
        c.connected = false;
        c.unreachable_s = Some(12.0);
        c.last_error = Some("etcd: timeout".into());
        assert!(format_cluster(&c).starts_with(
            "cluster: etcd UNREACHABLE for 12 s (etcd: timeout); keeping the last allocation;"
        ));
    }
}
