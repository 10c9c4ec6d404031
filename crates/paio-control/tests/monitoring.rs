//! The shipped monitoring files name only what paiod exports: every metric
//! in the Grafana dashboard (packaging/grafana/paio-dashboard.json) and the
//! Prometheus rules (packaging/prometheus/paio-rules.yml) is a family
//! `metrics.rs` registers, or a recording rule the rules file defines. The
//! rules themselves are checked and unit-tested by promtool
//! (scripts/test-monitoring.sh).

use std::collections::BTreeSet;

const METRICS_RS: &str = include_str!("../src/metrics.rs");
const DASHBOARD: &str = include_str!("../../../packaging/grafana/paio-dashboard.json");
const RULES: &str = include_str!("../../../packaging/prometheus/paio-rules.yml");

/// The metric and recording-rule names in `text`.
fn names(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == ':'))
        .filter(|t| t.starts_with("paio_") || t.starts_with("paiod_") || t.starts_with("paio:"))
        .map(str::to_string)
        .collect()
}

/// The family a sample name belongs to (`_total`, `_bucket`, ... removed).
fn family(name: &str) -> &str {
    ["_bucket", "_total", "_count", "_sum"]
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .unwrap_or(name)
}

fn check(what: &str, used: &BTreeSet<String>) {
    let recorded: BTreeSet<&str> = RULES
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- record: "))
        .collect();
    for name in used {
        if name.contains(':') {
            assert!(
                recorded.contains(name.as_str()),
                "{what}: {name} is no recording rule"
            );
        } else {
            let f = family(name);
            assert!(
                METRICS_RS.contains(&format!("\"{f}\"")),
                "{what}: {name} is not a metric paiod exports"
            );
        }
    }
}

fn exprs(panel: &serde_json::Value, out: &mut Vec<String>) {
    if let Some(targets) = panel["targets"].as_array() {
        for t in targets {
            out.push(
                t["expr"]
                    .as_str()
                    .expect("a target has an expr")
                    .to_string(),
            );
        }
    }
    if let Some(inner) = panel["panels"].as_array() {
        for p in inner {
            exprs(p, out);
        }
    }
}

#[test]
fn the_dashboard_uses_only_exported_metrics_and_its_datasource_variable() {
    let d: serde_json::Value = serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
    let panels = d["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    let mut all = Vec::new();
    for p in panels {
        assert!(
            ids.insert(p["id"].as_u64().expect("a panel id")),
            "duplicate panel id"
        );
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
            let mut e = Vec::new();
            exprs(p, &mut e);
            assert!(!e.is_empty(), "panel {} has no query", p["title"]);
            all.extend(e);
        }
    }
    let used: BTreeSet<String> = all.iter().flat_map(|e| names(e)).collect();
    assert!(used.len() > 20, "{used:?}");
    check("dashboard", &used);
}

#[test]
fn the_rules_use_only_exported_metrics() {
    let used: BTreeSet<String> = RULES
        .lines()
        .filter(|l| l.trim_start().starts_with("expr:") || l.starts_with("          "))
        .flat_map(names)
        .collect();
    assert!(
        used.contains("paiod_config_last_reload_successful"),
        "{used:?}"
    );
    check("rules", &used);
}
