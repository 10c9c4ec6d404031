//! paiod's connection accounting: the caps of `[connections]`
//! ([`crate::config::ConnectionLimits`]) resolved against the descriptor
//! limit, and who holds what.
//!
//! A connection *waits* from accept until its first message; then it is a
//! stage (after `hello`) or a `ctl` session. Waiting connections are capped
//! by evicting the oldest, stages and ctl sessions by refusing the newcomer
//! with a message. Descriptors: stages + waiting + ctl + [`FD_RESERVE`]
//! never exceed the descriptor limit with the default caps, so `accept`
//! does not fail with "Too many open files" and `paio status` and new
//! stages are served while idle peers hold every waiting slot.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use crate::config::{
    ConnectionLimits, DEFAULT_DRAIN_TIMEOUT, DEFAULT_HELLO_TIMEOUT, DEFAULT_MAX_BUFFERED,
    DEFAULT_MAX_STAGE_BYTES, DEFAULT_MAX_WAITING, MAX_CTL_SESSIONS,
};
use crate::ctl::ConnectionStatus;
use crate::outbox::Outbox;

/// Descriptors kept apart from connections: the listener, the metrics
/// listener and its scrapes, `/proc` reads, the log, the runtime's own.
pub const FD_RESERVE: u64 = 64;

/// The caps in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Registered stages at once.
    pub max_stages: usize,
    /// Registered stages of one uid at once.
    pub max_stages_per_uid: usize,
    /// Time from accept to the first message.
    pub hello_timeout: Duration,
    /// Connections waiting for their first message at once.
    pub max_waiting: usize,
    /// Time a peer may leave more than the outbox's soft limit unread.
    pub drain_timeout: Duration,
    /// Bytes of unfinished frames over all connections.
    pub max_buffered: usize,
    /// Bytes of stages' registrations and statistics paiod keeps.
    pub max_stage_bytes: usize,
    /// The descriptor limit the caps were sized for.
    pub descriptor_limit: u64,
}

/// Why a configuration cannot be served with the descriptor limit.
#[derive(Debug, thiserror::Error)]
#[error(
    "[connections] max_stages = {max_stages} needs {needed} descriptors (with {max_waiting} \
     waiting, {MAX_CTL_SESSIONS} ctl and {FD_RESERVE} reserved) but paiod may open only \
     {limit}: raise the hard limit (e.g. LimitNOFILE= in the service, `ulimit -Hn` as root) or \
     lower max_stages"
)]
pub struct LimitError {
    max_stages: usize,
    max_waiting: usize,
    needed: u64,
    limit: u64,
}

impl Limits {
    /// The caps of `c` for a process that may open `descriptor_limit`
    /// descriptors; an unset `max_stages` takes what is left after the
    /// other caps and [`FD_RESERVE`].
    pub fn resolve(c: &ConnectionLimits, descriptor_limit: u64) -> Result<Limits, LimitError> {
        let max_waiting = c.max_waiting.unwrap_or(DEFAULT_MAX_WAITING);
        let others = max_waiting as u64 + MAX_CTL_SESSIONS as u64 + FD_RESERVE;
        let fit = descriptor_limit.saturating_sub(others);
        let max_stages = match c.max_stages {
            Some(n) if n as u64 > fit => {
                return Err(LimitError {
                    max_stages: n,
                    max_waiting,
                    needed: n as u64 + others,
                    limit: descriptor_limit,
                })
            }
            Some(n) => n,
            None if fit == 0 => {
                return Err(LimitError {
                    max_stages: 1,
                    max_waiting,
                    needed: 1 + others,
                    limit: descriptor_limit,
                })
            }
            None => usize::try_from(fit).unwrap_or(usize::MAX),
        };
        Ok(Limits {
            max_stages,
            max_stages_per_uid: c.max_stages_per_uid.unwrap_or(max_stages).min(max_stages),
            hello_timeout: c.hello_timeout.unwrap_or(DEFAULT_HELLO_TIMEOUT),
            max_waiting,
            drain_timeout: c.drain_timeout.unwrap_or(DEFAULT_DRAIN_TIMEOUT),
            max_buffered: usize::try_from(c.max_buffered.unwrap_or(DEFAULT_MAX_BUFFERED))
                .unwrap_or(usize::MAX),
            max_stage_bytes: usize::try_from(c.max_stage_bytes.unwrap_or(DEFAULT_MAX_STAGE_BYTES))
                .unwrap_or(usize::MAX),
            descriptor_limit,
        })
    }
}

/// Why a connection was closed by paiod (the `reason` label of
/// `paiod_connections_closed_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Closed {
    /// A stage over `max_stages`.
    StageCap,
    /// A stage over `max_stages_per_uid`.
    UidCap,
    /// A ctl session over [`MAX_CTL_SESSIONS`].
    CtlCap,
    /// The oldest waiting connection, evicted for a new one.
    WaitingCap,
    /// No first message within `hello_timeout`.
    HelloTimeout,
    /// A ctl session without a request within `hello_timeout` of its last
    /// answer.
    CtlIdle,
    /// An unfinished frame that took paiod's over `max_buffered`.
    Buffered,
    /// A stage whose `hello` or statistics took what paiod keeps of stages
    /// over `max_stage_bytes`.
    StageBytes,
    /// A peer of another uid than paiod's and root.
    ForeignUid,
    /// Replies left unread longer than `drain_timeout`, or over the
    /// outbox's hard limit.
    Unread,
}

impl Closed {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Closed::StageCap => "stage_cap",
            Closed::UidCap => "uid_cap",
            Closed::CtlCap => "ctl_cap",
            Closed::WaitingCap => "waiting_cap",
            Closed::HelloTimeout => "hello_timeout",
            Closed::CtlIdle => "ctl_idle",
            Closed::Buffered => "max_buffered",
            Closed::StageBytes => "max_stage_bytes",
            Closed::ForeignUid => "foreign_uid",
            Closed::Unread => "unread",
        }
    }
}

/// Who holds which slot.
pub struct Conns {
    limits: Limits,
    next: u64,
    /// Waiting connections, oldest first.
    waiting: VecDeque<(u64, Outbox)>,
    stages: usize,
    stages_by_uid: HashMap<u32, usize>,
    ctl: usize,
    /// Bytes registered stages hold ([`Conns::hold`]).
    stage_bytes: usize,
    closed: BTreeMap<Closed, u64>,
}

impl Conns {
    /// No connection yet.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            next: 0,
            waiting: VecDeque::new(),
            stages: 0,
            stages_by_uid: HashMap::new(),
            ctl: 0,
            stage_bytes: 0,
            closed: BTreeMap::new(),
        }
    }

    /// Puts new caps in force (a configuration reload). Stages and
    /// connections already above a lowered cap stay; new ones are refused,
    /// and the oldest waiting connections closed, until they fit.
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// The caps in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// A new connection starts waiting; returns its id. When `max_waiting`
    /// connections already wait, the oldest is closed.
    pub fn wait(&mut self, out: Outbox) -> u64 {
        while self.waiting.len() >= self.limits.max_waiting {
            let Some((_, oldest)) = self.waiting.pop_front() else {
                break;
            };
            oldest.close();
            self.count(Closed::WaitingCap);
        }
        self.next += 1;
        self.waiting.push_back((self.next, out));
        self.next
    }

    /// Connection `id` stops waiting (it spoke, or it is gone).
    pub fn done_waiting(&mut self, id: u64) {
        self.waiting.retain(|(w, _)| *w != id);
    }

    /// Takes a stage slot for `uid`, or says why not.
    pub fn admit_stage(&mut self, uid: u32) -> Result<(), String> {
        let l = self.limits;
        if self.stages >= l.max_stages {
            self.count(Closed::StageCap);
            return Err(format!(
                "paiod serves at most {} stages ([connections] max_stages) and has that many; \
                 the stage runs on its last rules and retries",
                l.max_stages
            ));
        }
        let of_uid = self.stages_by_uid.get(&uid).copied().unwrap_or(0);
        if of_uid >= l.max_stages_per_uid {
            self.count(Closed::UidCap);
            return Err(format!(
                "uid {uid} already has {of_uid} stages, paiod's cap per uid ([connections] \
                 max_stages_per_uid); the stage runs on its last rules and retries"
            ));
        }
        self.stages += 1;
        *self.stages_by_uid.entry(uid).or_default() += 1;
        Ok(())
    }

    /// Gives back the slot of a stage of `uid`.
    pub fn stage_left(&mut self, uid: u32) {
        self.stages = self.stages.saturating_sub(1);
        if let Some(n) = self.stages_by_uid.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                self.stages_by_uid.remove(&uid);
            }
        }
    }

    /// Makes a stage's share of the bytes stages hold `after` instead of
    /// `before` (0 for a new stage), or says why not and counts the
    /// closing (`max_stage_bytes`): a share that grows may not take the
    /// total over the cap. A share that shrinks always may.
    pub fn hold(&mut self, before: usize, after: usize) -> Result<(), String> {
        let others = self.stage_bytes.saturating_sub(before);
        let max = self.limits.max_stage_bytes;
        if after > before && others.saturating_add(after) > max {
            self.count(Closed::StageBytes);
            return Err(format!(
                "paiod keeps at most {max} bytes of stages' registrations and statistics \
                 ([connections] max_stage_bytes) and holds {others} for other stages; this \
                 stage needs {after}: the stage runs on its last rules and retries (remove \
                 objects from it or raise the cap)"
            ));
        }
        self.stage_bytes = others + after;
        Ok(())
    }

    /// Takes a ctl slot, or says why not.
    pub fn admit_ctl(&mut self) -> Result<(), String> {
        if self.ctl >= MAX_CTL_SESSIONS {
            self.count(Closed::CtlCap);
            return Err(format!(
                "paiod serves at most {MAX_CTL_SESSIONS} ctl sessions at once; try again"
            ));
        }
        self.ctl += 1;
        Ok(())
    }

    /// Gives back a ctl slot.
    pub fn ctl_left(&mut self) {
        self.ctl = self.ctl.saturating_sub(1);
    }

    /// Counts a connection paiod closed.
    pub fn count(&mut self, why: Closed) {
        *self.closed.entry(why).or_default() += 1;
    }

    /// The figures `paio status` and the metrics show.
    pub fn status(&self) -> ConnectionStatus {
        let l = &self.limits;
        ConnectionStatus {
            descriptor_limit: l.descriptor_limit,
            max_stages: l.max_stages as u64,
            max_stages_per_uid: l.max_stages_per_uid as u64,
            max_waiting: l.max_waiting as u64,
            max_ctl: MAX_CTL_SESSIONS as u64,
            waiting: self.waiting.len() as u64,
            ctl: self.ctl as u64,
            stage_bytes: self.stage_bytes as u64,
            max_stage_bytes: l.max_stage_bytes as u64,
            closed: self
                .closed
                .iter()
                .map(|(k, v)| (k.as_str().to_string(), *v))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_stages: usize, per_uid: usize, waiting: usize) -> Limits {
        Limits::resolve(
            &ConnectionLimits {
                max_stages: Some(max_stages),
                max_stages_per_uid: Some(per_uid),
                max_waiting: Some(waiting),
                ..Default::default()
            },
            1 << 20,
        )
        .unwrap()
    }

    #[test]
    fn unset_caps_fit_the_descriptor_limit() {
        let l = Limits::resolve(&ConnectionLimits::default(), 1024).unwrap();
        assert_eq!(
            l.max_stages as u64 + l.max_waiting as u64 + MAX_CTL_SESSIONS as u64 + FD_RESERVE,
            1024
        );
        assert_eq!(l.max_stages_per_uid, l.max_stages);
        let e = Limits::resolve(
            &ConnectionLimits {
                max_stages: Some(10_000),
                ..Default::default()
            },
            1024,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("max_stages = 10000") && e.contains("1024"),
            "{e}"
        );
        assert!(Limits::resolve(&ConnectionLimits::default(), 100).is_err());
    }

    #[test]
    fn the_oldest_waiting_connection_is_evicted() {
        let mut c = Conns::new(limits(10, 10, 2));
        // Receivers kept alive: an outbox without one counts as closed.
        let (outs, _rxs): (Vec<Outbox>, Vec<_>) = (0..3).map(|_| Outbox::new()).unzip();
        let ids: Vec<u64> = outs.iter().map(|o| c.wait(o.clone())).collect();
        assert!(outs[0].is_closed());
        assert!(!outs[1].is_closed() && !outs[2].is_closed());
        c.done_waiting(ids[1]);
        c.wait(Outbox::new().0);
        assert!(!outs[2].is_closed());
        assert_eq!(c.status().waiting, 2);
        assert_eq!(c.status().closed["waiting_cap"], 1);
    }

    #[test]
    fn stages_are_capped_overall_and_per_uid() {
        let mut c = Conns::new(limits(3, 2, 4));
        c.admit_stage(1).unwrap();
        c.admit_stage(1).unwrap();
        let e = c.admit_stage(1).unwrap_err();
        assert!(e.contains("max_stages_per_uid"), "{e}");
        c.admit_stage(2).unwrap();
        let e = c.admit_stage(3).unwrap_err();
        assert!(e.contains("max_stages"), "{e}");
        c.stage_left(1);
        c.admit_stage(3).unwrap();
        let s = c.status();
        assert_eq!((s.closed["uid_cap"], s.closed["stage_cap"]), (1, 1));
    }

    #[test]
    fn ctl_sessions_have_their_own_cap() {
        let mut c = Conns::new(limits(1, 1, 1));
        c.admit_stage(0).unwrap();
        for _ in 0..MAX_CTL_SESSIONS {
            c.admit_ctl().unwrap();
        }
        assert!(c.admit_ctl().is_err());
        c.ctl_left();
        c.admit_ctl().unwrap();
    }
}
