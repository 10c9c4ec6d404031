//! `paio status` and `paio ctl`: talking to a running paiod.

use std::fmt::Write as _;

use paio_control::ctl::{CtlCommand, StatusReport};

use crate::args::ArgError;

/// `paio ctl set GROUP KEY=VALUE...` parsed: the group (the value of
/// paiod's grouping label; `job=I3` and `I3` both name group `I3`; `*` is
/// the policy as a whole) and one `set` command per assignment.
pub fn set_commands(group: &str, assignments: &[String]) -> Result<Vec<CtlCommand>, ArgError> {
    let group = match group.split_once('=') {
        Some((k, v)) if !k.is_empty() && !v.is_empty() => v,
        Some(_) => {
            return Err(ArgError::Ctl(format!(
                "{group:?}: expected a group such as job=I3, I3 or *"
            )))
        }
        None if !group.is_empty() => group,
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

fn mib(bps: f64) -> String {
    format!("{:.1} MiB/s", bps / (1024.0 * 1024.0))
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
        r.stages.len()
    );
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
                    Some(paio::ObjectConfig::Drl(d)) => format!("drl {}", d.rate),
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
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use paio_control::ctl::{ChannelStatus, ObjectStatus, StageStatus};
    use paio_control::policy::GroupTarget;

    #[test]
    fn set_parses_groups_and_assignments() {
        let c = set_commands("job=I3", &["demand=300MiB/s".into()]).unwrap();
        assert_eq!(
            c,
            vec![CtlCommand::Set {
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
            }],
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
                    objects: vec![ObjectStatus {
                        name: "paiod".into(),
                        kind: "drl".into(),
                        config: Some(paio::ObjectConfig::Drl(paio::object::DrlConfig::new(
                            paio::Rate::bytes_per_sec(1 << 20),
                        ))),
                        bytes_per_sec: 2.0 * 1048576.0,
                    }],
                }],
            }],
        };
        let text = format_status(&r);
        assert!(text.contains("policy max_min"), "{text}");
        assert!(
            text.contains("I1") && text.contains("150.0 MiB/s") && text.contains("249.0 MiB/s"),
            "{text}"
        );
        assert!(text.contains("pid 42") && text.contains("job=I1"), "{text}");
        assert!(
            text.contains("object paiod") && text.contains("drl"),
            "{text}"
        );
        assert!(text.contains("kernel reads 1.0 MiB/s"), "{text}");
    }
}
