#!/usr/bin/env python3
"""Per-application bandwidth control (PAIO paper §9.3, Fig. 10), scaled down.

Four instances of an unmodified reader (fio, psync engine, O_DIRECT,
sequential reads over the instance's own dataset shards, loops = epochs)
share one cgroup-v1 blkio throttle of MaxB on the data disk.  Three setups:

  baseline  each instance under `paio run` with no limit (pass-through)
  static    each instance under `paio run --limit read=<guarantee>`
  paio      paiod (max-min fair share, leftover redistributed) + each
            instance under `paio run --label job=I<n>` with PAIO_CONTROL set

Bandwidth is measured by fio itself (write_bw_log, log_avg_msec=1000), not by
paio.  See bench/bandwidth/README.md.  Stdlib only; plots through `paio plot`.
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
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import expt  # noqa: E402  (bench/expt.py: shared by the experiment drivers)
from expt import BlkioCgroup, block_device_of, commit_info, machine_info  # noqa: E402

REPO = expt.REPO
MIB = 1 << 20

# The paper's numbers (MiB/s) and epochs; the order is the start order.
PAPER_MAXB = 1024.0
PAPER_INSTANCES = (("I1", 150.0, 6), ("I2", 200.0, 5), ("I3", 300.0, 5), ("I4", 350.0, 4))
# Start of instance n as a fraction of the estimated baseline makespan
# (total bytes / MaxB): I1 alone, then I2, I3, I4 join one after another.
START_FRACTIONS = (0.0, 0.1, 0.2, 0.3)
DEFAULT_FACTOR = 0.2
SHARD_MIB = 128
BLOCK_SIZE = "256k"
MET_TOLERANCE = 0.95  # "met" = at least 95 % of the guarantee in that second
ALL_SETUPS = ("baseline", "static", "paio")
FULL_DATASET_MIB = 1536
SHORT_DATASET_MIB = 512

DriverError = expt.ExperimentError


# ---------------------------------------------------------------- pure parts


@dataclass
class Instance:
    name: str
    guarantee: float  # MiB/s
    epochs: int
    start_s: float  # planned start, seconds after the setup starts


def plan(factor, dataset_mib):
    """MaxB and the four instances for a scale factor and dataset size."""
    maxb = PAPER_MAXB * factor
    total_mib = sum(e for _, _, e in PAPER_INSTANCES) * dataset_mib
    est_makespan = total_mib / maxb
    instances = [
        Instance(name, round(g * factor, 3), epochs, round(frac * est_makespan, 1))
        for (name, g, epochs), frac in zip(PAPER_INSTANCES, START_FRACTIONS)
    ]
    return maxb, instances


def fmt_rate(mib_s):
    """30.0 -> '30MiB/s', 22.5 -> '22.5MiB/s' (paio's rate syntax)."""
    return f"{mib_s:.6g}MiB/s"


def parse_bw_log(text):
    """fio bandwidth log -> [(t_ms, MiB/s)] for reads.

    Lines are `time_ms, value_KiB/s, ddir, bs, offset[, prio]`; ddir 0 is read.
    """
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            raise ValueError(f"bw log line {lineno}: expected at least 3 fields: {line!r}")
        t_ms, kib_s, ddir = int(parts[0]), int(parts[1]), int(parts[2])
        if ddir != 0:
            continue
        out.append((t_ms, kib_s / 1024.0))
    return out


def parse_status_stream(text, pos=0):
    """Complete JSON objects in fio's --status-interval output from `pos`.

    Returns (objects, new_pos); a trailing incomplete object is left for the
    next call.
    """
    dec = json.JSONDecoder()
    objs = []
    while True:
        start = text.find("{", pos)
        if start < 0:
            return objs, len(text) if text.strip() == "" else pos
        try:
            obj, end = dec.raw_decode(text, start)
        except json.JSONDecodeError:
            return objs, start
        objs.append(obj)
        pos = end


def samples_to_rows(setup, instance, launch_s, samples):
    """fio samples (t_ms after the job's start) -> CSV rows on the setup's clock."""
    return [
        {"time_s": round(launch_s + t_ms / 1000.0, 3), "setup": setup,
         "instance": instance, "MiB_per_s": round(mib, 3)}
        for t_ms, mib in samples
    ]


def demand_fits(runs, lo, hi, maxb):
    """Whether the guarantees of the instances active during [lo, hi] fit in MaxB."""
    total = sum(r["guarantee"] for r in runs.values() if r["start_s"] < hi and r["end_s"] > lo)
    return total <= maxb + 1e-9


def compute_table(rows, runs, maxb, tolerance=MET_TOLERANCE):
    """Per setup and instance: intervals, % met, mean bandwidth, completion.

    rows: CSV rows (dicts with time_s, setup, instance, MiB_per_s) where each
      row is the mean over the second ending at time_s.
    runs: {setup: {instance: {"guarantee", "start_s", "end_s"}}}.
    An instance's first and last sample (partial seconds: start-up, end) are
    excluded; an interval counts only if the guarantees of all instances
    active during it fit in MaxB; it is met if bandwidth >= tolerance x
    guarantee.  Returns {"instances": [...], "makespan": {setup: s}}.
    """
    by_key = {}
    for r in rows:
        by_key.setdefault((r["setup"], r["instance"]), []).append(
            (float(r["time_s"]), float(r["MiB_per_s"])))
    result = {"instances": [], "makespan": {}}
    for setup, insts in runs.items():
        ends = [r["end_s"] for r in insts.values()]
        result["makespan"][setup] = max(ends) if ends else None
        for name, run in insts.items():
            samples = sorted(by_key.get((setup, name), []))
            inner = samples[1:-1]
            counted = met = 0
            for t, mib in inner:
                if not demand_fits(insts, t - 1.0, t, maxb):
                    continue
                counted += 1
                if mib >= tolerance * run["guarantee"]:
                    met += 1
            mean = sum(m for _, m in inner) / len(inner) if inner else None
            result["instances"].append({
                "setup": setup, "instance": name, "guarantee": run["guarantee"],
                "intervals": counted, "met": met,
                "pct_met": 100.0 * met / counted if counted else None,
                "mean": mean,
                "completion_s": run["end_s"] - run["start_s"],
                "end_s": run["end_s"],
            })
    return result


def format_table(table, tolerance=MET_TOLERANCE):
    lines = [
        f"| setup | instance | guarantee MiB/s | intervals | met (>= {tolerance:.0%}) | "
        "% met | mean MiB/s | completion s | finished at s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in table["instances"]:
        pct = "-" if r["pct_met"] is None else f"{r['pct_met']:.1f}"
        mean = "-" if r["mean"] is None else f"{r['mean']:.1f}"
        lines.append(
            f"| {r['setup']} | {r['instance']} | {r['guarantee']:g} | {r['intervals']} | "
            f"{r['met']} | {pct} | {mean} | {r['completion_s']:.1f} | {r['end_s']:.1f} |")
    lines.append("")
    lines.append("| setup | makespan s | vs baseline |")
    lines.append("|---|---:|---:|")
    base = table["makespan"].get("baseline")
    for setup, ms in table["makespan"].items():
        rel = f"{ms / base:.2f}x" if base and ms is not None else "-"
        lines.append(f"| {setup} | {ms:.1f} | {rel} |")
    return "\n".join(lines) + "\n"


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["time_s", "setup", "instance", "MiB_per_s"])
        w.writeheader()
        for r in rows:
            w.writerow(r)


def read_csv(path):
    with open(path, newline="") as f:
        return [dict(r, time_s=float(r["time_s"]), MiB_per_s=float(r["MiB_per_s"]))
                for r in csv.DictReader(f)]


# ------------------------------------------------------------------ plotting


INSTANCE_COLORS = {"I1": "blue", "I2": "orange", "I3": "green", "I4": "red"}
# Colours of instances with other names, in turn (paio plot's palette).
OTHER_COLORS = ("purple", "brown", "pink", "olive", "cyan", "grey")


def figure(rows, runs, maxb):
    """The figure of `plot` (paio plot's format, bench/expt.py): a panel per
    setup with each instance's 1 s read bandwidth, its guarantee (dashed,
    from its start to its end, in its colour) and MaxB (dotted black)."""
    setups = list(runs)
    ends = [r["end_s"] for s in setups for r in runs[s].values()]
    ends += [float(r["time_s"]) for r in rows]
    x_max = max(ends, default=1.0)
    colors = dict(INSTANCE_COLORS)
    panels = []
    for k, setup in enumerate(setups):
        series = []
        for name, run in runs[setup].items():
            if name not in colors:
                colors[name] = OTHER_COLORS[(len(colors) - len(INSTANCE_COLORS)) % len(OTHER_COLORS)]
            c = colors[name]
            pts = sorted((float(r["time_s"]), float(r["MiB_per_s"])) for r in rows
                         if r["setup"] == setup and r["instance"] == name)
            if pts:
                series.append({"label": f"{name} ({run['guarantee']:g} MiB/s)", "kind": "line",
                               "color": c, "width": 1.5, "points": [list(p) for p in pts]})
            series.append({"label": "", "kind": "line", "dash": "dashed", "color": c, "width": 1,
                           "points": [[run["start_s"], run["guarantee"]],
                                      [run["end_s"], run["guarantee"]]]})
        series.append({"label": f"MaxB {maxb:g} MiB/s", "kind": "line", "dash": "dotted",
                       "color": "black", "width": 1, "points": [[0.0, maxb], [x_max, maxb]]})
        ms = max(r["end_s"] for r in runs[setup].values())
        panels.append({"title": f"{setup} (makespan {ms:.0f} s)",
                       "x_label": "time (s)" if k == len(setups) - 1 else "",
                       "y_label": "MiB/s", "x_min": 0.0, "x_max": x_max,
                       "y_min": 0.0, "y_max": maxb * 1.15, "series": series})
    return {"title": "", "columns": 1, "panel_width": 1200, "panel_height": 360,
            "panels": panels}


def plot(path, rows, runs, maxb, bin_dir=None):
    """Draws `figure` into the PNG `path` with `paio plot` (of `bin_dir`)."""
    return expt.plot(figure(rows, runs, maxb), path, bin_dir)


# ------------------------------------------------------------------- machine


# ------------------------------------------------------------------- dataset


def ensure_dataset(data_dir, names, shards):
    """data_dir/<I>/shard-NN.bin, SHARD_MIB each; created once with fio, reused."""
    out = {}
    for name in names:
        d = data_dir / name
        d.mkdir(parents=True, exist_ok=True)
        files = [d / f"shard-{k:02d}.bin" for k in range(shards)]
        for f in files:
            if f.exists() and f.stat().st_size == SHARD_MIB * MIB:
                continue
            print(f"creating {f} ({SHARD_MIB} MiB)", flush=True)
            r = subprocess.run(
                ["fio", "--name=mk", f"--filename={f}", "--rw=write", "--bs=1M",
                 "--direct=1", "--ioengine=psync", f"--size={SHARD_MIB}M",
                 "--refill_buffers", "--output-format=terse"],
                capture_output=True, text=True)
            if r.returncode != 0 or f.stat().st_size != SHARD_MIB * MIB:
                raise DriverError(f"fio could not create {f}: {r.stderr.strip()}")
        out[name] = files
    return out


# ------------------------------------------------------------------- running


@dataclass
class Proc:
    inst: Instance
    popen: subprocess.Popen
    launch_s: float
    status_path: Path
    stderr_path: Path
    end_s: float = None
    pos: int = 0
    last: tuple = None  # (timestamp_ms, io_bytes) of the last status
    bw: float = 0.0
    io_bytes: int = 0


@dataclass
class Context:
    args: argparse.Namespace
    maxb: float
    instances: list
    files: dict
    cgroup: BlkioCgroup
    bin_dir: Path
    children: list = field(default_factory=list)  # every Popen we started


def kill_group(p, sig=signal.SIGTERM):
    """Signal the process group of a child we started (start_new_session=True)."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass


def stop(p, timeout=5.0):
    if p.poll() is not None:
        return
    kill_group(p, signal.SIGTERM)
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        kill_group(p, signal.SIGKILL)
        p.wait()


def paiod_config(maxb, instances):
    lines = ['period = "100ms"', "[policy]", 'kind = "max_min"', 'group_by = "job"',
             'channel = "read"', f'max_bandwidth = "{fmt_rate(maxb)}"', "calibrate = true"]
    for i in instances:
        lines += ["", "[[policy.group]]", f'name = "{i.name}"', f'demand = "{fmt_rate(i.guarantee)}"']
    return "\n".join(lines) + "\n"


def start_paiod(ctx, setup_dir, sock_dir, wait_s=2.0):
    """Start paiod and check that it stays up and creates its socket."""
    paiod = ctx.bin_dir / "paiod"
    if not paiod.is_file():
        raise DriverError(f"paiod not found at {paiod}: build it "
                          "(cargo build --release -p paio-control, or see --bin-dir)")
    cfg = setup_dir / "paiod.toml"
    cfg.write_text(paiod_config(ctx.maxb, ctx.instances))
    sock = Path(sock_dir) / "paiod.sock"
    log = open(setup_dir / "paiod.log", "w")
    cmd = [str(paiod), "--config", str(cfg), "--socket", str(sock)]
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    ctx.children.append(p)
    deadline = time.monotonic() + max(wait_s, 5.0)
    t_first = time.monotonic()
    while True:
        rc = p.poll()
        if rc is not None:
            log.close()
            out = (setup_dir / "paiod.log").read_text().strip()
            raise DriverError(
                f"paiod exited immediately with status {rc}:\n    {shlex.join(cmd)}\n"
                + ("\n".join("    | " + l for l in out.splitlines()[-15:]) if out else "    (no output)"))
        up = time.monotonic() - t_first
        if sock.exists() and up >= wait_s:
            return p, sock
        if time.monotonic() > deadline:
            stop(p)
            raise DriverError(f"paiod is running but did not create {sock} within "
                              f"{deadline - t_first:.0f} s; see {setup_dir / 'paiod.log'}")
        time.sleep(0.1)


def instance_command(ctx, setup, inst, setup_dir):
    paio = str(ctx.bin_dir / "paio")
    fio = ["fio", f"--name={inst.name}", "--thread", "--ioengine=psync", "--direct=1",
           "--rw=read", f"--bs={BLOCK_SIZE}",
           "--filename=" + ":".join(str(f) for f in ctx.files[inst.name]),
           "--file_service_type=sequential", f"--loops={inst.epochs}",
           f"--write_bw_log={setup_dir / inst.name}", "--log_avg_msec=1000",
           "--status-interval=1", "--output-format=json",
           f"--output={setup_dir / (inst.name + '.fio.json')}"]
    if setup == "baseline":
        pre = [paio, "run", "--label", f"job={inst.name}", "--"]
    elif setup == "static":
        pre = [paio, "run", "--limit", f"read={fmt_rate(inst.guarantee)}",
               "--label", f"job={inst.name}", "--"]
    elif setup == "paio":
        pre = [paio, "run", "--label", f"job={inst.name}", "--"]
    else:
        raise DriverError(f"unknown setup {setup!r}")
    return pre + fio


def update_progress(p):
    try:
        text = p.status_path.read_text()
    except OSError:
        return
    objs, p.pos = parse_status_stream(text, p.pos)
    for o in objs:
        try:
            job = o["jobs"][0]
            ts, io = int(o["timestamp_ms"]), int(job["read"]["io_bytes"])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if p.last and ts > p.last[0]:
            p.bw = (io - p.last[1]) / MIB / ((ts - p.last[0]) / 1000.0)
        elif p.last is None:
            p.bw = io / MIB / max(job.get("job_runtime", 1000) / 1000.0, 0.001)
        p.last = (ts, io)
        p.io_bytes = io


def run_setup(ctx, setup):
    args = ctx.args
    setup_dir = Path(args.out) / setup
    if setup_dir.exists():
        shutil.rmtree(setup_dir)
    setup_dir.mkdir(parents=True)
    dataset_bytes = {i.name: sum(f.stat().st_size for f in ctx.files[i.name]) for i in ctx.instances}
    env = dict(os.environ)
    paiod = None
    sock_dir = None
    if setup == "paio":
        sock_dir = tempfile.mkdtemp(prefix="paio-bw-")
        paiod, sock = start_paiod(ctx, setup_dir, sock_dir)
        env["PAIO_CONTROL"] = str(sock)
    procs_file = ctx.cgroup.procs_file

    def join_cgroup():
        if procs_file:
            with open(procs_file, "w") as f:
                f.write(str(os.getpid()))

    print(f"\n=== setup {setup}: MaxB {ctx.maxb:g} MiB/s, starts at "
          + ", ".join(f"{i.name}@{i.start_s:g}s" for i in ctx.instances), flush=True)
    cg_before = ctx.cgroup.io_bytes()[0]
    pending = list(ctx.instances)
    running, done = [], []
    t0 = time.monotonic()
    next_print = 1.0
    try:
        while pending or running:
            now = time.monotonic() - t0
            while pending and pending[0].start_s <= now:
                inst = pending.pop(0)
                cmd = instance_command(ctx, setup, inst, setup_dir)
                (setup_dir / f"{inst.name}.cmd").write_text(shlex.join(cmd) + "\n")
                errf = open(setup_dir / f"{inst.name}.stderr", "w")
                pop = subprocess.Popen(cmd, stdout=errf, stderr=subprocess.STDOUT, env=env,
                                       preexec_fn=join_cgroup, start_new_session=True)
                errf.close()
                ctx.children.append(pop)
                running.append(Proc(inst, pop, time.monotonic() - t0,
                                    setup_dir / f"{inst.name}.fio.json",
                                    setup_dir / f"{inst.name}.stderr"))
            for p in list(running):
                rc = p.popen.poll()
                if rc is not None:
                    p.end_s = time.monotonic() - t0
                    running.remove(p)
                    done.append(p)
                    update_progress(p)
                    if rc != 0:
                        out = p.stderr_path.read_text().strip()
                        raise DriverError(
                            f"{setup}/{p.inst.name} exited with status {rc}; "
                            f"command in {setup_dir / (p.inst.name + '.cmd')}:\n"
                            + "\n".join("    | " + l for l in out.splitlines()[-15:]))
                    print(f"[{setup:8s} t={p.end_s:6.1f}s] {p.inst.name} finished "
                          f"({p.inst.epochs} epochs in {p.end_s - p.launch_s:.1f} s)", flush=True)
            if paiod is not None and paiod.poll() is not None:
                raise DriverError(f"paiod exited during the run with status {paiod.returncode}; "
                                  f"see {setup_dir / 'paiod.log'}")
            if now >= next_print:
                next_print += 1.0
                for p in running:
                    update_progress(p)
                if running:
                    print_progress(setup, now, running, dataset_bytes, args.short)
            time.sleep(0.1)
    finally:
        for p in running:
            stop(p.popen)
        if paiod is not None:
            stop(paiod)
        if sock_dir:
            shutil.rmtree(sock_dir, ignore_errors=True)
    cg_after = ctx.cgroup.io_bytes()[0]

    rows, runs = [], {}
    for p in sorted(done, key=lambda p: p.inst.name):
        logs = sorted(setup_dir.glob(f"{p.inst.name}_bw*.log"))
        if not logs:
            raise DriverError(f"fio wrote no bandwidth log for {setup}/{p.inst.name} in {setup_dir}")
        samples = parse_bw_log(logs[0].read_text())
        rows += samples_to_rows(setup, p.inst.name, p.launch_s, samples)
        expected = dataset_bytes[p.inst.name] * p.inst.epochs
        if p.io_bytes and p.io_bytes != expected:
            print(f"WARNING: {setup}/{p.inst.name} read {p.io_bytes} B, expected {expected}",
                  file=sys.stderr)
        runs[p.inst.name] = {"guarantee": p.inst.guarantee, "epochs": p.inst.epochs,
                             "start_s": round(p.launch_s, 3), "end_s": round(p.end_s, 3),
                             "bytes": p.io_bytes}
    extra = {}
    if cg_before is not None:
        extra["cgroup_read_bytes"] = cg_after - cg_before
    return rows, runs, extra


def print_progress(setup, now, running, dataset_bytes, verbose):
    if verbose:
        for p in sorted(running, key=lambda p: p.inst.name):
            ep = p.io_bytes / dataset_bytes[p.inst.name]
            print(f"[{setup} t={now:5.0f}s] {p.inst.name} {p.bw:7.1f} MiB/s "
                  f"(guarantee {p.inst.guarantee:g})  epoch {ep:4.2f}/{p.inst.epochs}", flush=True)
    else:
        parts = [f"{p.inst.name} {p.bw:6.1f} ({p.io_bytes / dataset_bytes[p.inst.name]:.1f}/"
                 f"{p.inst.epochs})" for p in sorted(running, key=lambda p: p.inst.name)]
        total = sum(p.bw for p in running)
        print(f"[{setup:8s} t={now:5.0f}s] " + " | ".join(parts) + f" | sum {total:6.1f}", flush=True)


# ---------------------------------------------------------------------- main


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--short", action="store_true",
                    help="demo mode: paio setup only, small datasets (<= 2 min), live "
                         "per-instance progress; runs without the throttle if blkio is unusable")
    ap.add_argument("--setups", help="comma-separated subset of baseline,static,paio "
                    "(default: all three; paio with --short)")
    ap.add_argument("--factor", type=float, default=DEFAULT_FACTOR,
                    help="common scale factor for MaxB (1 GiB/s) and the guarantees "
                         f"(default {DEFAULT_FACTOR})")
    ap.add_argument("--dataset-mib", type=int,
                    help=f"dataset size per instance, rounded up to {SHARD_MIB} MiB shards "
                         f"(default {FULL_DATASET_MIB}, {SHORT_DATASET_MIB} with --short)")
    ap.add_argument("--data-dir", default=str(REPO / "target/bandwidth-data"))
    ap.add_argument("--out", help="output directory (default bench/results/bandwidth, "
                    "target/bandwidth-short with --short)")
    ap.add_argument("--bin-dir", default=str(REPO / "target/release"),
                    help="where paio, paiod and libpaio_preload.so are")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--report-only", action="store_true",
                    help="redo table and plot from OUT/bandwidth.csv and OUT/runs.json")
    args = ap.parse_args(argv)
    if args.setups:
        setups = [s.strip() for s in args.setups.split(",") if s.strip()]
        bad = [s for s in setups if s not in ALL_SETUPS]
        if bad or not setups:
            ap.error(f"--setups: unknown {bad}; choose from {','.join(ALL_SETUPS)}")
        args.setups = setups
    else:
        args.setups = ["paio"] if args.short else list(ALL_SETUPS)
    if args.dataset_mib is None:
        args.dataset_mib = SHORT_DATASET_MIB if args.short else FULL_DATASET_MIB
    if args.out is None:
        args.out = str(REPO / ("target/bandwidth-short" if args.short else "bench/results/bandwidth"))
    if not 0 < args.factor <= 1:
        ap.error("--factor must be in (0, 1]")
    return args


def report(out, rows, runs, maxb, no_plot, bin_dir=None):
    table = compute_table(rows, runs, maxb)
    md = format_table(table)
    (out / "table.md").write_text(
        f"Per-application bandwidth, MaxB {maxb:g} MiB/s. 'met' = the 1 s mean read bandwidth "
        f"(fio's log) >= {MET_TOLERANCE:.0%} of the guarantee; counted are seconds in which the "
        "guarantees of the active instances fit in MaxB, excluding each instance's first and "
        "last second.\n\n" + md)
    print("\n" + md, flush=True)
    if not no_plot:
        plot(out / "bandwidth.png", rows, runs, maxb, bin_dir)
        print(f"plot: {out / 'bandwidth.png'}")
    print(f"table: {out / 'table.md'}\ncsv: {out / 'bandwidth.csv'}", flush=True)
    return table


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    out = Path(args.out)
    if args.report_only:
        meta = json.loads((out / "runs.json").read_text())
        report(out, read_csv(out / "bandwidth.csv"), meta["runs"], meta["maxb"], args.no_plot,
               args.bin_dir)
        return 0

    for tool in ("fio",):
        if not shutil.which(tool):
            raise DriverError(f"{tool} is not installed")
    bin_dir = Path(args.bin_dir)
    if not (bin_dir / "paio").is_file():
        raise DriverError(f"{bin_dir / 'paio'} not found: build with "
                          "`cargo build --release -p paio-cli -p paio-preload` (or --bin-dir)")

    maxb, instances = plan(args.factor, args.dataset_mib)
    shards = math.ceil(args.dataset_mib / SHARD_MIB)
    data_dir = Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    maj, mnr, disk = block_device_of(data_dir)
    out.mkdir(parents=True, exist_ok=True)

    header = [
        f"command: {shlex.join([sys.executable] + sys.argv)}",
        f"date (UTC): {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M:%S')}",
        f"machine: {machine_info(data_dir)}",
        f"commit: {commit_info()}",
        f"binaries: {bin_dir}",
        f"scale factor: {args.factor:g} (MaxB {maxb:g} MiB/s; guarantees "
        + ", ".join(f"{i.name} {i.guarantee:g}" for i in instances) + " MiB/s)",
        f"epochs: " + ", ".join(f"{i.name} {i.epochs}" for i in instances),
        f"dataset: {shards} x {SHARD_MIB} MiB shards per instance in {data_dir}; "
        f"fio psync, O_DIRECT, rw=read, bs={BLOCK_SIZE}",
        "starts (s): " + ", ".join(f"{i.name} {i.start_s:g}" for i in instances),
        f"throttle: blkio read_bps_device {maj}:{mnr} {int(maxb * MIB)} on /dev/{disk}",
        f"setups: {','.join(args.setups)}",
    ]
    if "paio" in args.setups and not args.short:
        # Fail fast, before spending minutes on the other setups.
        tmp = Path(tempfile.mkdtemp(prefix="paio-bw-pre-"))
        ctx0 = Context(args, maxb, instances, {}, None, bin_dir)
        try:
            p, _ = start_paiod(ctx0, tmp, tmp, wait_s=1.0)
            stop(p)
        finally:
            for c in ctx0.children:
                stop(c)
            shutil.rmtree(tmp, ignore_errors=True)

    files = ensure_dataset(data_dir, [i.name for i in instances], shards)
    cgroup = BlkioCgroup(f"paio-bw-{os.getpid()}", f"{maj}:{mnr}", int(maxb * MIB),
                         required=not args.short)
    if cgroup.note:
        header.append(f"NOTE: {cgroup.note}")
    (out / "header.txt").write_text("\n".join(header) + "\n")
    print("\n".join(header), flush=True)

    ctx = Context(args, maxb, instances, files, cgroup, bin_dir)
    all_rows, all_runs, extras = [], {}, {}
    t_start = time.monotonic()
    err = None
    try:
        for setup in args.setups:
            try:
                rows, runs, extra = run_setup(ctx, setup)
            except DriverError as e:
                err = f"setup {setup} failed: {e}"
                if len(args.setups) > 1:  # the others still run; repeated at the end
                    print(f"\nERROR: {err}", file=sys.stderr, flush=True)
                continue
            all_rows += rows
            all_runs[setup] = runs
            extras[setup] = extra
            if "cgroup_read_bytes" in extra:
                print(f"[{setup}] blkio cgroup read {extra['cgroup_read_bytes'] / MIB:.0f} MiB "
                      f"(fio: {sum(r['bytes'] for r in runs.values()) / MIB:.0f} MiB)", flush=True)
    finally:
        for c in ctx.children:
            stop(c)
        cgroup.cleanup()
    if all_runs:
        write_csv(out / "bandwidth.csv", all_rows)
        (out / "runs.json").write_text(json.dumps(
            {"maxb": maxb, "factor": args.factor, "runs": all_runs, "extra": extras}, indent=1))
        report(out, all_rows, all_runs, maxb, args.no_plot, bin_dir)
    print(f"total {time.monotonic() - t_start:.0f} s; results in {out}", flush=True)
    if err:
        raise DriverError(err)
    return 0


if __name__ == "__main__":
    expt.run_main(main)
