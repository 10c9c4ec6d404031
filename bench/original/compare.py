#!/usr/bin/env python3
"""The original PAIO (dsrhaslab/paio) beside this stage, in one run.

Measures the original's own benchmarks next to paio-bench on this machine,
interleaved: every round runs each configuration once, in an order
rotated by the round, and ratios are taken within a round.

  micro   Noop object, closed-loop threads, 0 B / 4 KiB / 128 KiB requests:
          the original's `paio_bench` (its per-request loop clears the
          buffer and its Noop copies it) against `paio-bench micro` (one
          channel per thread, the buffer never touched); 2 threads as
          shipped (both threads on one channel) and, when --own-channel is
          given, a build of the original whose threads each have a channel
  drl     a DRL object at 100,000 ops/s, one client: the original's
          `drl_bench --test=simple_enforce` (rate over its 1 M requests,
          burst included) against `paio-bench drl` (case `ops`, 1 thread:
          the window's rate, and the rate with the initial burst)

This script does not build the original: --original names a CMake build
directory of its public source that holds `paio_bench` and `drl_bench`
(both read `../files/`, so they run from that directory), and
--original-source says what was built (repository, commit, local changes)
for the result header.

Results: OUT/original.csv (one row per run, then median/min/max rows and
per-round ratios) and OUT/summary.md.  Stdlib only.
"""

import argparse
import csv
import datetime
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import expt  # noqa: E402

PAIO_BENCH = expt.REPO / "target" / "release" / "paio-bench"

# (threads, size): operations per thread for the original's paio_bench, about
# one second each on this machine class.
ORIGINAL_OPS = {(1, 0): 10_000_000, (1, 4096): 4_000_000, (1, 131072): 300_000,
                (2, 0): 5_000_000}
MICRO_CONFIGS = [(1, 0), (1, 4096), (1, 131072), (2, 0)]
DRL_RATE = 100_000
DRL_OPS = 1_000_000


def parse_original_micro(text):
    """MOps/s of one `paio_bench --runs=1` output (its `Run: 1` block)."""
    m = re.search(r"Run: 1\s+IOPS \(KOps/s\):\s+([0-9.]+)", text)
    if not m:
        raise expt.ExperimentError("paio_bench printed no 'Run: 1 / IOPS (KOps/s)' block:\n"
                                   + text[-2000:])
    return float(m.group(1)) / 1000.0


def parse_original_drl(text):
    """Achieved ops/s of the enforce phase of `drl_bench --test=simple_enforce`."""
    m = re.search(r"DRL object enforce \((\d+)\).*?Real IOPS:\s+([0-9.]+)", text, re.S)
    if not m:
        raise expt.ExperimentError("drl_bench printed no 'DRL object enforce ... Real IOPS' "
                                   "block:\n" + text[-2000:])
    if int(m.group(1)) != DRL_RATE:
        raise expt.ExperimentError(f"drl_bench enforced at {m.group(1)} ops/s, "
                                   f"expected {DRL_RATE}")
    return float(m.group(2))


def read_paio_csv(path):
    """Data rows of a paio-bench CSV (comment lines skipped) as dicts."""
    lines = [ln for ln in Path(path).read_text().splitlines() if not ln.startswith("#")]
    return list(csv.DictReader(lines))


def paio_micro_mops(rows, threads, size):
    """MOps/s of the single run of (threads, size) in a micro.csv."""
    for r in rows:
        if (r["record"] == "run" and int(r["threads"]) == threads
                and int(r["size_bytes"]) == size):
            return float(r["mops_s"])
    raise expt.ExperimentError(f"micro.csv has no run row for {threads} threads, {size} B")


def paio_drl_rates(rows):
    """(rate_window, rate_incl_burst) of case `ops`, 1 thread, in a drl.csv."""
    for r in rows:
        if r["case"] == "ops" and int(r["threads"]) == 1:
            return float(r["rate_window"]), float(r["rate_incl_burst"])
    raise expt.ExperimentError("drl.csv has no row for case ops, 1 thread")


def run(argv, cwd=None):
    """stdout+stderr of `argv`; ExperimentError on failure."""
    p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        raise expt.ExperimentError(f"{' '.join(map(str, argv))} exited {p.returncode}:\n"
                                   + (p.stdout + p.stderr)[-2000:])
    return p.stdout + p.stderr


def measure(unit, args):
    """Runs one unit of a round; returns a list of result rows (dicts)."""
    impl, kind, threads, size = unit
    if impl in ("original", "original-own") and kind == "micro":
        build = args.original if impl == "original" else args.own_channel
        out = run([str(build / "paio_bench"), "--runs=1", "--wtime=0",
                   f"--threads={threads}", f"--size={size}",
                   f"--ops={ORIGINAL_OPS[(threads, size)]}"], cwd=build)
        mops = parse_original_micro(out)
        return [dict(impl=impl, bench="micro", threads=threads, size_bytes=size,
                     value=mops, unit="mops_s")]
    if impl == "paio" and kind == "micro":
        with tempfile.TemporaryDirectory() as d:
            run([str(PAIO_BENCH), "micro", "--runs", "1", "--threads", str(threads),
                 "--sizes", str(size), "--out", d])
            mops = paio_micro_mops(read_paio_csv(Path(d) / "micro.csv"), threads, size)
        return [dict(impl=impl, bench="micro", threads=threads, size_bytes=size,
                     value=mops, unit="mops_s")]
    if impl == "original" and kind == "drl":
        out = run([str(args.original / "drl_bench"), "--test=simple_enforce",
                   f"--rate={DRL_RATE}", f"--enforcement_ops={DRL_OPS}"], cwd=args.original)
        return [dict(impl=impl, bench="drl", threads=1, size_bytes=0,
                     value=parse_original_drl(out), unit="ops_s_incl_burst")]
    if impl == "paio" and kind == "drl":
        with tempfile.TemporaryDirectory() as d:
            run([str(PAIO_BENCH), "drl", "--threads", "1", "--out", d])
            window, incl = paio_drl_rates(read_paio_csv(Path(d) / "drl.csv"))
        return [dict(impl=impl, bench="drl", threads=1, size_bytes=0, value=window,
                     unit="ops_s_window"),
                dict(impl=impl, bench="drl", threads=1, size_bytes=0, value=incl,
                     unit="ops_s_incl_burst")]
    raise ValueError(f"unknown unit {unit}")


def units(args):
    """Every configuration of a round, in base order."""
    u = [(impl, "micro", t, s) for (t, s) in MICRO_CONFIGS for impl in ("original", "paio")]
    if args.own_channel:
        u += [("original-own", "micro", 1, 0), ("original-own", "micro", 2, 0)]
    if not args.no_drl:
        u += [("original", "drl", 1, 0), ("paio", "drl", 1, 0)]
    return u


def rotated(seq, r):
    """`seq` rotated left by r: round r starts at configuration r."""
    r %= len(seq)
    return seq[r:] + seq[:r]


def key(row):
    return (row["impl"], row["bench"], row["threads"], row["size_bytes"], row["unit"])


def ratios(rows):
    """Per-round ratios: paio over original MOps/s for each micro
    configuration (and over the own-channel build at 2 threads), 2-thread
    over 1-thread scaling per implementation, and DRL error in percent."""
    out = []
    by_round = {}
    for r in rows:
        by_round.setdefault(r["round"], {})[key(r)] = r["value"]
    for rnd, v in sorted(by_round.items()):
        for (t, s) in MICRO_CONFIGS:
            p, o = v.get(("paio", "micro", t, s, "mops_s")), v.get(("original", "micro", t, s,
                                                                      "mops_s"))
            if p and o:
                out.append(dict(round=rnd, name=f"speedup_{t}t_{s}B", value=p / o))
        own = v.get(("original-own", "micro", 2, 0, "mops_s"))
        p2 = v.get(("paio", "micro", 2, 0, "mops_s"))
        if own and p2:
            out.append(dict(round=rnd, name="speedup_2t_0B_vs_own_channel", value=p2 / own))
        for impl in ("paio", "original", "original-own"):
            one = v.get((impl, "micro", 1, 0, "mops_s"))
            two = v.get((impl, "micro", 2, 0, "mops_s"))
            if one and two:
                out.append(dict(round=rnd, name=f"scaling_2t_{impl}", value=two / one))
        for (impl, unit) in (("original", "ops_s_incl_burst"), ("paio", "ops_s_incl_burst"),
                             ("paio", "ops_s_window")):
            x = v.get((impl, "drl", 1, 0, unit))
            if x:
                out.append(dict(round=rnd, name=f"drl_err_pct_{impl}_{unit}",
                                value=(x / DRL_RATE - 1) * 100))
    return out


def summarize(values):
    return statistics.median(values), min(values), max(values)


def write_results(out, header, rows, rats):
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "original.csv", "w") as f:
        for line in header:
            f.write(f"# {line}\n")
        f.write("record,round,impl,bench,threads,size_bytes,unit,value\n")
        for r in rows:
            f.write(f"run,{r['round']},{r['impl']},{r['bench']},{r['threads']},"
                    f"{r['size_bytes']},{r['unit']},{r['value']:.4f}\n")
        groups = {}
        for r in rows:
            groups.setdefault(key(r), []).append(r["value"])
        for k, vals in groups.items():
            for name, val in zip(("median", "min", "max"), summarize(vals)):
                f.write(f"{name},,{k[0]},{k[1]},{k[2]},{k[3]},{k[4]},{val:.4f}\n")
        for r in rats:
            f.write(f"ratio,{r['round']},,,,,{r['name']},{r['value']:.4f}\n")
        rgroups = {}
        for r in rats:
            rgroups.setdefault(r["name"], []).append(r["value"])
        for name, vals in rgroups.items():
            for stat, val in zip(("median", "min", "max"), summarize(vals)):
                f.write(f"ratio_{stat},,,,,,{name},{val:.4f}\n")
    lines = ["# The original PAIO beside this stage", ""] + [f"- {h}" for h in header] + [""]
    lines += ["| measure | median | min | max |", "|---|---:|---:|---:|"]
    for k, vals in groups.items():
        med, lo, hi = summarize(vals)
        lines.append(f"| {k[0]} {k[1]} {k[2]}t {k[3]} B ({k[4]}) | {med:.3f} | {lo:.3f} | "
                     f"{hi:.3f} |")
    for name, vals in rgroups.items():
        med, lo, hi = summarize(vals)
        lines.append(f"| {name} (per round) | {med:.4f} | {lo:.4f} | {hi:.4f} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--original", type=Path, required=True,
                    help="build directory of the original holding paio_bench and drl_bench")
    ap.add_argument("--original-source", required=True,
                    help="what was built, for the header (repository, commit, local changes)")
    ap.add_argument("--own-channel", type=Path,
                    help="build directory of the original with a channel per thread")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-drl", action="store_true", help="skip the DRL pair (about 80 s a round)")
    ap.add_argument("--out", type=Path, default=expt.REPO / "bench" / "results" / "original")
    args = ap.parse_args()
    if args.rounds < 1:
        raise expt.ExperimentError("--rounds must be at least 1")
    for d in [args.original] + ([args.own_channel] if args.own_channel else []):
        for exe in ("paio_bench",) + (("drl_bench",) if d == args.original else ()):
            if not os.access(d / exe, os.X_OK):
                raise expt.ExperimentError(f"{d / exe} is not an executable: --original and "
                                           "--own-channel name the original's CMake build "
                                           "directory")
    run(["cargo", "build", "--release", "-q", "-p", "paio-bench"], cwd=expt.REPO)
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    header = [
        "benchmark: the original PAIO's paio_bench and drl_bench beside paio-bench micro and "
        "drl, interleaved, order rotated per round",
        "command: " + " ".join([sys.argv[0]] + sys.argv[1:]),
        f"date_utc: {started}",
        f"machine: {expt.machine_info(expt.REPO)}",
        f"loadavg_start: {Path('/proc/loadavg').read_text().strip()}",
        f"paio_commit: {expt.commit_info()}",
        f"original: {args.original_source}",
        "note: micro values are MOps/s summed over threads; speedup = paio / original MOps/s "
        "in the same round; scaling = 2-thread / 1-thread MOps/s in the same round",
        "note: the original's micro loop clears the request buffer before each request and its "
        "Noop copies it; paio's never touches it: at 4 KiB and 128 KiB the ratio includes that",
        f"note: drl: target {DRL_RATE} ops/s, one client; the original's rate is over its "
        f"{DRL_OPS} requests including its initial burst; paio's over a 10 s window after a "
        "0.5 s settle, and with the burst (first request to window end)",
    ]
    rows = []
    base = units(args)
    for rnd in range(args.rounds):
        order = rotated(base, rnd)
        print(f"round {rnd + 1}/{args.rounds}: "
              + ", ".join(f"{i}/{k}/{t}t/{s}B" for i, k, t, s in order), flush=True)
        for u in order:
            for row in measure(u, args):
                row["round"] = rnd + 1
                rows.append(row)
                print(f"  {row['impl']} {row['bench']} {row['threads']}t {row['size_bytes']} B: "
                      f"{row['value']:.3f} {row['unit']}", flush=True)
    print(write_results(args.out, header, rows, ratios(rows)))
    return 0


if __name__ == "__main__":
    expt.run_main(main)
