//! What paiod takes of a peer's text.
//!
//! Every string a peer can make paiod store, echo or log has a cap, checked
//! when it arrives (a stage's `hello` and `stats`, a `ctl` request); a
//! message over a cap is refused with the field, its length and the cap.
//! Text written to the log is escaped ([`Escaped`]).
//!
//! | text | cap |
//! |---|---|
//! | stage, channel, object, group and ctl stage names | [`MAX_NAME`] bytes (as `paio run --name`), no control characters |
//! | labels of a stage | [`MAX_LABELS`] labels, keys [`MAX_LABEL_KEY`] bytes, values [`MAX_LABEL_VALUE`] bytes, no control characters |
//! | host, user, executable path, ctl keys, values and rates | [`MAX_TEXT`] bytes |
//! | channels of a stage, objects of a channel | [`MAX_CHANNELS`], [`MAX_OBJECTS`] |
//! | mappings to channels, to a channel's objects | [`MAX_MAPPINGS`] each |
//! | classifiers | one of each kind |
//! | objects of a stage, over its channels | [`MAX_STAGE_OBJECTS`] |
//! | a report's histograms | [`paio::stats::HISTOGRAM_BUCKETS`] pairs each, wait buckets [`paio::stats::WAIT_BUCKET_BOUNDS_NS`]'s count |
//!
//! A whole message is at most [`paio::protocol::DEFAULT_MAX_FRAME`] bytes.
//! What all registered stages make paiod keep is capped as well
//! (`[connections] max_stage_bytes`), as [`held_by_info`] and
//! [`held_by_stats`] estimate it.

use std::mem::size_of;

use paio::protocol::Hello;
use paio::stage::{ChannelInfo, ObjectInfo};
use paio::stats::{ChannelStats, Counts, ObjectStats, HISTOGRAM_BUCKETS, WAIT_BUCKET_BOUNDS_NS};
use paio::{Pattern, StageInfo, StageStats};

use crate::ctl::CtlCommand;

/// Bytes of a stage, channel, object or group name.
pub const MAX_NAME: usize = paio::env::MAX_STAGE_NAME;
/// Labels of one stage.
pub const MAX_LABELS: usize = paio::env::MAX_LABELS;
/// Bytes of a label's key.
pub const MAX_LABEL_KEY: usize = paio::env::MAX_LABEL_KEY;
/// Bytes of a label's value.
pub const MAX_LABEL_VALUE: usize = paio::env::MAX_LABEL_VALUE;
/// Bytes of other text: host, user, executable, ctl keys and values.
pub const MAX_TEXT: usize = 4096;
/// Mappings of a stage to its channels, and of a channel to its objects
/// (what a stage's rules may create).
pub const MAX_MAPPINGS: usize = paio::rule::MAX_MAPPINGS;
/// Channels of one stage (what a stage's rules may create).
pub const MAX_CHANNELS: usize = paio::rule::MAX_CHANNELS;
/// Objects of one channel (what a stage's rules may create).
pub const MAX_OBJECTS: usize = paio::rule::MAX_OBJECTS;
/// Objects of one stage over its channels (what a stage's rules may create).
pub const MAX_STAGE_OBJECTS: usize = paio::rule::MAX_STAGE_OBJECTS;
/// Bytes of a peer's message (error, goodbye) written to the log; the rest
/// is cut and its length said.
pub const MAX_LOGGED: usize = 512;

fn name(field: &str, v: &str) -> Result<(), String> {
    if v.is_empty() || v.len() > MAX_NAME {
        return Err(format!(
            "{field}: a name has 1 to {MAX_NAME} bytes, this one {}",
            v.len()
        ));
    }
    if v.chars().any(char::is_control) {
        return Err(format!(
            "{field} \"{}\": a name has no control characters",
            Escaped(v)
        ));
    }
    Ok(())
}

fn text(field: &str, v: &str, max: usize) -> Result<(), String> {
    if v.len() > max {
        return Err(format!(
            "{field}: at most {max} bytes, this one {}",
            v.len()
        ));
    }
    Ok(())
}

fn count(field: &str, n: usize, max: usize) -> Result<(), String> {
    if n > max {
        return Err(format!("{field}: at most {max}, this stage has {n}"));
    }
    Ok(())
}

/// Checks a stage's `hello` against the caps.
pub fn check_hello(h: &Hello) -> Result<(), String> {
    let id = &h.info.identity;
    name("stage name", &id.name)?;
    text("host", &id.host, MAX_TEXT)?;
    text("user", &h.user, MAX_TEXT)?;
    if let Some(exe) = &h.exe {
        text("exe", exe, MAX_TEXT)?;
    }
    count("labels", id.labels.len(), MAX_LABELS)?;
    for (k, v) in &id.labels {
        if k.is_empty() || k.len() > MAX_LABEL_KEY {
            return Err(format!(
                "label key: 1 to {MAX_LABEL_KEY} bytes, this one {}",
                k.len()
            ));
        }
        text(&format!("label \"{}\"", Escaped(k)), v, MAX_LABEL_VALUE)?;
        if k.chars().chain(v.chars()).any(char::is_control) {
            return Err(format!(
                "label \"{}\": labels have no control characters (they are shown by paio \
                 status)",
                Escaped(k)
            ));
        }
    }
    count(
        "classifiers",
        h.info.classifiers.len(),
        paio::Classifier::ALL.len(),
    )?;
    count("channel mappings", h.info.channel_rules.len(), MAX_MAPPINGS)?;
    for (_, to) in &h.info.channel_rules {
        name("mapped channel", to)?;
    }
    if let Some(d) = &h.info.default_channel {
        name("default channel", d)?;
    }
    count("channels", h.info.channels.len(), MAX_CHANNELS)?;
    stage_objects(h.info.channels.iter().map(|c| c.objects.len()))?;
    for ch in &h.info.channels {
        channel(&ch.name, ch.objects.iter().map(|o| o.name.as_str()))?;
        count(
            &format!("object mappings of channel {}", ch.name),
            ch.object_rules.len(),
            MAX_MAPPINGS,
        )?;
        for (_, to) in &ch.object_rules {
            name("mapped object", to)?;
        }
        name("default object", &ch.default_object)?;
    }
    Ok(())
}

/// Checks one channel's name and its objects' names and count.
fn channel<'a>(ch: &str, objects: impl ExactSizeIterator<Item = &'a str>) -> Result<(), String> {
    name("channel name", ch)?;
    count(
        &format!("objects of channel {ch}"),
        objects.len(),
        MAX_OBJECTS,
    )?;
    for o in objects {
        name("object name", o)?;
    }
    Ok(())
}

/// Checks the objects of a stage's channels (`per_channel`) together.
fn stage_objects(per_channel: impl Iterator<Item = usize>) -> Result<(), String> {
    count(
        "objects over all channels",
        per_channel.sum(),
        MAX_STAGE_OBJECTS,
    )
}

/// Checks a histogram's or wait buckets' pairs.
fn pairs(field: &str, n: usize, max: usize) -> Result<(), String> {
    if n > max {
        return Err(format!("{field}: at most {max} pairs, this one {n}"));
    }
    Ok(())
}

/// Checks one [`Counts`]' buckets.
fn counts(field: &str, c: &Counts) -> Result<(), String> {
    pairs(
        &format!("{field} wait_buckets"),
        c.wait_buckets.len(),
        WAIT_BUCKET_BOUNDS_NS.len(),
    )
}

/// Checks a stage's statistics against the caps.
pub fn check_stats(s: &StageStats) -> Result<(), String> {
    count("channels", s.channels.len(), MAX_CHANNELS)?;
    stage_objects(s.channels.iter().map(|c| c.objects.len()))?;
    for (what, c) in [
        ("unmatched", &s.unmatched),
        ("removed", &s.removed),
        ("critical", &s.critical),
    ] {
        counts(what, c)?;
    }
    pairs(
        "critical_latency",
        s.critical_latency.len(),
        HISTOGRAM_BUCKETS,
    )?;
    for ch in &s.channels {
        channel(&ch.name, ch.objects.iter().map(|o| o.name.as_str()))?;
        counts(&format!("channel {}", Escaped(&ch.name)), &ch.counts)?;
        for o in &ch.objects {
            counts(&format!("object {}", Escaped(&o.name)), &o.counts)?;
        }
        if let Some(h) = &ch.histograms {
            let what = |k| format!("channel {} {k} histogram", Escaped(&ch.name));
            pairs(&what("wait"), h.wait.len(), HISTOGRAM_BUCKETS)?;
            pairs(&what("latency"), h.latency.len(), HISTOGRAM_BUCKETS)?;
        }
    }
    Ok(())
}

/// What a mapping of `name` takes in memory.
fn held_by_mapping(name: &str) -> usize {
    size_of::<(Pattern, String)>() + name.len()
}

/// What paiod keeps of a stage's registration (its `hello`'s info), in
/// bytes: the sizes of its parts and the lengths of its text. An estimate
/// that follows what a peer can grow (objects, mappings, names), without
/// the allocator's overhead; what `[connections] max_stage_bytes` counts.
pub fn held_by_info(i: &StageInfo) -> usize {
    let id = &i.identity;
    let labels: usize = id
        .labels
        .iter()
        .map(|(k, v)| 3 * size_of::<String>() + k.len() + v.len())
        .sum();
    let object = |o: &ObjectInfo| size_of::<ObjectInfo>() + o.name.len() + o.kind.len();
    let channel = |c: &ChannelInfo| {
        size_of::<ChannelInfo>()
            + c.name.len()
            + c.default_object.len()
            + c.objects.iter().map(object).sum::<usize>()
            + c.object_rules
                .iter()
                .map(|(_, n)| held_by_mapping(n))
                .sum::<usize>()
    };
    size_of::<StageInfo>()
        + id.name.len()
        + id.host.len()
        + labels
        + i.classifiers.len()
        + i.channels.iter().map(channel).sum::<usize>()
        + i.channel_rules
            .iter()
            .map(|(_, n)| held_by_mapping(n))
            .sum::<usize>()
        + i.default_channel.as_ref().map_or(0, String::len)
}

/// What paiod keeps of a stage's statistics, in bytes, estimated as
/// [`held_by_info`] is.
pub fn held_by_stats(s: &StageStats) -> usize {
    let pair = size_of::<(u64, u64)>();
    let counts = |c: &Counts| c.wait_buckets.len() * pair;
    let object = |o: &ObjectStats| {
        size_of::<ObjectStats>() + o.name.len() + o.kind.len() + counts(&o.counts)
    };
    let channel = |c: &ChannelStats| {
        size_of::<ChannelStats>()
            + c.name.len()
            + counts(&c.counts)
            + c.objects.iter().map(object).sum::<usize>()
            + c.histograms
                .as_ref()
                .map_or(0, |h| (h.wait.len() + h.latency.len()) * pair)
    };
    size_of::<StageStats>()
        + s.stage.len()
        + [&s.unmatched, &s.removed, &s.critical]
            .into_iter()
            .map(counts)
            .sum::<usize>()
        + s.critical_latency.len() * pair
        + s.channels.iter().map(channel).sum::<usize>()
}

/// Checks a `ctl` command against the caps (`*` is a valid group).
pub fn check_ctl(c: &CtlCommand) -> Result<(), String> {
    match c {
        CtlCommand::Status => Ok(()),
        CtlCommand::Set {
            label,
            group,
            key,
            value,
        } => {
            if let Some(l) = label {
                text("label", l, MAX_LABEL_KEY)?;
            }
            name("group", group)?;
            text("key", key, MAX_TEXT)?;
            text("value", value, MAX_TEXT)
        }
        CtlCommand::SetRate {
            stage,
            channel,
            object,
            rate,
        } => {
            name("stage", stage)?;
            name("channel", channel)?;
            name("object", object)?;
            text("rate", rate, MAX_TEXT)
        }
    }
}

/// A peer's text as it goes into paiod's log: control characters (a
/// newline that would forge a log line, terminal escapes) and backslashes
/// are written escaped (`\n`, `\u{1b}`, `\\`); text beyond [`MAX_LOGGED`]
/// bytes is cut, saying how long it was.
pub struct Escaped<'a>(pub &'a str);

impl std::fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write as _;
        let mut shown = 0;
        for c in self.0.chars() {
            shown += c.len_utf8();
            if shown > MAX_LOGGED {
                return write!(f, "... ({} bytes)", self.0.len());
            }
            if c.is_control() || c == '\\' {
                write!(f, "{}", c.escape_default())?;
            } else {
                f.write_char(c)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> Hello {
        let stage = paio::Stage::from_policy_str(
            "[stage]\nname = \"s\"\nlabels = { job = \"j\" }\n[[channel]]\nname = \"read\"\nmatch = {}\n",
            "<t>",
        )
        .unwrap();
        Hello {
            version: paio::protocol::VERSION,
            ppid: 1,
            user: "u".into(),
            exe: None,
            info: stage.info(),
        }
    }

    #[test]
    fn a_stage_within_the_caps_is_accepted() {
        check_hello(&hello()).unwrap();
        let stage =
            paio::Stage::from_policy_str("[[channel]]\nname = \"read\"\nmatch = {}\n", "<t>")
                .unwrap();
        check_stats(&stage.collect()).unwrap();
    }

    #[test]
    fn every_capped_field_of_a_hello_is_refused_over_its_cap() {
        type Spoil = Box<dyn Fn(&mut Hello)>;
        let cases: Vec<(&str, Spoil)> = vec![
            (
                "stage name",
                Box::new(|h| h.info.identity.name = "n".repeat(MAX_NAME + 1)),
            ),
            (
                "control characters",
                Box::new(|h| h.info.identity.name = "a\nb".into()),
            ),
            (
                "host",
                Box::new(|h| h.info.identity.host = "h".repeat(MAX_TEXT + 1)),
            ),
            ("user", Box::new(|h| h.user = "u".repeat(MAX_TEXT + 1))),
            ("exe", Box::new(|h| h.exe = Some("e".repeat(MAX_TEXT + 1)))),
            (
                "labels",
                Box::new(|h| {
                    for i in 0..=MAX_LABELS {
                        h.info.identity.labels.insert(format!("k{i}"), "v".into());
                    }
                }),
            ),
            (
                "label key",
                Box::new(|h| {
                    h.info
                        .identity
                        .labels
                        .insert("k".repeat(MAX_LABEL_KEY + 1), "v".into());
                }),
            ),
            (
                "label \"job\"",
                Box::new(|h| {
                    h.info
                        .identity
                        .labels
                        .insert("job".into(), "v".repeat(MAX_LABEL_VALUE + 1));
                }),
            ),
            (
                "labels have no control",
                Box::new(|h| {
                    h.info
                        .identity
                        .labels
                        .insert("job".into(), "a\u{1b}[2J".into());
                }),
            ),
            (
                "channel name",
                Box::new(|h| h.info.channels[0].name = "c".repeat(MAX_NAME + 1)),
            ),
            (
                "channels",
                Box::new(|h| {
                    let ch = h.info.channels[0].clone();
                    h.info.channels = vec![ch; MAX_CHANNELS + 1];
                }),
            ),
            (
                "classifiers",
                Box::new(|h| h.info.classifiers = vec![paio::Classifier::Workflow; 6]),
            ),
            (
                "channel mappings",
                Box::new(|h| {
                    let m = h.info.channel_rules[0].clone();
                    h.info.channel_rules = vec![m; MAX_MAPPINGS + 1];
                }),
            ),
            (
                "mapped channel",
                Box::new(|h| h.info.channel_rules[0].1 = "c".repeat(MAX_NAME + 1)),
            ),
            (
                "default channel",
                Box::new(|h| h.info.default_channel = Some(String::new())),
            ),
            (
                "object mappings of channel read",
                Box::new(|h| {
                    let ch = &mut h.info.channels[0];
                    ch.object_rules =
                        vec![(paio::Pattern::ANY, "default".into()); MAX_MAPPINGS + 1];
                }),
            ),
            (
                "mapped object",
                Box::new(|h| {
                    h.info.channels[0].object_rules = vec![(paio::Pattern::ANY, "o\n".into())];
                }),
            ),
            (
                "default object",
                Box::new(|h| h.info.channels[0].default_object = "o".repeat(MAX_NAME + 1)),
            ),
        ];
        for (field, spoil) in cases {
            let mut h = hello();
            spoil(&mut h);
            let e = check_hello(&h).unwrap_err();
            assert!(e.contains(field), "{field}: {e}");
        }
    }

    /// What a report may grow is capped: objects over all channels, wait
    /// buckets and histograms; the estimate of what paiod keeps grows with
    /// the objects.
    #[test]
    fn a_reports_objects_and_histograms_are_capped() {
        let stage =
            paio::Stage::from_policy_str("[[channel]]\nname = \"read\"\nmatch = {}\n", "<t>")
                .unwrap();
        let good = stage.collect();
        check_stats(&good).unwrap();
        let base = held_by_stats(&good);
        let spoilt = |f: &dyn Fn(&mut StageStats)| {
            let mut s = good.clone();
            f(&mut s);
            check_stats(&s).unwrap_err()
        };
        let e = spoilt(&|s| {
            let ch = s.channels[0].clone();
            let mut full = ch.clone();
            full.objects = vec![ch.objects[0].clone(); MAX_OBJECTS];
            s.channels = vec![full; MAX_STAGE_OBJECTS / MAX_OBJECTS + 1];
        });
        assert!(e.contains("objects over all channels: at most 4096"), "{e}");
        let e = spoilt(&|s| s.channels[0].objects[0].counts.wait_buckets = vec![(1, 1); 9]);
        assert!(
            e.contains("wait_buckets: at most 8 pairs, this one 9"),
            "{e}"
        );
        let e = spoilt(&|s| {
            s.channels[0].histograms = Some(paio::stats::Histograms {
                wait: vec![],
                latency: vec![(1, 1); HISTOGRAM_BUCKETS + 1],
            })
        });
        assert!(e.contains("latency histogram: at most 496 pairs"), "{e}");
        let e = spoilt(&|s| s.critical_latency = vec![(1, 1); HISTOGRAM_BUCKETS + 1]);
        assert!(e.contains("critical_latency"), "{e}");
        let mut more = good.clone();
        let o = more.channels[0].objects[0].clone();
        more.channels[0].objects.extend(vec![o; 100]);
        assert!(held_by_stats(&more) >= base + 100 * size_of::<ObjectStats>());
        let mut h = hello();
        let ch = h.info.channels[0].clone();
        let mut full = ch.clone();
        full.objects = vec![ch.objects[0].clone(); MAX_OBJECTS];
        h.info.channels = vec![full; MAX_STAGE_OBJECTS / MAX_OBJECTS + 1];
        let e = check_hello(&h).unwrap_err();
        assert!(e.contains("objects over all channels"), "{e}");
        assert!(
            held_by_info(&h.info) > (MAX_STAGE_OBJECTS + MAX_OBJECTS) * size_of::<ObjectInfo>()
        );
    }

    #[test]
    fn ctl_strings_are_capped() {
        let set = |group: &str, value: &str| CtlCommand::Set {
            label: None,
            group: group.into(),
            key: "demand".into(),
            value: value.into(),
        };
        check_ctl(&set("*", "1MiB/s")).unwrap();
        let e = check_ctl(&set(&"g".repeat(900_000), "1MiB/s")).unwrap_err();
        assert!(e.contains("group") && e.contains("900000"), "{e}");
        assert!(check_ctl(&set("g", &"v".repeat(MAX_TEXT + 1))).is_err());
        let e = check_ctl(&CtlCommand::SetRate {
            stage: "s".into(),
            channel: String::new(),
            object: "o".into(),
            rate: "1MiB/s".into(),
        })
        .unwrap_err();
        assert!(e.contains("channel"), "{e}");
    }

    #[test]
    fn logged_text_is_escaped_and_cut() {
        assert_eq!(
            Escaped("a\nb\u{1b}[2J\\n é").to_string(),
            "a\\nb\\u{1b}[2J\\\\n é"
        );
        let long = "x".repeat(10_000);
        let shown = Escaped(&long).to_string();
        assert!(shown.len() < MAX_LOGGED + 32, "{}", shown.len());
        assert!(shown.ends_with("... (10000 bytes)"), "{shown}");
    }
}
