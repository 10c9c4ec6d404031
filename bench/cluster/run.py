#!/usr/bin/env python3
"""Cluster mode at scale (issue 15): the global control cycle and the
failover time at 10, 100 and 1,000 simulated nodes of 100 stages each,
against a real etcd on this machine.

One etcd member runs in a temporary directory (Debian's etcd-server, its
default timing and durability). For each configuration
target/release/paio-cluster-sim runs N of paiod's own cluster agents in
one process (each with its own etcd session, lease and watches); one of
them is elected and runs the real leader. Every `--change` seconds the
demand changes on every node; a change's cycle is the time from the last
node publishing it to the last node having applied the matching
allocation (computed with the leader's own allocation function), and its
reaction the time from the change itself to that point (each node sees
it within a tenth of a period and reports it at once). At the
end the leader is stopped and the time until another node leads is the
failover time. Also measured: etcd's own latency under that load (a
probe in the simulator puts one small key every 100 ms over a connection
and a thread of its own), etcd's write rate (revisions per second, the
probe's not counted), the simulator's CPU per node and etcd's CPU.

The failover time is bounded by the lease: etcd expires it (checking
every 500 ms), then the nodes campaign. paiod's default lease is 2 s, the
shortest etcd grants with its default timing; a 1 s lease needs etcd's
election timeout at 666 ms or less. So the runs above use etcd's and
paiod's defaults, and `--failover-runs` more runs at 1,000 nodes measure
the failover with `lease = "1s"` against etcd with
`--election-timeout 600` (a single member holds no elections, so only the
shortest lease changes).

Configurations run in rounds, each in an order rotated by one. Results:
OUT/runs.csv (one row per run), OUT/cycles.csv (every cycle),
OUT/summary.md (per configuration: pooled percentiles of the cycles, each
run's extremes, medians of the rest) and OUT/cycle.png. Stdlib only.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import expt  # noqa: E402

SIM = expt.REPO / "target" / "release" / "paio-cluster-sim"
CLK_TCK = os.sysconf("SC_CLK_TCK")
GOAL_NODES, GOAL_CYCLE_MS, GOAL_FAILOVER_S = 1000, 100.0, 2.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    text = Path(f"/proc/{pid}/stat").read_text()
    f = text.rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / CLK_TCK


FAST_ELECTION_MS = 600


class Etcd:
    """One etcd member on loopback ports in `d` (its default timing unless
    `election_ms` is given)."""

    def __init__(self, d, election_ms=None):
        self.port, peer = free_port(), free_port()
        self.log = open(Path(d) / "etcd.log", "w")
        timing = ["--election-timeout", str(election_ms)] if election_ms else []
        self.proc = subprocess.Popen(
            ["etcd", "--name", "m0", "--data-dir", str(Path(d) / "data"),
             "--listen-client-urls", f"http://127.0.0.1:{self.port}",
             "--advertise-client-urls", f"http://127.0.0.1:{self.port}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"m0=http://127.0.0.1:{peer}"] + timing,
            stdout=subprocess.DEVNULL, stderr=self.log)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                    if b'"health":"true"' in r.read():
                        return
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise expt.ExperimentError(f"etcd did not start (see {self.log.name})")
            time.sleep(0.1)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def run_one(nodes, args, seconds, lease_s=2, election_ms=None):
    """One run in a fresh etcd: the simulator's figures, and etcd's CPU."""
    with tempfile.TemporaryDirectory(prefix="paio-cluster-") as d:
        etcd = Etcd(d, election_ms)
        try:
            cpu0, t0 = cpu_seconds(etcd.proc.pid), time.monotonic()
            r = subprocess.run(
                [str(SIM), "--etcd", etcd.url, "--nodes", str(nodes), "--stages",
                 str(args.stages), "--seconds", str(seconds), "--change", str(args.change),
                 "--lease", str(lease_s)],
                capture_output=True, text=True, timeout=seconds + 300)
            etcd_cpu = (cpu_seconds(etcd.proc.pid) - cpu0) / (time.monotonic() - t0)
        finally:
            etcd.stop()
    out = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    if r.returncode != 0 or "error" in out:
        raise expt.ExperimentError(
            f"paio-cluster-sim --nodes {nodes}: {out.get('error', r.stderr.strip()[-500:])}")
    row = {k: float(v) for k, v in out.items() if k != "cycles_ms"}
    row["etcd_cpu_share"] = round(etcd_cpu, 3)
    row["lease_s"] = lease_s
    cycles = [float(c) for c in out.get("cycles_ms", "").split(",") if c]
    return row, cycles


def summarize(rows, cycles):
    """The summary tables: per configuration with the default lease, pooled
    cycle percentiles, each run's p99 range, and medians of the other
    figures; then the failover runs with a 1 s lease, if any."""
    lines = ["| nodes × stages | changes (incomplete) | cycle p50 / p99 / max, pooled (ms) "
             "| runs' p99 (ms) | etcd's own put p50 / p99, runs' medians (ms) "
             "| reaction p50 / p99, runs' medians (ms) "
             "| failover median (runs) (s) | etcd writes/s | simulator CPU "
             "per node (ms/s) | etcd CPU (share of a core) | goal |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    default = [r for r in rows if r.get("lease_s", 2) == 2]
    for n in sorted({int(r["nodes"]) for r in default}):
        rs = [r for r in default if int(r["nodes"]) == n]
        cs = [c for (m, c) in cycles if m == n]
        pc = expt.percentiles_of(cs, [50, 99, 100]) if cs else {50.0: float("nan"),
                                                                    99.0: float("nan"),
                                                                    100.0: float("nan")}
        fo = [r["failover_s"] for r in rs]
        med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        verdict = ""
        if n == GOAL_NODES:
            verdict = f"p99 ≤ {GOAL_CYCLE_MS:.0f} ms: " + met(pc[99.0] <= GOAL_CYCLE_MS)
        lines.append(
            f"| {n} × {int(rs[0]['stages']) // n} | {len(cs)} ({int(sum(r['incomplete'] for r in rs))}) "
            f"| {pc[50.0]:.1f} / {pc[99.0]:.1f} / {pc[100.0]:.1f} "
            f"| {min(r['cycle_p99_ms'] for r in rs):.1f}–{max(r['cycle_p99_ms'] for r in rs):.1f} "
            f"| {med('etcd_put_p50_ms'):.1f} / {med('etcd_put_p99_ms'):.1f} "
            f"| {med('reaction_p50_ms'):.1f} / {med('reaction_p99_ms'):.1f} "
            f"| {statistics.median(fo):.2f} ({', '.join(f'{x:.2f}' for x in fo)}) "
            f"| {med('etcd_writes_per_s'):.0f} | {med('cpu_ms_per_node_per_s'):.3f} "
            f"| {med('etcd_cpu_share'):.2f} | {verdict} |")
    short = [r for r in rows if r.get("lease_s", 2) == 1]
    if short:
        lines += ["", "| nodes | lease | etcd election timeout | failover median (runs) (s) "
                  "| goal |", "|---|---|---|---|---|"]
        for n in sorted({int(r["nodes"]) for r in short}):
            fo = [r["failover_s"] for r in short if int(r["nodes"]) == n]
            lines.append(f"| {n} | 1 s | {FAST_ELECTION_MS} ms "
                         f"| {statistics.median(fo):.2f} ({', '.join(f'{x:.2f}' for x in fo)}) "
                         f"| failover ≤ {GOAL_FAILOVER_S:.0f} s: "
                         f"{met(max(fo) <= GOAL_FAILOVER_S)} |")
    return "\n".join(lines) + "\n"


def met(ok):
    return "met" if ok else "NOT met"


def figure(cycles):
    """Cycle percentiles (p50, p90, p99) against the number of nodes."""
    ns = sorted({n for n, _ in cycles})
    series = []
    for p, color, dash in [(50, "blue", "solid"), (90, "orange", "solid"), (99, "red", "dashed")]:
        pts = [[n, expt.percentiles_of([c for m, c in cycles if m == n], [p])[float(p)]]
               for n in ns]
        series.append({"label": f"p{p}", "kind": "line", "color": color,
                       "dash": dash, "width": 2, "points": pts})
    return {"title": "", "columns": 1, "panel_width": 700, "panel_height": 420,
            "panels": [{"x_label": "simulated nodes (100 stages each)", "x_log": True,
                        "y_label": "global control cycle (ms)",
                        "series": series}]}


def read_cycles(path):
    """OUT/cycles.csv as `main` wrote it: (nodes, cycle ms) pairs."""
    lines = path.read_text().splitlines()[1:]
    return [(int(n), float(c)) for n, c in (line.split(",") for line in lines if line)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="10,100,1000")
    ap.add_argument("--stages", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--change", type=float, default=3.0)
    ap.add_argument("--failover-runs", type=int, default=3,
                    help="runs at 1,000 nodes measuring the failover with a 1 s lease")
    ap.add_argument("--out", type=Path, default=expt.REPO / "bench" / "results" / "cluster")
    ap.add_argument("--replot", action="store_true",
                    help="draw OUT/cycle.png again from OUT/cycles.csv, and run nothing")
    args = ap.parse_args()
    if args.replot:
        print(expt.plot(figure(read_cycles(args.out / "cycles.csv")), args.out / "cycle.png"))
        return
    if not os.access(SIM, os.X_OK):
        raise expt.ExperimentError(f"{SIM} missing: run `cargo build --release -p paio-bench`")
    nodes = [int(x) for x in args.nodes.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    header = expt.header_lines(args.out) + [
        "benchmark: cluster mode, simulated nodes against one real etcd member "
        "(bench/cluster/run.py, target/release/paio-cluster-sim)",
        f"loadavg_start: {Path('/proc/loadavg').read_text().strip()}",
        f"etcd: {subprocess.run(['etcd', '--version'], capture_output=True, text=True).stdout.splitlines()[0]}",
    ]
    expt.write_header(args.out, header)
    rows, cycles = [], []
    for rnd in range(args.rounds):
        for n in expt.rotation(nodes, rnd):
            print(f"round {rnd + 1}/{args.rounds}: {n} nodes ...", flush=True)
            row, cs = run_one(n, args, args.seconds)
            row["round"] = rnd + 1
            rows.append(row)
            cycles += [(n, c) for c in cs]
            print("  " + ", ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    for k in range(args.failover_runs):
        print(f"failover {k + 1}/{args.failover_runs}: {GOAL_NODES} nodes, lease 1 s ...",
              flush=True)
        # Only the failover counts here: a short run.
        row, _ = run_one(GOAL_NODES, args, 2 * args.change, lease_s=1,
                         election_ms=FAST_ELECTION_MS)
        row["round"] = k + 1
        rows.append(row)
        print("  " + ", ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    with open(args.out / "cycles.csv", "w") as f:
        f.write("nodes,cycle_ms\n" + "".join(f"{n},{c}\n" for n, c in cycles))
    fields = ["round", "lease_s", "nodes", "stages", "changes", "incomplete", "cycle_p50_ms",
              "cycle_p99_ms", "cycle_max_ms", "reaction_p50_ms", "reaction_p99_ms", "failover_s",
              "etcd_put_p50_ms", "etcd_put_p99_ms", "etcd_put_max_ms", "etcd_writes_per_s",
              "cpu_ms_per_node_per_s", "sim_cpu_share", "etcd_cpu_share", "startup_s"]
    expt.finish(args.out, header, rows, fields, summarize(rows, cycles),
                lambda: expt.plot(figure(cycles), args.out / "cycle.png"))


if __name__ == "__main__":
    expt.run_main(main)
