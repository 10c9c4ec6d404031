//! Per-input checks shared by the fuzz targets (`fuzz_targets/*.rs`) and by
//! the stable test `crates/paio/tests/fuzz_corpus.rs`, which includes this
//! file with `#[path]` and replays the corpus through it. Only `paio` and
//! `serde_json` may be used here: both crates must compile it.
//!
//! Each check panics when an invariant breaks; returning says how the input
//! was handled ([`Handled`]).

use paio::{
    Context, Pattern, Policy, PolicyError, RequestContext, RequestType, Rule, Stage, StageInfo,
};

/// How a check handled an input that broke no invariant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// Not of the target's kind (not UTF-8, not a rule): nothing checked.
    Skipped,
    /// Refused with an error that passed the error checks.
    Rejected,
    /// Accepted, and the result passed its checks.
    Accepted,
}

/// The origin given to fuzzed policies; errors must name it.
pub const ORIGIN: &str = "fuzz.toml";

/// Most contexts routed per input (bounds the time of one execution).
const MAX_CONTEXTS: usize = 64;

/// The `policy` target: bytes that are valid UTF-8 are parsed as a policy;
/// an accepted policy is built into a stage, whose routing is exercised.
pub fn check_policy(data: &[u8]) -> Handled {
    // Policies are text: only inputs that are UTF-8 without loss go on.
    let Ok(text) = std::str::from_utf8(data) else {
        return Handled::Skipped;
    };
    let policy = match Policy::parse(text, ORIGIN) {
        Ok(p) => p,
        Err(e) => {
            check_error(&e, text);
            return Handled::Rejected;
        }
    };
    // A policy is a list of rules a control plane could have sent: the rules
    // survive JSON.
    let json = serde_json::to_string(policy.rules()).expect("rules serialize");
    let back: Vec<Rule> = serde_json::from_str(&json)
        .unwrap_or_else(|e| panic!("rules do not parse back: {e}\n{json}"));
    assert_eq!(back, policy.rules(), "rules changed through JSON");

    match policy.new_stage() {
        Err(e) => {
            check_error(&e, text);
            // The same rules fail on a bare stage too, and change nothing;
            // unless they apply and the policy refused a part of the file no
            // request can reach.
            let bare = Stage::builder("bare").build();
            let before = bare.info();
            if bare.apply_all(policy.rules()).is_ok() {
                assert!(
                    e.message.contains("would receive no request")
                        || e.message.contains("fits no request"),
                    "{e}"
                );
            } else {
                assert_eq!(bare.info(), before, "a failed policy changed the stage");
            }
            Handled::Rejected
        }
        Ok(stage) => {
            let info = stage.info();
            assert_eq!(info.identity.name, policy.name.as_deref().unwrap_or("paio"));
            assert_eq!(info.identity.labels, policy.labels);
            let created = policy
                .rules()
                .iter()
                .filter(|r| matches!(r, Rule::CreateChannel { .. }))
                .count();
            assert_eq!(info.channels.len(), created);
            check_routes(&stage, &info, policy.rules());
            serde_json::to_string(&info).expect("info serializes");
            serde_json::to_string(&stage.collect()).expect("stats serialize");
            Handled::Accepted
        }
    }
}

/// The stage `rule_json` inputs are applied to.
pub const RULE_STAGE: &str = r#"
[[channel]]
name = "a"
match = { request_type = "read" }

[[channel.object]]
name = "limit"
kind = "drl"
rate = "1MiB/s"
match = { request_context = "flush" }

[[channel.object]]
name = "ops"
kind = "drl"
rate = "100 ops/s"
match = { workflow = 3 }

[[channel]]
name = "b"
match = { workflow = 7 }
default_object = "pass"

[[channel.object]]
name = "pass"
kind = "noop"
"#;

/// The `rule_json` target: bytes that decode as one JSON rule (or an array
/// of rules) are applied to a small stage ([`RULE_STAGE`]) as one
/// transaction.
pub fn check_rule_json(data: &[u8]) -> Handled {
    let rules = if let Ok(rule) = serde_json::from_slice::<Rule>(data) {
        vec![rule]
    } else if let Ok(rules) = serde_json::from_slice::<Vec<Rule>>(data) {
        rules
    } else {
        return Handled::Skipped;
    };
    for rule in &rules {
        let json = serde_json::to_string(rule).expect("a rule serializes");
        let back: Rule = serde_json::from_str(&json)
            .unwrap_or_else(|e| panic!("rule does not parse back: {e}\n{json}"));
        assert_eq!(&back, rule, "rule changed through JSON: {json}");
    }
    let stage = Stage::from_policy_str(RULE_STAGE, "rule-stage.toml").expect("base stage builds");
    let before = stage.info();
    match stage.apply_all(&rules) {
        Err(e) => {
            assert!(!e.to_string().is_empty());
            assert_eq!(stage.info(), before, "a failed rule changed the stage: {e}");
            Handled::Rejected
        }
        Ok(()) => {
            let info = stage.info();
            // A lone configuration rule that succeeded is what the object
            // now reports.
            if let [Rule::Configure {
                channel,
                object,
                config,
            }] = rules.as_slice()
            {
                let o = info
                    .channels
                    .iter()
                    .find(|c| &c.name == channel)
                    .and_then(|c| c.objects.iter().find(|o| &o.name == object))
                    .expect("configured object exists");
                assert_eq!(o.config.as_ref(), Some(config));
            }
            let all: Vec<Rule> = Policy::parse(RULE_STAGE, "rule-stage.toml")
                .expect("base policy parses")
                .rules()
                .iter()
                .chain(&rules)
                .cloned()
                .collect();
            check_routes(&stage, &info, &all);
            serde_json::to_string(&info).expect("info serializes");
            Handled::Accepted
        }
    }
}

/// An error must point inside `text` and name the origin and a field.
fn check_error(e: &PolicyError, text: &str) {
    let shown = e.to_string();
    assert_eq!(e.origin, ORIGIN, "{shown}");
    assert!(!e.field.is_empty(), "no field: {shown}");
    assert!(!e.field.contains("$__"), "internal field name: {shown}");
    assert!(!e.message.is_empty(), "no message: {shown}");
    assert!(
        shown.starts_with(&format!("{ORIGIN}:{}:{}: {}: ", e.line, e.column, e.field)),
        "{shown}"
    );
    assert!(e.line >= 1 && e.column >= 1, "{shown}");
    let lines = text.split('\n').count();
    assert!(e.line <= lines, "line {} of {lines}: {shown}", e.line);
    let line = text.split('\n').nth(e.line - 1).unwrap_or("");
    assert!(
        e.column <= line.chars().count() + 1,
        "column {} past the end of line {:?}: {shown}",
        e.column,
        line
    );
}

/// A request that `pattern` matches (wildcards filled with fixed values).
fn context_of(pattern: &Pattern, size: u64) -> Context {
    Context::explicit(
        pattern.workflow.unwrap_or(1),
        pattern.request_type.unwrap_or(RequestType::WRITE),
        pattern.request_context.unwrap_or(RequestContext::NONE),
        size,
    )
}

/// Every route names an existing channel and object; requests matching a
/// channel pattern are routed; requests matching nothing go to the default
/// channel or pass.
fn check_routes(stage: &Stage, info: &StageInfo, rules: &[Rule]) {
    let mut contexts = vec![
        Context::explicit(0, RequestType::READ, RequestContext::NONE, 0),
        Context::explicit(7, RequestType::WRITE, RequestContext::NONE, 4096),
        Context::explicit(u64::MAX, RequestType::OPEN, RequestContext::NONE, u64::MAX),
    ];
    for rule in rules {
        match rule {
            Rule::MapChannel { pattern, .. }
            | Rule::UnmapChannel { pattern }
            | Rule::MapObject { pattern, .. }
            | Rule::UnmapObject { pattern, .. } => contexts.push(context_of(pattern, 1)),
            _ => {}
        }
    }
    for (pattern, _) in &info.channel_rules {
        let ctx = context_of(pattern, 2);
        assert!(
            stage.route(&ctx).is_some(),
            "{ctx:?} matches {pattern} but is not routed"
        );
    }
    contexts.truncate(MAX_CONTEXTS);
    for ctx in &contexts {
        match stage.route(ctx) {
            Some((channel, object)) => {
                let ch = info
                    .channels
                    .iter()
                    .find(|c| c.name == channel)
                    .unwrap_or_else(|| panic!("{ctx:?} routed to unknown channel {channel:?}"));
                assert!(
                    ch.objects.iter().any(|o| o.name == object),
                    "{ctx:?} routed to unknown object {object:?} of {channel:?}"
                );
            }
            None => assert!(
                info.default_channel.is_none(),
                "{ctx:?} unrouted despite default channel {:?}",
                info.default_channel
            ),
        }
    }
}

/// The `protocol` target: the bytes are a stream from a peer. They are fed
/// to the control protocol's frame decoder in chunks whose sizes the input
/// chooses (its first byte), every frame is decoded as a message, and the
/// blocking reader must cut the same frames. A message that decodes must
/// survive a round trip through a frame.
pub fn check_protocol(data: &[u8]) {
    use paio::protocol::{self, FrameDecoder, FrameError};
    const MAX: usize = 4096;
    let (chunk, stream) = match data.split_first() {
        Some((c, rest)) => (usize::from(*c).max(1), rest),
        None => return,
    };
    let mut incremental = Vec::new();
    let mut d = FrameDecoder::new(MAX);
    for piece in stream.chunks(chunk) {
        d.push(piece);
        loop {
            match d.next_frame() {
                Ok(Some(p)) => {
                    assert!(p.len() <= MAX, "a frame above the limit came through");
                    incremental.push(Some(p));
                }
                Ok(None) => break,
                Err(FrameError::TooLarge { len, max }) => {
                    assert!(len > max);
                    incremental.push(None);
                }
                Err(e) => panic!("the incremental decoder failed: {e}"),
            }
        }
    }
    // An oversized frame cut short by the end of the stream: the incremental
    // decoder reported it on its header, the blocking reader finds the
    // stream truncated while skipping it. Both are right.
    if d.skipping() {
        assert_eq!(incremental.pop(), Some(None));
    }
    let mut blocking = Vec::new();
    let mut r = stream;
    loop {
        match protocol::read_frame(&mut r, MAX) {
            Ok(Some(p)) => blocking.push(Some(p)),
            Ok(None) => break,
            Err(FrameError::TooLarge { .. }) => blocking.push(None),
            Err(FrameError::Truncated { .. }) => break,
            Err(e) => panic!("the blocking reader failed: {e}"),
        }
    }
    assert_eq!(
        incremental, blocking,
        "the two readers cut different frames"
    );
    for payload in incremental.into_iter().flatten() {
        if let Ok(msg) = protocol::decode(&payload) {
            let frame = protocol::encode(&msg);
            let back = protocol::decode(&frame[protocol::HEADER_LEN..])
                .unwrap_or_else(|e| panic!("a decoded message does not decode again: {e}"));
            // Floats in statistics may lose their last bit through JSON;
            // compare the JSON forms.
            assert_eq!(
                serde_json::to_value(&back).expect("serializes"),
                serde_json::to_value(&msg).expect("serializes"),
                "a message changed through a frame"
            );
        }
    }
}

/// The `env` target: the interposer's `PAIO_*` variables
/// ([`paio::env::parse`], run in every process under `paio run` and by
/// `paio run` itself before it starts the command). The input is lines of
/// `KEY=VALUE` (a line without `=` is a key with an empty value), in order,
/// as a process's environment lists them.
///
/// Invariants: the parse never panics and depends only on each key's last
/// entry; an error names a variable that was set (its last value non-empty)
/// and quotes that value; an accepted environment is within the documented
/// bounds (stage name, labels, interval, absolute paths).
pub fn check_env(data: &[u8]) -> Handled {
    use paio::env::{self, BoardSetting, ControlSocket};
    let Ok(text) = std::str::from_utf8(data) else {
        return Handled::Skipped;
    };
    let vars: Vec<(String, String)> = text
        .split('\n')
        .map(|line| match line.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (line.to_string(), String::new()),
        })
        .collect();
    let last = |key: &str| {
        vars.iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    // The same variables, each once with its last value, in first-seen order.
    let mut once: Vec<(String, String)> = Vec::new();
    for (k, _) in &vars {
        if !once.iter().any(|(seen, _)| seen == k) {
            once.push((k.clone(), last(k).unwrap_or_default().to_string()));
        }
    }
    let parsed = env::parse(&vars);
    assert_eq!(
        parsed,
        env::parse(&once),
        "earlier entries of a variable changed the result"
    );
    match parsed {
        Err(e) => {
            assert!(e.variable.starts_with("PAIO_"), "{e}");
            assert_eq!(
                last(e.variable),
                Some(e.value.as_str()),
                "the error quotes a value the variable does not have: {e}"
            );
            assert!(
                !e.value.is_empty(),
                "an empty value is unset, not wrong: {e}"
            );
            assert!(!e.reason.is_empty(), "{e}");
            Handled::Rejected
        }
        Ok(got) => {
            if let Some(name) = &got.stage_name {
                env::check_stage_name(name).expect("an accepted stage name passes its check");
            }
            assert!(got.labels.len() <= env::MAX_LABELS);
            for (i, (k, v)) in got.labels.iter().enumerate() {
                assert!(
                    !k.is_empty() && k.len() <= env::MAX_LABEL_KEY,
                    "label key {k:?}"
                );
                assert!(v.len() <= env::MAX_LABEL_VALUE, "label value of {k:?}");
                assert!(
                    !got.labels[..i].iter().any(|(seen, _)| seen == k),
                    "label {k:?} twice"
                );
            }
            assert!(!got.stats_interval.is_zero());
            if let Some(ControlSocket::Path(p)) = &got.control {
                assert!(p.is_absolute(), "control socket {p:?}");
            }
            if let BoardSetting::Path(p) = &got.board {
                assert!(p.is_absolute(), "board {p:?}");
            }
            for (_, prefix) in &got.file_classes {
                assert!(prefix.starts_with('/'), "file class prefix {prefix:?}");
            }
            Handled::Accepted
        }
    }
}
