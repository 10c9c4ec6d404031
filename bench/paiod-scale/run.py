#!/usr/bin/env python3
"""paiod at scale on one machine (issue 14): how many stages it serves at
its control period, and what that costs.

One process simulates N stages over paiod's Unix socket (asyncio, one
connection per stage, written from docs/protocol.md like
docs/examples/python_stage.py): each says hello with the shape of a stage
under `paio run` (channels read, write and metadata, a noop object each,
label job=g), acknowledges rules, and answers every collect with
statistics that grow by 1 MiB of reads per collect. paiod runs the
max_min policy on channel `read` with one group holding every stage.

For each configuration (stages, period), once every stage is registered
and `--settle` seconds have passed, the driver measures for `--seconds`:

  period    the control loop's achieved period: paiod's own figures
            (`paio status`: p50/p99/max over its last 100 ticks, read at
            the end, with the window inside the measurement) and, as the
            stages see it, the interval between consecutive collects at
            each stage (p50/p99/max over all stages)
  cpu       paiod's CPU time over the measurement, as a share of one core
            (from /proc/<pid>/stat), and the driver's own
  status    `paio status` round trips (a ctl request over the socket) and
  scrape    GETs of /metrics: median and maximum of `--probes` each, and
            the scrape's size

Configurations run in rounds, each round in an order rotated by one.
Results: OUT/paiod-scale.csv (one row per run) and OUT/summary.md
(medians over rounds, each run's extremes). Stdlib only.
"""

import argparse
import asyncio
import csv
import datetime
import json
import os
import resource
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import expt  # noqa: E402

PAIOD = expt.REPO / "target" / "release" / "paiod"
CLK_TCK = os.sysconf("SC_CLK_TCK")
GOALS = {  # (stages, period_ms): (period p99 ms, paiod CPU share)
    (1000, 100): (110.0, 0.20),
    # Issue 14 names no CPU goal at 10,000 stages: a p99 within 10 % of the
    # period, as at 1,000, and no more than one core.
    (10000, 1000): (1100.0, 1.0),
}


def frame(msg):
    payload = json.dumps(msg, separators=(",", ":")).encode()
    return struct.pack(">I", len(payload)) + payload


def cpu_seconds(pid):
    """utime + stime of a process, seconds."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def percentile(values, p):
    """Nearest-rank percentile; None when empty."""
    if not values:
        return None
    v = sorted(values)
    k = max(1, min(len(v), -(-len(v) * p // 100)))
    return v[int(k) - 1]


def hello(i):
    noop = {"name": "default", "kind": "noop", "config": {"kind": "noop"}}
    chan = lambda n: {"name": n, "objects": [noop], "object_rules": [], "default_object": "default"}
    info = {"name": "sim", "pid": os.getpid(), "host": "sim", "labels": {"job": "g", "i": str(i)},
            "classifiers": ["request_type"],
            "channels": [chan("read"), chan("write"), chan("metadata")],
            "channel_rules": [[{"request_type": "read"}, "read"],
                              [{"request_type": "write"}, "write"]],
            "default_channel": "metadata"}
    return {"type": "hello", "version": 1, "ppid": 1, "user": "0", "info": info}


class Stage:
    """One simulated stage: its connection and the collect arrival times."""

    def __init__(self, i):
        self.i = i
        self.ops = 0
        self.collects = []  # monotonic arrival times
        self.registered = False
        self.objects = {"read": ["default"], "write": ["default"], "metadata": ["default"]}

    def stats(self, req):
        self.ops += 16
        nbytes = self.ops << 16
        chans = []
        for name, objs in self.objects.items():
            ops, b = (self.ops, nbytes) if name == "read" else (0, 0)
            chans.append({"name": name, "ops": ops, "bytes": b,
                          "objects": [{"name": o, "kind": "noop" if o == "default" else "drl",
                                       "ops": ops if o == objs[-1] else 0,
                                       "bytes": b if o == objs[-1] else 0} for o in objs]})
        return {"type": "stats", "id": req, "stats": {
            "stage": "sim", "collected_at_ns": time.monotonic_ns(), "channels": chans}}

    async def run(self, path, stop):
        reader, writer = await asyncio.open_unix_connection(path, limit=1 << 21)
        writer.write(frame(hello(self.i)))
        await writer.drain()
        try:
            while not stop.is_set():
                head = await reader.readexactly(4)
                (n,) = struct.unpack(">I", head)
                msg = json.loads(await reader.readexactly(n))
                t = msg["type"]
                if t == "welcome":
                    self.registered = True
                elif t == "collect":
                    self.collects.append(time.monotonic())
                    writer.write(frame(self.stats(msg["id"])))
                elif t == "rules":
                    for r in msg["rules"]:
                        if r.get("rule") == "create_object" and r["name"] not in \
                                self.objects.get(r["channel"], []):
                            self.objects.setdefault(r["channel"], []).append(r["name"])
                    writer.write(frame({"type": "ack", "id": msg["id"]}))
                elif t in ("error", "goodbye"):
                    raise expt.ExperimentError(f"stage {self.i}: paiod sent {msg}")
        except (asyncio.IncompleteReadError, ConnectionError):
            if not stop.is_set():
                raise expt.ExperimentError(f"stage {self.i}: paiod closed the connection")
        finally:
            writer.close()


def ctl_status(path):
    """paiod's status report, and the round trip in seconds."""
    t0 = time.perf_counter()
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(path))
        s.sendall(frame({"type": "ctl", "id": 1, "command": {"op": "status"}}))
        (n,) = struct.unpack(">I", recv_exact(s, 4))
        reply = json.loads(recv_exact(s, n))
    if not reply.get("ok"):
        raise expt.ExperimentError(f"status refused: {reply}")
    return reply["status"], time.perf_counter() - t0


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise expt.ExperimentError("paiod closed the ctl connection")
        buf += chunk
    return buf


def scrape(port):
    t0 = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        body = r.read()
    return len(body), time.perf_counter() - t0


async def run_config(n, period_ms, args, workdir):
    sock = workdir / "paiod.sock"
    port = free_port()
    cfg = workdir / "paiod.toml"
    cfg.write_text(
        f'period = "{period_ms}ms"\nmetrics = "127.0.0.1:{port}"\n'
        '[policy]\nkind = "max_min"\ngroup_by = "job"\nchannel = "read"\n'
        'max_bandwidth = "10GiB/s"\n[[policy.group]]\nname = "g"\ndemand = "1GiB/s"\n')
    log = open(workdir / "paiod.log", "w")
    paiod = subprocess.Popen([str(PAIOD), "--config", str(cfg), "--socket", str(sock),
                              "--log", "warn"], stderr=log)
    stop = asyncio.Event()
    tasks = []
    try:
        for _ in range(300):
            if sock.exists():
                break
            await asyncio.sleep(0.02)
        stages = [Stage(i) for i in range(n)]
        t_reg = time.monotonic()
        for k in range(0, n, 200):  # connect in batches
            tasks += [asyncio.create_task(s.run(sock, stop)) for s in stages[k:k + 200]]
            await asyncio.sleep(0.01)
        while sum(s.registered for s in stages) < n:
            for t in tasks:
                if t.done() and t.exception():
                    raise t.exception()
            if time.monotonic() - t_reg > 120:
                raise expt.ExperimentError(f"only {sum(s.registered for s in stages)} of {n} "
                                           "stages registered in 120 s")
            await asyncio.sleep(0.1)
        reg_s = time.monotonic() - t_reg
        await asyncio.sleep(args.settle)
        seconds = max(args.seconds, 1.2 * 100 * period_ms / 1000)  # paiod's window inside
        start = time.monotonic()
        cpu0, me0 = cpu_seconds(paiod.pid), cpu_seconds(os.getpid())
        await asyncio.sleep(seconds)
        cpu1, me1 = cpu_seconds(paiod.pid), cpu_seconds(os.getpid())
        elapsed = time.monotonic() - start
        gaps = []
        for s in stages:
            t = [x for x in s.collects if x >= start]
            gaps += [(b - a) * 1e3 for a, b in zip(t, t[1:])]
        loop = asyncio.get_running_loop()
        status_rt, scrape_rt, scrape_bytes = [], [], 0
        for _ in range(args.probes):
            st, rt = await loop.run_in_executor(None, ctl_status, sock)
            status_rt.append(rt * 1e3)
            scrape_bytes, rt = await loop.run_in_executor(None, scrape, port)
            scrape_rt.append(rt * 1e3)
        if len(st["stages"]) != n:
            raise expt.ExperimentError(f"paiod reports {len(st['stages'])} stages, not {n}")
        lp = st["control_loop"]
        return {
            "stages": n, "period_ms": period_ms, "register_s": round(reg_s, 2),
            "seconds": round(elapsed, 1),
            "paiod_period_p50_ms": lp["period_p50_ms"], "paiod_period_p99_ms": lp["period_p99_ms"],
            "paiod_period_max_ms": lp["period_max_ms"], "paiod_work_p99_ms": lp["work_p99_ms"],
            "paiod_window_ticks": lp["window"],
            "stage_gap_p50_ms": round(percentile(gaps, 50), 2),
            "stage_gap_p99_ms": round(percentile(gaps, 99), 2),
            "stage_gap_max_ms": round(max(gaps), 2), "gaps": len(gaps),
            "paiod_cpu_share": round((cpu1 - cpu0) / elapsed, 4),
            "driver_cpu_share": round((me1 - me0) / elapsed, 4),
            "status_ms_median": round(statistics.median(status_rt), 2),
            "status_ms_max": round(max(status_rt), 2),
            "scrape_ms_median": round(statistics.median(scrape_rt), 2),
            "scrape_ms_max": round(max(scrape_rt), 2), "scrape_bytes": scrape_bytes,
        }
    finally:
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        paiod.terminate()
        try:
            paiod.wait(timeout=10)
        except subprocess.TimeoutExpired:
            paiod.kill()
        log.close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_configs(text):
    """`STAGES@PERIOD_MS,...` -> [(stages, period_ms)]."""
    out = []
    for item in text.split(","):
        try:
            n, p = item.split("@")
            out.append((int(n), int(p)))
        except ValueError:
            raise expt.ExperimentError(f"--configs {item!r}: expected STAGES@PERIOD_MS, "
                                       "e.g. 1000@100") from None
        if out[-1][0] < 1 or out[-1][1] < 1:
            raise expt.ExperimentError(f"--configs {item!r}: stages and period must be positive")
    return out


def summarize(rows):
    """Medians over rounds per configuration, with each run's extremes."""
    lines = ["| stages @ period | paiod period p50 / p99 / max (ms) | stages' collect gap "
             "p99 (ms) | paiod CPU (share of a core) | status median / max (ms) | "
             "scrape median / max (ms), size | goal |", "|---|---|---|---|---|---|---|"]
    for key in sorted({(r["stages"], r["period_ms"]) for r in rows}):
        rs = [r for r in rows if (r["stages"], r["period_ms"]) == key]
        med = lambda f: statistics.median(r[f] for r in rs)
        rng = lambda f: f"{min(r[f] for r in rs):g}–{max(r[f] for r in rs):g}"
        goal = GOALS.get(key)
        verdict = "—"
        if goal:
            ok = med("paiod_period_p99_ms") <= goal[0] and med("paiod_cpu_share") <= goal[1]
            verdict = (f"p99 ≤ {goal[0]:g} ms and CPU ≤ {goal[1]:.0%}: "
                       + ("met" if ok else "**not met**"))
        lines.append(
            f"| {key[0]} @ {key[1]} ms | {med('paiod_period_p50_ms'):.1f} / "
            f"{med('paiod_period_p99_ms'):.1f} ({rng('paiod_period_p99_ms')}) / "
            f"{med('paiod_period_max_ms'):.1f} | {med('stage_gap_p99_ms'):.1f} "
            f"({rng('stage_gap_p99_ms')}) | {med('paiod_cpu_share'):.3f} "
            f"({rng('paiod_cpu_share')}) | {med('status_ms_median'):.1f} / "
            f"{med('status_ms_max'):.1f} | {med('scrape_ms_median'):.1f} / "
            f"{med('scrape_ms_max'):.1f}, {med('scrape_bytes') / 1e6:.2f} MB | {verdict} |")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="200@100,1000@100,10000@1000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=12.0,
                    help="measurement per run (at least 120 periods, so paiod's window fits)")
    ap.add_argument("--settle", type=float, default=2.0)
    ap.add_argument("--probes", type=int, default=5)
    ap.add_argument("--out", type=Path, default=expt.REPO / "bench" / "results" / "paiod-scale")
    args = ap.parse_args()
    configs = parse_configs(args.configs)
    if args.rounds < 1 or args.probes < 1:
        raise expt.ExperimentError("--rounds and --probes must be at least 1")
    if not os.access(PAIOD, os.X_OK):
        raise expt.ExperimentError(f"{PAIOD} missing: run `cargo build --release -p paio-control`")
    need = max(n for n, _ in configs) + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        raise expt.ExperimentError(f"{need} descriptors needed, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    header = [
        "benchmark: paiod at scale, simulated stages (bench/paiod-scale/run.py), max_min policy",
        "command: " + " ".join([sys.argv[0]] + sys.argv[1:]),
        f"date_utc: {started}",
        f"machine: {expt.machine_info(expt.REPO)}",
        f"loadavg_start: {Path('/proc/loadavg').read_text().strip()}",
        f"paio_commit: {expt.commit_info()}",
        "note: paiod_period_* are paiod's own figures over its last 100 ticks (inside the "
        "measurement); stage_gap_* the interval between consecutive collects at each stage; "
        "cpu shares are of one core over the measurement",
    ]
    rows = []
    for rnd in range(args.rounds):
        order = configs[rnd % len(configs):] + configs[:rnd % len(configs)]
        for n, p in order:
            print(f"round {rnd + 1}/{args.rounds}: {n} stages @ {p} ms ...", flush=True)
            with tempfile.TemporaryDirectory(prefix="paiod-scale-") as d:
                row = asyncio.run(run_config(n, p, args, Path(d)))
            row["round"] = rnd + 1
            rows.append(row)
            print("  " + ", ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "paiod-scale.csv", "w", newline="") as f:
        for h in header:
            f.write(f"# {h}\n")
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    summary = ["# paiod at scale", ""] + [f"- {h}" for h in header] + [""] + summarize(rows)
    (args.out / "summary.md").write_text("\n".join(summary) + "\n")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    expt.run_main(main)
