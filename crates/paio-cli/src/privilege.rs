//! Whether executing a program elevates its caller's privilege, by the
//! kernel's rule (security/commoncap.c): then the loader runs it in
//! secure-execution mode (`AT_SECURE`) and drops `LD_PRELOAD`, so `paio run`
//! cannot enforce it. Used by `paio run` (a warning) and `paio doctor` (a
//! finding).

use std::path::Path;

/// How executing a file would change the ids of the user running paio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elevation {
    /// No set-ID bit, no file capabilities.
    Plain,
    /// Set-ID bits or capabilities that change nothing for this caller
    /// (its own uid or gid, capabilities for root, a `nosuid` mount): the
    /// loader keeps `LD_PRELOAD`. The text says which.
    Harmless(&'static str),
    /// Set-user-ID to uid `file`, not the caller's real uid `caller`.
    SetUid {
        /// The file's owner.
        file: u32,
        /// The caller's real uid.
        caller: u32,
    },
    /// Set-group-ID to gid `file`, not the caller's real gid `caller`.
    SetGid {
        /// The file's group.
        file: u32,
        /// The caller's real gid.
        caller: u32,
    },
    /// File capabilities, for a caller whose real uid is not root.
    Capabilities,
}

/// What of an executable and its caller the rule looks at.
#[derive(Debug, Clone, Copy)]
struct Exec {
    mode: u32,
    uid: u32,
    gid: u32,
    /// It has a `security.capability` attribute.
    caps: bool,
    /// It lies on a `nosuid` mount: set-ID bits and capabilities are ignored.
    nosuid: bool,
    /// The caller's real uid and gid.
    caller_uid: u32,
    caller_gid: u32,
}

const DROPS: &str = "the dynamic loader ignores LD_PRELOAD for it (secure-execution mode), so it runs without a stage";

impl Elevation {
    /// The elevation of executing `path` (links followed, as `execve`
    /// does) for this process's real ids; `None` when the file cannot be
    /// read (other checks then say why).
    pub fn of(path: &Path) -> Option<Elevation> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = std::fs::metadata(path).ok()?;
        Some(rule(&Exec {
            mode: meta.mode(),
            uid: meta.uid(),
            gid: meta.gid(),
            caps: rustix::fs::getxattr_query(path, "security.capability").is_ok(),
            nosuid: rustix::fs::statvfs(path)
                .is_ok_and(|v| v.f_flag.contains(rustix::fs::StatVfsMountFlags::NOSUID)),
            caller_uid: rustix::process::getuid().as_raw(),
            caller_gid: rustix::process::getgid().as_raw(),
        }))
    }

    /// Why the executable `p` runs without a stage, when it does (`None`
    /// for [`Elevation::Plain`] and [`Elevation::Harmless`]).
    pub fn problem(&self, p: &str) -> Option<String> {
        Some(match self {
            Elevation::Plain | Elevation::Harmless(_) => return None,
            Elevation::SetUid { file, caller } => {
                format!("{p} is set-user-ID to uid {file}, and you are uid {caller}: {DROPS}")
            }
            Elevation::SetGid { file, caller } => {
                format!("{p} is set-group-ID to gid {file}, and your gid is {caller}: {DROPS}")
            }
            Elevation::Capabilities => format!(
                "{p} has file capabilities (security.capability) and you are not root: {DROPS}"
            ),
        })
    }

    /// How to run it with a stage, for the cases [`Elevation::problem`]
    /// names.
    pub fn fix(&self) -> Option<String> {
        Some(match self {
            Elevation::Plain | Elevation::Harmless(_) => return None,
            Elevation::SetUid { file, .. } => format!(
                "run a copy without the set-ID bit, if it does not need the privilege, or run paio as uid {file}"
            ),
            Elevation::SetGid { .. } => {
                "run a copy without the set-ID bit, if it does not need the privilege".into()
            }
            Elevation::Capabilities => {
                "run a copy without them (setcap -r on the copy), if it does not need them".into()
            }
        })
    }
}

/// The kernel's rule for a privilege-elevating exec: the new effective uid
/// differs from the real one, or the effective gid from the real one, or
/// capabilities grow for a caller whose real uid is not root; set-group-ID
/// needs group execute permission; a `nosuid` mount ignores all of it.
fn rule(x: &Exec) -> Elevation {
    let setuid = x.mode & 0o4000 != 0;
    let setgid = x.mode & 0o2010 == 0o2010;
    if !setuid && !setgid && !x.caps {
        return Elevation::Plain;
    }
    if x.nosuid {
        return Elevation::Harmless(
            "it lies on a nosuid mount, which ignores set-ID bits and capabilities",
        );
    }
    if setuid && x.uid != x.caller_uid {
        return Elevation::SetUid {
            file: x.uid,
            caller: x.caller_uid,
        };
    }
    if setgid && x.gid != x.caller_gid {
        return Elevation::SetGid {
            file: x.gid,
            caller: x.caller_gid,
        };
    }
    if x.caps && x.caller_uid != 0 {
        return Elevation::Capabilities;
    }
    Elevation::Harmless(if setuid || setgid {
        "its set-ID bits name your own ids, so executing it changes no identity"
    } else {
        "its file capabilities add nothing for root"
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_id_bits_and_capabilities_matter_only_when_they_change_an_id() {
        let user = (1000, 1000);
        let root = (0, 0);
        let e = |mode, uid, gid, caps, nosuid, (caller_uid, caller_gid)| {
            rule(&Exec {
                mode,
                uid,
                gid,
                caps,
                nosuid,
                caller_uid,
                caller_gid,
            })
        };
        let harmless = |x: Elevation| matches!(x, Elevation::Harmless(_));
        let setuid = |file, caller| Elevation::SetUid { file, caller };
        assert_eq!(e(0o755, 0, 0, false, false, user), Elevation::Plain);
        assert_eq!(e(0o4755, 0, 0, false, false, user), setuid(0, 1000));
        assert!(harmless(e(0o4755, 0, 0, false, false, root)));
        assert_eq!(e(0o4755, 65534, 0, false, false, root), setuid(65534, 0));
        assert!(harmless(e(0o4755, 1000, 0, false, false, user)));
        assert_eq!(
            e(0o2755, 0, 42, false, false, root),
            Elevation::SetGid {
                file: 42,
                caller: 0
            }
        );
        assert!(harmless(e(0o2755, 0, 1000, false, false, user)));
        // Its own uid but another gid: the gid decides.
        assert_eq!(
            e(0o6755, 1000, 42, false, false, user),
            Elevation::SetGid {
                file: 42,
                caller: 1000
            }
        );
        // Set-group-ID without group execute is mandatory locking, not an id.
        assert_eq!(e(0o2745, 0, 42, false, false, root), Elevation::Plain);
        assert_eq!(e(0o755, 0, 0, true, false, user), Elevation::Capabilities);
        assert!(harmless(e(0o755, 0, 0, true, false, root)));
        assert!(harmless(e(0o6755, 0, 0, true, true, user)));
    }

    #[test]
    fn only_an_elevation_is_a_problem_and_each_has_a_fix() {
        let all = [
            Elevation::Plain,
            Elevation::Harmless("x"),
            Elevation::SetUid { file: 0, caller: 1 },
            Elevation::SetGid { file: 0, caller: 1 },
            Elevation::Capabilities,
        ];
        for e in all {
            assert_eq!(e.problem("p").is_some(), e.fix().is_some(), "{e:?}");
            let plain = matches!(e, Elevation::Plain | Elevation::Harmless(_));
            assert_eq!(e.problem("p").is_none(), plain, "{e:?}");
        }
    }
}
