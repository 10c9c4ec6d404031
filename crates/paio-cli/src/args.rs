//! Values of `paio run`'s flags, checked before anything runs, and the
//! policy `--limit` builds.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::str::FromStr;

use paio::units::{parse_rate, RateUnit};
use paio::{Policy, PolicyError, Rate, Stage};

/// A class of requests `--limit` can limit, and the name of the channel of
/// those requests (the same names as the interposer's default policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// `read` requests (every call that reads file data).
    Read,
    /// `write` requests.
    Write,
    /// Zero-byte requests: open, close, stat, unlink, rename, mkdir, rmdir,
    /// truncate, fallocate, fsync, fdatasync, sync_file_range.
    Metadata,
}

/// Request types of the `metadata` class.
pub const METADATA_TYPES: &[&str] = &[
    "open",
    "close",
    "stat",
    "unlink",
    "rename",
    "mkdir",
    "rmdir",
    "truncate",
    "fallocate",
    "fsync",
    "fdatasync",
    "sync_file_range",
];

impl Class {
    /// Every class, in channel order.
    pub const ALL: [Class; 3] = [Class::Read, Class::Write, Class::Metadata];

    /// The class's (and its channel's) name.
    pub fn name(self) -> &'static str {
        match self {
            Class::Read => "read",
            Class::Write => "write",
            Class::Metadata => "metadata",
        }
    }

    /// The request types routed to the class's channel.
    pub fn request_types(self) -> &'static [&'static str] {
        match self {
            Class::Read => &["read"],
            Class::Write => &["write"],
            Class::Metadata => METADATA_TYPES,
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A bad flag value or combination. `paio` exits with status 2
/// ([`crate::EXIT_USAGE`]) before running anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    /// `--limit` without `=`.
    #[error("--limit {value:?}: expected CLASS=RATE, e.g. read=50MiB/s, write=20MiB/s or \"metadata=1k ops/s\"")]
    LimitSyntax {
        /// The flag's value.
        value: String,
    },
    /// `--limit` with a class other than read, write, metadata.
    #[error("--limit {value:?}: unknown class {class:?}; expected read, write or metadata")]
    LimitClass {
        /// The flag's value.
        value: String,
        /// The class given.
        class: String,
    },
    /// `--limit` with a rate that does not parse.
    #[error("--limit {value:?}: {message}")]
    LimitRate {
        /// The flag's value.
        value: String,
        /// Why the rate is invalid.
        message: String,
    },
    /// `--limit metadata=` with a byte rate.
    #[error("--limit {value:?}: metadata requests carry no bytes, so their limit must be an operation rate, e.g. \"metadata=1k ops/s\" or metadata=500iops")]
    MetadataBytes {
        /// The flag's value.
        value: String,
    },
    /// `--limit CLASS=0...`.
    #[error("--limit {value:?}: a rate of 0 would stop every request of the class; expected a positive rate")]
    LimitZero {
        /// The flag's value.
        value: String,
    },
    /// Two `--limit` for one class.
    #[error("--limit given twice for class {class}: {first:?} and {second:?}; expected at most one limit per class")]
    DuplicateLimit {
        /// The class.
        class: Class,
        /// The first value.
        first: String,
        /// The second value.
        second: String,
    },
    /// Both `--policy` and `--limit`.
    #[error("--policy and --limit cannot be used together: --limit builds a policy of its own (write the limits into the policy file instead)")]
    PolicyAndLimit,
    /// A `paio ctl` argument that does not parse (the message says which).
    #[error("{0}")]
    Ctl(String),
    /// `--label` not of the form `KEY=VALUE`.
    #[error("--label {value:?}: {reason}; expected KEY=VALUE with a non-empty KEY, no ',' in either, no '=' in KEY, no control characters (e.g. --label job=train1)")]
    Label {
        /// The flag's value.
        value: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// Two `--label` with one key.
    #[error("--label {key:?} given twice; expected each key at most once")]
    DuplicateLabel {
        /// The key.
        key: String,
    },
    /// A bad `--name`.
    #[error(
        "--name {value:?}: expected a stage name of 1 to 128 bytes without control characters"
    )]
    Name {
        /// The flag's value.
        value: String,
    },
    /// `--stats` with `%p` outside the file name.
    #[error("--stats {value:?}: %p may only appear in the file name, not in a directory (e.g. --stats /tmp/paio-stats.%p.json)")]
    StatsPattern {
        /// The flag's value.
        value: String,
    },
    /// `--stats` naming a directory.
    #[error("--stats {value:?}: expected a file name pattern such as /tmp/paio-stats.%p.json, not a directory")]
    StatsDirectory {
        /// The flag's value.
        value: String,
    },
    /// `--stats` in a directory that does not exist.
    #[error("--stats {value:?}: directory {dir:?} does not exist (create it first)")]
    StatsNoDirectory {
        /// The flag's value.
        value: String,
        /// The missing directory.
        dir: String,
    },
    /// Several classes in one `--limit`.
    #[error("--limit {value:?}: one class per --limit; repeat the flag: {suggestion}")]
    LimitList {
        /// The flag's value.
        value: String,
        /// The same limits as repeated flags.
        suggestion: String,
    },
    /// A policy file (or the generated policy) that does not build a stage.
    #[error("--policy: {0}")]
    Policy(PolicyError),
    /// The policy file named by an inherited `PAIO_POLICY` does not build a
    /// stage.
    #[error("PAIO_POLICY (inherited from the environment; unset it or pass --policy): {0}")]
    InheritedPolicy(PolicyError),
    /// An inherited `PAIO_*` variable the interposer would refuse.
    #[error("{0} (inherited from the environment: fix or unset it)")]
    Env(paio::env::EnvError),
    /// A DRL or a priority object at rate 0 with no control plane to raise
    /// it.
    #[error("{origin}: object {object:?} of channel {channel:?} has rate 0, which pauses every request it gets until a control rule raises it; without --control nothing will (give it a rate, or run under paiod with --control)")]
    PausedForever {
        /// The policy file.
        origin: String,
        /// The channel.
        channel: String,
        /// The object.
        object: String,
    },
    /// The policy matches a file class `PAIO_FILE_CLASSES` does not define:
    /// no file gets it, so what the rule limits is never reached.
    #[error("{origin}: {at} matches file_class {class:?}, which PAIO_FILE_CLASSES does not define ({defined}): no file gets that class, so what it limits is never limited; set PAIO_FILE_CLASSES=\"{class}=/absolute/prefix\" (see docs/preload.md), or correct the class's name")]
    UndefinedFileClass {
        /// The policy file.
        origin: String,
        /// Where the class is matched (`channel "x"`, `object mapping of channel "x"`).
        at: String,
        /// The class.
        class: String,
        /// What is defined.
        defined: String,
    },
    /// The generated policy was rejected: a bug in `paio run`.
    #[error("--limit: the generated policy was rejected (a bug in paio): {0}")]
    Generated(PolicyError),
}

/// One `--limit CLASS=RATE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// The class limited.
    pub class: Class,
    /// Its rate.
    pub rate: Rate,
    /// The flag's value as given (for messages).
    pub text: String,
}

impl FromStr for Limit {
    type Err = ArgError;
    fn from_str(value: &str) -> Result<Self, ArgError> {
        let text = value.to_string();
        if value.contains(',') && value.matches('=').count() > 1 {
            let suggestion = value
                .split(',')
                .map(|l| format!("--limit {}", l.trim()))
                .collect::<Vec<_>>()
                .join(" ");
            return Err(ArgError::LimitList {
                value: text,
                suggestion,
            });
        }
        let (class, rate) = value.split_once('=').ok_or_else(|| ArgError::LimitSyntax {
            value: text.clone(),
        })?;
        let class = match class.trim() {
            "read" => Class::Read,
            "write" => Class::Write,
            "metadata" => Class::Metadata,
            other => {
                return Err(ArgError::LimitClass {
                    value: text,
                    class: other.to_string(),
                })
            }
        };
        let rate = parse_rate(rate.trim()).map_err(|e| ArgError::LimitRate {
            value: text.clone(),
            message: e.to_string(),
        })?;
        if class == Class::Metadata && rate.unit == RateUnit::Bytes {
            return Err(ArgError::MetadataBytes { value: text });
        }
        if rate.per_second == 0 {
            return Err(ArgError::LimitZero { value: text });
        }
        Ok(Limit { class, rate, text })
    }
}

/// One `--label KEY=VALUE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// The key.
    pub key: String,
    /// The value.
    pub value: String,
}

impl FromStr for Label {
    type Err = ArgError;
    fn from_str(text: &str) -> Result<Self, ArgError> {
        let bad = |reason| ArgError::Label {
            value: text.to_string(),
            reason,
        };
        let (key, value) = text.split_once('=').ok_or_else(|| bad("no '='"))?;
        if key.is_empty() {
            return Err(bad("empty key"));
        }
        if text.contains(',') {
            return Err(bad("',' separates labels in PAIO_LABELS"));
        }
        if text.chars().any(char::is_control) {
            return Err(bad("control character"));
        }
        Ok(Label {
            key: key.to_string(),
            value: value.to_string(),
        })
    }
}

/// A `--name`: a stage name as paio accepts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageName(pub String);

impl FromStr for StageName {
    type Err = ArgError;
    fn from_str(s: &str) -> Result<Self, ArgError> {
        if paio::env::check_stage_name(s).is_err() {
            return Err(ArgError::Name {
                value: s.to_string(),
            });
        }
        Ok(StageName(s.to_string()))
    }
}

/// Checks that no class is limited twice.
pub fn check_limits(limits: &[Limit]) -> Result<(), ArgError> {
    let mut seen: BTreeMap<Class, &Limit> = BTreeMap::new();
    for l in limits {
        if let Some(first) = seen.insert(l.class, l) {
            return Err(ArgError::DuplicateLimit {
                class: l.class,
                first: first.text.clone(),
                second: l.text.clone(),
            });
        }
    }
    Ok(())
}

/// The `PAIO_LABELS` value (`k=v,k=v`) of `labels`; a key given twice is an
/// error.
pub fn labels_env(labels: &[Label]) -> Result<String, ArgError> {
    let mut seen = BTreeMap::new();
    for l in labels {
        if seen.insert(l.key.as_str(), ()).is_some() {
            return Err(ArgError::DuplicateLabel { key: l.key.clone() });
        }
    }
    Ok(labels
        .iter()
        .map(|l| format!("{}={}", l.key, l.value))
        .collect::<Vec<_>>()
        .join(","))
}

/// Checks a `--stats` pattern: `%p` only in the file name, and not a
/// directory.
pub fn check_stats_pattern(pattern: &OsStr) -> Result<(), ArgError> {
    let value = pattern.to_string_lossy().into_owned();
    let bytes = pattern.as_bytes();
    if bytes.is_empty() || bytes.ends_with(b"/") || Path::new(pattern).is_dir() {
        return Err(ArgError::StatsDirectory { value });
    }
    let last_slash = bytes.iter().rposition(|&b| b == b'/');
    if let Some(slash) = last_slash {
        if bytes[..slash].windows(2).any(|w| w == b"%p") {
            return Err(ArgError::StatsPattern { value });
        }
        let dir = Path::new(OsStr::from_bytes(&bytes[..slash.max(1)]));
        if !dir.is_dir() {
            return Err(ArgError::StatsNoDirectory {
                value,
                dir: dir.to_string_lossy().into_owned(),
            });
        }
    }
    Ok(())
}

/// Refuses `stage` (built from the policy file `path`) if it has a DRL, or
/// a priority object's rate, at 0 and no control plane will ever raise it
/// (`control`: the stage registers with paiod).
pub fn check_not_paused_forever(stage: &Stage, path: &Path, control: bool) -> Result<(), ArgError> {
    if control {
        return Ok(());
    }
    for ch in stage.info().channels {
        for o in ch.objects {
            let rate = match &o.config {
                Some(paio::ObjectConfig::Drl(d)) => Some(d.rate),
                Some(paio::ObjectConfig::Priority(p)) => p.rate,
                _ => None,
            };
            if rate.is_some_and(|r| r.per_second == 0) {
                return Err(ArgError::PausedForever {
                    origin: path.display().to_string(),
                    channel: ch.name.clone(),
                    object: o.name,
                });
            }
        }
    }
    Ok(())
}

/// Name under which the generated policy is reported in errors.
pub const GENERATED_ORIGIN: &str = "<policy generated from --limit>";

/// The policy text for `limits` (already checked by [`check_limits`]): one
/// channel per class, `read`, `write` and `metadata`, each matched by
/// request type; a limited class's channel sends its requests to a DRL object
/// `limit` at the given rate, the others pass through (and are counted).
/// Requests of any other type go to `metadata` (its `default_channel`), as
/// in the interposer's embedded default policy.
pub fn limit_policy(limits: &[Limit]) -> String {
    let mut out = String::from(
        "# Generated by `paio run --limit`: one channel per class of requests,\n\
         # matched by request type. Limited classes go through a DRL (token\n\
         # bucket) object `limit` whose bucket every process of the command\n\
         # shares (`shared`), except what goes through pipes and sockets;\n\
         # the others pass through and are counted.\n\
         # Request types of no class go to `metadata`, as in the interposer's\n\
         # default policy.\n\
         \n\
         [stage]\n\
         default_channel = \"metadata\"\n",
    );
    for class in Class::ALL {
        out.push_str(&format!("\n[[channel]]\nname = \"{class}\"\n"));
        let types = class.request_types();
        if types.len() == 1 {
            out.push_str(&format!("match = {{ request_type = \"{}\" }}\n", types[0]));
        } else {
            out.push_str("match = [\n");
            for t in types {
                out.push_str(&format!("    {{ request_type = \"{t}\" }},\n"));
            }
            out.push_str("]\n");
        }
        if let Some(l) = limits.iter().find(|l| l.class == class) {
            out.push_str(&format!(
                "default_object = \"limit\"\n\n\
                 # --limit {}\n\
                 [[channel.object]]\n\
                 name = \"limit\"\n\
                 kind = \"drl\"\n\
                 rate = \"{}\"\n\
                 shared = \"{class}\"\n\
                 \n\
                 # Pipes and sockets carry data between processes, not to\n\
                 # storage: counted, not limited.\n\
                 [[channel.object]]\n\
                 name = \"streams\"\n\
                 kind = \"noop\"\n\
                 match = {{ file_class = \"{}\" }}\n",
                l.text,
                l.rate,
                paio::env::STREAM_CLASS
            ));
        }
    }
    out
}

/// Lets this process build the stages of policies that name shared buckets
/// ([`paio::object::shared_drl`]), to check them: `paio` enforces nothing
/// itself, so buckets of its own do (the command's processes map the run's
/// file, `PAIO_SHARED`).
fn check_with_local_buckets() {
    paio::object::install_shared_buckets(
        std::sync::Arc::new(paio::object::LocalBuckets::default()),
    );
}

/// [`limit_policy`], checked: it must parse and build a stage.
pub fn checked_limit_policy(limits: &[Limit]) -> Result<String, ArgError> {
    check_limits(limits)?;
    check_with_local_buckets();
    let text = limit_policy(limits);
    let policy = Policy::parse(&text, GENERATED_ORIGIN).map_err(ArgError::Generated)?;
    policy.new_stage().map_err(ArgError::Generated)?;
    Ok(text)
}

/// Checks a policy file the way the interposer will load it: it must parse
/// and build a stage. Errors carry `file:line:column`.
pub fn check_policy_file(path: &Path) -> Result<Stage, ArgError> {
    check_with_local_buckets();
    let policy = Policy::from_file(path).map_err(ArgError::Policy)?;
    policy.new_stage().map_err(ArgError::Policy)
}

/// Refuses a policy (`stage`, from `origin`) whose patterns match a file
/// class that `defined` (`PAIO_FILE_CLASSES`) does not define, the
/// interposer's own `stream` class excepted.
pub fn check_file_classes(
    stage: &Stage,
    origin: &Path,
    defined: &[(paio::FileClass, String)],
) -> Result<(), ArgError> {
    let info = stage.info();
    let mappings = info
        .channel_rules
        .iter()
        .map(|(p, to)| (p, format!("the mapping to channel {to:?}")))
        .chain(info.channels.iter().flat_map(|ch| {
            ch.object_rules.iter().map(|(p, to)| {
                (
                    p,
                    format!("the mapping to object {to:?} of channel {:?}", ch.name),
                )
            })
        }));
    for (pattern, at) in mappings {
        let Some(class) = pattern.file_class else {
            continue;
        };
        let name = class.name();
        if name == paio::env::STREAM_CLASS || defined.iter().any(|(c, _)| *c == class) {
            continue;
        }
        let mut names: Vec<String> = defined.iter().map(|(c, _)| c.name()).collect();
        names.dedup();
        return Err(ArgError::UndefinedFileClass {
            origin: origin.display().to_string(),
            at,
            class: name,
            defined: if names.is_empty() {
                "it is not set".to_string()
            } else {
                format!("it defines {}", names.join(", "))
            },
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use paio::{Context, RequestContext, RequestType, Stage};

    fn limits(v: &[&str]) -> Vec<Limit> {
        v.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn route(stage: &Stage, ty: &str, size: u64) -> Option<(String, String)> {
        let ctx = Context::explicit(
            1,
            RequestType::named(ty).unwrap(),
            RequestContext::NONE,
            size,
        );
        stage.route(&ctx)
    }

    fn pair(c: &str, o: &str) -> Option<(String, String)> {
        Some((c.to_string(), o.to_string()))
    }

    #[test]
    fn parses_limits() {
        let l: Limit = "read=50MiB/s".parse().unwrap();
        assert_eq!(l.class, Class::Read);
        assert_eq!(l.rate, Rate::bytes_per_sec(50 << 20));
        let l: Limit = "metadata=1k ops/s".parse().unwrap();
        assert_eq!(l.rate, Rate::ops_per_sec(1000));
        let l: Limit = "write = 20MB/s".parse().unwrap();
        assert_eq!(
            (l.class, l.rate),
            (Class::Write, Rate::bytes_per_sec(20_000_000))
        );
        // An operation rate on data is an IOPS limit: allowed.
        let l: Limit = "read=2000iops".parse().unwrap();
        assert_eq!(l.rate, Rate::ops_per_sec(2000));
    }

    #[test]
    fn limit_errors_name_the_flag_and_what_was_expected() {
        let e = "read=fast".parse::<Limit>().unwrap_err();
        assert!(matches!(e, ArgError::LimitRate { .. }));
        let msg = e.to_string();
        assert!(
            msg.starts_with("--limit \"read=fast\": invalid rate \"fast\""),
            "{msg}"
        );
        assert!(msg.contains("50MiB/s"), "{msg}");

        let e = "reads=1MiB/s".parse::<Limit>().unwrap_err().to_string();
        assert_eq!(
            e,
            "--limit \"reads=1MiB/s\": unknown class \"reads\"; expected read, write or metadata"
        );
        let e = "50MiB/s".parse::<Limit>().unwrap_err().to_string();
        assert!(e.contains("expected CLASS=RATE"), "{e}");
        let e = "read=50MiB".parse::<Limit>().unwrap_err().to_string();
        assert!(e.contains("a rate ends in /s"), "{e}");
        let e = "metadata=1MiB/s".parse::<Limit>().unwrap_err();
        assert!(matches!(e, ArgError::MetadataBytes { .. }));
        let e = "write=0B/s".parse::<Limit>().unwrap_err();
        assert!(matches!(e, ArgError::LimitZero { .. }));

        let e = check_limits(&limits(&["read=1MiB/s", "write=1MiB/s", "read=2MiB/s"]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--limit given twice for class read: \"read=1MiB/s\" and \"read=2MiB/s\"; expected at most one limit per class"
        );
    }

    #[test]
    fn labels_and_names() {
        let l: Vec<Label> = ["job=train1", "instance=I3", "empty="]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(labels_env(&l).unwrap(), "job=train1,instance=I3,empty=");
        for bad in ["job", "=x", "a=b,c=d", "a=\n"] {
            let e = bad.parse::<Label>().unwrap_err().to_string();
            assert!(e.starts_with("--label "), "{e}");
            assert!(e.contains("expected KEY=VALUE"), "{e}");
        }
        let dup: Vec<Label> = ["a=1", "a=2"].iter().map(|s| s.parse().unwrap()).collect();
        assert!(matches!(
            labels_env(&dup),
            Err(ArgError::DuplicateLabel { .. })
        ));
        assert!("trainer".parse::<StageName>().is_ok());
        assert!("".parse::<StageName>().is_err());
        assert!("x".repeat(129).parse::<StageName>().is_err());
    }

    #[test]
    fn stats_patterns() {
        assert!(check_stats_pattern(OsStr::new("/tmp/s.%p.json")).is_ok());
        assert!(check_stats_pattern(OsStr::new("s.json")).is_ok());
        assert!(matches!(
            check_stats_pattern(OsStr::new("/tmp/%p/s.json")),
            Err(ArgError::StatsPattern { .. })
        ));
        assert!(matches!(
            check_stats_pattern(OsStr::new("/tmp")),
            Err(ArgError::StatsDirectory { .. })
        ));
        assert!(matches!(
            check_stats_pattern(OsStr::new("out/")),
            Err(ArgError::StatsDirectory { .. })
        ));
    }

    #[test]
    fn generated_policy_routes_limited_and_unlimited_classes() {
        let text = checked_limit_policy(&limits(&["read=50MiB/s", "metadata=1k ops/s"])).unwrap();
        let stage = Stage::from_policy_str(&text, "generated").unwrap();
        assert_eq!(route(&stage, "read", 4096), pair("read", "limit"));
        assert_eq!(route(&stage, "write", 4096), pair("write", "default"));
        for t in METADATA_TYPES {
            assert_eq!(route(&stage, t, 0), pair("metadata", "limit"), "{t}");
        }
        // Request types of no class go to metadata, as in the interposer's
        // default policy.
        assert_eq!(route(&stage, "other", 0), pair("metadata", "limit"));
        let info = stage.info();
        let names: Vec<_> = info.channels.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["read", "write", "metadata"]);
        assert!(text.contains("rate = \"52428800 B/s\""), "{text}");
        assert!(text.contains("rate = \"1000 ops/s\""), "{text}");
        assert!(text.contains("# --limit read=50MiB/s"), "{text}");
    }

    #[test]
    fn generated_policy_enforces_the_rate() {
        // A burst-sized request passes at once; the DRL counts it.
        let text = checked_limit_policy(&limits(&["write=1MiB/s"])).unwrap();
        let stage = Stage::from_policy_str(&text, "generated").unwrap();
        let ctx = Context::explicit(1, RequestType::WRITE, RequestContext::NONE, 100);
        stage.enforce(&ctx, None).unwrap();
        let stats = stage.collect();
        let write = stats.channels.iter().find(|c| c.name == "write").unwrap();
        assert_eq!(write.counts.bytes, 100);
        assert_eq!(
            write
                .objects
                .iter()
                .find(|o| o.name == "limit")
                .unwrap()
                .kind,
            "drl"
        );
    }

    #[test]
    fn docs_show_the_generated_policy() {
        let doc = include_str!("../../../docs/cli.md");
        let section = &doc[doc.find("## What `--limit` generates").unwrap()..];
        let start = section.find("```toml\n").unwrap() + "```toml\n".len();
        let end = start + section[start..].find("```").unwrap();
        let text = checked_limit_policy(&limits(&["read=50MiB/s", "metadata=1k ops/s"])).unwrap();
        assert_eq!(&section[start..end], text);
    }

    #[test]
    fn no_limits_is_pass_through_with_three_channels() {
        let text = checked_limit_policy(&[]).unwrap();
        let stage = Stage::from_policy_str(&text, "generated").unwrap();
        assert_eq!(route(&stage, "read", 1), pair("read", "default"));
        assert_eq!(route(&stage, "write", 1), pair("write", "default"));
        assert_eq!(route(&stage, "fsync", 0), pair("metadata", "default"));
    }

    #[test]
    fn policy_file_errors_carry_file_line_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        std::fs::write(
            &path,
            "[[channel]]\nname = \"bulk\"\ndefault_object = \"limit\"\n\n[[channel.object]]\nname = \"limit\"\nkind = \"drl\"\nrate = \"50MiB\"\n",
        )
        .unwrap();
        let e = check_policy_file(&path).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "--policy: {}:8:8: channel[0].object[0].rate: invalid rate",
                path.display()
            )),
            "{e}"
        );
        // Errors found only when the rules are applied are reported too.
        std::fs::write(
            &path,
            "[stage]\ndefault_channel = \"fats\"\n[[channel]]\nname = \"fast\"\n",
        )
        .unwrap();
        let e = check_policy_file(&path).unwrap_err().to_string();
        assert!(
            e.contains(":2:19: stage.default_channel: no channel named \"fats\""),
            "{e}"
        );
        let e = check_policy_file(&dir.path().join("missing.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.toml:1:1: policy: cannot read"), "{e}");
        std::fs::write(&path, "[[channel]]\nname = \"ok\"\nmatch = {}\n").unwrap();
        check_policy_file(&path).unwrap();
    }
}
