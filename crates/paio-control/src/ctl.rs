//! Administration messages (`paio ctl`, `paio status`): the same framing as
//! the stage protocol ([`paio::protocol`]), on the same socket, told apart
//! by their `"type"`: a client sends [`CtlRequest`]s and receives one
//! [`CtlReply`] per request. A blocking client is [`request`].

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::time::Duration;

use paio::protocol::{self, FrameError};
use paio::ObjectConfig;
use serde::{Deserialize, Serialize};

use crate::policy::{GroupTarget, LatencyStatus};

/// The `"type"` of a [`CtlRequest`]: always `ctl`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CtlType {
    /// `"ctl"`.
    #[default]
    Ctl,
}

/// The `"type"` of a [`CtlReply`]: always `ctl_reply`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CtlReplyType {
    /// `"ctl_reply"`.
    #[default]
    CtlReply,
}

/// A request of an administration client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CtlRequest {
    /// Always `ctl`.
    #[serde(rename = "type")]
    pub kind: CtlType,
    /// Echoed in the reply.
    pub id: u64,
    /// What to do.
    pub command: CtlCommand,
}

/// What an administration client asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum CtlCommand {
    /// The registered stages, their channels, rates and achieved bandwidth,
    /// and the policy's per-group figures.
    Status,
    /// Changes one policy parameter: `group` is the value of the grouping
    /// label (`*` for the policy as a whole), `key` and `value` as the
    /// policy documents (`demand`, `weight`, `max_bandwidth`, ...).
    Set {
        /// The label the group is a value of, when the client named it
        /// (`job=I3`): refused unless it is the policy's `group_by`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
        /// The group.
        group: String,
        /// The parameter.
        key: String,
        /// Its new value.
        value: String,
    },
    /// Sets the rate of one DRL object directly, in every registered stage
    /// that `stage` names (its id, or its name: all stages of that name).
    /// Refused, with nothing sent, unless every such stage has the channel
    /// and the object, the object is a DRL, and the policy does not set it
    /// itself each period. The object's burst and zero-size cost are kept.
    SetRate {
        /// A stage id (as `paio status` shows it) or a stage name.
        stage: String,
        /// The channel.
        channel: String,
        /// The DRL object in the channel.
        object: String,
        /// The new rate, e.g. `20MiB/s` or `500 iops`.
        rate: String,
    },
}

/// The answer to one [`CtlRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CtlReply {
    /// Always `ctl_reply`.
    #[serde(rename = "type")]
    pub kind: CtlReplyType,
    /// The request's id.
    pub id: u64,
    /// The command took effect.
    pub ok: bool,
    /// Why not, when `ok` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// For `status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Box<StatusReport>>,
    /// What was done, for commands that say (`set_rate`: which stages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<String>,
}

impl CtlReply {
    /// Request `id` took effect (`status` and `done` empty).
    pub fn ok(id: u64) -> Self {
        CtlReply {
            kind: CtlReplyType::default(),
            id,
            ok: true,
            error: None,
            status: None,
            done: None,
        }
    }

    /// Request `id` was refused for `error`.
    pub fn refused(id: u64, error: impl Into<String>) -> Self {
        CtlReply {
            ok: false,
            error: Some(error.into()),
            ..CtlReply::ok(id)
        }
    }
}

/// The largest status reply paiod sends and [`request`] reads (its
/// payload): 24 MiB, under the 32 MiB a connection may queue
/// ([`crate::outbox::HARD_LIMIT`]). Beyond it the report lists fewer
/// stages ([`StatusReport::stages_omitted`]).
pub const MAX_STATUS_BYTES: usize = 24 << 20;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The frame of `reply` (a whole frame, header included), its status
/// report cut to the stages that keep the payload within `max` bytes.
pub fn encode_reply(mut reply: CtlReply, max: usize) -> Vec<u8> {
    let frame = protocol::encode_value(&reply);
    let Some(status) = reply.status.as_mut() else {
        return frame;
    };
    let payload = frame.len() - protocol::HEADER_LEN;
    if payload <= max {
        return frame;
    }
    // Each stage's share of the JSON: its own bytes and a comma. The rest
    // grows by the count of omitted stages, at most 20 digits.
    let sizes: Vec<usize> = status
        .stages
        .iter()
        .map(|st| serde_json::to_vec(st).map_or(0, |v| v.len()) + 1)
        .collect();
    let base =
        payload.saturating_sub(sizes.iter().sum::<usize>()) + "\"stages_omitted\":,".len() + 20;
    let mut used = base;
    let keep = sizes
        .iter()
        .take_while(|&&n| {
            used += n;
            used <= max
        })
        .count();
    status.stages_omitted = (status.stages.len() - keep) as u64;
    status.stages.truncate(keep);
    protocol::encode_value(&reply)
}

/// paiod's view, as `paio status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    /// paiod's pid.
    pub pid: u32,
    /// Seconds since paiod started.
    pub uptime_s: f64,
    /// The control period in milliseconds.
    pub period_ms: u64,
    /// The policy's kind.
    pub policy: String,
    /// The policy's per-group figures.
    pub groups: Vec<GroupTarget>,
    /// The latency target's state (policy `criticality`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencyStatus>,
    /// Registered stages, by id: the first of them, when all would make
    /// the reply larger than [`MAX_STATUS_BYTES`] ([`Self::stages_omitted`]).
    pub stages: Vec<StageStatus>,
    /// Registered stages left out of [`Self::stages`] to keep the reply
    /// within [`MAX_STATUS_BYTES`] (the last by id).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stages_omitted: u64,
    /// Connections and their caps (absent from a paiod before they were
    /// reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections: Option<ConnectionStatus>,
    /// The control loop's achieved period and paiod's CPU use (absent
    /// from a paiod before they were reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_loop: Option<LoopStatus>,
    /// The configuration's reloads (absent from a paiod before they were
    /// reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<ConfigStatus>,
    /// Cluster mode: this node's view of the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<crate::cluster::node::ClusterStatus>,
}

/// paiod's configuration file and its reloads (SIGHUP).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ConfigStatus {
    /// The file paiod was started with (absent: none, the defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Reloads applied since paiod started.
    pub reloads: u64,
    /// Reloads refused because the file was invalid or unreadable (the
    /// running configuration stayed in force).
    pub refused: u64,
    /// Why the latest reload was refused, when the latest one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// How well paiod's control loop keeps its period over its last ticks
/// ([`crate::loopstats::WINDOW`]), and what paiod costs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoopStatus {
    /// The configured period, ms.
    pub target_ms: f64,
    /// Ticks since paiod started.
    pub ticks: u64,
    /// Ticks the figures below cover.
    pub window: u64,
    /// Ticks since paiod started whose period exceeded the target by more
    /// than 10 %.
    pub overruns: u64,
    /// Achieved period (time between tick starts): median, ms.
    pub period_p50_ms: Option<f64>,
    /// Achieved period: 99th percentile, ms.
    pub period_p99_ms: Option<f64>,
    /// Achieved period: maximum, ms.
    pub period_max_ms: Option<f64>,
    /// A tick's work (policy, rules, collects): 99th percentile, ms.
    pub work_p99_ms: Option<f64>,
    /// paiod's CPU time over the window, as a fraction of one core.
    pub cpu_share: Option<f64>,
    /// paiod's CPU time since it started, seconds.
    pub cpu_seconds: Option<f64>,
}

/// paiod's connections and their caps (`[connections]` in its
/// configuration).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionStatus {
    /// Descriptors paiod may open (its raised soft limit).
    pub descriptor_limit: u64,
    /// Cap on registered stages.
    pub max_stages: u64,
    /// Cap on registered stages of one uid.
    pub max_stages_per_uid: u64,
    /// Cap on connections that have not sent their first message.
    pub max_waiting: u64,
    /// Cap on `ctl` sessions.
    pub max_ctl: u64,
    /// Connections that have not sent their first message.
    pub waiting: u64,
    /// Open `ctl` sessions.
    pub ctl: u64,
    /// Bytes of registered stages' registrations and statistics paiod
    /// keeps (estimated: [`crate::peer::held_by_info`]).
    #[serde(default)]
    pub stage_bytes: u64,
    /// Cap on `stage_bytes`.
    #[serde(default)]
    pub max_stage_bytes: u64,
    /// Connections paiod closed since it started, by reason (`stage_cap`,
    /// `uid_cap`, `ctl_cap`, `waiting_cap`, `hello_timeout`, `ctl_idle`, `max_buffered`,
    /// `max_stage_bytes`, `foreign_uid`, `unread`).
    pub closed: BTreeMap<String, u64>,
}

/// One registered stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageStatus {
    /// paiod's id for this registration.
    pub id: u64,
    /// The stage's name.
    pub name: String,
    /// Process id, from the kernel (SO_PEERCRED).
    pub pid: u32,
    /// User id, from the kernel.
    pub uid: u32,
    /// The host the stage reported.
    pub host: String,
    /// The stage's labels.
    pub labels: BTreeMap<String, String>,
    /// Seconds since it registered.
    pub registered_s: f64,
    /// Read bytes per second the kernel counted for the process over the
    /// last period (`/proc/<pid>/io`), when readable.
    pub proc_read_bytes_per_sec: Option<f64>,
    /// Written bytes per second, likewise.
    pub proc_write_bytes_per_sec: Option<f64>,
    /// Channels with their figures over the last period.
    pub channels: Vec<ChannelStatus>,
}

impl StageStatus {
    /// `name[id] pid`: the stage as `paio top` and recordings name it.
    pub fn label(&self) -> String {
        format!("{}[{}] {}", self.name, self.id, self.pid)
    }
}

/// One channel of a stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelStatus {
    /// The channel.
    pub name: String,
    /// Bytes per second over the last period.
    pub bytes_per_sec: f64,
    /// Operations per second over the last period.
    pub ops_per_sec: f64,
    /// Waits in the channel's objects over the last period (absent from a
    /// paiod before they were reported).
    #[serde(default)]
    pub wait: paio::stats::WaitSummary,
    /// Call latency of the period's completed requests.
    #[serde(default)]
    pub latency: paio::stats::LatencySummary,
    /// Objects with their configuration.
    pub objects: Vec<ObjectStatus>,
}

/// One object of a channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObjectStatus {
    /// The object.
    pub name: String,
    /// Its kind.
    pub kind: String,
    /// Its configuration as paiod last set or learnt it.
    pub config: Option<ObjectConfig>,
    /// Bytes per second over the last period.
    pub bytes_per_sec: f64,
}

/// An administration request failed.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// paiod is not reachable at the socket.
    #[error("cannot reach paiod at {path}: {error} (is paiod running? see `paiod --help`)")]
    Connect {
        /// The socket.
        path: String,
        /// The error (in the message, not a separate cause).
        error: io::Error,
    },
    /// The socket's server is not a paiod this user may trust (another
    /// non-root user's process, e.g. one squatting the socket path).
    #[error("{0}; not talking to it (a socket squatted by another user?)")]
    Denied(String),
    /// The connection failed mid-request.
    #[error("paiod at {path}: {error}")]
    Io {
        /// The socket.
        path: String,
        /// The error (in the message, not a separate cause).
        error: io::Error,
    },
    /// paiod answered something that is not a reply to the request.
    #[error("paiod at {path} answered unexpectedly: {message}")]
    Protocol {
        /// The socket.
        path: String,
        /// What was wrong.
        message: String,
    },
    /// paiod took the connection but did not take the request or finish
    /// its reply in time (stopped, hung, or overloaded).
    #[error(
        "paiod at {path} did not answer within {timeout:?} (stopped, hung or overloaded? \
         its log says why; `kill -CONT` a stopped one)"
    )]
    Timeout {
        /// The socket.
        path: String,
        /// The time allowed.
        timeout: Duration,
    },
    /// paiod refused the command.
    #[error("{0}")]
    Refused(String),
}

/// Whether `e` is a socket timeout (`SO_RCVTIMEO`/`SO_SNDTIMEO` report
/// `EAGAIN`).
fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}

/// Sends one command to paiod at `socket` and waits for its reply, after
/// checking that the server runs as this user or root
/// ([`paio::control::check_paiod`]). `timeout` bounds the wait for a place
/// in the socket's queue, the request's write and the whole reply's read,
/// each ([`CtlError::Timeout`]).
pub fn request(
    socket: &Path,
    command: CtlCommand,
    timeout: Duration,
) -> Result<CtlReply, CtlError> {
    let path = socket.display().to_string();
    let io_err = |error| CtlError::Io {
        path: path.clone(),
        error,
    };
    let timed_out = || CtlError::Timeout {
        path: path.clone(),
        timeout,
    };
    let mut s = crate::unixconn::connect(socket, timeout).map_err(|error| CtlError::Connect {
        path: path.clone(),
        error,
    })?;
    paio::control::check_paiod(&s, socket, None).map_err(CtlError::Denied)?;
    s.set_write_timeout(Some(timeout)).map_err(io_err)?;
    let req = CtlRequest {
        kind: CtlType::Ctl,
        id: 1,
        command,
    };
    use std::io::Write;
    match s.write_all(&protocol::encode_value(&req)) {
        Err(e) if is_timeout(&e) => return Err(timed_out()),
        r => r.map_err(io_err)?,
    }
    let mut reader = crate::unixconn::DeadlineStream::new(&s, timeout);
    let payload = match protocol::read_one_frame(&mut reader, MAX_STATUS_BYTES) {
        Ok(Some(p)) => p,
        Ok(None) => {
            return Err(CtlError::Protocol {
                path,
                message: "connection closed without a reply".into(),
            })
        }
        Err(FrameError::Io(e)) if is_timeout(&e) => return Err(timed_out()),
        Err(FrameError::Io(e)) => return Err(io_err(e)),
        Err(FrameError::TooLarge { len, max }) => {
            return Err(CtlError::Protocol {
                path,
                message: format!(
                    "a frame of {len} bytes, more than a reply may have ({max}): is the server \
                     at this socket paiod?"
                ),
            })
        }
        Err(e) => {
            return Err(CtlError::Protocol {
                path,
                message: e.to_string(),
            })
        }
    };
    let reply: CtlReply = serde_json::from_slice(&payload).map_err(|e| CtlError::Protocol {
        path: path.clone(),
        message: format!("{e}: {}", String::from_utf8_lossy(&payload)),
    })?;
    if !reply.ok {
        return Err(CtlError::Refused(
            reply.error.unwrap_or_else(|| "refused".into()),
        ));
    }
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_format() {
        let r = CtlRequest {
            kind: CtlType::Ctl,
            id: 3,
            command: CtlCommand::Set {
                label: None,
                group: "I3".into(),
                key: "demand".into(),
                value: "300MiB/s".into(),
            },
        };
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(
            json,
            r#"{"type":"ctl","id":3,"command":{"op":"set","group":"I3","key":"demand","value":"300MiB/s"}}"#
        );
        assert_eq!(serde_json::from_str::<CtlRequest>(&json).unwrap(), r);
        let s: CtlRequest =
            serde_json::from_str(r#"{"type":"ctl","id":1,"command":{"op":"status"}}"#).unwrap();
        assert_eq!(s.command, CtlCommand::Status);
        assert!(serde_json::from_str::<CtlRequest>(
            r#"{"type":"hello","id":1,"command":{"op":"status"}}"#
        )
        .is_err());
        let r: CtlRequest = serde_json::from_str(
            r#"{"type":"ctl","id":2,"command":{"op":"set_rate","stage":"rocksdb","channel":"compaction","object":"ln","rate":"20MiB/s"}}"#,
        )
        .unwrap();
        assert!(matches!(r.command, CtlCommand::SetRate { ref object, .. } if object == "ln"));
    }

    /// A status reply over the limit lists the first stages that fit and
    /// counts the rest; one within it is sent whole.
    #[test]
    fn a_status_reply_over_the_limit_lists_the_stages_that_fit() {
        let stage = |id: u64| StageStatus {
            id,
            name: format!("stage-{id}"),
            pid: id as u32,
            uid: 0,
            host: "h".into(),
            labels: BTreeMap::from([("job".to_string(), format!("j{id}"))]),
            registered_s: 1.0,
            proc_read_bytes_per_sec: None,
            proc_write_bytes_per_sec: None,
            channels: Vec::new(),
        };
        let reply = |n: u64| CtlReply {
            status: Some(Box::new(StatusReport {
                pid: 1,
                uptime_s: 1.0,
                period_ms: 100,
                policy: "static".into(),
                groups: Vec::new(),
                latency: None,
                stages: (1..=n).map(stage).collect(),
                stages_omitted: 0,
                connections: None,
                control_loop: None,
                config: None,
                cluster: None,
            })),
            ..CtlReply::ok(1)
        };
        let decode = |frame: &[u8]| -> (usize, StatusReport) {
            let payload = &frame[protocol::HEADER_LEN..];
            let r: CtlReply = serde_json::from_slice(payload).unwrap();
            (payload.len(), *r.status.unwrap())
        };
        let whole = protocol::encode_value(&reply(1000));
        assert_eq!(encode_reply(reply(1000), whole.len()), whole);
        for max in [whole.len() / 2, whole.len() - 5, 300] {
            let (len, status) = decode(&encode_reply(reply(1000), max));
            assert!(len <= max, "{len} > {max}");
            let kept = status.stages.len() as u64;
            assert!(kept < 1000);
            assert_eq!(kept + status.stages_omitted, 1000);
            assert!(status.stages.iter().map(|s| s.id).eq(1..=kept));
        }
        // A stage fewer than fits would not be wasted: the cut is tight to
        // within one stage's bytes and the count's digits.
        let max = whole.len() / 2;
        let (len, _) = decode(&encode_reply(reply(1000), max));
        assert!(max - len < 200, "{len} of {max}");
    }
}
