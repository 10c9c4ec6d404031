//! The example policies in `policies/` and the examples in
//! `docs/policies.md` must keep working.
//!
//! Fenced blocks of the documentation, by info string:
//! - ```` ```toml ````: must build a stage; later `json` blocks apply to it.
//! - ```` ```toml,error ````: must fail to build. A ```` ```text ```` block
//!   right after it that starts with `policy.toml:` must be the exact error.
//! - ```` ```json ````: one rule that must apply to the stage of the latest
//!   `toml` block (rules accumulate, in document order).
//! - ```` ```json,error ````: a rule that must fail to parse or to apply.
//!
//! Other blocks are not checked.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use paio::{Context, ObjectConfig, Policy, RequestContext, RequestType, Rule, Stage};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn example_files() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join("policies"))
        .expect("policies/ exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    // The RocksDB plugin's stage policy is an example too.
    v.push(root().join("integrations/rocksdb/paio-rocksdb.toml"));
    v.sort();
    v
}

#[test]
fn every_example_policy_builds() {
    let files = example_files();
    assert!(files.len() >= 4, "{files:?}");
    for path in files {
        let stage = Stage::from_policy_file(&path).unwrap_or_else(|e| panic!("{e}"));
        let info = stage.info();
        assert!(!info.channels.is_empty(), "{}: no channels", path.display());
        let policy = Policy::from_file(&path).unwrap();
        assert!(
            policy.name.is_some(),
            "{}: examples name their stage",
            path.display()
        );
    }
}

fn route(stage: &Stage, w: u64, t: RequestType, c: &str) -> Option<(String, String)> {
    let c = RequestContext::named(c).unwrap();
    stage.route(&Context::explicit(w, t, c, 4096))
}

fn to(channel: &str, object: &str) -> Option<(String, String)> {
    Some((channel.into(), object.into()))
}

#[test]
fn demo_policy_is_what_make_demo_expects() {
    let stage = Stage::from_policy_file(&root().join("policies/demo.toml")).unwrap();
    let info = stage.info();
    assert_eq!(info.identity.name, "demo");
    assert_eq!(info.default_channel.as_deref(), Some("fast"));
    let limited = info.channels.iter().find(|c| c.name == "limited").unwrap();
    let drl = limited.objects.iter().find(|o| o.name == "drl").unwrap();
    assert_eq!(drl.kind, "drl");
    let fast = info.channels.iter().find(|c| c.name == "fast").unwrap();
    assert_eq!(
        fast.objects.iter().find(|o| o.name == "noop").unwrap().kind,
        "noop"
    );
    use RequestType as T;
    assert_eq!(route(&stage, 1, T::WRITE, "bulk"), to("limited", "drl"));
    assert_eq!(route(&stage, 1, T::READ, "bulk"), to("limited", "drl"));
    assert_eq!(
        route(&stage, 1, T::WRITE, "interactive"),
        to("fast", "noop")
    );
    assert_eq!(route(&stage, 1, T::WRITE, "none"), to("fast", "noop"));
}

#[test]
fn example_policies_route_as_their_comments_say() {
    use RequestType as T;
    let load = |name: &str| Stage::from_policy_file(&root().join("policies").join(name)).unwrap();

    // The RocksDB plugin's layout, which paiod's SILK policy relies on.
    let silk =
        Stage::from_policy_file(&root().join("integrations/rocksdb/paio-rocksdb.toml")).unwrap();
    // Reads of flushes and compactions have their own objects, so the
    // rate keys limit writes as RocksDB's limiter does (docs/rocksdb.md).
    for (rt, ctx, channel, object) in [
        (T::WRITE, "flush", "flush", "limit"),
        (T::READ, "flush", "flush", "reads"),
        (T::WRITE, "compaction_l0", "compaction", "l0"),
        (T::WRITE, "compaction_ln", "compaction", "ln"),
        (T::READ, "compaction_l0", "compaction", "reads"),
        (T::READ, "compaction_ln", "compaction", "reads"),
        (T::READ, "foreground", "foreground", "default"),
        (T::WRITE, "unthrottled", "unthrottled", "default"),
    ] {
        assert_eq!(
            route(&silk, 1, rt, ctx),
            to(channel, object),
            "{rt:?} {ctx}"
        );
    }
    assert_eq!(route(&silk, 1, T::READ, "none"), to("other", "default"));

    let tenants = load("per-workflow.toml");
    assert_eq!(route(&tenants, 1, T::READ, "none"), to("tenant-1", "reads"));
    assert_eq!(
        route(&tenants, 1, T::WRITE, "none"),
        to("tenant-1", "writes")
    );
    assert_eq!(
        route(&tenants, 1, T::FSYNC, "none"),
        to("tenant-1", "default")
    );
    assert_eq!(route(&tenants, 2, T::READ, "none"), to("tenant-2", "all"));
    assert_eq!(
        route(&tenants, 3, T::WRITE, "none"),
        to("best-effort", "share")
    );

    // Every request of a background program through one priority object;
    // the shared variant also bounds all such programs together.
    for (name, shared) in [
        ("background.toml", None),
        ("background-shared.toml", Some(2)),
    ] {
        let stage = load(name);
        assert_eq!(route(&stage, 1, T::READ, "none"), to("background", "yield"));
        assert_eq!(
            route(&stage, 7, T::FSYNC, "none"),
            to("background", "yield")
        );
        let info = stage.info();
        let object = info.channels[0]
            .objects
            .iter()
            .find(|o| o.name == "yield")
            .unwrap();
        let Some(ObjectConfig::Priority(p)) = &object.config else {
            panic!("{name}: {object:?} is not a priority object");
        };
        assert_eq!((p.depth, p.busy_depth), (4, 1), "{name}");
        assert_eq!(p.shared_busy_depth, shared, "{name}");
    }

    let meta = load("metadata-ops.toml");
    assert_eq!(route(&meta, 1, T::OPEN, "none"), to("metadata", "lookups"));
    assert_eq!(route(&meta, 1, T::STAT, "none"), to("metadata", "lookups"));
    assert_eq!(
        route(&meta, 1, T::UNLINK, "none"),
        to("metadata", "deletes")
    );
    assert_eq!(route(&meta, 1, T::READ, "none"), None);
}

/// A fenced block of the documentation.
struct Block {
    info: String,
    body: String,
    line: usize,
}

fn fenced_blocks(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in markdown.lines().enumerate() {
        let trimmed = line.trim();
        match &mut open {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    open = Some(Block {
                        info: info.trim().to_string(),
                        body: String::new(),
                        line: i + 1,
                    });
                }
            }
            Some(block) => {
                if trimmed == "```" {
                    blocks.push(open.take().expect("open block"));
                } else {
                    block.body.push_str(line);
                    block.body.push('\n');
                }
            }
        }
    }
    assert!(open.is_none(), "docs/policies.md: unclosed code fence");
    blocks
}

#[test]
fn every_example_in_the_documentation_works() {
    let path = root().join("docs/policies.md");
    let markdown = std::fs::read_to_string(&path).expect("docs/policies.md exists");
    let blocks = fenced_blocks(&markdown);
    let mut stage: Option<Stage> = None;
    let mut last_error: Option<String> = None;
    let (mut built, mut failed, mut compared) = (0, 0, 0);
    let mut rules_shown = BTreeSet::new();
    for b in &blocks {
        let at = format!("docs/policies.md:{}", b.line);
        let previous_error = last_error.take();
        match b.info.as_str() {
            "toml" => {
                let s = Stage::from_policy_str(&b.body, "policy.toml")
                    .unwrap_or_else(|e| panic!("{at}: example does not build: {e}"));
                stage = Some(s);
                built += 1;
            }
            "toml,error" => {
                let e = Stage::from_policy_str(&b.body, "policy.toml")
                    .err()
                    .unwrap_or_else(|| panic!("{at}: error example builds"));
                last_error = Some(e.to_string());
                failed += 1;
            }
            "text" if b.body.starts_with("policy.toml:") => {
                let expected = previous_error
                    .unwrap_or_else(|| panic!("{at}: error text without a toml,error block"));
                assert_eq!(b.body.trim_end(), expected, "{at}: error text is stale");
                compared += 1;
            }
            "json" => {
                let rule: Rule = serde_json::from_str(&b.body)
                    .unwrap_or_else(|e| panic!("{at}: rule does not parse: {e}"));
                let s = stage
                    .as_ref()
                    .unwrap_or_else(|| panic!("{at}: no toml example before this rule"));
                s.apply(&rule)
                    .unwrap_or_else(|e| panic!("{at}: rule does not apply: {e}"));
                let v = serde_json::to_value(&rule).unwrap();
                rules_shown.insert(v["rule"].as_str().unwrap().to_string());
            }
            "json,error" => {
                if let Ok(rule) = serde_json::from_str::<Rule>(&b.body) {
                    let s = stage.as_ref().expect("a stage for the rule");
                    assert!(s.apply(&rule).is_err(), "{at}: error rule applies");
                }
            }
            _ => {}
        }
    }
    assert!(built >= 8, "only {built} toml examples build");
    assert!(failed >= 3, "only {failed} error examples");
    assert!(compared >= 1, "no error message shown");
    let all = [
        "create_channel",
        "remove_channel",
        "create_object",
        "remove_object",
        "set_classifiers",
        "map_channel",
        "unmap_channel",
        "set_default_channel",
        "map_object",
        "unmap_object",
        "set_default_object",
        "configure",
    ];
    let missing: Vec<&str> = all
        .iter()
        .copied()
        .filter(|r| !rules_shown.contains(*r))
        .collect();
    assert!(
        missing.is_empty(),
        "rules without a JSON example: {missing:?}"
    );
}

/// docs/criticality.md's policy examples are policies that build.
#[test]
fn criticality_doc_examples_build() {
    let path = root().join("docs/criticality.md");
    let markdown = std::fs::read_to_string(&path).expect("docs/criticality.md exists");
    let blocks: Vec<Block> = fenced_blocks(&markdown)
        .into_iter()
        .filter(|b| b.info == "toml")
        .collect();
    assert!(
        !blocks.is_empty(),
        "docs/criticality.md has no toml example"
    );
    for b in &blocks {
        Stage::from_policy_str(&b.body, "policy.toml")
            .unwrap_or_else(|e| panic!("docs/criticality.md:{}: does not build: {e}", b.line));
    }
}
