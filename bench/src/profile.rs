//! `profile`: the paper's per-step profile of one request (§9.1, "context
//! creation, channel selection, object selection, obj_enf"), from tight
//! single-thread loops.
//!
//! The public API does not expose a stage's channel selection or object
//! selection on their own (they are private methods of the routing table and
//! the channel; [`Stage::route`] does both but allocates two `String`s, so
//! it is not the hot path). What is timed instead:
//! - the same code the stage runs for each step, outside the stage: a
//!   [`Matcher`] compiled from equivalent patterns (channel selection and
//!   object selection are each one `Matcher::find` plus a default fallback),
//!   [`EnforcementObject::enforce`] of a [`Noop`] through a `dyn` pointer,
//!   and [`ObjectRecorder::record`] (statistics);
//! - whole [`Stage::enforce`] calls in configurations that isolate the
//!   steps: no channel (routing-table access + an empty lookup + the
//!   unmatched counter), one channel with no object rule, one channel with an
//!   object rule, 64 channels with 449 channel rules over all 8 classifier
//!   combinations (first-probe hit and 8-probe worst case), and a DRL object
//!   that never makes a request wait.
//!
//! Every value is nanoseconds per call including the loop (see the `loop`
//! row), the median of several runs. Loops of tiny calls overlap successive
//! iterations in the CPU, so the steps do not add up exactly to the whole.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use paio::context::current_workflow;
use paio::differentiation::{Matcher, Pattern};
use paio::object::{Drl, DrlConfig, Noop};
use paio::stats::ObjectRecorder;
use paio::{
    Context, EnforceError, EnforcementObject, ObjectConfig, Outcome, Rate, Request, RequestContext,
    RequestType, Rule, Stage,
};

use crate::env::{load1, RunInfo, StealMeter};
use crate::util::{fmt, text_table, Csv, Summary};
use crate::Target;

/// Parameters of `profile`.
#[derive(Debug, Clone)]
pub struct ProfileParams {
    /// Measured runs per item.
    pub runs: usize,
    /// Length of one run of one item, seconds.
    pub seconds: f64,
}

impl ProfileParams {
    /// One line for the CSV header.
    pub fn describe(&self) -> String {
        format!("runs={} seconds_per_run={}", self.runs, self.seconds)
    }
}

type Body<'a> = Box<dyn FnMut(u64) -> Duration + 'a>;

struct Item<'a> {
    name: &'static str,
    what: &'static str,
    body: Body<'a>,
}

/// Builds an item whose loop evaluates `$e` `n` times.
macro_rules! item {
    ($items:ident, $name:expr, $what:expr, $e:expr) => {
        $items.push(Item {
            name: $name,
            what: $what,
            body: Box::new(move |n: u64| {
                let start = Instant::now();
                for _ in 0..n {
                    let _ = black_box($e);
                }
                start.elapsed()
            }),
        })
    };
}

/// Iterations that take about `target` seconds.
fn calibrate(body: &mut Body<'_>, target: f64) -> u64 {
    let mut n: u64 = 1000;
    loop {
        let d = body(n).as_secs_f64();
        if d >= 0.02 || n >= 1 << 36 {
            return ((n as f64 * target / d.max(1e-9)) as u64).max(1000);
        }
        n *= 4;
    }
}

fn one_channel(tid: u64, object_rule: bool, drl: bool) -> Stage {
    let stage = Stage::builder("bench-profile").build();
    let config = if drl {
        // Never makes a request wait: 10^12 tokens/s, default burst 10^10.
        ObjectConfig::Drl(DrlConfig::new(Rate::ops_per_sec(1_000_000_000_000)))
    } else {
        ObjectConfig::Noop
    };
    let mut rules = vec![
        Rule::CreateChannel { name: "c".into() },
        Rule::CreateObject {
            channel: "c".into(),
            name: "obj".into(),
            config,
        },
        Rule::MapChannel {
            pattern: Pattern {
                workflow: Some(tid),
                ..Pattern::ANY
            },
            channel: "c".into(),
        },
    ];
    rules.push(if object_rule {
        Rule::MapObject {
            channel: "c".into(),
            pattern: Pattern {
                request_type: Some(RequestType::WRITE),
                ..Pattern::ANY
            },
            object: "obj".into(),
        }
    } else {
        Rule::SetDefaultObject {
            channel: "c".into(),
            object: "obj".into(),
        }
    });
    stage.apply_all(&rules).expect("valid rules");
    stage
}

/// The 64-channel configuration's names.
struct Names {
    ctx: Vec<RequestContext>,
    ty: Vec<RequestType>,
}

fn names() -> Names {
    Names {
        ctx: (0..64)
            .map(|i| RequestContext::named(&format!("bench-ctx-{i}")).expect("interns"))
            .collect(),
        ty: (0..64)
            .map(|i| RequestType::named(&format!("bench-type-{i}")).expect("interns"))
            .collect(),
    }
}

/// Channel patterns over all 8 classifier combinations: 7 × 64 specific
/// ones (workflows 1000+i..7000+i, contexts and custom types of channel i)
/// plus `{any}`. Target: channel index, 64 for `{any}`.
fn channel_patterns(n: &Names) -> Vec<(Pattern, u32)> {
    let mut v = Vec::new();
    let w = |base: u64, i: usize| Some(base + i as u64);
    for i in 0..64 {
        let (c, t) = (Some(n.ctx[i]), Some(n.ty[i]));
        let write = Some(RequestType::WRITE);
        for p in [
            (w(1000, i), write, c),
            (w(2000, i), None, c),
            (w(3000, i), write, None),
            (w(4000, i), None, None),
            (None, write, c),
            (None, None, c),
            (None, t, None),
        ] {
            v.push((
                Pattern {
                    workflow: p.0,
                    request_type: p.1,
                    request_context: p.2,
                    ..Pattern::ANY
                },
                i as u32,
            ));
        }
    }
    v.push((Pattern::ANY, 64));
    v
}

/// Object patterns of each channel of the 64-channel stage: 16 context
/// patterns, 16 type patterns, `{any}` → object 4.
fn object_patterns(n: &Names) -> Vec<(Pattern, u32)> {
    let mut v = Vec::new();
    for j in 0..16 {
        v.push((
            Pattern {
                request_context: Some(n.ctx[j]),
                ..Pattern::ANY
            },
            (j % 4) as u32,
        ));
        v.push((
            Pattern {
                request_type: Some(n.ty[j]),
                ..Pattern::ANY
            },
            (j % 4) as u32,
        ));
    }
    v.push((Pattern::ANY, 4));
    v
}

fn many_channels(n: &Names) -> Stage {
    let stage = Stage::builder("bench-profile-64").build();
    let channel = |i: u32| {
        if i == 64 {
            "any".to_string()
        } else {
            format!("c{i}")
        }
    };
    let object = |j: u32| {
        if j == 4 {
            "noop".to_string()
        } else {
            format!("o{j}")
        }
    };
    let mut rules = Vec::new();
    for i in 0..=64 {
        rules.push(Rule::CreateChannel { name: channel(i) });
        for j in 0..=4 {
            rules.push(Rule::CreateObject {
                channel: channel(i),
                name: object(j),
                config: ObjectConfig::Noop,
            });
        }
        for (pattern, j) in object_patterns(n) {
            rules.push(Rule::MapObject {
                channel: channel(i),
                pattern,
                object: object(j),
            });
        }
    }
    for (pattern, i) in channel_patterns(n) {
        rules.push(Rule::MapChannel {
            pattern,
            channel: channel(i),
        });
    }
    stage.apply_all(&rules).expect("valid rules");
    stage
}

/// Two do-nothing calling conventions, to show why
/// [`EnforcementObject::enforce`] returns a two-register
/// `Result<u64, EnforceError>`: the 48-byte `Result<Outcome, String-pair>` it
/// returned before is returned through memory at every layer.
trait ReturnProbe {
    /// Returns a 48-byte result, as `enforce` did before.
    fn big(&self, ctx: &Context, data: Option<&[u8]>) -> Result<Outcome, (String, String)>;
    /// Returns a register-sized result.
    fn small(&self, ctx: &Context, data: Option<&[u8]>) -> Result<u64, Box<EnforceError>>;
}

/// Passes everything, like [`Noop`].
struct Pass;

impl ReturnProbe for Pass {
    fn big(&self, _ctx: &Context, _data: Option<&[u8]>) -> Result<Outcome, (String, String)> {
        Ok(Outcome::PASS)
    }
    fn small(&self, _ctx: &Context, _data: Option<&[u8]>) -> Result<u64, Box<EnforceError>> {
        Ok(0)
    }
}

/// Size in bytes of what `EnforcementObject::enforce` returns.
pub fn enforce_result_size() -> usize {
    std::mem::size_of::<Result<u64, EnforceError>>()
}

/// One measured item.
#[derive(Debug, Clone)]
pub struct ItemResult {
    /// Short name.
    pub name: &'static str,
    /// What the loop body does.
    pub what: &'static str,
    /// Iterations per run.
    pub iters: u64,
    /// ns per iteration of each run.
    pub ns: Vec<f64>,
}

/// Runs `profile`, writes `profile.csv` into `out`, prints the summary, and
/// returns the target checks.
pub fn run(p: &ProfileParams, info: &RunInfo, out: &std::path::Path) -> Vec<Target> {
    let size_note = format!(
        "size_of::<Result<u64, EnforceError>>() = {} bytes (what obj_enf returns, in two registers)",
        enforce_result_size()
    );
    let header = info.csv_header(
        "profile: ns per operation of each step of one request, single thread, tight loops",
        &p.describe(),
        &[
            "channel and object selection are not separately reachable through the public API: matcher_* rows time paio::differentiation::Matcher::find (the code Stage::enforce runs for both steps) on equivalent patterns",
            "values include the loop and black_box overhead (row `loop`); record=run rows are single runs, median/min/max summarize them; items are interleaved within each run",
            &size_note,
        ],
    );
    let load = load1();
    let tid = current_workflow();
    let n = names();
    let buf4k = vec![0x5Au8; 4096];
    let stage_empty = Stage::builder("bench-profile-empty").build();
    let stage_1 = one_channel(tid, false, false);
    let stage_1o = one_channel(tid, true, false);
    let stage_drl = one_channel(tid, false, true);
    let stage_64 = many_channels(&n);
    let noop: Arc<dyn EnforcementObject> = Arc::new(Noop);
    let drl: Arc<dyn EnforcementObject> = Arc::new(
        Drl::new(
            DrlConfig::new(Rate::ops_per_sec(1_000_000_000_000)),
            paio::clock::monotonic(),
        )
        .expect("valid config"),
    );
    let recorder = ObjectRecorder::default();
    let m_one = Matcher::compile([(
        &Pattern {
            workflow: Some(tid),
            ..Pattern::ANY
        },
        0u32,
    )]);
    let m_empty: Matcher<u32> = Matcher::default();
    let cp = channel_patterns(&n);
    let m_many = Matcher::compile(cp.iter().map(|(p, t)| (p, *t)));
    let ctx = Context::new(RequestType::WRITE, 0);
    let ctx4k = Context::new(RequestType::WRITE, 4096);
    // Matches only `{any}`: 8 probes, then 3 object probes.
    let ctx_any = Context::explicit(7, RequestType::WRITE, RequestContext::NONE, 0);
    // Matches the most specific table first, and its object on the first probe.
    let ctx_first = Context::explicit(1005, RequestType::WRITE, n.ctx[5], 0);
    assert_eq!(
        stage_64.route(&ctx_any),
        Some(("any".to_string(), "noop".to_string()))
    );
    assert_eq!(
        stage_64.route(&ctx_first),
        Some(("c5".to_string(), "o1".to_string()))
    );
    assert_eq!(stage_1.route(&ctx), Some(("c".into(), "obj".into())));
    assert_eq!(stage_empty.route(&ctx), None);

    let (s0, s1, s1o, sd, s64) = (&stage_empty, &stage_1, &stage_1o, &stage_drl, &stage_64);
    let (noop, drl, rec) = (&noop, &drl, &recorder);
    let (m_one, m_empty, m_many) = (&m_one, &m_empty, &m_many);
    let buf4k = &buf4k[..];
    let mut items: Vec<Item<'_>> = Vec::new();
    item!(items, "loop", "empty loop: black_box(())", black_box(()));
    item!(
        items,
        "instant_now",
        "std::time::Instant::now()",
        Instant::now()
    );
    item!(
        items,
        "context_new",
        "Context::new(WRITE, 0): cached thread id + thread-local request context",
        Context::new(black_box(RequestType::WRITE), black_box(0))
    );
    item!(
        items,
        "context_explicit",
        "Context::explicit(...): plain struct",
        Context::explicit(
            black_box(1),
            black_box(RequestType::WRITE),
            black_box(RequestContext::NONE),
            black_box(0)
        )
    );
    item!(
        items,
        "matcher_1rule",
        "channel selection as in micro: Matcher::find, 1 workflow pattern, hit",
        m_one.find(black_box(&ctx))
    );
    item!(
        items,
        "matcher_empty",
        "object selection with no object rule: Matcher::find on an empty matcher (then default)",
        m_empty.find(black_box(&ctx))
    );
    item!(
        items,
        "matcher_449_first",
        "Matcher::find, 449 patterns in 8 tables, hit in the first table",
        m_many.find(black_box(&ctx_first))
    );
    item!(
        items,
        "matcher_449_any",
        "Matcher::find, 449 patterns in 8 tables, only {any} matches (8 probes)",
        m_many.find(black_box(&ctx_any))
    );
    item!(
        items,
        "noop_enforce",
        "obj_enf: Noop::enforce through &dyn EnforcementObject",
        black_box(&**noop).enforce(black_box(&ctx), &mut Request::new(None))
    );
    item!(
        items,
        "noop_enforce_4k",
        "obj_enf: Noop::enforce through &dyn, 4 KiB data",
        black_box(&**noop).enforce(black_box(&ctx4k), &mut Request::new(Some(black_box(buf4k))))
    );
    let probe: &dyn ReturnProbe = &Pass;
    item!(
        items,
        "dyn_big_result",
        "a do-nothing dyn call returning a 48-byte Result<Outcome, (String, String)>",
        black_box(probe).big(black_box(&ctx), None)
    );
    item!(
        items,
        "dyn_small_result",
        "the same dyn call returning Result<u64, Box<EnforceError>> (two registers, like obj_enf)",
        black_box(probe).small(black_box(&ctx), None)
    );
    item!(
        items,
        "recorder_record",
        "statistics: ObjectRecorder::record(size, 0) (per-thread counter slot)",
        rec.record(black_box(0), black_box(0))
    );
    item!(
        items,
        "stage_unmatched",
        "Stage::enforce, no channels: table access + empty lookup + unmatched counter",
        s0.enforce(black_box(&ctx), None)
    );
    item!(
        items,
        "stage_1ch",
        "Stage::enforce, 1 channel (workflow rule), default noop object, prebuilt context",
        s1.enforce(black_box(&ctx), None)
    );
    item!(
        items,
        "stage_1ch_objrule",
        "Stage::enforce, 1 channel, object chosen by a request_type rule",
        s1o.enforce(black_box(&ctx), None)
    );
    item!(
        items,
        "stage_64ch_first",
        "Stage::enforce, 65 channels / 449 channel rules / 33 object rules, first-probe hits",
        s64.enforce(black_box(&ctx_first), None)
    );
    item!(
        items,
        "stage_64ch_any",
        "Stage::enforce, same stage, request matching only {any} (8 + 3 probes)",
        s64.enforce(black_box(&ctx_any), None)
    );
    item!(
        items,
        "full_0b",
        "Context::new + Stage::enforce, 1 channel, 0 B (the micro loop body)",
        s1.enforce(
            black_box(&Context::new(RequestType::WRITE, black_box(0))),
            None
        )
    );
    let mut h1 = s1.handle();
    item!(
        items,
        "handle_full_0b",
        "Context::new + StageHandle::enforce (per-thread handle), 1 channel, 0 B",
        h1.enforce(
            black_box(&Context::new(RequestType::WRITE, black_box(0))),
            None
        )
    );
    let mut h1p = s1.handle();
    item!(
        items,
        "handle_1ch",
        "StageHandle::enforce alone, 1 channel, prebuilt context",
        h1p.enforce(black_box(&ctx), None)
    );
    item!(
        items,
        "full_4k",
        "Context::new + Stage::enforce, 1 channel, 4 KiB buffer as data",
        s1.enforce(
            black_box(&Context::new(RequestType::WRITE, black_box(4096))),
            Some(black_box(buf4k))
        )
    );
    item!(
        items,
        "drl_enforce",
        "Drl::enforce through &dyn, never waits (clock read + mutex)",
        black_box(&**drl).enforce(black_box(&ctx), &mut Request::new(None))
    );
    item!(
        items,
        "stage_1ch_drl",
        "Stage::enforce, 1 channel, DRL object that never waits",
        sd.enforce(black_box(&ctx), None)
    );
    item!(
        items,
        "stage_route",
        "Stage::route (both selections, allocates the two names)",
        s1.route(black_box(&ctx))
    );

    let iters: Vec<u64> = items
        .iter_mut()
        .map(|it| calibrate(&mut it.body, p.seconds))
        .collect();
    let mut results: Vec<ItemResult> = items
        .iter()
        .zip(&iters)
        .map(|(it, &n)| ItemResult {
            name: it.name,
            what: it.what,
            iters: n,
            ns: Vec::new(),
        })
        .collect();
    // Interleave items across runs so background load spreads evenly.
    let mut steal = Vec::new();
    for run in 0..p.runs {
        eprintln!(
            "profile run {}/{} (load {})",
            run + 1,
            p.runs,
            fmt(load1(), 2)
        );
        let meter = StealMeter::start();
        for (it, r) in items.iter_mut().zip(results.iter_mut()) {
            let d = (it.body)(r.iters);
            r.ns.push(d.as_nanos() as f64 / r.iters as f64);
        }
        steal.push(meter.percent());
    }
    drop(items);

    let mut csv = Csv::new(
        header,
        &[
            "record",
            "item",
            "description",
            "run",
            "iters",
            "ns_per_op",
            "load1",
            "steal_pct",
        ],
    );
    let mut table = Vec::new();
    let med = |name: &str| {
        results
            .iter()
            .find(|r| r.name == name)
            .map_or(f64::NAN, |r| Summary::of(&r.ns).median)
    };
    for r in &results {
        for (i, v) in r.ns.iter().enumerate() {
            csv.push(vec![
                "run".into(),
                r.name.into(),
                r.what.into(),
                (i + 1).to_string(),
                r.iters.to_string(),
                fmt(*v, 3),
                fmt(load, 2),
                fmt(steal[i], 2),
            ]);
        }
        let s = Summary::of(&r.ns);
        for (k, v) in [("median", s.median), ("min", s.min), ("max", s.max)] {
            csv.push(vec![
                k.into(),
                r.name.into(),
                r.what.into(),
                String::new(),
                r.iters.to_string(),
                fmt(v, 3),
                fmt(load, 2),
                String::new(),
            ]);
        }
        table.push(vec![
            r.name.to_string(),
            fmt(s.median, 2),
            format!("{}–{}", fmt(s.min, 2), fmt(s.max, 2)),
            r.what.to_string(),
        ]);
    }
    println!("\n== profile: {} ==", p.describe());
    print!(
        "{}",
        text_table(&["item", "ns/op", "min–max", "what"], &table)
    );
    let table_access = med("stage_unmatched") - med("recorder_record") - med("matcher_empty");
    let steps = [
        ("context creation (context_new)", med("context_new")),
        (
            "routing-table access (stage_unmatched - recorder_record - matcher_empty)",
            table_access,
        ),
        (
            "channel selection, 1 rule (matcher_1rule)",
            med("matcher_1rule"),
        ),
        (
            "object selection, default (matcher_empty)",
            med("matcher_empty"),
        ),
        ("obj_enf noop (noop_enforce)", med("noop_enforce")),
        ("statistics (recorder_record)", med("recorder_record")),
    ];
    let sum: f64 = steps.iter().map(|s| s.1).sum();
    println!("\n  per-step estimate of the micro's 0 B request (medians, ns):");
    for (k, v) in &steps {
        println!("    {k:<76} {:>7}", fmt(*v, 2));
    }
    println!("    {:<76} {:>7}", "sum of steps", fmt(sum, 2));
    println!(
        "    (obj_enf returns Result<u64, EnforceError>: {} bytes, two registers)",
        enforce_result_size()
    );
    println!(
        "    {:<76} {:>7}",
        "measured whole (full_0b)",
        fmt(med("full_0b"), 2)
    );
    let path = out.join("profile.csv");
    match csv.write(&path) {
        Ok(()) => println!("  wrote {}", path.display()),
        Err(e) => eprintln!("  cannot write {}: {e}", path.display()),
    }
    let full = med("full_0b");
    let enforce = med("stage_1ch");
    let handle_full = med("handle_full_0b");
    vec![
        Target::new(
            "profile: Context::new + StageHandle::enforce, 0 B noop, 1 thread (handle_full_0b)",
            "<= 15 ns",
            format!("{} ns median", fmt(handle_full, 2)),
            handle_full <= 15.0,
        ),
        Target::new(
            "profile: Context::new + Stage::enforce, 0 B noop, 1 thread (full_0b)",
            "<= 15 ns",
            format!("{} ns median", fmt(full, 2)),
            full <= 15.0,
        ),
        Target::new(
            "profile: Stage::enforce alone, 0 B noop, prebuilt context (stage_1ch)",
            "<= 15 ns",
            format!("{} ns median", fmt(enforce, 2)),
            enforce <= 15.0,
        ),
    ]
}
