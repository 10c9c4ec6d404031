//! The interposer's environment: the `PAIO_*` variables that configure
//! `libpaio_preload.so`, what each means, and its checks. One parser serves
//! both the interposer (which configures itself from it) and `paio run`
//! (which refuses a bad variable before it starts the command, so that a
//! typo never leaves a program running without the limits asked for).
//!
//! The policy file named by `PAIO_POLICY` is not read here: its path is
//! returned, and the caller parses it ([`crate::Policy::from_file`]).

use std::path::PathBuf;
use std::time::Duration;

use crate::context::{FileClass, RequestContext};

/// Longest stage name, in bytes (`PAIO_STAGE_NAME`, `paio run --name`).
pub const MAX_STAGE_NAME: usize = 128;
/// Most labels of a stage (paiod refuses a stage with more).
pub const MAX_LABELS: usize = 32;
/// Longest label key, in bytes.
pub const MAX_LABEL_KEY: usize = 64;
/// Longest label value, in bytes.
pub const MAX_LABEL_VALUE: usize = 256;

/// Default `PAIO_STATS_INTERVAL`: one second.
pub const DEFAULT_STATS_INTERVAL: Duration = Duration::from_secs(1);
/// The file class the interposer gives pipes and sockets (data between
/// processes, not storage) when its policy names it, so a limit can leave
/// them out; reserved: `PAIO_FILE_CLASSES` cannot name it.
pub const STREAM_CLASS: &str = "stream";

/// Where the stage registers with paiod (`PAIO_CONTROL`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlSocket {
    /// `default` or `1`: paiod's default socket path.
    Default,
    /// An absolute socket path.
    Path(PathBuf),
}

impl ControlSocket {
    /// The socket's path, [`ControlSocket::Default`] resolved as paiod's
    /// default for a process whose `XDG_RUNTIME_DIR` is `xdg_runtime_dir`
    /// ([`crate::control::default_socket_path_from`]).
    pub fn path_with(&self, xdg_runtime_dir: Option<PathBuf>) -> PathBuf {
        match self {
            ControlSocket::Default => crate::control::default_socket_path_from(xdg_runtime_dir),
            ControlSocket::Path(p) => p.clone(),
        }
    }
}

/// The socket a `PAIO_CONTROL` value names: `default` or `1`, or an
/// absolute path; `None` for anything else.
pub fn control_socket(value: &str) -> Option<ControlSocket> {
    match value {
        "default" | "1" => Some(ControlSocket::Default),
        p if p.starts_with('/') => Some(ControlSocket::Path(PathBuf::from(p))),
        _ => None,
    }
}

/// The shared board of critical I/O (`PAIO_BOARD`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoardSetting {
    /// Unset or empty: the per-user default file.
    Default,
    /// `off`: no board.
    Off,
    /// An absolute path.
    Path(PathBuf),
}

/// The interposer's configuration, as the environment gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct InterposerEnv {
    /// `PAIO_POLICY`: the policy file (none: the embedded default layout).
    pub policy: Option<PathBuf>,
    /// `PAIO_CONTROL`: paiod's socket (none: no control plane).
    pub control: Option<ControlSocket>,
    /// `PAIO_STAGE_NAME`: 1 to [`MAX_STAGE_NAME`] bytes, no control
    /// characters (none: the policy's name, else `preload`).
    pub stage_name: Option<String>,
    /// `PAIO_LABELS=k=v,k=v`: the stage's labels, each key once.
    pub labels: Vec<(String, String)>,
    /// `PAIO_WORKFLOW=process` (true) or `thread` (false, the default).
    pub workflow_process: bool,
    /// `PAIO_STATS`: the statistics file pattern (`%p`: the pid).
    pub stats: Option<String>,
    /// `PAIO_STATS_INTERVAL`: how often the statistics file is rewritten
    /// (default [`DEFAULT_STATS_INTERVAL`]; more than 0).
    pub stats_interval: Duration,
    /// `PAIO_CONTEXT`: the process-wide request context.
    pub context: RequestContext,
    /// `PAIO_LOG=1`: diagnostics on stderr (`0` or unset: none).
    pub log: bool,
    /// `PAIO_BOARD`.
    pub board: BoardSetting,
    /// `PAIO_SHARED`: the file holding the buckets of limits shared by
    /// processes ([`crate::object::shared_drl`]), an absolute path (none:
    /// shared limits cannot be used).
    pub shared: Option<PathBuf>,
    /// `PAIO_CRITICAL=1`: the whole process is critical (`0` or unset: not).
    pub critical: bool,
    /// `PAIO_FILE_CLASSES=class=/prefix,...`: each class with an absolute
    /// path prefix, in the order given (a class may have several).
    pub file_classes: Vec<(FileClass, String)>,
}

/// A variable with a value the interposer cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}={value:?}: {reason}")]
pub struct EnvError {
    /// The variable.
    pub variable: &'static str,
    /// Its value.
    pub value: String,
    /// What was expected.
    pub reason: String,
}

/// Checks a stage name: 1 to [`MAX_STAGE_NAME`] bytes, no control characters.
pub fn check_stage_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_STAGE_NAME {
        return Err(format!(
            "a stage name has 1 to {MAX_STAGE_NAME} bytes, this one {}",
            name.len()
        ));
    }
    if name.chars().any(char::is_control) {
        return Err("a stage name has no control characters".into());
    }
    Ok(())
}

/// Parses the `PAIO_*` variables of `env` (later entries win); variables
/// that are unset or empty take their defaults.
pub fn parse(env: &[(String, String)]) -> Result<InterposerEnv, EnvError> {
    let get = |key: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    };
    let bad = |variable: &'static str, value: &str, reason: String| EnvError {
        variable,
        value: value.to_string(),
        reason,
    };
    let control = match get("PAIO_CONTROL") {
        None => None,
        Some(p) => {
            let socket = control_socket(p).ok_or_else(|| {
                bad(
                    "PAIO_CONTROL",
                    p,
                    "expected an absolute socket path, or \"default\" for paiod's default socket"
                        .into(),
                )
            })?;
            if let ControlSocket::Path(path) = &socket {
                crate::control::check_socket_path(path).map_err(|e| bad("PAIO_CONTROL", p, e))?;
            }
            Some(socket)
        }
    };
    let stage_name = match get("PAIO_STAGE_NAME") {
        Some(n) => {
            check_stage_name(n).map_err(|e| bad("PAIO_STAGE_NAME", n, e))?;
            Some(n.to_string())
        }
        None => None,
    };
    let mut labels: Vec<(String, String)> = Vec::new();
    if let Some(all) = get("PAIO_LABELS") {
        for item in all.split(',').filter(|s| !s.is_empty()) {
            let Some((k, v)) = item.split_once('=') else {
                return Err(bad(
                    "PAIO_LABELS",
                    all,
                    format!("{item:?} is not key=value"),
                ));
            };
            let (k, v) = (k.trim(), v.trim());
            if k.is_empty() || item.chars().any(char::is_control) {
                return Err(bad(
                    "PAIO_LABELS",
                    all,
                    format!("{item:?}: a label has a non-empty key and no control characters"),
                ));
            }
            if labels.iter().any(|(seen, _)| seen == k) {
                return Err(bad("PAIO_LABELS", all, format!("key {k:?} given twice")));
            }
            if k.len() > MAX_LABEL_KEY || v.len() > MAX_LABEL_VALUE || labels.len() == MAX_LABELS {
                return Err(bad(
                    "PAIO_LABELS",
                    all,
                    format!(
                        "at most {MAX_LABELS} labels, keys of at most {MAX_LABEL_KEY} bytes and \
                         values of at most {MAX_LABEL_VALUE}"
                    ),
                ));
            }
            labels.push((k.to_string(), v.to_string()));
        }
    }
    let workflow_process = match get("PAIO_WORKFLOW") {
        None | Some("thread") => false,
        Some("process") => true,
        Some(other) => {
            return Err(bad(
                "PAIO_WORKFLOW",
                other,
                "expected \"thread\" or \"process\"".into(),
            ))
        }
    };
    let stats_interval = match get("PAIO_STATS_INTERVAL") {
        Some(s) => {
            let d = crate::units::parse_duration(s)
                .map_err(|e| bad("PAIO_STATS_INTERVAL", s, e.to_string()))?;
            if d.is_zero() {
                return Err(bad("PAIO_STATS_INTERVAL", s, "must be more than 0".into()));
            }
            d
        }
        None => DEFAULT_STATS_INTERVAL,
    };
    let context = match get("PAIO_CONTEXT") {
        Some(c) => RequestContext::named(c).map_err(|e| bad("PAIO_CONTEXT", c, e.to_string()))?,
        None => RequestContext::NONE,
    };
    // A 0/1 switch; `on` says what 1 means.
    let switch = |variable: &'static str, on: &str| match get(variable) {
        None | Some("0") => Ok(false),
        Some("1") => Ok(true),
        Some(other) => Err(bad(variable, other, format!("expected 1 ({on}) or 0"))),
    };
    let log = switch("PAIO_LOG", "diagnostics on stderr")?;
    let board = match get("PAIO_BOARD") {
        None => BoardSetting::Default,
        Some("off") => BoardSetting::Off,
        Some(p) if p.starts_with('/') => BoardSetting::Path(PathBuf::from(p)),
        Some(p) => {
            return Err(bad(
                "PAIO_BOARD",
                p,
                "expected an absolute path, or \"off\"".into(),
            ))
        }
    };
    let shared = match get("PAIO_SHARED") {
        None => None,
        Some(p) if p.starts_with('/') => Some(PathBuf::from(p)),
        Some(p) => {
            return Err(bad(
                "PAIO_SHARED",
                p,
                "expected the absolute path of the file of shared limits".into(),
            ))
        }
    };
    let critical = switch("PAIO_CRITICAL", "the process is critical")?;
    let mut file_classes = Vec::new();
    if let Some(all) = get("PAIO_FILE_CLASSES") {
        for item in all.split(',').filter(|s| !s.is_empty()) {
            let Some((name, prefix)) = item.split_once('=') else {
                return Err(bad(
                    "PAIO_FILE_CLASSES",
                    all,
                    format!("{item:?} is not class=/path"),
                ));
            };
            if !prefix.starts_with('/') {
                return Err(bad(
                    "PAIO_FILE_CLASSES",
                    all,
                    format!("{prefix:?} is not an absolute path"),
                ));
            }
            if name == STREAM_CLASS {
                return Err(bad(
                    "PAIO_FILE_CLASSES",
                    all,
                    format!(
                        "{STREAM_CLASS:?} is the interposer's own class of pipes and sockets; \
                         name the class of {prefix:?} otherwise"
                    ),
                ));
            }
            let class =
                FileClass::named(name).map_err(|e| bad("PAIO_FILE_CLASSES", all, e.to_string()))?;
            file_classes.push((class, prefix.to_string()));
        }
    }
    Ok(InterposerEnv {
        policy: get("PAIO_POLICY").map(PathBuf::from),
        control,
        stage_name,
        labels,
        workflow_process,
        stats: get("PAIO_STATS").map(str::to_string),
        stats_interval,
        context,
        log,
        board,
        shared,
        critical,
        file_classes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn err(pairs: &[(&str, &str)]) -> EnvError {
        parse(&env(pairs)).unwrap_err()
    }

    #[test]
    fn an_empty_environment_gives_the_defaults() {
        let e = parse(&[]).unwrap();
        assert_eq!(e.policy, None);
        assert_eq!(e.control, None);
        assert_eq!(e.stats_interval, DEFAULT_STATS_INTERVAL);
        assert_eq!(e.board, BoardSetting::Default);
        assert!(!e.log && !e.critical && !e.workflow_process);
        // Empty values are unset.
        assert_eq!(
            parse(&env(&[("PAIO_LOG", ""), ("PAIO_CONTROL", "")])).unwrap(),
            e
        );
    }

    #[test]
    fn every_variable_is_parsed() {
        let e = parse(&env(&[
            ("PAIO_POLICY", "/p.toml"),
            ("PAIO_CONTROL", "default"),
            ("PAIO_STAGE_NAME", "db"),
            ("PAIO_LABELS", "job=a, tier = gold"),
            ("PAIO_WORKFLOW", "process"),
            ("PAIO_STATS", "/tmp/s.%p.json"),
            ("PAIO_STATS_INTERVAL", "250ms"),
            ("PAIO_CONTEXT", "flush"),
            ("PAIO_LOG", "1"),
            ("PAIO_BOARD", "off"),
            ("PAIO_SHARED", "/run/j/limits"),
            ("PAIO_CRITICAL", "1"),
            ("PAIO_FILE_CLASSES", "wal=/db/wal,sst=/db/sst"),
        ]))
        .unwrap();
        assert_eq!(e.policy, Some(PathBuf::from("/p.toml")));
        assert_eq!(e.control, Some(ControlSocket::Default));
        assert_eq!(e.stage_name.as_deref(), Some("db"));
        assert_eq!(
            e.labels,
            vec![("job".into(), "a".into()), ("tier".into(), "gold".into())]
        );
        assert!(e.workflow_process && e.log && e.critical);
        assert_eq!(e.stats_interval, Duration::from_millis(250));
        assert_eq!(e.context, RequestContext::named("flush").unwrap());
        assert_eq!(e.board, BoardSetting::Off);
        assert_eq!(e.shared, Some(PathBuf::from("/run/j/limits")));
        assert_eq!(e.file_classes.len(), 2);
        assert_eq!(e.file_classes[1].1, "/db/sst");
        // The later of two entries wins, as in a process's environment.
        let e = parse(&env(&[("PAIO_CONTROL", "/a"), ("PAIO_CONTROL", "/b")])).unwrap();
        assert_eq!(e.control, Some(ControlSocket::Path("/b".into())));
    }

    #[test]
    fn bad_values_name_the_variable_and_what_was_expected() {
        for (pairs, variable, says) in [
            (&[("PAIO_CONTROL", "sock")][..], "PAIO_CONTROL", "absolute"),
            (
                &[("PAIO_CONTROL", &*format!("/{}", "s".repeat(107)))][..],
                "PAIO_CONTROL",
                "108 bytes, more than a Unix socket's path may have (107)",
            ),
            (&[("PAIO_SHARED", "limits")][..], "PAIO_SHARED", "absolute"),
            (
                &[("PAIO_FILE_CLASSES", "stream=/data")][..],
                "PAIO_FILE_CLASSES",
                "own class of pipes",
            ),
            (
                &[("PAIO_STAGE_NAME", &*"n".repeat(300))][..],
                "PAIO_STAGE_NAME",
                "1 to 128 bytes",
            ),
            (
                &[("PAIO_STAGE_NAME", "a\nb")][..],
                "PAIO_STAGE_NAME",
                "control",
            ),
            (&[("PAIO_LABELS", "job")][..], "PAIO_LABELS", "key=value"),
            (&[("PAIO_LABELS", "=x")][..], "PAIO_LABELS", "non-empty key"),
            (&[("PAIO_LABELS", "a=1,a=2")][..], "PAIO_LABELS", "twice"),
            (
                &[("PAIO_LABELS", &*format!("job={}", "v".repeat(257)))][..],
                "PAIO_LABELS",
                "at most 256",
            ),
            (
                &[(
                    "PAIO_LABELS",
                    &*(0..33)
                        .map(|i| format!("k{i}=v"))
                        .collect::<Vec<_>>()
                        .join(","),
                )][..],
                "PAIO_LABELS",
                "at most 32 labels",
            ),
            (
                &[("PAIO_WORKFLOW", "proc")][..],
                "PAIO_WORKFLOW",
                "\"process\"",
            ),
            (
                &[("PAIO_STATS_INTERVAL", "soon")][..],
                "PAIO_STATS_INTERVAL",
                "",
            ),
            (
                &[("PAIO_STATS_INTERVAL", "0s")][..],
                "PAIO_STATS_INTERVAL",
                "more than 0",
            ),
            (
                &[("PAIO_CONTEXT", &*"c".repeat(300))][..],
                "PAIO_CONTEXT",
                "",
            ),
            (&[("PAIO_LOG", "garbage")][..], "PAIO_LOG", "expected 1"),
            (&[("PAIO_BOARD", "board")][..], "PAIO_BOARD", "absolute"),
            (
                &[("PAIO_CRITICAL", "yes")][..],
                "PAIO_CRITICAL",
                "expected 1",
            ),
            (
                &[("PAIO_FILE_CLASSES", "wal")][..],
                "PAIO_FILE_CLASSES",
                "class=/path",
            ),
            (
                &[("PAIO_FILE_CLASSES", "wal=db")][..],
                "PAIO_FILE_CLASSES",
                "absolute",
            ),
        ] {
            let e = err(pairs);
            assert_eq!(e.variable, variable, "{e}");
            assert!(e.to_string().contains(says), "{e}");
            assert!(e.to_string().starts_with(&format!("{variable}=")), "{e}");
        }
    }
}
