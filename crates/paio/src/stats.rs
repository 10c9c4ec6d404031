//! Statistics: per-object counters and wait-time histograms, aggregated per
//! channel and per stage at collection time.
//!
//! Hot-path cost: recording a request touches only the calling thread's own
//! cache line of the object's counters (plain loads and stores, no locked
//! instruction) — see [`ObjectCounters`] — and, for a completed two-phase
//! request, two words of the thread's own latency buckets, the same way
//! (`SlotHistogram`). Requests that waited also update the object's wait
//! histogram with atomic adds; they have just slept, so the cost does not
//! matter. Channel and stage figures are sums computed by
//! [`crate::Stage::collect`], never maintained per request.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Threads that own a counter slot; later threads share one atomic slot.
pub const COUNTER_SLOTS: usize = 64;
const OVERFLOW: usize = COUNTER_SLOTS;

#[repr(align(64))]
#[derive(Default)]
struct Slot {
    ops: AtomicU64,
    bytes: AtomicU64,
}

/// Operation and byte counters of one enforcement object, one cache line per
/// thread.
///
/// Each of the first [`COUNTER_SLOTS`] live threads owns a slot and updates it
/// with a relaxed load and store (no other thread writes it while it is
/// owned); further threads share an overflow slot updated with atomic adds.
/// A slot is handed to a new thread when its owner exits, with its counts, so
/// totals are exact and never go backwards.
pub struct ObjectCounters {
    slots: Box<[Slot]>,
}

impl Default for ObjectCounters {
    fn default() -> Self {
        Self {
            slots: (0..=COUNTER_SLOTS).map(|_| Slot::default()).collect(),
        }
    }
}

impl std::fmt::Debug for ObjectCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (ops, bytes) = self.totals();
        f.debug_struct("ObjectCounters")
            .field("ops", &ops)
            .field("bytes", &bytes)
            .finish()
    }
}

/// Adds `n` to a word of counter slot `slot`. A thread's own slot is
/// written only by that thread, so a plain load and store cannot lose an
/// update and avoid a locked instruction; the shared overflow slot takes an
/// atomic add.
#[inline]
fn add_to_slot_word(word: &AtomicU64, slot: usize, n: u64) {
    if slot == OVERFLOW {
        word.fetch_add(n, Ordering::Relaxed);
    } else {
        word.store(
            word.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }
}

impl ObjectCounters {
    /// Counts one request of `bytes` bytes.
    #[inline]
    pub fn record(&self, bytes: u64) {
        self.record_at(crate::context::with_thread(thread_slot), bytes);
    }

    /// [`ObjectCounters::record`] with the calling thread's slot index,
    /// already looked up (see [`thread_slot`]).
    #[inline(always)]
    pub(crate) fn record_at(&self, i: usize, bytes: u64) {
        let slot = &self.slots[i];
        add_to_slot_word(&slot.ops, i, 1);
        add_to_slot_word(&slot.bytes, i, bytes);
    }

    /// Total (operations, bytes) recorded so far.
    pub fn totals(&self) -> (u64, u64) {
        self.slots.iter().fold((0, 0), |(o, b), s| {
            (
                o + s.ops.load(Ordering::Relaxed),
                b.wrapping_add(s.bytes.load(Ordering::Relaxed)),
            )
        })
    }
}

/// Bitmap of owned slots. Lock-free, so a process that forks while another
/// thread is claiming a slot cannot leave the child with a held lock.
static SLOTS_IN_USE: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Releases the thread's slot when it exits; registered when the thread
    /// claims one. (The slot index itself lives in the thread's
    /// [`crate::context::ThreadState`], which has no destructor.)
    static SLOT_OWNER: SlotOwner = const { SlotOwner };
}
/// The slot index of a thread that has not recorded anything yet.
pub(crate) const UNASSIGNED: usize = usize::MAX;

/// Releases the thread's slot when the thread exits.
struct SlotOwner;

impl Drop for SlotOwner {
    fn drop(&mut self) {
        let i = crate::context::with_thread(|t| t.slot.replace(OVERFLOW));
        if i < COUNTER_SLOTS {
            // Release: this thread's last stores to the slot happen before
            // the next owner's claim (Acquire) of it.
            SLOTS_IN_USE.fetch_and(!(1u64 << i), Ordering::Release);
        }
    }
}

/// The counter slot index of the thread whose state `t` is, claimed on first
/// use.
#[inline]
pub(crate) fn thread_slot(t: &crate::context::ThreadState) -> usize {
    let i = t.slot.get();
    if i != UNASSIGNED {
        return i;
    }
    assign_slot(t)
}

/// Claims the lowest free slot, or the overflow slot when none is free.
fn claim_slot() -> usize {
    let mut used = SLOTS_IN_USE.load(Ordering::Relaxed);
    loop {
        let free = (!used).trailing_zeros() as usize;
        if free >= COUNTER_SLOTS {
            return OVERFLOW;
        }
        match SLOTS_IN_USE.compare_exchange_weak(
            used,
            used | 1u64 << free,
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            Ok(_) => return free,
            Err(now) => used = now,
        }
    }
}

#[cold]
fn assign_slot(t: &crate::context::ThreadState) -> usize {
    // Registering the owner may fail during thread exit; then the thread uses
    // the shared overflow slot, which is always correct.
    let registered = SLOT_OWNER.try_with(|_| ()).is_ok();
    let i = if registered { claim_slot() } else { OVERFLOW };
    t.slot.set(i);
    i
}

/// Sub-buckets per power of two in [`WaitHistogram`] (relative error ≤ 1/8).
const SUB_BITS: u32 = 3;
const SUB: usize = 1 << SUB_BITS;
/// Buckets: exact values 0..8, then 8 per octave up to 2⁶⁴ ns.
const BUCKETS: usize = SUB + (64 - SUB_BITS as usize) * SUB;
/// Buckets of a wait or latency histogram: the most pairs a sparse
/// histogram of a report ([`Histograms`], [`StageStats::critical_latency`])
/// has.
pub const HISTOGRAM_BUCKETS: usize = BUCKETS;

/// A log-linear histogram of wait times in nanoseconds (8 buckets per power of
/// two, so a reported percentile is within 12.5 % above the true value).
pub struct WaitHistogram {
    buckets: Box<[AtomicU64]>,
    sum_ns: AtomicU64,
}

impl Default for WaitHistogram {
    fn default() -> Self {
        Self {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
        }
    }
}

impl std::fmt::Debug for WaitHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitHistogram")
            .field("sum_ns", &self.sum_ns.load(Ordering::Relaxed))
            .finish()
    }
}

fn bucket_of(ns: u64) -> usize {
    if ns < SUB as u64 {
        return ns as usize;
    }
    let octave = 63 - ns.leading_zeros(); // ≥ SUB_BITS
    let sub = (ns >> (octave - SUB_BITS)) as usize & (SUB - 1);
    SUB + (octave - SUB_BITS) as usize * SUB + sub
}

/// The smallest value that falls in bucket `b`.
fn bucket_lower(b: usize) -> u64 {
    if b < SUB {
        return b as u64;
    }
    let octave = (b - SUB) / SUB + SUB_BITS as usize;
    let sub = ((b - SUB) % SUB) as u64;
    (1u64 << octave) | (sub << (octave - SUB_BITS as usize))
}

/// The largest value that falls in bucket `b`.
fn bucket_upper(b: usize) -> u64 {
    if b < SUB {
        return b as u64;
    }
    let octave = (b - SUB) / SUB + SUB_BITS as usize;
    bucket_lower(b).saturating_add((1u64 << (octave - SUB_BITS as usize)) - 1)
}

impl WaitHistogram {
    /// Records one wait of `ns` nanoseconds (> 0; zero waits are implied by
    /// the operation count).
    pub fn record(&self, ns: u64) {
        self.buckets[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// A copy of the current counts.
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            counts: self
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
        }
    }
}

/// A [`WaitHistogram`] kept per counter slot, for a value recorded on every
/// request (a call's latency): the thread that owns a slot
/// ([`ObjectCounters`]) updates its own buckets with a plain load and store
/// per word, no locked instruction; threads beyond [`COUNTER_SLOTS`] share
/// the overflow slot's buckets, updated with atomic adds. Exact: a slot
/// passes to a new thread with its counts, as counters do. A snapshot sums
/// the slots.
///
/// Memory: about 4 KiB per slot, 258 KiB per histogram, allocated zeroed at
/// creation without being written, so the system backs only the pages a
/// thread has recorded into; nothing is allocated on the request path. A
/// snapshot reads only the slots that have recorded.
pub(crate) struct SlotHistogram {
    /// Slot `i`'s bucket counts at `i * STRIDE ..`, then the sum of its
    /// values.
    words: Box<[AtomicU64]>,
    /// Bit `i`: slot `i` (below [`OVERFLOW`]) has recorded. Never cleared (a
    /// slot keeps its counts).
    used: AtomicU64,
}

/// Words per slot of a [`SlotHistogram`]: the buckets, then the sum.
const STRIDE: usize = BUCKETS + 1;

impl Default for SlotHistogram {
    fn default() -> Self {
        use zerocopy::FromZeros;
        let n = (COUNTER_SLOTS + 1) * STRIDE;
        // Out of memory ends the process, as for any allocation.
        let words = <[AtomicU64]>::new_box_zeroed_with_elems(n).unwrap_or_else(|_| {
            let layout = std::alloc::Layout::array::<AtomicU64>(n);
            std::alloc::handle_alloc_error(layout.unwrap_or(std::alloc::Layout::new::<u64>()))
        });
        Self {
            words,
            used: AtomicU64::new(0),
        }
    }
}

impl std::fmt::Debug for SlotHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotHistogram")
            .field("recorded", &self.snapshot().waited())
            .finish()
    }
}

impl SlotHistogram {
    /// Records `value` from the thread whose counter slot is `slot`
    /// ([`thread_slot`]).
    #[inline]
    pub(crate) fn record_at(&self, slot: usize, value: u64) {
        let words = &self.words[slot * STRIDE..(slot + 1) * STRIDE];
        let (bucket, sum) = (&words[bucket_of(value)], &words[BUCKETS]);
        if slot != OVERFLOW {
            let bit = 1u64 << slot;
            if self.used.load(Ordering::Relaxed) & bit == 0 {
                self.used.fetch_or(bit, Ordering::Relaxed);
            }
        }
        add_to_slot_word(bucket, slot, 1);
        add_to_slot_word(sum, slot, value);
    }

    /// The counts of all slots together.
    pub(crate) fn snapshot(&self) -> HistogramSnapshot {
        let mut total = HistogramSnapshot::default();
        let used = self.used.load(Ordering::Relaxed);
        let recorded = |&(i, _): &(usize, &[AtomicU64])| i == OVERFLOW || used & 1 << i != 0;
        for (_, words) in self.words.chunks_exact(STRIDE).enumerate().filter(recorded) {
            for (c, w) in total.counts.iter_mut().zip(words) {
                *c += w.load(Ordering::Relaxed);
            }
            total.sum_ns = total
                .sum_ns
                .wrapping_add(words[BUCKETS].load(Ordering::Relaxed));
        }
        total
    }
}

/// Counts of a [`WaitHistogram`] at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    counts: Vec<u64>,
    sum_ns: u64,
}

impl Default for HistogramSnapshot {
    fn default() -> Self {
        Self {
            counts: vec![0; BUCKETS],
            sum_ns: 0,
        }
    }
}

impl HistogramSnapshot {
    /// Requests that waited.
    pub fn waited(&self) -> u64 {
        self.counts.iter().fold(0, |a, &c| a.saturating_add(c))
    }

    /// Adds `other`'s counts into `self` (each saturating at `u64::MAX`:
    /// counts from another process are not trusted to be sane).
    pub fn merge(&mut self, other: &HistogramSnapshot) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a = a.saturating_add(*b);
        }
        self.sum_ns = self.sum_ns.wrapping_add(other.sum_ns);
    }

    /// Counts accumulated since `earlier`.
    pub fn since(&self, earlier: &HistogramSnapshot) -> HistogramSnapshot {
        HistogramSnapshot {
            counts: self
                .counts
                .iter()
                .zip(&earlier.counts)
                .map(|(a, b)| a.saturating_sub(*b))
                .collect(),
            sum_ns: self.sum_ns.wrapping_sub(earlier.sum_ns),
        }
    }

    /// The `q` quantile (0 ≤ q ≤ 1) over `total_ops` requests, of which those
    /// not in the histogram waited 0 ns. Returns the upper bound of the bucket
    /// holding the quantile.
    pub fn quantile(&self, q: f64, total_ops: u64) -> u64 {
        let waited = self.waited();
        let total = total_ops.max(waited);
        if total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let zeros = total - waited;
        if rank <= zeros {
            return 0;
        }
        let mut seen = zeros;
        for (b, &c) in self.counts.iter().enumerate() {
            seen = seen.saturating_add(c);
            if seen >= rank {
                return bucket_upper(b);
            }
        }
        bucket_upper(BUCKETS - 1)
    }

    /// For each bound `le` of `bounds` (ascending), the requests among
    /// `total_ops` that waited at most `le` ns: those not in the histogram
    /// (no wait) plus the buckets whose upper bound is at most `le`.
    pub fn cumulative(&self, total_ops: u64, bounds: &[u64]) -> Vec<(u64, u64)> {
        let zeros = total_ops.saturating_sub(self.waited());
        let mut out = Vec::with_capacity(bounds.len());
        let mut seen = zeros;
        let mut b = 0;
        for &le in bounds {
            while b < BUCKETS && bucket_upper(b) <= le {
                seen = seen.saturating_add(self.counts[b]);
                b += 1;
            }
            out.push((le, seen));
        }
        out
    }

    /// The recorded values as call latencies, each tick worth `ns_per_tick`
    /// nanoseconds.
    pub fn latency(&self, ns_per_tick: f64) -> LatencySummary {
        let ops = self.waited();
        let ns = |ticks: u64| (ticks as f64 * ns_per_tick).round() as u64;
        LatencySummary {
            ops,
            mean_ns: self.sum_ns.checked_div(ops).map_or(0, ns),
            p50_ns: ns(self.quantile(0.50, 0)),
            p99_ns: ns(self.quantile(0.99, 0)),
            p999_ns: ns(self.quantile(0.999, 0)),
            max_ns: self
                .counts
                .iter()
                .rposition(|&c| c > 0)
                .map_or(0, |b| ns(bucket_upper(b))),
        }
    }

    /// The recorded values as call latencies in sparse form: for every
    /// non-empty bucket, the middle of its range in nanoseconds (each tick
    /// worth `ns_per_tick`) and its count, ascending. The middle, not a
    /// bound, so that a slightly refined `ns_per_tick` (the TSC clock
    /// calibrates on) still lands in the same bucket when a control plane
    /// merges or subtracts histograms ([`HistogramSnapshot::add`]).
    pub fn latency_buckets(&self, ns_per_tick: f64) -> Vec<(u64, u64)> {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(b, &c)| {
                let (lo, hi) = (bucket_lower(b) as f64, bucket_upper(b) as f64);
                (((lo + hi) / 2.0 * ns_per_tick).round() as u64, c)
            })
            .collect()
    }

    /// Adds `count` values of `value` (e.g. the buckets of
    /// [`HistogramSnapshot::latency_buckets`], merged from several stages);
    /// a bucket's count saturates at `u64::MAX`.
    pub fn add(&mut self, value: u64, count: u64) {
        let c = &mut self.counts[bucket_of(value)];
        *c = c.saturating_add(count);
        self.sum_ns = self.sum_ns.wrapping_add(value.wrapping_mul(count));
    }

    /// Summary over `total_ops` requests.
    pub fn summary(&self, total_ops: u64) -> WaitSummary {
        let waited = self.waited();
        WaitSummary {
            waited_ops: waited,
            total_ns: self.sum_ns,
            mean_ns: if total_ops == 0 {
                0
            } else {
                self.sum_ns / total_ops.max(waited)
            },
            p50_ns: self.quantile(0.50, total_ops),
            p99_ns: self.quantile(0.99, total_ops),
            p999_ns: self.quantile(0.999, total_ops),
            max_ns: self
                .counts
                .iter()
                .rposition(|&c| c > 0)
                .map_or(0, bucket_upper),
        }
    }
}

/// Wait-time figures over a set of requests. Percentiles and the maximum are
/// bucket upper bounds (at most 12.5 % above the true value).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitSummary {
    /// Requests that waited at all.
    pub waited_ops: u64,
    /// Total time spent waiting.
    pub total_ns: u64,
    /// Mean wait over all requests, including those that did not wait.
    pub mean_ns: u64,
    /// Median wait.
    pub p50_ns: u64,
    /// 99th percentile wait.
    pub p99_ns: u64,
    /// 99.9th percentile wait.
    pub p999_ns: u64,
    /// Longest wait.
    pub max_ns: u64,
}

/// Figures of one object, one channel or the unmatched requests. Every
/// field defaults to zero when absent from a serialized form.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Counts {
    /// Operations since the stage was created.
    pub ops: u64,
    /// Bytes since the stage was created.
    pub bytes: u64,
    /// Operations since the previous collection.
    pub interval_ops: u64,
    /// Bytes since the previous collection.
    pub interval_bytes: u64,
    /// `interval_ops` per second of the interval.
    pub ops_per_sec: f64,
    /// `interval_bytes` per second of the interval.
    pub bytes_per_sec: f64,
    /// Wait times of the requests of the interval.
    pub wait: WaitSummary,
    /// Wait times of all requests since the stage was created.
    pub wait_total: WaitSummary,
    /// Call latency of the interval's completed requests (two-phase requests
    /// only: [`crate::Stage::admit`] then [`crate::Stage::complete`]).
    #[serde(default, skip_serializing_if = "LatencySummary::is_empty")]
    pub latency: LatencySummary,
    /// Call latency of every completed request since the stage was created.
    #[serde(default, skip_serializing_if = "LatencySummary::is_empty")]
    pub latency_total: LatencySummary,
    /// Cumulative wait distribution since the stage was created, as
    /// Prometheus histogram buckets: `(le_ns, n)` = requests that waited at
    /// most `le_ns` nanoseconds (requests that did not wait included), for
    /// the bounds of [`WAIT_BUCKET_BOUNDS_NS`]. A histogram bucket that
    /// straddles a bound counts towards the next bound, so a count is exact
    /// or low by the requests within 12.5 % above the bound.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wait_buckets: Vec<(u64, u64)>,
    /// Requests held back when the figures were collected (an object's,
    /// or a channel's objects' together; 0 elsewhere): a gauge, not a
    /// count. A request held longer than an interval is in no other figure
    /// until it is admitted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waiting: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Call latency over a set of completed requests: the time from the end of
/// admission (after any wait in the stage) to completion, i.e. the real
/// call's own time. Percentiles and the maximum are bucket upper bounds (at
/// most 12.5 % above the true value, plus the clock's conversion error).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LatencySummary {
    /// Completed requests.
    pub ops: u64,
    /// Mean latency.
    pub mean_ns: u64,
    /// Median latency.
    pub p50_ns: u64,
    /// 99th percentile latency.
    pub p99_ns: u64,
    /// 99.9th percentile latency.
    pub p999_ns: u64,
    /// Longest latency.
    pub max_ns: u64,
}

impl LatencySummary {
    /// Whether no request was completed.
    pub fn is_empty(&self) -> bool {
        self.ops == 0
    }
}

/// Upper bounds of [`Counts::wait_buckets`]: 1 µs to 10 s by decades.
pub const WAIT_BUCKET_BOUNDS_NS: [u64; 8] = [
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
    10_000_000_000,
];

/// Statistics of one enforcement object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObjectStats {
    /// The object's name in its channel.
    pub name: String,
    /// The object's kind (`noop`, `drl`, ...).
    pub kind: String,
    /// Its figures.
    #[serde(flatten)]
    pub counts: Counts,
}

/// Statistics of one channel: the sums of its objects (including objects
/// removed since the stage started, so totals never go backwards).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelStats {
    /// The channel's name.
    pub name: String,
    /// Its figures.
    #[serde(flatten)]
    pub counts: Counts,
    /// Its live objects.
    #[serde(default)]
    pub objects: Vec<ObjectStats>,
    /// Its wait and latency distributions since the stage was created, when
    /// the collection asked for them ([`crate::Stage::collect_histograms`]):
    /// what several processes' percentiles are merged from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub histograms: Option<Histograms>,
}

/// A channel's wait and call-latency distributions since the stage was
/// created, each in the sparse form of
/// [`HistogramSnapshot::latency_buckets`]: `(ns, requests)` for every
/// non-empty bucket, ascending. Histograms of several stages add up
/// ([`MergedHistograms::merge`]); percentiles taken from the sum are bucket upper
/// bounds, as a single stage's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Histograms {
    /// Requests that waited in the stage, by wait (those that did not wait
    /// are not in it).
    pub wait: Vec<(u64, u64)>,
    /// Completed two-phase requests, by call latency.
    pub latency: Vec<(u64, u64)>,
}

/// [`Histograms`] of several stages added up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergedHistograms {
    wait: HistogramSnapshot,
    latency: HistogramSnapshot,
}

impl MergedHistograms {
    /// Adds one stage's histograms.
    pub fn merge(&mut self, h: &Histograms) {
        for &(ns, n) in &h.wait {
            self.wait.add(ns, n);
        }
        for &(ns, n) in &h.latency {
            self.latency.add(ns, n);
        }
    }

    /// The merged waits over `total_ops` requests (those not in the
    /// histograms did not wait). `total_ns` and `mean_ns` are from the
    /// buckets' middles: take the stages' own sums where exact ones matter.
    pub fn wait(&self, total_ops: u64) -> WaitSummary {
        self.wait.summary(total_ops)
    }

    /// The merged call latencies (`mean_ns` from the buckets' middles).
    pub fn latency(&self) -> LatencySummary {
        self.latency.latency(1.0)
    }
}

/// One collection of a stage's statistics. Only `stage` is required in a
/// serialized form; absent fields are zero or empty.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StageStats {
    /// The stage's name.
    pub stage: String,
    /// Clock time of this collection, in nanoseconds of the stage's clock.
    pub collected_at_ns: u64,
    /// Length of the interval since the previous collection.
    pub interval_ns: u64,
    /// Live channels.
    pub channels: Vec<ChannelStats>,
    /// Requests that matched no channel (they passed through unenforced).
    pub unmatched: Counts,
    /// Requests counted by channels that have since been removed.
    pub removed: Counts,
    /// The stage's critical requests, whichever channel and object they
    /// went through (two-phase requests only: counted at completion).
    pub critical: Counts,
    /// Call latency of every critical request since the stage was created,
    /// in the sparse form of [`HistogramSnapshot::latency_buckets`]:
    /// `(ns, requests)`, ascending. Cumulative, so that a control plane gets
    /// each interval exactly by subtracting its previous copy, whoever else
    /// collects in between, and histograms of several stages merge
    /// (paiod's `criticality` policy does both).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub critical_latency: Vec<(u64, u64)>,
}

/// Live statistics of one object: its counters, wait histogram and the
/// latency histogram of its completed two-phase requests (in clock ticks).
#[derive(Debug, Default)]
pub struct ObjectRecorder {
    counters: ObjectCounters,
    waits: WaitHistogram,
    latency: SlotHistogram,
}

impl ObjectRecorder {
    /// Records one request of `bytes` that waited `waited_ns`.
    #[inline]
    pub fn record(&self, bytes: u64, waited_ns: u64) {
        self.record_at(crate::context::with_thread(thread_slot), bytes, waited_ns);
    }

    /// [`ObjectRecorder::record`] with the calling thread's slot index,
    /// already looked up (see [`thread_slot`]).
    #[inline]
    pub(crate) fn record_at(&self, slot: usize, bytes: u64, waited_ns: u64) {
        self.counters.record_at(slot, bytes);
        if waited_ns > 0 {
            self.waits.record(waited_ns);
        }
    }

    /// Records one completed two-phase request that moved `bytes`, waited
    /// `waited_ns` in the stage and took `latency_ticks` (of the stage's
    /// clock) in its call, when known. The latency costs two plain
    /// stores to the thread's own buckets ([`SlotHistogram`]).
    #[inline]
    pub(crate) fn record_completion_at(
        &self,
        slot: usize,
        bytes: u64,
        waited_ns: u64,
        latency_ticks: Option<u64>,
    ) {
        self.record_at(slot, bytes, waited_ns);
        if let Some(l) = latency_ticks {
            self.latency.record_at(slot, l);
        }
    }

    /// Cumulative figures.
    pub fn sample(&self) -> Sample {
        let (ops, bytes) = self.counters.totals();
        Sample {
            ops,
            bytes,
            waits: self.waits.snapshot(),
            latency: self.latency.snapshot(),
        }
    }
}

/// Cumulative figures of one recorder (or a sum of several) at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sample {
    /// Operations.
    pub ops: u64,
    /// Bytes.
    pub bytes: u64,
    /// Wait histogram.
    pub waits: HistogramSnapshot,
    /// Latency histogram of completed two-phase requests, in clock ticks.
    pub latency: HistogramSnapshot,
}

impl Sample {
    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &Sample) {
        self.ops += other.ops;
        self.bytes = self.bytes.wrapping_add(other.bytes);
        self.waits.merge(&other.waits);
        self.latency.merge(&other.latency);
    }

    /// Figures of `self` with the interval since `earlier`, `interval_ns` long;
    /// latency ticks are converted at `ns_per_tick`
    /// ([`crate::Clock::ns_per_tick`]).
    pub fn counts_since(&self, earlier: &Sample, interval_ns: u64, ns_per_tick: f64) -> Counts {
        let interval_ops = self.ops.saturating_sub(earlier.ops);
        let interval_bytes = self.bytes.wrapping_sub(earlier.bytes);
        let secs = interval_ns as f64 / 1e9;
        let per_sec = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        Counts {
            ops: self.ops,
            bytes: self.bytes,
            interval_ops,
            interval_bytes,
            ops_per_sec: per_sec(interval_ops),
            bytes_per_sec: per_sec(interval_bytes),
            wait: self.waits.since(&earlier.waits).summary(interval_ops),
            wait_total: self.waits.summary(self.ops),
            wait_buckets: self.waits.cumulative(self.ops, &WAIT_BUCKET_BOUNDS_NS),
            latency: self.latency.since(&earlier.latency).latency(ns_per_tick),
            latency_total: self.latency.latency(ns_per_tick),
            waiting: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Arc;

    #[test]
    fn cumulative_buckets_count_waits_up_to_each_bound() {
        let h = WaitHistogram::default();
        for ns in [500, 5_000, 5_000, 2_000_000, 20_000_000_000] {
            h.record(ns);
        }
        let c = h.snapshot().cumulative(10, &WAIT_BUCKET_BOUNDS_NS);
        // 5 requests did not wait.
        assert_eq!(c[0], (1_000, 6));
        assert_eq!(c[1], (10_000, 8));
        assert_eq!(c[3], (1_000_000, 8));
        assert_eq!(c[4], (10_000_000, 9));
        assert_eq!(c[7], (10_000_000_000, 9));
        assert!(c.windows(2).all(|w| w[0].1 <= w[1].1));
    }

    /// Serializes the tests that depend on how many slots are free.
    static SLOT_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn counters_are_exact_across_many_threads() {
        let _g = SLOT_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let c = Arc::new(ObjectCounters::default());
        // More threads than slots, so the overflow slot is exercised too.
        let threads: Vec<_> = (0..COUNTER_SLOTS + 16)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        c.record(3);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let n = (COUNTER_SLOTS as u64 + 16) * 1000;
        assert_eq!(c.totals(), (n, 3 * n));
    }

    #[test]
    fn slots_are_reused_after_threads_exit() {
        let _g = SLOT_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let c = Arc::new(ObjectCounters::default());
        for round in 0..3 * COUNTER_SLOTS {
            let c2 = c.clone();
            std::thread::spawn(move || c2.record(1)).join().unwrap();
            assert_eq!(c.totals().0, round as u64 + 1);
        }
        assert_eq!(c.slots[OVERFLOW].ops.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn slot_histogram_is_exact_across_many_threads_and_reused_slots() {
        let _g = SLOT_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let h = Arc::new(SlotHistogram::default());
        // More threads than slots alive at once (each records before the
        // barrier, so at least 16 share the overflow slot's atomic adds),
        // then threads one after another (slots handed over with counts).
        let n = COUNTER_SLOTS + 16;
        let barrier = Arc::new(std::sync::Barrier::new(n));
        let threads: Vec<_> = (0..n)
            .map(|_| {
                let (h, barrier) = (h.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let slot = crate::context::with_thread(thread_slot);
                    h.record_at(slot, 1);
                    barrier.wait();
                    for v in 2..=1000u64 {
                        h.record_at(slot, v);
                    }
                    slot == OVERFLOW
                })
            })
            .collect();
        let overflowed = threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|&o| o)
            .count();
        assert!(
            overflowed >= 16,
            "{overflowed} threads on the overflow slot"
        );
        for _ in 0..2 * COUNTER_SLOTS {
            let h = h.clone();
            std::thread::spawn(move || h.record_at(crate::context::with_thread(thread_slot), 7))
                .join()
                .unwrap();
        }
        let reference = WaitHistogram::default();
        for _ in 0..COUNTER_SLOTS + 16 {
            for v in 1..=1000u64 {
                reference.record(v);
            }
        }
        for _ in 0..2 * COUNTER_SLOTS {
            reference.record(7);
        }
        assert_eq!(h.snapshot(), reference.snapshot());
    }

    #[test]
    fn histogram_quantiles() {
        let h = WaitHistogram::default();
        for ns in 1..=1000u64 {
            h.record(ns * 1000);
        }
        let s = h.snapshot();
        assert_eq!(s.waited(), 1000);
        // 1000 waits plus 1000 requests that did not wait.
        assert_eq!(s.quantile(0.5, 2000), 0);
        let p99 = s.quantile(0.99, 2000);
        assert!((980_000..=980_000 * 9 / 8 + 1).contains(&p99), "{p99}");
        let sum = s.summary(2000);
        assert_eq!(sum.waited_ops, 1000);
        assert_eq!(sum.total_ns, 500_500_000);
        assert_eq!(sum.mean_ns, 250_250);
        assert!(sum.max_ns >= 1_000_000 && sum.max_ns <= 1_125_000);
        assert_eq!(HistogramSnapshot::default().quantile(0.99, 0), 0);
    }

    proptest! {
        #[test]
        fn bucket_bounds_contain_value(ns in any::<u64>()) {
            let b = bucket_of(ns);
            prop_assert!(b < BUCKETS);
            prop_assert!(bucket_upper(b) >= ns);
            // Relative error of the upper bound is at most 1/8.
            prop_assert!(bucket_upper(b) - ns <= ns / 8);
            if b > 0 {
                prop_assert!(bucket_upper(b - 1) < ns);
            }
        }

        #[test]
        fn slot_histogram_matches_a_shared_one(values in proptest::collection::vec(any::<u64>(), 0..300), slots in proptest::collection::vec(0..=COUNTER_SLOTS, 300)) {
            let (h, reference) = (SlotHistogram::default(), WaitHistogram::default());
            for (&v, &slot) in values.iter().zip(&slots) {
                h.record_at(slot, v);
                reference.record(v);
            }
            prop_assert_eq!(h.snapshot(), reference.snapshot());
        }

        #[test]
        fn quantile_is_monotone(waits in proptest::collection::vec(1u64..1u64 << 40, 1..200), extra in 0u64..100) {
            let h = WaitHistogram::default();
            for &w in &waits { h.record(w); }
            let s = h.snapshot();
            let total = waits.len() as u64 + extra;
            let mut last = 0;
            for q in [0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0] {
                let v = s.quantile(q, total);
                prop_assert!(v >= last);
                last = v;
            }
            prop_assert!(last >= *waits.iter().max().unwrap());
        }
    }
}
