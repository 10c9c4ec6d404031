#!/usr/bin/env python3
"""Critical I/O first (issue 11; RCP FAST'17, FastResponse ICS'22).

A latency-critical job and a background job share this machine's disk.
Critical workloads (one at a time):

  fio      small random reads at queue depth 1 (4 KiB, O_DIRECT, psync):
           completion-latency percentiles from fio
  rocksdb  db_bench readrandom on an existing database with direct reads
           (one thread, a small block cache): percentiles from db_bench
  sqlite   sqlite3 commits with fsync (a Python loop timing each commit)

Background, separate unmodified processes started first: fio with two
sequential 1 MiB readers and two sequential 512 KiB writers (O_DIRECT,
psync), and a buffered `dd` writer.

Setups, interleaved and rotated per round:

  vanilla          nothing
  ionice-bfq       BFQ scheduler, background under `ionice -c3` (idle class)
  ionice-deadline  mq-deadline (the default), background under `ionice -c3`
  static           background under a static read limit R and write limit W
                   for each process (`paio run --policy static.toml`, written
                   into the output directory; `--limit` would share them
                   among the command's processes, and the rates were tuned
                   per process)
  paio             critical job under `paio run --critical`, background under
                   `paio run --policy bench/criticality/background.toml`
  paio-target      paio, with both jobs' stages registered with a paiod whose
                   `criticality` policy holds critical requests to a latency
                   target (--target at --target-percentile) by cutting the
                   background's depth, then its rate

The background's throughput is its fio's MiB/s over the seconds the critical
job ran (from fio's per-second logs; fio's own average over the whole run,
leads included, is kept as `bg_run_mib`). For each setup and round the
background also runs alone, for its throughput without critical work.
Results in bench/results/criticality/.
Stdlib; plots through `paio plot`.  Run as root (the scheduler switch); the
scheduler is restored on exit, SIGINT and errors.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import expt  # noqa: E402
from expt import block_device_of, fio_bandwidth_mib  # noqa: E402

REPO = expt.REPO
HERE = Path(__file__).resolve().parent
MIB = 1 << 20
ALL_SETUPS = ("vanilla", "ionice-bfq", "ionice-deadline", "static", "paio", "paio-target")
ALL_WORKLOADS = ("fio", "rocksdb", "sqlite")
PERCENTILES = (1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 99, 99.5, 99.9, 99.99)
DriverError = expt.ExperimentError


# ---------------------------------------------------------------- pure parts

def fio_clat_us(doc):
    """{percentile: microseconds} and ops/s of the first job's reads in a
    fio JSON document."""
    job = doc["jobs"][0]["read"]
    pct = job["clat_ns"].get("percentile")
    if not pct:
        raise DriverError("fio reported no completion-latency percentiles")
    return {float(k): v / 1e3 for k, v in pct.items()}, job["iops"]


def dd_command(path, mib, notrunc):
    """The background's buffered writer: `mib` MiB of zeros into `path`,
    truncating what the file held unless `notrunc` (then overwritten in
    place, as `--dd-notrunc` asks)."""
    argv = ["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mib}", "status=none"]
    if notrunc:
        argv.append("conv=notrunc")
    return argv


def db_bench_percentiles(text):
    """{percentile: microseconds} and ops/s from db_bench's output with
    --histogram (the `Percentiles:` line and the benchmark's result line)."""
    pct, ops = {}, None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Percentiles:") and not pct:
            parts = line.split()[1:]
            for name, value in zip(parts[::2], parts[1::2]):
                pct[float(name.rstrip(":")[1:])] = float(value)
        if line.startswith("readrandom") and "ops/sec" in line:
            ops = float(line.split("ops/sec")[0].split(";")[-1].split()[-1])
    if not pct or ops is None:
        raise DriverError(f"db_bench printed no percentiles or rate:\n{text[-2000:]}")
    return pct, ops


def percentiles_of(samples, points=PERCENTILES):
    """{percentile: value} of `samples` (nearest rank)."""
    return expt.percentiles_of(samples, points)


def summarize(rows):
    """Per (workload, setup): median and extremes of p50/p99/p99.9, critical
    ops/s and background MiB/s (with and without critical work), plus ratios
    against vanilla, each taken within a round, as median and extremes over
    the rounds."""
    groups = {}
    for r in rows:
        groups.setdefault((r["workload"], r["setup"]), []).append(r)
    fields = ("p50_us", "p99_us", "p999_us", "crit_ops", "bg_mib", "bg_alone_mib")
    out = []
    for (w, s), rs in sorted(groups.items()):
        e = {"workload": w, "setup": s, "rounds": len(rs)}
        for f in fields:
            vals = [float(r[f]) for r in rs]
            e[f] = (statistics.median(vals), min(vals), max(vals))
        same = [r for r in rows if r["workload"] == w]
        e["p999_vs_vanilla"] = expt.round_ratios(same, "vanilla", s, "p999_us")
        e["bg_vs_vanilla"] = expt.round_ratios(same, s, "vanilla", "bg_mib")
        e["bg_alone_vs_vanilla"] = expt.round_ratios(same, s, "vanilla", "bg_alone_mib")
        out.append(e)
    return out


def markdown(summary):
    """The summary table."""
    def cell(t, digits=0):
        m, lo, hi = t
        return f"{m:.{digits}f} ({lo:.{digits}f}..{hi:.{digits}f})"
    lines = [
        "| workload | setup | rounds | p50 µs | p99 µs | p99.9 µs | p99.9 vanilla/setup "
        "| critical ops/s | background MiB/s while critical | bg % of vanilla | bg alone MiB/s | alone % |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for e in summary:
        lines.append(
            f"| {e['workload']} | {e['setup']} | {e['rounds']} | {cell(e['p50_us'])} "
            f"| {cell(e['p99_us'])} | {cell(e['p999_us'])} "
            f"| {expt.spread(e['p999_vs_vanilla'], 1, unit='x')} | {cell(e['crit_ops'])} "
            f"| {cell(e['bg_mib'])} | {expt.spread(e['bg_vs_vanilla'], 0, 100, ' %')} "
            f"| {cell(e['bg_alone_mib'])} | {expt.spread(e['bg_alone_vs_vanilla'], 0, 100, ' %')} |")
    return "\n".join(lines) + "\n\n" + expt.RATIO_NOTE + "\n"


def paiod_config(target, percentile, depths, decrease=None, min_depth=None):
    """paiod's configuration in the paio-target setup: the criticality
    policy with a latency target at `percentile`, starting from and never
    above the background policy's `depths` ((depth, busy_depth), from
    `priority_depths`): the policy owns those settings, and its own
    defaults (4, 1) would otherwise replace the policy's. `decrease`: the
    rate a missed window keeps; `min_depth`: the lowest depth a miss cuts
    to before the rate (None: paiod's defaults)."""
    depth, busy = depths
    return ("period = \"100ms\"\n[policy]\nkind = \"criticality\"\n"
            f"latency_target = \"{target}\"\npercentile = {percentile:g}\n"
            f"max_depth = {depth}\nbusy_depth = {busy}\n"
            + (f"decrease = {decrease:g}\n" if decrease is not None else "")
            + (f"min_depth = {min_depth}\n" if min_depth is not None else ""))


def priority_depths(policy_text, where):
    """(depth, busy_depth) of the priority objects of a stage policy (the
    highest of each; the stage's defaults 4 and 1 where unset); an error
    naming `where` if it has none."""
    objects = [o for ch in tomllib.loads(policy_text).get("channel", [])
               for o in ch.get("object", []) if o.get("kind") == "priority"]
    if not objects:
        raise DriverError(f"{where}: no priority object (kind = \"priority\"), "
                          "so the paio-target setup would have nothing to control")
    return (max(o.get("depth", 4) for o in objects),
            max(o.get("busy_depth", 1) for o in objects))


def stages_that_left(log_text):
    """How many stages paiod's log says left (each had registered)."""
    return sum(1 for line in log_text.splitlines()
               if "paio_control::server: stage " in line and line.endswith(" left"))


rotation = expt.rotation


# ---------------------------------------------------------------- running

class Run:
    def __init__(self, args, data, out):
        self.args, self.data, self.out = args, data, out
        self.paio = str(Path(args.bin_dir) / "paio")
        self.children = []
        self.disk = block_device_of(data)[2]
        self.sched_file = Path(f"/sys/block/{self.disk}/queue/scheduler")
        self.sched_orig = self.current_scheduler()

    def current_scheduler(self):
        try:
            text = self.sched_file.read_text()
        except OSError:
            return None
        return text[text.index("[") + 1:text.index("]")] if "[" in text else None

    def set_scheduler(self, name):
        if self.current_scheduler() == name:
            return
        try:
            self.sched_file.write_text(name)
        except OSError as e:
            raise DriverError(f"cannot select the {name} scheduler in {self.sched_file}: {e} "
                              "(root needed)") from e

    def restore(self):
        for c in self.children:
            expt.stop(c)
        self.children = []
        if self.sched_orig:
            try:
                self.set_scheduler(self.sched_orig)
            except DriverError as e:
                print(f"WARNING: {e}", file=sys.stderr)

    def prepare(self):
        """Data files (once) and the RocksDB database (once)."""
        for name, mib in (("crit.dat", self.args.crit_mib), ("bg-read.dat", self.args.bg_mib)):
            f = self.data / name
            if not f.exists() or f.stat().st_size != mib * MIB:
                print(f"preparing {f} ({mib} MiB)", flush=True)
                subprocess.run(["fio", "--name=prep", f"--filename={f}", f"--size={mib}m",
                                "--rw=write", "--bs=1m", "--direct=1",
                                "--output-format=terse"], check=True, stdout=subprocess.DEVNULL)
        if "rocksdb" in self.args.workloads and not (self.data / "db" / "CURRENT").exists():
            print("preparing the RocksDB database (fillrandom)", flush=True)
            subprocess.run(["db_bench", "--benchmarks=fillrandom", f"--db={self.data / 'db'}",
                            f"--num={self.args.db_keys}", "--value_size=400",
                            "--compression_type=none", "--disable_wal=1"],
                           check=True, stdout=subprocess.DEVNULL)

    def static_policy(self):
        """The static setup's policy: a read and a write limit of each
        process's own (no `shared` bucket), as the rates were tuned."""
        path = self.out / "static.toml"
        if not path.exists():
            channels = []
            for rt, rate in (("read", self.args.static_read), ("write", self.args.static_write)):
                channels.append(
                    f'[[channel]]\nname = "{rt}"\nmatch = {{ request_type = "{rt}" }}\n'
                    f'default_object = "limit"\n\n[[channel.object]]\nname = "limit"\n'
                    f'kind = "drl"\nrate = "{rate}"\n')
            path.write_text('[stage]\ndefault_channel = "other"\n\n' + "\n".join(channels)
                            + '\n[[channel]]\nname = "other"\n')
        return path

    def wrap_background(self, setup, argv):
        if setup.startswith("ionice"):
            return ["ionice", "-c3"] + argv
        if setup == "static":
            return [self.paio, "run", "--policy", str(self.static_policy()), "--"] + argv
        if setup in ("paio", "paio-target"):
            return ([self.paio, "run", "--policy", self.args.paio_policy]
                    + self.control(setup) + ["--"] + argv)
        return argv

    def wrap_critical(self, setup, argv):
        if setup in ("paio", "paio-target"):
            return [self.paio, "run", "--critical"] + self.control(setup) + ["--"] + argv
        return argv

    def control(self, setup):
        """paio run's flags that register its stages with paiod, in the
        setup that has one."""
        return ["--control", str(self.paiod_socket)] if setup == "paio-target" else []

    @property
    def paiod_socket(self):
        return self.out / "raw" / "paiod.sock"

    def start_paiod(self, setup):
        """paiod with the criticality policy (setup paio-target), until stop_paiod."""
        if setup != "paio-target":
            return None
        a = self.args
        cfg = self.out / "raw" / "paiod.toml"
        policy = Path(a.paio_policy)
        depths = priority_depths(policy.read_text(), policy)
        cfg.write_text(paiod_config(a.target, a.target_percentile, depths,
                                    a.target_decrease, a.target_min_depth))
        log = open(self.out / "raw" / "paiod.log", "a")
        self.paiod_log_start = log.tell()
        p = subprocess.Popen([str(Path(a.bin_dir) / "paiod"), "--config", str(cfg),
                              "--socket", str(self.paiod_socket)],
                             stdout=log, stderr=log)
        self.children.append(p)
        deadline = time.monotonic() + 10
        while not self.paiod_socket.exists():
            if p.poll() is not None or time.monotonic() > deadline:
                raise DriverError(f"paiod did not start (see {log.name})")
            time.sleep(0.05)
        return p

    def stop_paiod(self, p):
        """Stops paiod; an error if no stage ever registered with it (the
        setup would silently have been plain paio)."""
        if p is None:
            return
        p.terminate()
        p.wait()
        log = self.out / "raw" / "paiod.log"
        with open(log) as f:
            f.seek(self.paiod_log_start)
            text = f.read()
        if not stages_that_left(text):
            raise DriverError(f"no stage registered with paiod in this run (see {log})")

    def start_background(self, setup, seconds, tag):
        """fio readers and writers plus a buffered dd; returns (fio process,
        its JSON path, dd process)."""
        j = self.out / "raw" / f"{tag}.bg.json"
        fio = ["fio", "--output-format=json", f"--output={j}", "--direct=1",
               "--ioengine=psync", "--time_based", f"--runtime={seconds}",
               f"--write_bw_log={self.out / 'raw' / tag}", "--log_avg_msec=1000",
               "--name=readers", f"--filename={self.data / 'bg-read.dat'}", "--rw=read",
               "--bs=1m", "--numjobs=2",
               "--name=writers", f"--filename={self.data / 'bg-write.dat'}", "--rw=write",
               "--bs=512k", f"--size={self.args.bg_mib}m", "--numjobs=2"]
        dd = dd_command(self.data / "bg-dd.dat", self.args.dd_mib, self.args.dd_notrunc)
        p = subprocess.Popen(self.wrap_background(setup, fio), stdout=subprocess.DEVNULL)
        d = subprocess.Popen(self.wrap_background(setup, dd), stdout=subprocess.DEVNULL)
        self.children += [p, d]
        return p, j, d

    def finish_background(self, fio, j, dd):
        if fio.wait() != 0:
            raise DriverError(f"background fio failed (exit {fio.returncode})")
        expt.stop(dd)
        return fio_bandwidth_mib(json.loads(j.read_text()))

    def critical(self, setup, workload, seconds, tag):
        """Runs the critical job; ({percentile: µs}, ops/s)."""
        if workload == "fio":
            j = self.out / "raw" / f"{tag}.crit.json"
            argv = ["fio", "--name=crit", f"--filename={self.data / 'crit.dat'}",
                    "--rw=randread", "--bs=4k", "--direct=1", "--ioengine=psync",
                    "--time_based", f"--runtime={seconds}",
                    "--percentile_list=" + ":".join(f"{p:g}" for p in PERCENTILES),
                    "--output-format=json", f"--output={j}"]
            self.check(subprocess.run(self.wrap_critical(setup, argv)), "fio")
            return fio_clat_us(json.loads(j.read_text()))
        if workload == "rocksdb":
            argv = ["db_bench", "--benchmarks=readrandom", f"--db={self.data / 'db'}",
                    "--use_existing_db=1", "--use_direct_reads=1", "--threads=1",
                    f"--num={self.args.db_keys}", f"--duration={seconds}",
                    "--cache_size=8388608", "--histogram=1", "--value_size=400"]
            r = subprocess.run(self.wrap_critical(setup, argv), capture_output=True, text=True)
            self.check(r, "db_bench", r.stderr)
            (self.out / "raw" / f"{tag}.crit.txt").write_text(r.stdout)
            return db_bench_percentiles(r.stdout)
        if workload == "sqlite":
            argv = [sys.executable, str(HERE / "commits.py"), str(self.data / "commits.db"),
                    str(seconds)]
            r = subprocess.run(self.wrap_critical(setup, argv), capture_output=True, text=True)
            self.check(r, "commits.py", r.stderr)
            samples = json.loads(r.stdout)
            (self.out / "raw" / f"{tag}.crit.json").write_text(r.stdout)
            return percentiles_of(samples), len(samples) / seconds
        raise DriverError(f"unknown workload {workload}")

    @staticmethod
    def check(result, what, err=""):
        if result.returncode != 0:
            raise DriverError(f"{what} failed (exit {result.returncode}): {err[-1000:]}")

    def one(self, rnd, setup, workload):
        """Background alone (once per setup and round), then background with
        the critical job started `lead` seconds in."""
        a = self.args
        self.set_scheduler("bfq" if setup == "ionice-bfq" else a.scheduler)
        tag = f"r{rnd}-{setup}-{workload}"
        paiod = self.start_paiod(setup)
        try:
            bg = self.start_background(setup, a.seconds + 2 * a.lead, tag)
            time.sleep(a.lead)
            pct, ops = self.critical(setup, workload, a.seconds, tag)
            bg_run_mib = self.finish_background(*bg)
        finally:
            self.stop_paiod(paiod)
        bg_mib = expt.fio_mib_between(self.out / "raw", tag, a.lead, a.lead + a.seconds)
        if bg_mib is None:
            raise DriverError(f"no background bandwidth samples while the critical job ran "
                              f"({self.out / 'raw'}/{tag}_bw.*.log)")
        return {"round": rnd, "setup": setup, "workload": workload,
                "p50_us": pct[50.0], "p99_us": pct[99.0], "p999_us": pct[99.9],
                "crit_ops": ops, "bg_mib": bg_mib, "bg_run_mib": bg_run_mib,
                "percentiles": pct}

    def alone(self, rnd, setup):
        a = self.args
        self.set_scheduler("bfq" if setup == "ionice-bfq" else a.scheduler)
        paiod = self.start_paiod(setup)
        try:
            bg = self.start_background(setup, a.alone_seconds, f"r{rnd}-{setup}-alone")
            return self.finish_background(*bg)
        finally:
            self.stop_paiod(paiod)


# The colour of each setup, the same in every panel and plot.
SETUP_COLORS = dict(zip(ALL_SETUPS, ("blue", "orange", "green", "red", "purple", "brown")))


def latency_cdf_figure(rows):
    """The latency CDF plot (`paio plot --figure`): a panel per workload,
    a line per setup through the percentiles of its round with the median
    p99.9 (latency on a log x axis, percentile on y), dots at the points."""
    workloads = sorted({r["workload"] for r in rows})
    panels = []
    for w in workloads:
        series, dots = [], []
        for setup in ALL_SETUPS:
            rs = [r for r in rows if r["workload"] == w and r["setup"] == setup]
            if not rs:
                continue
            # The round with the median p99.9.
            r = sorted(rs, key=lambda r: r["p999_us"])[len(rs) // 2]
            # runs.json has the percentiles' keys as strings.
            pts = sorted((float(p), v) for p, v in r["percentiles"].items())
            points = [[v, p] for p, v in pts]
            color = SETUP_COLORS[setup]
            series.append({"label": setup, "kind": "line", "color": color, "points": points})
            dots.append({"label": "", "kind": "points", "color": color, "points": points})
        panels.append({
            "title": f"critical {w}: latency CDF (median round)",
            "x_label": "latency (µs, log)", "y_label": "percentile",
            "x_log": True, "y_min": 0, "y_max": 100,
            "series": series + dots,
        })
    return {"columns": max(1, len(workloads)), "panel_width": 660, "panel_height": 495,
            "panels": panels}


def background_per_second(raw, setups=ALL_SETUPS):
    """{setup: {second: MiB/s}} of the background fio in round 0's fio
    workload, from its bandwidth logs in `raw` (KiB/s per job and second,
    summed over jobs); setups without logs are left out."""
    out = {}
    for setup in setups:
        per_s = {}
        for log in sorted(Path(raw).glob(f"r0-{setup}-fio_bw.*.log")):
            for line in log.read_text().splitlines():
                parts = [x.strip() for x in line.split(",")]
                if len(parts) >= 2:
                    sec = int(parts[0]) // 1000
                    per_s[sec] = per_s.get(sec, 0.0) + int(parts[1]) / 1024.0
        if per_s:
            out[setup] = per_s
    return out


def background_figure(per_s):
    """The background throughput plot (`paio plot --figure`) of
    `background_per_second`'s {setup: {second: MiB/s}}: a line per setup."""
    series = [{"label": setup, "kind": "line", "color": SETUP_COLORS[setup],
               "points": [[x, per_s[setup][x]] for x in sorted(per_s[setup])]}
              for setup in ALL_SETUPS if per_s.get(setup)]
    return {"panel_width": 990, "panel_height": 495, "panels": [{
        "title": "background throughput per second (round 0, critical fio from the lead)",
        "x_label": "s", "y_label": "background MiB/s (fio)",
        "series": series,
    }]}


def plot(out, rows, bin_dir=None):
    """OUT/latency-cdf.png, and OUT/background-throughput.png when
    OUT/raw has round 0's fio bandwidth logs; the paths written."""
    out = Path(out)
    written = [expt.plot(latency_cdf_figure(rows), out / "latency-cdf.png", bin_dir)]
    per_s = background_per_second(out / "raw")
    if per_s:
        written.append(expt.plot(background_figure(per_s),
                                 out / "background-throughput.png", bin_dir))
    return written


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--setups", default=",".join(ALL_SETUPS))
    ap.add_argument("--workloads", default=",".join(ALL_WORKLOADS))
    ap.add_argument("--seconds", type=int, default=15, help="critical job duration")
    ap.add_argument("--lead", type=int, default=2,
                    help="seconds the background runs before (and after) the critical job")
    ap.add_argument("--alone-seconds", type=int, default=8)
    ap.add_argument("--data-dir", default="/var/tmp/paio-criticality")
    ap.add_argument("--out", default=str(REPO / "bench/results/criticality"))
    ap.add_argument("--bin-dir", default=str(REPO / "target/release"))
    ap.add_argument("--scheduler", default="mq-deadline",
                    help="scheduler of every setup but ionice-bfq")
    ap.add_argument("--paio-policy", default=str(HERE / "background.toml"),
                    help="the background's policy in the paio setup")
    ap.add_argument("--target", default="300us",
                    help="paio-target: paiod's latency target for critical requests "
                         "(300us: chosen on fio, docs/performance.md)")
    ap.add_argument("--target-percentile", type=float, default=99.9,
                    help="paio-target: the percentile the target applies to")
    ap.add_argument("--target-decrease", type=float, default=None,
                    help="paio-target: the fraction of the background's rate a missed "
                         "window keeps (paiod's `decrease`; default paiod's, 0.5)")
    ap.add_argument("--target-min-depth", type=int, default=None,
                    help="paio-target: the lowest depth a missed window cuts to before "
                         "it cuts the rate (paiod's `min_depth`; default paiod's, 1)")
    ap.add_argument("--static-read", default="200MiB/s")
    ap.add_argument("--static-write", default="100MiB/s")
    ap.add_argument("--crit-mib", type=int, default=512)
    ap.add_argument("--bg-mib", type=int, default=2048)
    ap.add_argument("--dd-mib", type=int, default=4096)
    ap.add_argument("--dd-notrunc", action="store_true",
                    help="the dd writer overwrites its file in place (conv=notrunc) instead "
                         "of truncating the previous run's: on a file system mounted with "
                         "`discard`, truncating frees gigabytes whose discards stall the "
                         "device for up to a second (bench/results/criticality/device-tail/)")
    ap.add_argument("--db-keys", type=int, default=2_000_000)
    ap.add_argument("--quick", action="store_true",
                    help="smoke check: 1 round, vanilla, paio and paio-target, fio only, 2 s")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--report-only", action="store_true",
                    help="write OUT/summary.md again from OUT/runs.json; run nothing")
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds, a.setups, a.workloads = 1, "vanilla,paio,paio-target", "fio"
        a.seconds, a.lead, a.alone_seconds = 2, 1, 2
        a.crit_mib, a.bg_mib, a.dd_mib = 64, 128, 64
    a.setups = a.setups.split(",")
    a.workloads = a.workloads.split(",")
    for s in a.setups:
        if s not in ALL_SETUPS:
            ap.error(f"unknown setup {s!r}; expected some of {','.join(ALL_SETUPS)}")
    for w in a.workloads:
        if w not in ALL_WORKLOADS:
            ap.error(f"unknown workload {w!r}; expected some of {','.join(ALL_WORKLOADS)}")
    return a


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.report_only:
        return expt.report_only(Path(args.out), lambda rows: markdown(summarize(rows)))
    expt.require(["fio", "ionice"] + (["db_bench"] if "rocksdb" in args.workloads else []),
                 args.bin_dir, ["paio"] + (["paiod"] if "paio-target" in args.setups else []))
    data = Path(args.data_dir)
    data.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    (out / "raw").mkdir(parents=True, exist_ok=True)
    run = Run(args, data, out)
    header = expt.header_lines(data) + [
        f"scheduler: {run.sched_orig} (ionice-bfq switches to bfq and back)",
        f"setups: {','.join(args.setups)}; workloads: {','.join(args.workloads)}; "
        f"rounds: {args.rounds}; critical {args.seconds} s inside {args.seconds + 2 * args.lead} s "
        f"of background; static limits read {args.static_read} write {args.static_write}; "
        f"paio-target: p{args.target_percentile:g} target {args.target}",
    ]
    expt.write_header(out, header)
    rows = []
    total = args.rounds * len(args.setups) * (len(args.workloads) + 1)
    done, t0 = 0, time.monotonic()
    try:
        run.prepare()
        for rnd in range(args.rounds):
            for setup in rotation(args.setups, rnd):
                alone = run.alone(rnd, setup)
                done += 1
                for w in args.workloads:
                    r = run.one(rnd, setup, w)
                    r["bg_alone_mib"] = alone
                    rows.append(r)
                    done += 1
                    print(f"[{done}/{total} {time.monotonic() - t0:.0f}s] round {rnd} {setup:16} "
                          f"{w:8} p50 {r['p50_us']:9.0f} µs  p99 {r['p99_us']:9.0f}  "
                          f"p99.9 {r['p999_us']:9.0f}  crit {r['crit_ops']:7.0f}/s  "
                          f"bg {r['bg_mib']:6.0f} MiB/s (alone {alone:.0f})", flush=True)
    finally:
        run.restore()
    fields = ["round", "setup", "workload", "p50_us", "p99_us", "p999_us", "crit_ops",
              "bg_mib", "bg_run_mib", "bg_alone_mib"]

    def plots():
        return "plots: " + ", ".join(str(p) for p in plot(out, rows, args.bin_dir))

    expt.finish(out, header, rows, fields, markdown(summarize(rows)),
                None if args.no_plot else plots)
    return 0


if __name__ == "__main__":
    expt.run_main(main)
