#!/usr/bin/env python3
"""Tail-latency control in a key-value store (PAIO paper §9.2, Fig. 5-7), scaled down.

RocksDB 7.8.3 under bursty closed-loop clients (taillat_driver, C++), four
setups x three workloads, every driver process in one cgroup-v1 blkio cgroup
throttled to 200 MiB/s read and 200 MiB/s write (direct I/O, so the throttle
sees every byte):

  baseline   plain RocksDB
  autotuned  RocksDB's auto-tuned rate limiter (200 MiB/s, kWritesOnly)
  autotuned_all  the same limiter in kAllIo mode (compaction reads charged too)
  paio       the paio RocksDB plugin + paiod's SILK policy

Builds nothing: it needs bench/taillat/build/taillat_driver (and, for paio,
target/release/paiod).  Writes a CSV, one plot per workload, a table and a
header to the output directory.  See bench/taillat/README.md.
Stdlib only; plots through `paio plot`.  Must run as root (cgroup writes); --short runs
unthrottled, with a note, where it cannot set up the throttle.
"""

import argparse
import csv
import datetime
import json
import math
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import expt  # noqa: E402  (bench/expt.py: shared by the experiment drivers)
from expt import BlkioCgroup, block_device_of, commit_info, machine_info, sh  # noqa: E402

REPO = expt.REPO
MIB = 1 << 20
ALL_SETUPS = ("baseline", "autotuned", "autotuned_all", "paio")
# The auto-tuned limiter's modes: the goal compares paio with the better.
AUTOTUNED = ("autotuned", "autotuned_all")
ALL_WORKLOADS = ("mixture", "readheavy", "writeheavy")
READ_RATIO = {"mixture": 0.5, "readheavy": 0.9, "writeheavy": 0.1}
LABEL = {"baseline": "RocksDB", "autotuned": "Auto-tuned", "autotuned_all": "Auto-tuned (kAllIo)",
         "paio": "PAIO",
         "mixture": "Mixture (50:50)", "readheavy": "Read-heavy (90:10)",
         "writeheavy": "Write-heavy (10:90)"}
DRIVER = REPO / "bench/taillat/build/taillat_driver"
BUILD_CMD = ("cmake -S bench/taillat -B bench/taillat/build -DCMAKE_BUILD_TYPE=Release && "
             "cmake --build bench/taillat/build -j2")
PAIOD_BUILD_CMD = "cargo build --release -p paio-control"
CSV_FIELDS = ("time_s", "setup", "workload", "run", "kops", "p99_us", "p50_us")
# Goal from the issue: paio's peak p99 >= 4x below baseline's and below the
# auto-tuned limiter's, at >= 95 % of the baseline's mean throughput.
GOAL_P99_FACTOR = 4.0
GOAL_THROUGHPUT = 0.95


RunError = expt.ExperimentError


# ---------------------------------------------------------------- pure parts


@dataclass
class Scale:
    """Size and time scale of one run (see README: 'Scaling')."""
    num: int                 # preloaded key-value pairs
    write_buffer_mib: int    # memtable size (paper 128 MiB)
    level_base_mib: int      # max_bytes_for_level_base
    target_file_mib: int     # target_file_size_base
    block_cache_mib: int     # block cache (the memory cap)
    valley_kops: float
    peak_kops: float
    initial_valley_s: float  # paper 300 s
    peak_s: float            # paper 100 s
    valley_s: float          # paper 10 s
    duration_s: float        # paper: 1200 s shown
    kvs_mib: float = 200.0   # device bandwidth (blkio throttle, autotuned cap, SILK KVSB)
    min_mib: float = 10.0    # SILK minB
    writes_only: int = 1     # SILK limits only flush/compaction writes (1) or all their I/O (0)
    silk_kvs_mib: float = 0.0  # SILK's KVSB when it differs from the device bandwidth (0: kvs_mib)
    # SILK's read budget for compaction reads, with writes_only (0: kvs_mib,
    # the device's read rate; < 0: none, compaction reads unlimited)
    silk_read_mib: float = 0.0
    # SILK's read_split in KiB, with the read budget: compaction reads are
    # issued in pieces of this size (0: whole)
    silk_read_split_kib: int = 256
    # SILK's read_latency_target in µs, with the read budget: the compaction
    # reads' budget is halved while the Gets' p99 is above it (0: none)
    silk_read_latency_us: int = 0
    # SILK's read_priority, with the read budget: compaction reads go through
    # a priority object with this busy_depth (their depth while Gets are in
    # flight or were less than silk_read_window_us ago; -1: a DRL, no
    # priority object), depth silk_read_depth otherwise, and split
    # silk_read_split_kib
    silk_read_busy_depth: int = -1
    silk_read_depth: int = 4
    silk_read_window_us: int = 2000
    # SILK's write_priority, with writes_only: flush and compaction writes go
    # through priority objects with this busy_depth (-1: DRLs), depth
    # silk_write_depth and window silk_write_window_us
    silk_write_busy_depth: int = -1
    silk_write_depth: int = 4
    silk_write_window_us: int = 0
    # RocksDB's compaction_readahead_size in KiB, every setup (0: RocksDB's
    # own, sanitized to 2 MiB with direct I/O): the size of compaction reads
    compaction_readahead_kib: int = 0
    # Every setup: obsolete SST files deleted at this many MiB/s, 4 MiB at a
    # time (RocksDB's SstFileManager; 0: at once, RocksDB's default). The
    # data directory's ext4 is mounted with `discard`, so a deletion is a
    # burst of discards at the disk.
    delete_rate_mib: float = 0
    # Diagnosis (every setup): each Get slower than this many µs is written
    # to <run>/slow_gets.csv with RocksDB's PerfContext breakdown of where
    # its time went (0: off). Timers on every Get cost CPU: not for the
    # comparisons, for finding what a spike is made of.
    slow_get_us: int = 0
    # paio setup: the plugin's critical_during_stalls (1, its default: flush
    # and L0 compaction requests critical while RocksDB stalls or delays
    # writes, so priority objects admit them first and their rate does not
    # hold them; 0: they stay normal)
    paio_stall_critical: int = 1


FULL_SCALE = Scale(num=4_000_000, write_buffer_mib=32, level_base_mib=128, target_file_mib=16,
                   block_cache_mib=64, valley_kops=5, peak_kops=20, initial_valley_s=75,
                   peak_s=25, valley_s=2.5, duration_s=240)
SHORT_SCALE = Scale(num=200_000, write_buffer_mib=4, level_base_mib=16, target_file_mib=2,
                    block_cache_mib=8, valley_kops=5, peak_kops=20, initial_valley_s=1.5,
                    peak_s=3, valley_s=1, duration_s=6)


def target_kops(scale, t):
    """The theoretical client load (kops/s) at t seconds (like the driver's schedule)."""
    if t < scale.initial_valley_s:
        return scale.valley_kops
    u = math.fmod(t - scale.initial_valley_s, scale.peak_s + scale.valley_s)
    return scale.peak_kops if u < scale.peak_s else scale.valley_kops


def parse_driver_csv(text, setup, workload, run=1):
    """The driver's per-second CSV -> rows of CSV_FIELDS (plus the extra columns)."""
    rows = []
    reader = csv.DictReader(text.splitlines())
    missing = {"time_s", "kops", "p99_us", "p50_us"} - set(reader.fieldnames or ())
    if missing:
        raise ValueError(f"driver CSV lacks columns {sorted(missing)}")
    for rec in reader:
        row = {k: float(v) for k, v in rec.items() if k is not None and v not in (None, "")}
        row["time_s"] = int(row["time_s"])
        row["setup"] = setup
        row["workload"] = workload
        row["run"] = run
        rows.append(row)
    return rows


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def stddev(xs):
    """Population standard deviation."""
    if not xs:
        return float("nan")
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


def mean_abs_dev(xs):
    """The paper's 'variability' (mean absolute deviation from the mean)."""
    if not xs:
        return float("nan")
    m = mean(xs)
    return sum(abs(x - m) for x in xs) / len(xs)


def phase_of(scale, time_s):
    """'initial' (initial valley), 'peak' or 'valley' for the CSV row of second time_s.

    Row t covers (t-1, t]; its phase is the one at its middle.
    """
    mid = time_s - 0.5
    if mid < scale.initial_valley_s:
        return "initial"
    return "peak" if target_kops(scale, mid) == scale.peak_kops else "valley"


def _run_stats(rs, scale):
    """summarize's statistics of one run of one (workload, setup)."""
    kops = [float(r["kops"]) for r in rs]
    p99 = [float(r["p99_us"]) / 1000.0 for r in rs if float(r["kops"]) > 0]
    st = {
        "seconds": len(rs),
        "mean_kops": mean(kops),
        "p99_min_ms": min(p99) if p99 else float("nan"),
        "p99_max_ms": max(p99) if p99 else float("nan"),
        # One second decides a maximum: the 99th percentile (nearest rank)
        # of the seconds' p99 says whether it was one second or many.
        "p99_p99_ms": quantile(p99, 0.99) if p99 else float("nan"),
        "p99_mean_ms": mean(p99),
        "p99_std_ms": stddev(p99),
        "p99_mad_ms": mean_abs_dev(p99),
    }
    if scale is not None:
        for ph in ("initial", "peak", "valley"):
            xs = [float(r["p99_us"]) / 1000.0 for r in rs
                  if float(r["kops"]) > 0 and phase_of(scale, int(r["time_s"])) == ph]
            st[f"p99_max_{ph}_ms"] = max(xs) if xs else float("nan")
    return st


def _median(xs):
    """Median of the non-NaN values (NaN if none); an int when all are ints and it is whole."""
    ys = [x for x in xs if not (isinstance(x, float) and math.isnan(x))]
    if not ys:
        return float("nan")
    m = statistics.median(ys)
    return int(m) if all(isinstance(y, int) for y in ys) and m == int(m) else m


def summarize(rows, scale=None):
    """Per (workload, setup): seconds, mean kops, p99 range/max/mean, the 99th
    percentile of the seconds' p99 (p99_p99_ms), variability.

    rows: dicts with setup, workload, kops, p99_us (and run, default 1).
    Latencies in the result are in ms.  Seconds with no completed request
    (kops 0) count for the throughput but not for the latency statistics.
    With a scale, also the max p99 per phase (initial valley, peaks, later
    valleys).

    Repeated runs (--repeat): when a (workload, setup) has rows of runs other
    than run 1 alone, the statistics are computed per run and every figure
    of the row is the MEDIAN over its runs (statistics.median, so the mean
    of the middle two for an even count); the row also has `runs` (how
    many), `p99_max_runs_ms` and `p99_p99_runs_ms` (each run's max p99 and
    99th percentile of its seconds' p99, in run order; with a scale also
    `p99_max_<phase>_runs_ms`).  With only run 1 the row is the
    single run's statistics, without those keys.
    """
    groups = {}
    for r in rows:
        groups.setdefault((r["workload"], r["setup"]), {}).setdefault(int(r.get("run", 1)), []).append(r)
    out = []
    for (workload, setup), by_run in groups.items():
        per_run = [_run_stats(by_run[k], scale) for k in sorted(by_run)]
        row = {"workload": workload, "setup": setup}
        if list(by_run) == [1]:
            row.update(per_run[0])
        else:
            row.update({k: _median([st[k] for st in per_run]) for k in per_run[0]})
            row["runs"] = len(per_run)
            row["p99_max_runs_ms"] = [st["p99_max_ms"] for st in per_run]
            row["p99_p99_runs_ms"] = [st["p99_p99_ms"] for st in per_run]
            if scale is not None:
                for ph in ("initial", "peak", "valley"):
                    row[f"p99_max_{ph}_runs_ms"] = [st[f"p99_max_{ph}_ms"] for st in per_run]
        out.append(row)
    order = {s: i for i, s in enumerate(ALL_SETUPS)}
    worder = {w: i for i, w in enumerate(ALL_WORKLOADS)}
    out.sort(key=lambda s: (worder.get(s["workload"], 99), order.get(s["setup"], 99)))
    return out


def goal_verdict(summary, factor=GOAL_P99_FACTOR, min_tput=GOAL_THROUGHPUT):
    """Per workload with a paio row: the issue's goal, checked.

    Returns {workload: {"p99_vs_baseline": x, "p99_4x": bool|None,
    "below_autotuned": bool|None, "autotuned": setup|None, "tput_ratio": x,
    "tput_ok": bool|None, "met": bool|None}} (None: the setup needed for that
    check was not run).  The auto-tuned limiter is given its best mode: of
    the AUTOTUNED setups that ran, the one with the lower max p99
    (`autotuned` names it).
    """
    by = {(s["workload"], s["setup"]): s for s in summary}
    out = {}
    for workload in sorted({s["workload"] for s in summary}):
        paio = by.get((workload, "paio"))
        if not paio:
            continue
        base = by.get((workload, "baseline"))
        autos = [by[(workload, a)] for a in AUTOTUNED if (workload, a) in by]
        auto = min(autos, key=lambda s: s["p99_max_ms"], default=None)
        v = {"p99_vs_baseline": None, "p99_4x": None, "below_autotuned": None,
             "autotuned": auto["setup"] if auto else None, "tput_ratio": None, "tput_ok": None}
        if base:
            v["p99_vs_baseline"] = base["p99_max_ms"] / paio["p99_max_ms"] if paio["p99_max_ms"] else None
            v["p99_4x"] = paio["p99_max_ms"] * factor <= base["p99_max_ms"]
            v["tput_ratio"] = paio["mean_kops"] / base["mean_kops"] if base["mean_kops"] else None
            v["tput_ok"] = v["tput_ratio"] is not None and v["tput_ratio"] >= min_tput
        if auto:
            v["below_autotuned"] = paio["p99_max_ms"] < auto["p99_max_ms"]
        checks = [v["p99_4x"], v["below_autotuned"], v["tput_ok"]]
        v["met"] = None if None in checks else all(checks)
        out[workload] = v
    return out


def _f(x, fmt):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def format_table(summary, verdict=None):
    """The markdown table (and, with a verdict, the goal check).

    With repeated runs (a row with runs > 1): a line saying the figures are
    medians over the runs, and a table of each run's max p99.
    """
    repeated = any(s.get("runs", 1) > 1 for s in summary)
    lines = []
    if repeated:
        ns = sorted({s.get("runs", 1) for s in summary})
        n = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"
        lines += [f"Every figure is the median over {n} runs (each statistic computed per run, "
                  "then the median of the runs); each run's max p99 below.", ""]
    lines += [
        "| workload | setup | seconds | mean kops/s | p99 range ms | max p99 ms | "
        "99th pct of the seconds' p99 ms | mean p99 ms | p99 stddev ms | p99 MAD ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summary:
        lines.append(
            f"| {s['workload']} | {s['setup']} | {s['seconds']} | {_f(s['mean_kops'], '.2f')} | "
            f"{_f(s['p99_min_ms'], '.2f')}–{_f(s['p99_max_ms'], '.2f')} | {_f(s['p99_max_ms'], '.2f')} | "
            f"{_f(s.get('p99_p99_ms'), '.2f')} | {_f(s['p99_mean_ms'], '.2f')} | {_f(s['p99_std_ms'], '.2f')} | {_f(s['p99_mad_ms'], '.2f')} |")
    if summary and "p99_max_peak_ms" in summary[0]:
        lines += ["", "Max p99 (ms) per phase:", "",
                  "| workload | setup | initial valley | peaks | later valleys |", "|---|---|---:|---:|---:|"]
        for s in summary:
            lines.append(f"| {s['workload']} | {s['setup']} | {_f(s['p99_max_initial_ms'], '.2f')} | "
                         f"{_f(s['p99_max_peak_ms'], '.2f')} | {_f(s['p99_max_valley_ms'], '.2f')} |")
    if repeated:
        lines += ["", "| workload | setup | max p99 per run (ms) | 99th pct of the seconds' p99 per run (ms) |",
                  "|---|---|---|---|"]
        for s in summary:
            per_run = s.get("p99_max_runs_ms", [s["p99_max_ms"]])
            p99s = s.get("p99_p99_runs_ms", [s.get("p99_p99_ms")])
            lines.append(f"| {s['workload']} | {s['setup']} | {', '.join(_f(x, '.2f') for x in per_run)} | "
                         f"{', '.join(_f(x, '.2f') for x in p99s)} |")
    if verdict:
        lines += ["", f"Goal: paio's max p99 >= {GOAL_P99_FACTOR:g}x below baseline's and below auto-tuned's, "
                  f"at >= {GOAL_THROUGHPUT:.0%} of baseline's mean throughput.", "",
                  "| workload | baseline max p99 / paio max p99 | >= 4x | below auto-tuned (its best mode) | "
                  "paio / baseline throughput | >= 95 % | goal met |",
                  "|---|---:|---|---|---:|---|---|"]
        yn = {True: "yes", False: "no", None: "-"}
        for w, v in verdict.items():
            lines.append(
                f"| {w} | {_f(v['p99_vs_baseline'], '.2f')}x | {yn[v['p99_4x']]} | {yn[v['below_autotuned']]}"
                f"{' (' + v['autotuned'] + ')' if v.get('autotuned') else ''} | "
                f"{_f(None if v['tput_ratio'] is None else 100 * v['tput_ratio'], '.1f')} % | "
                f"{yn[v['tput_ok']]} | {yn[v['met']]} |")
    return "\n".join(lines) + "\n"


def paiod_config(scale):
    """paiod's configuration for the paio setup: the silk policy, KVSB and the
    read budget the device's rate unless overridden (see Scale)."""
    text = (f'period = "100ms"\n[policy]\nkind = "silk"\n'
            f'kvs_bandwidth = "{scale.silk_kvs_mib or scale.kvs_mib:g}MiB/s"\n'
            f'min_bandwidth = "{scale.min_mib:g}MiB/s"\n'
            f'writes_only = {"true" if scale.writes_only else "false"}\n')
    if scale.writes_only and scale.silk_read_mib >= 0:
        text += f'read_bandwidth = "{scale.silk_read_mib or scale.kvs_mib:g}MiB/s"\n'
        if scale.silk_read_busy_depth >= 0:
            text += (f'read_priority = {{ busy_depth = {scale.silk_read_busy_depth}, '
                     f'depth = {scale.silk_read_depth}, '
                     f'window = "{scale.silk_read_window_us}us", '
                     f'split = "{scale.silk_read_split_kib}KiB" }}\n')
        elif scale.silk_read_split_kib:
            text += f'read_split = "{scale.silk_read_split_kib}KiB"\n'
        if scale.silk_read_latency_us:
            text += f'read_latency_target = "{scale.silk_read_latency_us}us"\n'
    if scale.silk_write_busy_depth >= 0:
        if not scale.writes_only:
            raise RunError("silk_write_busy_depth needs writes_only=1 (paiod's write_priority "
                           "needs writes_only = true)")
        text += (f'write_priority = {{ busy_depth = {scale.silk_write_busy_depth}, '
                 f'depth = {scale.silk_write_depth}, '
                 f'window = "{scale.silk_write_window_us}us" }}\n')
    return text


def driver_args(scale, setup, workload):
    return [
        "--num", str(scale.num), "--setup", setup, "--workload", workload,
        "--valley-kops", f"{scale.valley_kops:g}", "--peak-kops", f"{scale.peak_kops:g}",
        "--initial-valley-s", f"{scale.initial_valley_s:g}", "--peak-s", f"{scale.peak_s:g}",
        "--valley-s", f"{scale.valley_s:g}", "--duration-s", f"{scale.duration_s:g}",
        "--kvs-mib", f"{scale.kvs_mib:g}", "--write-buffer-mib", str(scale.write_buffer_mib),
        "--level-base-mib", str(scale.level_base_mib), "--target-file-mib", str(scale.target_file_mib),
        "--block-cache-mib", str(scale.block_cache_mib),
    ] + (["--compaction-readahead-kib", str(scale.compaction_readahead_kib)]
         if scale.compaction_readahead_kib else []) + (
        ["--delete-rate-mib", f"{scale.delete_rate_mib:g}"] if scale.delete_rate_mib else []) + (
        ["--paio-stall-critical", "0"] if setup == "paio" and not scale.paio_stall_critical else [])


def golden_name(scale):
    """The preloaded DB depends on these options only."""
    return (f"golden-n{scale.num}-wb{scale.write_buffer_mib}-lb{scale.level_base_mib}"
            f"-tf{scale.target_file_mib}-random")


def check_csv(path):
    """Smoke checks of the combined CSV: header, types, non-zero throughput (per run)."""
    col = {k: i for i, k in enumerate(CSV_FIELDS)}
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if tuple(header or ()) != CSV_FIELDS:
            raise ValueError(f"{path}: header {header} != {list(CSV_FIELDS)}")
        n = 0
        kops = {}
        for i, rec in enumerate(reader, 2):
            if len(rec) != len(CSV_FIELDS):
                raise ValueError(f"{path}:{i}: {len(rec)} fields")
            int(rec[col["time_s"]]), int(rec[col["run"]])
            float(rec[col["kops"]]), float(rec[col["p99_us"]]), float(rec[col["p50_us"]])
            key = (rec[col["workload"]], rec[col["setup"]], f"run {rec[col['run']]}")
            kops.setdefault(key, []).append(float(rec[col["kops"]]))
            n += 1
    if not n:
        raise ValueError(f"{path}: no rows")
    for key, ks in kops.items():
        if sum(ks) <= 0:
            raise ValueError(f"{path}: zero throughput for {key}")
    return n


# ------------------------------------------------------------- CSV and plots


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({"time_s": r["time_s"], "setup": r["setup"], "workload": r["workload"],
                        "run": int(r.get("run", 1)), "kops": f"{float(r['kops']):.3f}",
                        "p99_us": f"{float(r['p99_us']):.1f}", "p50_us": f"{float(r['p50_us']):.1f}"})


def read_csv(path):
    """taillat.csv -> rows; a CSV from before --repeat (no run column) is run 1."""
    with open(path, newline="") as f:
        return [{"time_s": int(r["time_s"]), "setup": r["setup"], "workload": r["workload"],
                 "run": int(r.get("run") or 1), "kops": float(r["kops"]), "p99_us": float(r["p99_us"]),
                 "p50_us": float(r["p50_us"])}
                for r in csv.DictReader(f)]


def quantile(xs, q):
    """Nearest-rank quantile (q in [0, 1]) of a non-empty list."""
    s = sorted(xs)
    k = max(0, min(len(s) - 1, math.ceil(q * len(s)) - 1))
    return s[k]


def workload_figure(rows, workload, scale, lat_max_ms=None, run=None):
    """Fig. 5-7 style, in paio plot's format (bench/expt.py): per setup,
    throughput (top: per second, its mean dotted, the client load dashed
    red) and p99 and p50 latency (bottom) over time.

    rows: one run's (run: its number, shown in the title with --repeat > 1);
    lat_max_ms: the top of the latency axes (default: the max p99 + 10 %).
    """
    setups = [s for s in ALL_SETUPS if any(r["setup"] == s for r in rows)]
    kmax = max([r["kops"] for r in rows] + [scale.peak_kops]) * 1.15
    lmax = lat_max_ms or (max(r["p99_us"] for r in rows) / 1000.0 * 1.1 or 1.0)
    ts = [i / 10.0 for i in range(int(scale.duration_s * 10) + 1)]
    x_max = max([ts[-1]] + [r["time_s"] for r in rows])
    load = [[x, target_kops(scale, x)] for x in ts]
    panels = []
    for i, setup in enumerate(setups):
        rs = sorted((r for r in rows if r["setup"] == setup), key=lambda r: r["time_s"])
        m = mean([r["kops"] for r in rs])
        last = i == len(setups) - 1
        panels.append({
            "title": LABEL[setup], "y_label": "Throughput (kops/s)",
            "x_min": 0.0, "x_max": x_max, "y_min": 0.0, "y_max": kmax,
            "series": [
                {"label": "client load", "kind": "line", "dash": "dashed", "color": "red",
                 "width": 1, "points": load},
                {"label": LABEL[setup], "kind": "steps", "color": "blue", "width": 1,
                 "points": [[r["time_s"], r["kops"]] for r in rs]},
                {"label": f"mean {m:.2f}", "kind": "line", "dash": "dotted", "color": "blue",
                 "width": 1, "points": [[0.0, m], [x_max, m]]},
            ]})
        panels.append({
            "y_label": "Latency (ms)", "x_label": "Time (s)" if last else "",
            "x_min": 0.0, "x_max": x_max, "y_min": 0.0, "y_max": lmax,
            "series": [
                {"label": "p99", "kind": "steps", "color": "orange", "width": 1,
                 "points": [[r["time_s"], r["p99_us"] / 1000.0] for r in rs]},
                {"label": "p50", "kind": "steps", "color": "grey", "width": 1,
                 "points": [[r["time_s"], r["p50_us"] / 1000.0] for r in rs]},
            ]})
    # paio plot sizes a panel's legend by its longest label: the labels,
    # padded to one length, keep the panels' time axes aligned.
    n = max(len(x["label"]) for p in panels for x in p["series"])
    for x in (x for p in panels for x in p["series"]):
        x["label"] = x["label"].ljust(n)
    return {"title": f"{LABEL.get(workload, workload)}: throughput and 99th percentile latency "
                     f"({scale.kvs_mib:g} MiB/s device)" + (f", run {run}" if run else ""),
            "columns": 1, "panel_width": 1000, "panel_height": 230, "panels": panels}


def plot_workload(path, rows, workload, scale, lat_max_ms=None, run=None, bin_dir=None):
    """Draws `workload_figure` into the PNG `path` with `paio plot` (of `bin_dir`)."""
    return expt.plot(workload_figure(rows, workload, scale, lat_max_ms, run), path, bin_dir)


# ------------------------------------------------------------------ machine


class IoSampler(threading.Thread):
    """Samples once a second the cgroup's accounted bytes and the disk's own
    counters -> [(t, read MiB/s, write MiB/s, disk figures or None)], the
    disk's as `expt.disk_rates` gives them: what reached the device, its
    mean time per read and write (a request waiting in the throttle's queue
    is not there yet), and discards."""

    def __init__(self, cgroup):
        super().__init__(daemon=True)
        self.cgroup = cgroup
        self.samples = []
        self.stop_ev = threading.Event()
        self.t0 = None

    def run(self):
        self.t0 = time.monotonic()
        if self.cgroup.path is None:  # no throttle (--short without root)
            return
        prev = self.cgroup.io_bytes()
        prev_disk = expt.disk_counters(self.cgroup.device)
        n = 1
        while not self.stop_ev.wait(max(0.0, self.t0 + n - time.monotonic())):
            cur = self.cgroup.io_bytes()
            disk = expt.disk_counters(self.cgroup.device)
            rates = expt.disk_rates(prev_disk, disk, 1.0) if prev_disk and disk else None
            self.samples.append((n, (cur[0] - prev[0]) / MIB, (cur[1] - prev[1]) / MIB, rates))
            prev, prev_disk = cur, disk
            n += 1

    def stop(self):
        self.stop_ev.set()
        self.join(timeout=2)


BLKIO_HEADER = ("time_s,read_mibs,write_mibs,disk_read_mibs,disk_write_mibs,disk_read_ms,"
                "disk_write_ms,disk_discard_mibs")


def blkio_rows(samples):
    """blkio.csv's lines (header first) for IoSampler's samples; the disk's
    columns are empty where its counters could not be read."""
    out = [BLKIO_HEADER]
    for t, r, w, d in samples:
        disk = ("," * 5 if d is None else
                f",{d['read_mibs']:.1f},{d['write_mibs']:.1f},{d['read_ms']:.3f},"
                f"{d['write_ms']:.3f},{d['discard_mibs']:.1f}")
        out.append(f"{t},{r:.1f},{w:.1f}{disk}")
    return out


# -------------------------------------------------------------------- runner

_children = []  # live Popen objects, stopped on errors/signals


def stop(p, timeout=10.0):
    if p is None or p.poll() is not None:
        return
    try:
        os.killpg(p.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        p.terminate()
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            p.kill()
        p.wait()


def copy_db(src, dst):
    """A private copy of the preloaded DB: SST files (immutable) hard-linked, the rest copied."""
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.suffix == ".sst":
            os.link(f, dst / f.name)
        elif f.is_file():
            shutil.copy2(f, dst / f.name)


def ensure_golden(args, scale, data_dir):
    golden = data_dir / golden_name(scale)
    done = golden / "PRELOAD_DONE"
    if done.exists():
        return golden
    if golden.exists():
        shutil.rmtree(golden)
    data_dir.mkdir(parents=True, exist_ok=True)
    print(f"preloading {scale.num} key-value pairs into {golden} (once, no throttle) ...", flush=True)
    t = time.monotonic()
    cmd = [str(args.driver), "preload", "--db", str(golden), "--quiet"] + driver_args(scale, "baseline", "mixture")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RunError(f"preload failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    (golden / "preload.log").write_text(r.stderr)
    done.write_text(json.dumps(asdict(scale)) + "\n")
    print(f"preloaded in {time.monotonic() - t:.0f} s\n{r.stderr.strip()}", flush=True)
    return golden


def start_paiod(args, scale, setup_dir, sock_dir):
    cfg = setup_dir / "paiod.toml"
    cfg.write_text(paiod_config(scale))
    sock = Path(sock_dir) / "paiod.sock"
    log = open(setup_dir / "paiod.log", "w")
    cmd = [str(args.paiod), "--config", str(cfg), "--socket", str(sock)]
    (setup_dir / "paiod.cmd").write_text(shlex.join(cmd) + "\n")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    _children.append(p)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if p.poll() is not None:
            log.close()
            text = (setup_dir / "paiod.log").read_text()
            first = text.strip().splitlines()[0] if text.strip() else ""
            return None, None, f"paiod exited ({p.returncode}): {first}"
        if sock.exists():
            time.sleep(0.3)
            if p.poll() is None:
                return p, sock, None
        time.sleep(0.05)
    stop(p)
    return None, None, "paiod did not create its socket within 5 s"


def round_order(setups, k):
    """The setups in round k (from 1): rotated left by k-1."""
    i = (k - 1) % len(setups) if setups else 0
    return list(setups[i:]) + list(setups[:i])


def paiod_refusals(log_text):
    """The lines of paiod's log saying a stage refused its rules."""
    return [line.strip() for line in log_text.splitlines() if " refused request " in line]


def run_dir(out, workload, setup, run=1, repeat=1):
    """<out>/<workload>/<setup>/, or .../run<k>/ with --repeat > 1."""
    d = out / workload / setup
    return d if repeat == 1 else d / f"run{run}"


def run_label(workload, setup, run=1, repeat=1):
    """'<workload>/<setup>', or '<workload>/<setup> run k/N' with --repeat > 1 (progress, errors)."""
    return f"{workload}/{setup}" + (f" run {run}/{repeat}" if repeat > 1 else "")


def run_setup(args, scale, cgroup, golden, out, workload, setup, notes, run=1, repeat=1):
    setup_dir = run_dir(out, workload, setup, run, repeat)
    setup_dir.mkdir(parents=True, exist_ok=True)
    label = run_label(workload, setup, run, repeat)
    db = args.data_dir / (f"run-{setup}-{workload}" + (f"-run{run}" if repeat > 1 else ""))
    copy_db(golden, db)
    paiod = None
    sock_dir = tempfile.mkdtemp(prefix="paio-taillat-")
    extra = ["--db", str(db), "--out", str(setup_dir / "driver.csv")]
    if scale.slow_get_us:
        extra += ["--slow-get-us", str(scale.slow_get_us), "--slow-out", str(setup_dir / "slow_gets.csv")]
    try:
        if setup == "paio":
            extra += ["--paio-stats", str(setup_dir / "paio-stats.json")]
            if args.paio_control != "none":
                paiod, sock, err = start_paiod(args, scale, setup_dir, sock_dir)
                if err:
                    if args.paio_control == "paiod":
                        raise RunError(f"{err} (see {setup_dir / 'paiod.log'}); the SILK policy needs "
                                       f"a paiod with `kind = \"silk\"`: {PAIOD_BUILD_CMD}. "
                                       "--paio-control none runs the plugin without a control plane.")
                    msg = (f"{label}: {err} -- ran the paio setup WITHOUT paiod "
                           "(plugin installed, no control: pass-through DRLs)")
                    print(f"NOTE: {msg}", flush=True)
                    notes.append(msg)
                else:
                    extra += ["--paio-socket", str(sock)]
            elif f"{workload}/paio: run without paiod (--paio-control none)" not in notes:
                notes.append(f"{workload}/paio: run without paiod (--paio-control none)")
        cmd = [str(args.driver), "run"] + driver_args(scale, setup, workload) + extra
        wrapped = cmd
        if cgroup.procs_file:
            wrapped = ["sh", "-c", f'echo $$ > {shlex.quote(cgroup.procs_file)} && exec "$0" "$@"'] + cmd
        (setup_dir / "driver.cmd").write_text(shlex.join(wrapped) + "\n")
        print(f"[{label}] {scale.duration_s:g} s ...", flush=True)
        sampler = IoSampler(cgroup)
        load0 = list(os.getloadavg())
        log = open(setup_dir / "driver.log", "w")
        t0 = time.monotonic()
        p = subprocess.Popen(wrapped, stdout=log, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        _children.append(p)
        sampler.start()
        n = 0
        for line in p.stderr:
            log.write(line)
            n += 1
            if args.verbose or not line.startswith("[") or n % args.progress_every == 0:
                print("  " + line.rstrip(), flush=True)
            if paiod is not None and paiod.poll() is not None:
                stop(p)
                raise RunError(f"paiod died during {label} (see {setup_dir / 'paiod.log'})")
            if time.monotonic() - t0 > scale.duration_s + args.timeout_slack_s:
                stop(p)
                raise RunError(f"{label}: driver exceeded {scale.duration_s + args.timeout_slack_s:.0f} s")
        rc = p.wait()
        sampler.stop()
        log.close()
        if rc != 0:
            raise RunError(f"{label}: driver failed ({rc}), see {setup_dir / 'driver.log'}")
        if paiod is not None:
            refused = paiod_refusals((setup_dir / "paiod.log").read_text(errors="replace"))
            if refused:
                raise RunError(f"{label}: the stage refused paiod's rules, so the run did not have "
                               f"the configured policy (see {setup_dir / 'paiod.log'}): {refused[0]}")
        (setup_dir / "blkio.csv").write_text("\n".join(blkio_rows(sampler.samples)) + "\n")
        if scale.slow_get_us:
            slow = summarize_slow((setup_dir / "slow_gets.csv").read_text())
            (setup_dir / "slow_gets.json").write_text(json.dumps(slow, indent=1) + "\n")
            print(format_slow(label, slow), flush=True)
        peak_r = max((r for _, r, _, _ in sampler.samples), default=0)
        peak_w = max((w for _, _, w, _ in sampler.samples), default=0)
        return parse_driver_csv((setup_dir / "driver.csv").read_text(), setup, workload, run), {
            "wall_s": round(time.monotonic() - t0, 1), "blkio_peak_read_mibs": round(peak_r, 1),
            "blkio_peak_write_mibs": round(peak_w, 1),
            "blkio_mean_read_mibs": round(mean([r for _, r, _, _ in sampler.samples]), 1),
            "blkio_mean_write_mibs": round(mean([w for _, _, w, _ in sampler.samples]), 1),
            "paiod": paiod is not None, "loadavg_at_start": load0,
            "loadavg_at_end": list(os.getloadavg())}
    finally:
        if paiod is not None:
            stop(paiod)
        shutil.rmtree(sock_dir, ignore_errors=True)
        if not args.keep_db:
            shutil.rmtree(db, ignore_errors=True)


SLOW_FIELDS = ("at_s", "client", "wall_us", "thread_cpu_us", "db_mutex_us", "snapshot_us", "memtable_us",
               "files_us", "find_table_us", "block_reads", "block_read_us", "block_read_kib",
               "block_cache_hits", "file_read_us")


def summarize_slow(text, top=10):
    """Where the slow Gets of a driver's slow_gets.csv (`text`) spent their
    time: for all of them and for the `top` slowest, the sums of wall time,
    of block reads (RocksDB's block_read_time: the device and any throttle
    queue in front of it), of DB mutex waits, of the thread's CPU time (the
    reads' system time included, so it overlaps the block reads a little),
    and what is left, at least (off-CPU, not reading and not waiting for
    the mutex: the run queue, other locks, page faults), as shares of the
    wall time. Raises ValueError when the header is not the driver's."""
    lines = text.splitlines()
    if not lines or tuple(lines[0].split(",")) != SLOW_FIELDS:
        raise ValueError(f"slow_gets.csv: expected the header {','.join(SLOW_FIELDS)}, "
                         f"got {lines[0] if lines else 'an empty file'!r}")
    rows = [dict(zip(SLOW_FIELDS, map(float, ln.split(",")))) for ln in lines[1:] if ln]

    def shares(rs):
        wall = sum(r["wall_us"] for r in rs)
        read = sum(r["block_read_us"] for r in rs)
        mutex = sum(r["db_mutex_us"] for r in rs)
        cpu = sum(r["thread_cpu_us"] for r in rs)
        other = max(wall - read - mutex - cpu, 0.0)
        pct = (lambda x: round(100.0 * x / wall, 1)) if wall else (lambda x: 0.0)
        return {"gets": len(rs), "wall_ms": round(wall / 1e3, 1),
                "median_wall_us": round(_median([r["wall_us"] for r in rs]), 1) if rs else 0.0,
                "block_reads_per_get": round(sum(r["block_reads"] for r in rs) / len(rs), 2) if rs else 0.0,
                "block_read_pct": pct(read), "db_mutex_pct": pct(mutex), "cpu_pct": pct(cpu),
                "other_pct": pct(other)}

    slowest = sorted(rows, key=lambda r: -r["wall_us"])[:top]
    return {"all": shares(rows), "slowest": shares(slowest),
            "slowest_at_s": sorted(round(r["at_s"], 2) for r in slowest)}


def format_slow(label, summary):
    """One paragraph of `summarize_slow`'s figures for the progress output."""
    out = []
    for key, name in (("all", "all slow Gets"), ("slowest", f"the {summary['slowest']['gets']} slowest")):
        s = summary[key]
        out.append(f"  {name}: {s['gets']} Gets, {s['wall_ms']} ms, median {s['median_wall_us']} us, "
                   f"{s['block_reads_per_get']} block reads each; block reads {s['block_read_pct']} %, "
                   f"DB mutex {s['db_mutex_pct']} %, CPU {s['cpu_pct']} %, other {s['other_pct']} %")
    out.append(f"  the slowest ended at s {summary['slowest_at_s']}")
    return f"[{label}] slow Gets (slow_gets.csv):\n" + "\n".join(out)


def report(out, rows, scale, workloads, no_plot, notes=(), bin_dir=None):
    write_csv(out / "taillat.csv", rows)
    summary = summarize(rows, scale)
    verdict = goal_verdict(summary)
    table = format_table(summary, verdict)
    if notes:
        table += "\n" + "\n".join(f"NOTE: {n}" for n in notes) + "\n"
    (out / "table.md").write_text(table)
    (out / "summary.json").write_text(json.dumps({"summary": summary, "verdict": verdict}, indent=1) + "\n")
    if not no_plot:
        for w in workloads:
            wr = [r for r in rows if r["workload"] == w]
            run_ids = sorted({int(r.get("run", 1)) for r in wr})
            # One plot per workload; with repeated runs one per run (<w>-run<k>.png).
            for k in run_ids:
                rr = wr if run_ids == [1] else [r for r in wr if int(r.get("run", 1)) == k]
                name, run = (w, None) if run_ids == [1] else (f"{w}-run{k}", k)
                plot_workload(out / f"{name}.png", rr, w, scale, run=run, bin_dir=bin_dir)
                # Same plot with the latency axis cut at 1.5x the 95th percentile
                # of the per-second p99s: the shape below the largest spikes.
                cut = 1.5 * quantile([r["p99_us"] / 1000.0 for r in rr], 0.95)
                plot_workload(out / f"{name}-zoom.png", rr, w, scale, lat_max_ms=cut, run=run,
                              bin_dir=bin_dir)
    return table


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--short", action="store_true",
                    help="smoke test: mixture, all setups, ~6 s each, 200k keys (< 30 s)")
    ap.add_argument("--workloads", help=f"comma-separated, of {','.join(ALL_WORKLOADS)}")
    ap.add_argument("--setups", help=f"comma-separated, of {','.join(ALL_SETUPS)}")
    ap.add_argument("--out", type=Path, help="output dir (default bench/results/taillat, "
                                             "short: target/taillat-short)")
    ap.add_argument("--data-dir", type=Path, default=REPO / "target/taillat-data")
    ap.add_argument("--driver", type=Path, default=DRIVER)
    ap.add_argument("--paiod", type=Path, default=REPO / "target/release/paiod")
    ap.add_argument("--paio-control", choices=("paiod", "auto", "none"),
                    help="paio setup: paiod (required; default in full mode), auto (paiod if it starts "
                         "with the SILK policy, else the plugin without control; default with --short), "
                         "none (plugin without control)")
    ap.add_argument("--num", type=int, help="preloaded pairs (override)")
    ap.add_argument("--duration-s", type=float, help="per setup (override)")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="override a scale field (e.g. initial_valley_s=10); see Scale in run.py")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="run every workload x setup N times, round-robin (run k of all setups, then "
                         "run k+1); files in <out>/<workload>/<setup>/run<k>/; the table shows medians")
    ap.add_argument("--keep-db", action="store_true", help="keep each run's DB copy")
    ap.add_argument("--report-only", action="store_true", help="redo table/plots from <out>/taillat.csv")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="print every per-second driver line")
    ap.add_argument("--progress-every", type=int, default=10, help="print every n-th driver line")
    ap.add_argument("--timeout-slack-s", type=float, default=180)
    a = ap.parse_args(argv)
    a.workloads = a.workloads.split(",") if a.workloads else (["mixture"] if a.short else list(ALL_WORKLOADS))
    a.setups = a.setups.split(",") if a.setups else list(ALL_SETUPS)
    if a.repeat < 1:
        ap.error(f"--repeat must be >= 1, not {a.repeat}")
    for w in a.workloads:
        if w not in ALL_WORKLOADS:
            ap.error(f"unknown workload {w}")
    for s in a.setups:
        if s not in ALL_SETUPS:
            ap.error(f"unknown setup {s}")
    if a.out is None:
        a.out = REPO / ("target/taillat-short" if a.short else "bench/results/taillat")
    if a.paio_control is None:
        a.paio_control = "auto" if a.short else "paiod"
    return a


def plot_bin_dir(args):
    """Where the `paio` that draws the plots is: beside --paiod if it is
    there, else target/release."""
    d = args.paiod.parent
    return d if (d / "paio").is_file() else None


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    scale = SHORT_SCALE if args.short else FULL_SCALE
    if args.num:
        scale.num = args.num
    if args.duration_s:
        scale.duration_s = args.duration_s
    for kv in args.set:
        k, _, v = kv.partition("=")
        if k not in Scale.__dataclass_fields__:
            raise RunError(f"--set {kv}: no scale field {k}")
        value = type(getattr(scale, k))(float(v)) if isinstance(getattr(scale, k), int) else float(v)
        if k == "paio_stall_critical" and value not in (0, 1):
            raise RunError(f"--set {kv}: expected 0 or 1")
        setattr(scale, k, value)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        rows = read_csv(out / "taillat.csv")
        print(report(out, rows, scale, args.workloads, args.no_plot,
                     bin_dir=plot_bin_dir(args)), end="")
        return 0

    if not args.driver.exists():
        raise RunError(f"{args.driver} is missing; build it first:\n  {BUILD_CMD}")
    if "paio" in args.setups:
        status = args.driver.parent / "paio_status.txt"
        if status.exists() and status.read_text().strip() != "yes":
            raise RunError(f"{args.driver} was built without the paio plugin; build "
                           "integrations/rocksdb (bash integrations/rocksdb/build.sh) and rebuild:\n"
                           f"  {BUILD_CMD}\nor leave out the paio setup: --setups baseline,autotuned")
        if args.paio_control != "none" and not args.paiod.exists():
            if args.paio_control == "paiod":
                raise RunError(f"{args.paiod} is missing: {PAIOD_BUILD_CMD}")
    if os.geteuid() != 0 and not args.short:
        raise RunError("must run as root (cgroup v1 blkio writes)")

    args.data_dir.mkdir(parents=True, exist_ok=True)
    maj, mnr, disk = block_device_of(args.data_dir)
    fstype = sh(["findmnt", "-no", "FSTYPE", "-T", str(args.data_dir)])
    if fstype in ("tmpfs", "ramfs"):
        raise RunError(f"{args.data_dir} is on {fstype}: direct I/O and the blkio throttle need a disk")
    bps = int(scale.kvs_mib * MIB)
    header = [
        f"command: {shlex.join([sys.executable] + sys.argv)}",
        f"date (UTC): {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M:%S')}",
        f"machine: {machine_info(args.data_dir)}",
        f"commit: {commit_info()}",
        f"driver: {args.driver} (paio plugin: "
        f"{(args.driver.parent / 'paio_status.txt').read_text().strip() if (args.driver.parent / 'paio_status.txt').exists() else '?'})",
        f"scale: {json.dumps(asdict(scale))}",
        f"throttle: blkio read_bps_device and write_bps_device {maj}:{mnr} {bps} on /dev/{disk} "
        f"({fstype}), data dir {args.data_dir}",
        f"setups: {','.join(args.setups)}; workloads: {','.join(args.workloads)}; "
        f"paio control: {args.paio_control}; repeat: {args.repeat}"
        + (" (round-robin: run k of every workload x setup, then run k+1; the setups' order "
           "rotates by one each round)" if args.repeat > 1 else ""),
    ]
    (out / "header.txt").write_text("\n".join(header) + "\n")
    print("\n".join(header), flush=True)

    golden = ensure_golden(args, scale, args.data_dir)
    plog = golden / "preload.log"
    summary_line = next((ln for ln in (plog.read_text().splitlines() if plog.exists() else [])
                         if ln.startswith("preload:")), "preload: ?")
    with open(out / "header.txt", "a") as f:
        f.write(f"preloaded DB (shared by all setups, SSTs hard-linked): {golden}; {summary_line}\n")
    # The smoke run (--short) checks the pipeline: without root or a v1 blkio
    # hierarchy it runs unthrottled and says so; the full run requires both.
    cgroup = BlkioCgroup(f"paio-taillat-{os.getpid()}", f"{maj}:{mnr}", bps, write_bps=bps,
                         required=not args.short)
    rows, runs, notes = [], {}, []
    if cgroup.note:
        notes.append(cgroup.note)
    try:
        # Round-robin, so that the setups' runs are interleaved in time, and
        # the setups' order rotates from round to round (round_order), so
        # that no setup always runs first (on a cold device and page cache).
        for k in range(1, args.repeat + 1):
            for w in args.workloads:
                for s in round_order(args.setups, k):
                    r, info = run_setup(args, scale, cgroup, golden, out, w, s, notes, k, args.repeat)
                    rows += r
                    key = f"{w}/{s}" + (f"/run{k}" if args.repeat > 1 else "")
                    runs[key] = info
                    print(f"[{run_label(w, s, k, args.repeat)}] done: mean {mean([x['kops'] for x in r]):.2f} kops/s, max p99 "
                          f"{max([x['p99_us'] for x in r], default=0) / 1000:.2f} ms; blkio mean/peak read "
                          f"{info['blkio_mean_read_mibs']}/{info['blkio_peak_read_mibs']}, write "
                          f"{info['blkio_mean_write_mibs']}/{info['blkio_peak_write_mibs']} MiB/s", flush=True)
                    # Partial results survive an interruption of a long run.
                    report(out, rows, scale, args.workloads, True, notes)
    finally:
        for p in _children:
            stop(p)
        cgroup.cleanup()
    (out / "runs.json").write_text(json.dumps(runs, indent=1) + "\n")
    if notes:
        with open(out / "header.txt", "a") as f:
            f.write("".join(f"NOTE: {n}\n" for n in notes))
    table = report(out, rows, scale, args.workloads, args.no_plot, notes, plot_bin_dir(args))
    print(table, end="")
    n = check_csv(out / "taillat.csv")
    print(f"results in {out} ({n} CSV rows)")
    return 0


def _stop_children():
    for p in _children:
        stop(p)


if __name__ == "__main__":
    expt.run_main(main, on_interrupt=_stop_children)
