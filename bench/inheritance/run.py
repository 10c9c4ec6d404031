#!/usr/bin/env python3
"""Priority inheritance and dirty-data control (issue 12; RCP FAST'17 §4.2-4.3).

Three cases, each with the critical work's latency as the metric:

  locks   bench/inheritance/loglock.c: request threads ("req-N", critical by
          name) read 4 KiB (O_DIRECT) and append to a log under a mutex that
          a checkpointer thread ("bg-ckpt") holds while it writes 1 MiB
          (O_DIRECT); a background fio (two 1 MiB readers, two 512 KiB
          writers, O_DIRECT) runs beside it.  Metric: request latency.
  dirty   sqlite3 commits with fsync (critical, bench/criticality/commits.py)
          next to a buffered `dd` writer on the same file system.  Metric:
          commit latency.
  stalls  db_bench fillrandom through the RocksDB plugin with flush and
          compaction writes limited (a DRL at --stall-rate) and small
          memtables, so writes stall.  Metrics: RocksDB's stall time
          (rocksdb.stall.micros) and put latency.

Setups, interleaved and rotated per round:

  vanilla          no paio
  rocksdb-limiter  (stalls only) RocksDB's own rate limiter at --stall-rate
  paio             paio criticality without inheritance: locks, the program
                   under `paio run` with `[criticality] inherit = false`;
                   dirty, `dd` under the background policy with no dirty
                   bound; stalls, PAIO_ROCKSDB_STALL_INHERIT=0
  paio-inherit     the same with inheritance: lock inheritance, the dirty
                   bound (--dirty-per-file, each write-back overlapping the
                   next as by default), stall inheritance
  paio-wait        (dirty only) paio-inherit with `dirty_overlap = false`
                   at --wait-per-file: the writer waits for each write-back
                   it starts (twice the bound: the same most in an fsync's way)

Background programs (fio, dd) run under `paio run --policy BG` in the paio
setups (--bg-policy, default bench/inheritance/background.toml), critical ones under
`paio run` with their names or `--critical`.  Results in
bench/results/inheritance/.  Stdlib; plots through `paio plot`.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import expt  # noqa: E402

REPO = expt.REPO
HERE = Path(__file__).resolve().parent
MIB = 1 << 20
ALL_CASES = ("locks", "dirty", "stalls")
# The dirty case's setups with a bound: their background policy in raw/.
DIRTY_POLICY = {"paio-inherit": "bg-dirty.toml", "paio-wait": "bg-wait.toml"}
SETUPS = {
    "locks": ("vanilla", "paio", "paio-inherit"),
    "dirty": ("vanilla", "paio", "paio-inherit", "paio-wait"),
    "stalls": ("vanilla", "rocksdb-limiter", "paio", "paio-inherit"),
}
PERCENTILES = (50, 90, 99, 99.9)
DriverError = expt.ExperimentError
# The small-memtable RocksDB of the stalls case (flags of db_bench; the
# paio setups take them through an options file with the listener).
DB_FLAGS = ["--write_buffer_size=4194304", "--max_write_buffer_number=2",
            "--compression_type=none", "--max_background_jobs=2",
            "--target_file_size_base=4194304", "--max_bytes_for_level_base=16777216"]


# ---------------------------------------------------------------- pure parts

def percentiles_of(samples, points=PERCENTILES):
    """{percentile: value} of `samples` (nearest rank)."""
    return expt.percentiles_of(samples, points)


def db_bench_result(text):
    """(ops/s, {percentile: µs}, stall seconds) of a db_bench fillrandom run
    with --histogram and --statistics."""
    ops, pct, stall = None, {}, None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("fillrandom") and "ops/sec" in line:
            ops = float(line.split("ops/sec")[0].split(";")[-1].split()[-1])
        elif line.startswith("Percentiles:") and not pct:
            parts = line.split()[1:]
            for name, value in zip(parts[::2], parts[1::2]):
                pct[float(name.rstrip(":")[1:])] = float(value)
        elif line.startswith("rocksdb.stall.micros COUNT :"):
            stall = int(line.split(":")[1]) / 1e6
    if ops is None or not pct or stall is None:
        raise DriverError(f"db_bench printed no rate, percentiles or stall time:\n{text[-2000:]}")
    return ops, pct, stall


def byte_rate(text):
    """Bytes per second of a rate such as "8MiB/s" (the units paio takes:
    B, KiB, MiB, GiB, KB, MB, GB)."""
    units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30,
             "KB": 1000, "MB": 1000 ** 2, "GB": 1000 ** 3}
    t = text.strip()
    if not t.endswith("/s"):
        raise ValueError(f"{text!r} is not a byte rate such as 8MiB/s")
    t = t[:-2].strip()
    for u in sorted(units, key=len, reverse=True):
        if t.endswith(u):
            try:
                return int(float(t[:-len(u)]) * units[u])
            except ValueError:
                break
    raise ValueError(f"{text!r} is not a byte rate such as 8MiB/s")


def stage_bytes(path):
    """The stalls case's stage statistics (PAIO_ROCKSDB_STATS): bytes of its
    critical and background channels; an error if the plugin wrote none or
    nothing went through the background limit (the setup would not be what
    it says)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise DriverError(f"the RocksDB plugin wrote no statistics to {path}: {e}")
    channels = {c["name"]: c for c in doc["channels"]}
    out = {f"{n}_mib": channels.get(n, {}).get("bytes", 0) / MIB for n in ("critical", "background")}
    if out["background_mib"] == 0:
        raise DriverError(f"{path}: no flush or compaction bytes went through the limit")
    return out


rotation = expt.rotation


def loglock_policy(inherit):
    """The loglock program's policy: request threads critical by name, every
    request through one priority object, inheritance on or off."""
    return ("[criticality]\nthreads = [\"req-*\"]\n"
            f"inherit = {'true' if inherit else 'false'}\n\n"
            + (HERE / "critical-app.toml").read_text())


def stalls_policy(rate):
    """The RocksDB stage of the stalls case: critical requests unlimited,
    normal flush and compaction writes through one DRL at `rate`."""
    return (HERE / "stalls.toml").read_text().replace("RATE", rate)


def summarize(rows):
    """Per (case, setup): median and extremes of each metric, and, each
    taken within a round and then as median and extremes over the rounds,
    the paio setup's p99.9 (and, for stalls, stall time) over this setup's
    and this setup's background throughput over vanilla's."""
    groups = {}
    for r in rows:
        groups.setdefault((r["case"], r["setup"]), []).append(r)
    fields = ("p99", "p999", "crit_ops", "bg_mib", "stall_s")
    out = []
    for (c, s), rs in sorted(groups.items()):
        e = {"case": c, "setup": s, "rounds": len(rs)}
        for f in fields:
            vals = [float(r[f]) for r in rs if r.get(f) is not None]
            e[f] = (statistics.median(vals), min(vals), max(vals)) if vals else None
        in_case = [r for r in rows if r["case"] == c]
        e["p999_paio_over"] = expt.round_ratios(in_case, "paio", s, "p999")
        e["stall_paio_over"] = expt.round_ratios(in_case, "paio", s, "stall_s")
        e["bg_of_vanilla"] = expt.round_ratios(in_case, s, "vanilla", "bg_mib")
        out.append(e)
    return out


def markdown(summary):
    """The summary table."""
    def cell(t, digits=0):
        if t is None:
            return "-"
        m, lo, hi = t
        return f"{m:.{digits}f} ({lo:.{digits}f}..{hi:.{digits}f})"

    lines = [
        "| case | setup | rounds | p99 µs | p99.9 µs | paio p99.9 / setup's "
        "| critical ops/s | background MiB/s | bg % of vanilla | stall s | paio stall / setup's |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for e in summary:
        lines.append(
            f"| {e['case']} | {e['setup']} | {e['rounds']} | {cell(e['p99'])} "
            f"| {cell(e['p999'])} | {expt.spread(e['p999_paio_over'], 1, unit='x')} "
            f"| {cell(e['crit_ops'])} | {cell(e['bg_mib'], 1)} "
            f"| {expt.spread(e['bg_of_vanilla'], 0, 100, ' %')} | {cell(e['stall_s'], 2)} "
            f"| {expt.spread(e['stall_paio_over'], 1, unit='x')} |")
    return "\n".join(lines) + "\n\n" + expt.RATIO_NOTE + "\n"


# ---------------------------------------------------------------- running

def dd_bytes(stderr_text):
    """Bytes a GNU dd run copied, from its closing statistics line."""
    for line in stderr_text.splitlines():
        if " bytes " in line and " copied" in line:
            return int(line.split()[0])
    raise DriverError(f"dd printed no statistics:\n{stderr_text[-1000:]}")


class Run:
    def __init__(self, args, data, out):
        self.args, self.data, self.out = args, data, out
        self.paio = str(Path(args.bin_dir) / "paio")
        self.raw = out / "raw"
        self.children = []
        # Built into the scratch data directory: results hold no binaries.
        self.loglock = data / "loglock"

    def restore(self):
        for c in self.children:
            expt.stop(c)
        self.children = []

    def prepare(self):
        """The loglock program, data files and the listener options file."""
        a = self.args
        subprocess.run(["cc", "-O2", "-Wall", "-pthread", "-o", str(self.loglock),
                        str(HERE / "loglock.c")], check=True)
        for name, mib in (("data.dat", a.data_mib), ("bg-read.dat", a.bg_mib)):
            f = self.data / name
            if not f.exists() or f.stat().st_size != mib * MIB:
                print(f"preparing {f} ({mib} MiB)", flush=True)
                subprocess.run(["fio", "--name=prep", f"--filename={f}", f"--size={mib}m",
                                "--rw=write", "--bs=1m", "--direct=1",
                                "--output-format=terse"], check=True, stdout=subprocess.DEVNULL)
        for setup in ("paio", "paio-inherit"):
            (self.raw / f"loglock-{setup}.toml").write_text(
                loglock_policy(setup == "paio-inherit"))
        bg = Path(a.bg_policy).read_text()
        def bound(size):
            return f"\n[criticality]\ndirty_per_file = \"{size}\"\n"
        (self.raw / "bg-dirty.toml").write_text(bg + bound(a.dirty_per_file))
        (self.raw / "bg-wait.toml").write_text(
            bg + bound(a.wait_per_file) + "dirty_overlap = false\n")
        (self.raw / "stalls.toml").write_text(stalls_policy(a.stall_rate))
        if "stalls" in a.cases:
            subprocess.run(["bash", str(REPO / "integrations/rocksdb/db_bench/listener-options.sh"),
                            str(self.raw / "stalls.ini")] + DB_FLAGS, check=True)

    def background(self, setup, argv):
        if setup in ("paio", "paio-inherit"):
            return [self.paio, "run", "--policy", str(self.args.bg_policy), "--"] + argv
        return argv

    @staticmethod
    def check(result, what, err=""):
        if result.returncode != 0:
            raise DriverError(f"{what} failed (exit {result.returncode}): {err[-1000:]}")

    def locks(self, setup, tag):
        a = self.args
        j = self.raw / f"{tag}.bg.json"
        fio = ["fio", "--output-format=json", f"--output={j}", "--direct=1",
               "--ioengine=psync", "--time_based", f"--runtime={a.seconds + 2 * a.lead}",
               f"--write_bw_log={self.raw / tag}", "--log_avg_msec=1000",
               "--name=readers", f"--filename={self.data / 'bg-read.dat'}", "--rw=read",
               "--bs=1m", "--numjobs=2",
               "--name=writers", f"--filename={self.data / 'bg-write.dat'}", "--rw=write",
               "--bs=512k", f"--size={a.bg_mib}m", "--numjobs=2"]
        bg = subprocess.Popen(self.background(setup, fio), stdout=subprocess.DEVNULL)
        self.children.append(bg)
        time.sleep(a.lead)
        argv = [str(self.loglock), str(a.seconds), str(self.data / "data.dat"),
                str(self.data / "log.dat"), str(self.data / "ckpt.dat"), str(a.threads)]
        if setup != "vanilla":
            argv = [self.paio, "run", "--policy", str(self.raw / f"loglock-{setup}.toml"),
                    "--"] + argv
        r = subprocess.run(argv, capture_output=True, text=True)
        self.check(r, "loglock", r.stderr)
        if bg.wait() != 0:
            raise DriverError(f"background fio failed (exit {bg.returncode})")
        doc = json.loads(r.stdout)
        (self.raw / f"{tag}.crit.json").write_text(r.stdout)
        run_mib = expt.fio_bandwidth_mib(json.loads(j.read_text()))
        # The background while the request threads ran, not over its
        # whole run with the leads.
        fio_mib = expt.fio_mib_between(self.raw, tag, a.lead, a.lead + a.seconds)
        if fio_mib is None:
            raise DriverError(f"no background bandwidth samples while the request threads "
                              f"ran ({self.raw}/{tag}_bw.*.log)")
        pct = percentiles_of(doc["latency_us"])
        return {"p99": pct[99.0], "p999": pct[99.9], "p50": pct[50.0],
                "crit_ops": len(doc["latency_us"]) / doc["seconds"],
                "bg_mib": fio_mib, "bg_run_mib": run_mib,
                "ckpt_mib": doc["ckpt_mib"] / doc["seconds"]}

    def dirty(self, setup, tag):
        a = self.args
        target = self.data / "dd.dat"
        target.unlink(missing_ok=True)
        free = shutil.disk_usage(self.data).free
        if free < (a.dd_mib + 1024) * MIB:
            raise DriverError(f"{self.data} has {free // MIB} MiB free; the dirty case's writer "
                              f"needs {a.dd_mib + 1024} (lower --dd-mib)")
        dd = ["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={a.dd_mib}"]
        if setup in DIRTY_POLICY:
            dd = [self.paio, "run", "--policy", str(self.raw / DIRTY_POLICY[setup]), "--"] + dd
        else:
            dd = self.background(setup, dd)
        bg = subprocess.Popen(dd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.children.append(bg)
        t0 = time.monotonic()
        time.sleep(a.lead)
        argv = [sys.executable, str(REPO / "bench/criticality/commits.py"),
                str(self.data / "commits.db"), str(a.seconds)]
        if setup != "vanilla":
            argv = [self.paio, "run", "--critical", "--"] + argv
        r = subprocess.run(argv, capture_output=True, text=True)
        self.check(r, "commits.py", r.stderr)
        time.sleep(a.lead)
        # GNU dd prints its statistics when interrupted; `paio run` passes
        # the signal on.
        ended_early = bg.poll() is not None
        if not ended_early:
            bg.send_signal(signal.SIGINT)
        err = bg.communicate()[1]
        # What the writer moved counts once it is on the device: a file
        # removed with dirty pages is never written, so a writer that only
        # filled the page cache would otherwise look fastest.
        fd = os.open(target, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        took = time.monotonic() - t0
        written = dd_bytes(err)
        target.unlink(missing_ok=True)
        if ended_early:
            print(f"WARNING: {tag}: dd wrote all {a.dd_mib} MiB before the run ended; "
                  "its throughput is a lower bound (raise --dd-mib)", file=sys.stderr)
        samples = json.loads(r.stdout)
        (self.raw / f"{tag}.crit.json").write_text(r.stdout)
        pct = percentiles_of(samples)
        return {"p99": pct[99.0], "p999": pct[99.9], "p50": pct[50.0],
                "crit_ops": len(samples) / a.seconds, "bg_mib": written / MIB / took}

    def stalls(self, setup, tag):
        a = self.args
        db = self.data / "stalls-db"
        shutil.rmtree(db, ignore_errors=True)
        common = ["--benchmarks=fillrandom", f"--num={a.stall_ops}", "--value_size=1000",
                  f"--db={db}", "--statistics=1", "--histogram=1"]
        env = dict(os.environ)
        if setup in ("vanilla", "rocksdb-limiter"):
            argv = ["db_bench"] + DB_FLAGS + common
            if setup == "rocksdb-limiter":
                argv.append(f"--rate_limiter_bytes_per_sec={a.stall_rate_bytes}")
        else:
            argv = ["db_bench", "--fs_uri=paio", f"--options_file={self.raw / 'stalls.ini'}"] + common
            env.update({
                "LD_PRELOAD": str(REPO / "integrations/rocksdb/build/libpaio_rocksdb_preload.so"),
                "PAIO_ROCKSDB_POLICY": str(self.raw / "stalls.toml"),
                "PAIO_ROCKSDB_STALL_INHERIT": "1" if setup == "paio-inherit" else "0",
                "PAIO_ROCKSDB_STATS": str(self.raw / f"{tag}.stage.json"),
            })
        r = subprocess.run(argv, capture_output=True, text=True, env=env)
        self.check(r, "db_bench", r.stderr)
        (self.raw / f"{tag}.db_bench.txt").write_text(r.stdout)
        shutil.rmtree(db, ignore_errors=True)
        ops, pct, stall = db_bench_result(r.stdout)
        row = {"p99": pct[99.0], "p999": pct[99.9], "p50": pct[50.0], "crit_ops": ops,
               "bg_mib": None, "stall_s": stall}
        if setup.startswith("paio"):
            row.update(stage_bytes(self.raw / f"{tag}.stage.json"))
        return row

    def one(self, rnd, case, setup):
        tag = f"r{rnd}-{case}-{setup}"
        r = getattr(self, case)(setup, tag)
        r.update({"round": rnd, "case": case, "setup": setup})
        return r


def latency_figure(rows):
    """The latency plot (`paio plot --figure`): a panel per case, its
    setups as categories, bars of the median p99 (blue, left) and p99.9
    (red, right) over rounds on a log y axis, and a black vertical line over
    each bar from the lowest to the highest round."""
    cases = [c for c in ALL_CASES if any(r["case"] == c for r in rows)]
    panels = []
    for c in cases:
        setups = [s for s in SETUPS[c] if any(r["case"] == c and r["setup"] == s for r in rows)]
        bars = {key: [] for key in ("p99", "p999")}
        ranges = []
        for i, s in enumerate(setups):
            rs = [r for r in rows if r["case"] == c and r["setup"] == s]
            for j, key in enumerate(("p99", "p999")):
                vals = sorted(float(r[key]) for r in rs if r.get(key) is not None)
                x = i + (j - 0.5) * 0.35
                bars[key].append([x, statistics.median(vals) if vals else None])
                if vals:
                    ranges.append({"label": "", "kind": "line", "color": "black", "width": 2,
                                   "points": [[x, vals[0]], [x, vals[-1]]]})
        panels.append({
            # The y label short: the log axis' tick labels are wide.
            "title": f"case {c}: critical latency",
            "y_label": "µs (log)",
            "x_label": "median and range over rounds",
            "y_log": True, "x_min": -0.5, "x_max": len(setups) - 0.5,
            "categories": setups,
            "series": [
                {"label": "p99", "kind": "bars", "color": "blue", "width": 0.33,
                 "points": bars["p99"]},
                {"label": "p99.9", "kind": "bars", "color": "red", "width": 0.33,
                 "points": bars["p999"]},
            ] + ranges,
        })
    return {"columns": max(1, len(cases)), "panel_width": 605, "panel_height": 462,
            "panels": panels}


def plot(out, rows, bin_dir=None):
    """OUT/latency.png (`latency_figure`); its path."""
    return expt.plot(latency_figure(rows), Path(out) / "latency.png", bin_dir)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cases", default=",".join(ALL_CASES))
    ap.add_argument("--seconds", type=int, default=10, help="critical work per run (locks, dirty)")
    ap.add_argument("--lead", type=int, default=2,
                    help="seconds the background runs before (and after) the critical work")
    ap.add_argument("--threads", type=int, default=4, help="loglock request threads")
    ap.add_argument("--dirty-per-file", default="2MiB",
                    help="dirty: the bound in paio-inherit (docs/performance.md)")
    ap.add_argument("--wait-per-file", default="4MiB",
                    help="dirty: the bound in paio-wait, whose writer waits for each write-back")
    ap.add_argument("--stall-rate", default="8MiB/s",
                    help="stalls: the flush and compaction write limit")
    ap.add_argument("--stall-ops", type=int, default=200_000,
                    help="stalls: fillrandom operations of 1000-byte values")
    ap.add_argument("--bg-policy", default=str(HERE / "background.toml"),
                    help="the background programs' policy in the paio setups")
    ap.add_argument("--dd-mib", type=int, default=24576,
                    help="dirty: most MiB the writer writes per run (its file is removed after)")
    ap.add_argument("--data-mib", type=int, default=512)
    ap.add_argument("--bg-mib", type=int, default=1024)
    ap.add_argument("--data-dir", default="/var/tmp/paio-inheritance")
    ap.add_argument("--out", default=str(REPO / "bench/results/inheritance"))
    ap.add_argument("--bin-dir", default=str(REPO / "target/release"))
    ap.add_argument("--quick", action="store_true",
                    help="smoke check: 1 round, every case and setup, 2 s runs")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--report-only", action="store_true",
                    help="write OUT/summary.md again from OUT/runs.json; run nothing")
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds, a.seconds, a.lead = 1, 2, 1
        a.data_mib, a.bg_mib, a.stall_ops, a.dd_mib = 64, 128, 20_000, 512
    a.cases = a.cases.split(",")
    for c in a.cases:
        if c not in ALL_CASES:
            ap.error(f"unknown case {c!r}; expected some of {','.join(ALL_CASES)}")
    try:
        a.stall_rate_bytes = byte_rate(a.stall_rate)
    except ValueError as e:
        ap.error(f"--stall-rate: {e}")
    return a


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.report_only:
        return expt.report_only(Path(args.out), lambda rows: markdown(summarize(rows)))
    expt.require(["fio", "cc"] + (["db_bench"] if "stalls" in args.cases else []),
                 args.bin_dir, ["paio"])
    if "stalls" in args.cases:
        lib = REPO / "integrations/rocksdb/build/libpaio_rocksdb_preload.so"
        if not lib.is_file():
            raise DriverError(f"{lib} not found: build it with `make test-rocksdb`")
    data = Path(args.data_dir)
    data.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    (out / "raw").mkdir(parents=True, exist_ok=True)
    run = Run(args, data, out)
    header = expt.header_lines(data) + [
        f"cases: {','.join(args.cases)}; rounds: {args.rounds}; critical work {args.seconds} s "
        f"with {args.lead} s of background before and after; loglock threads {args.threads}; "
        f"dirty bound {args.dirty_per_file} per file ({args.wait_per_file} waited for in "
        f"paio-wait); background policy {args.bg_policy}; "
        f"stalls: {args.stall_ops} puts, "
        f"flush and compaction writes limited to {args.stall_rate}",
    ]
    expt.write_header(out, header)
    rows = []
    total = args.rounds * sum(len(SETUPS[c]) for c in args.cases)
    done, t0 = 0, time.monotonic()
    try:
        run.prepare()
        for rnd in range(args.rounds):
            for case in args.cases:
                for setup in rotation(SETUPS[case], rnd):
                    r = run.one(rnd, case, setup)
                    rows.append(r)
                    done += 1
                    stall = f"  stall {r['stall_s']:.2f} s" if r.get("stall_s") is not None else ""
                    bg = f"  bg {r['bg_mib']:.0f} MiB/s" if r.get("bg_mib") is not None else ""
                    print(f"[{done}/{total} {time.monotonic() - t0:.0f}s] round {rnd} {case:6} "
                          f"{setup:15} p99 {r['p99']:9.0f} µs  p99.9 {r['p999']:9.0f}  "
                          f"ops {r['crit_ops']:8.0f}/s{bg}{stall}", flush=True)
    finally:
        run.restore()
    fields = ["round", "case", "setup", "p50", "p99", "p999", "crit_ops", "bg_mib",
              "bg_run_mib", "ckpt_mib", "stall_s", "critical_mib", "background_mib"]

    def plots():
        return f"plot: {plot(out, rows, args.bin_dir)}"

    expt.finish(out, header, rows, fields, markdown(summarize(rows)),
                None if args.no_plot else plots)
    return 0


if __name__ == "__main__":
    expt.run_main(main)
