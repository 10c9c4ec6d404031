#!/usr/bin/env python3
"""Where a critical read's time goes below the stages: block-layer tracing.

    blocktrace.py record OUT [--dev MAJ:MIN] -- COMMAND...
    blocktrace.py analyze TRACE [--critical-kib 4] [--slow-ms 5] [--per-second] [--csv FILE]

`record` traces one device's requests (the block layer's insert, issue and
complete tracepoints, through a tracefs instance of its own, so nothing else
that traces is disturbed) while COMMAND runs, and writes the events to OUT.
Needs root and tracefs at /sys/kernel/tracing.

`analyze` takes the reads of exactly `--critical-kib` (the critical job's;
the background's are larger) and splits each one's time into the scheduler
queue (insert to issue) and the device (issue to complete). For the reads
slower than `--slow-ms` it counts what the device held when the read was
issued (reads, writes, flushes and their bytes), which tells whether the
tail is made above the device (requests queued in the scheduler, which a
stage can hold back) or in it (requests the device already had, or the
device alone). Prints a summary; `--csv FILE` writes one line per critical
read.
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import threading

TRACEFS = "/sys/kernel/tracing"
EVENTS = ("block_rq_insert", "block_rq_issue", "block_rq_complete")
LINE = re.compile(
    r"\s(?P<ts>\d+\.\d+): (?P<ev>block_rq_\w+): (?P<maj>\d+),(?P<min>\d+) (?P<rwbs>\S+) "
    r"(?:(?P<bytes>\d+) )?\([^)]*\) (?P<sector>\d+) \+ (?P<n>\d+)"
)


def default_dev():
    """The disk holding the current directory (a partition's parent disk:
    requests are traced on the disk)."""
    st = os.stat(".")
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    sys_dev = f"/sys/dev/block/{dev}"
    if os.path.exists(f"{sys_dev}/partition"):
        with open(f"{sys_dev}/../dev") as f:
            dev = f.read().strip()
    return dev


def record(out, dev, cmd):
    try:
        maj, mnr = (int(x) for x in dev.split(":"))
    except ValueError:
        raise SystemExit(f"blocktrace: --dev {dev!r}: expected MAJ:MIN, e.g. 254:0 (lsblk shows them)")
    if not os.path.isdir(os.path.join(TRACEFS, "instances")):
        raise SystemExit(f"blocktrace: no tracefs at {TRACEFS}: mount it "
                         f"(mount -t tracefs nodev {TRACEFS}) and run as root")
    inst = os.path.join(TRACEFS, "instances", f"paio-blocktrace-{os.getpid()}")
    try:
        os.mkdir(inst)
    except PermissionError:
        raise SystemExit(f"blocktrace: cannot create a trace instance in {TRACEFS}: run as root")
    try:
        def put(rel, value):
            with open(os.path.join(inst, rel), "w") as f:
                f.write(value)

        put("trace_clock", "mono")
        put("buffer_size_kb", "32768")
        for ev in EVENTS:
            put(f"events/block/{ev}/filter", f"dev == {(maj << 20) | mnr}")
            put(f"events/block/{ev}/enable", "1")
        stop = threading.Event()
        count = [0]

        def drain():
            with open(os.path.join(inst, "trace_pipe"), "rb") as pipe, open(out, "wb") as dst:
                os.set_blocking(pipe.fileno(), False)
                while True:
                    try:
                        chunk = pipe.read(1 << 16)
                    except BlockingIOError:
                        chunk = None
                    if chunk:
                        dst.write(chunk)
                        count[0] += chunk.count(b"\n")
                    elif stop.is_set():
                        return
                    else:
                        stop.wait(0.05)

        reader = threading.Thread(target=drain)
        reader.start()
        put("tracing_on", "1")
        try:
            status = subprocess.call(cmd)
        finally:
            put("tracing_on", "0")
            stop.set()
            reader.join()
        with open(os.path.join(inst, "per_cpu/cpu0/stats")) as f:
            lost = sum(int(l.split()[1]) for l in f if l.startswith("overrun"))
        print(f"blocktrace: {count[0]} events in {out}; overruns on cpu0: {lost}", file=sys.stderr)
        if lost:
            print("blocktrace: events were lost; raise buffer_size_kb", file=sys.stderr)
        return status
    finally:
        for ev in EVENTS:
            try:
                with open(os.path.join(inst, f"events/block/{ev}/enable"), "w") as f:
                    f.write("0")
            except OSError:
                pass
        os.rmdir(inst)


def pct(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def kind(rwbs):
    if "F" in rwbs and not any(c in rwbs for c in "RW"):
        return "flush"
    if "W" in rwbs:
        return "write+fua" if "FUA" in rwbs else "write"
    if "R" in rwbs:
        return "read"
    return "other"


def analyze(path, critical_kib, slow_ms, csv_path, per_second=False):
    crit_sectors = critical_kib * 2
    inserted = {}
    issued = {}  # key -> (t_issue, rwbs, sectors, t_insert)
    in_flight = {}  # key -> (rwbs, sectors)
    reads = []  # (queue_ms, device_ms, total_ms, t_issue, ahead)
    flushes = collections.deque()
    moved = collections.Counter()  # (second, "read"/"write") -> bytes issued
    if not os.path.isfile(path):
        raise SystemExit(f"blocktrace: {path}: no such trace (blocktrace.py record writes one)")
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.search(line)
            if not m:
                continue
            t = float(m["ts"]) * 1000.0
            ev = m["ev"]
            if kind(m["rwbs"]) == "flush":
                # A flush has no sector (its completion says -1): flushes
                # complete in the order they were issued.
                if ev == "block_rq_issue":
                    flushes.append(("flush", t))
                    key = flushes[-1]
                elif ev == "block_rq_complete" and flushes:
                    key = flushes.popleft()
                else:
                    continue
            else:
                key = (m["sector"], m["n"], m["rwbs"].replace("M", ""))
            if ev == "block_rq_insert":
                inserted[key] = t
            elif ev == "block_rq_issue":
                ahead = {}
                for rwbs, n in in_flight.values():
                    k = kind(rwbs)
                    c, b = ahead.get(k, (0, 0))
                    ahead[k] = (c + 1, b + n * 512)
                issued[key] = (t, m["rwbs"], int(m["n"]), inserted.pop(key, None), ahead)
                k = kind(m["rwbs"])
                if k in ("read", "write", "write+fua") and not (k == "read" and int(m["n"]) == crit_sectors):
                    moved[(int(t // 1000), "read" if k == "read" else "write")] += int(m["n"]) * 512
                in_flight[key] = (m["rwbs"], int(m["n"]))
            elif ev == "block_rq_complete":
                in_flight.pop(key, None)
                got = issued.pop(key, None)
                if not got:
                    continue
                t_issue, rwbs, n, t_insert, ahead = got
                if kind(rwbs) == "read" and n == crit_sectors:
                    queue = (t_issue - t_insert) if t_insert is not None else 0.0
                    device = t - t_issue
                    reads.append((queue, device, queue + device, t_issue, ahead))
    if not reads:
        print(f"no reads of {critical_kib} KiB in {path}")
        return 1
    if csv_path:
        with open(csv_path, "w") as out:
            out.write("t_issue_ms,queue_ms,device_ms,ahead_reads,ahead_writes,ahead_flushes,ahead_bytes\n")
            for q, d, _, ti, ah in reads:
                out.write(
                    f"{ti:.3f},{q:.3f},{d:.3f},{ah.get('read', (0, 0))[0]},"
                    f"{ah.get('write', (0, 0))[0] + ah.get('write+fua', (0, 0))[0]},"
                    f"{ah.get('flush', (0, 0))[0]},{sum(b for _, b in ah.values())}\n"
                )
    print(f"{path}: {len(reads)} critical reads of {critical_kib} KiB")
    for name, i in (("scheduler queue", 0), ("device", 1), ("total", 2)):
        v = [r[i] for r in reads]
        print(f"  {name:16s} ms: p50 {pct(v, 50):.3f}  p99 {pct(v, 99):.3f}  "
              f"p99.9 {pct(v, 99.9):.3f}  max {max(v):.3f}")
    slow = [r for r in reads if r[2] > slow_ms]
    fast = [r for r in reads if r[2] <= slow_ms]
    print(f"  slower than {slow_ms} ms: {len(slow)} ({100 * len(slow) / len(reads):.2f} %); "
          f"of their time in the device: {100 * sum(r[1] for r in slow) / max(1e-9, sum(r[2] for r in slow)):.0f} %")

    def mean_ahead(group):
        out = {}
        for r in group:
            for k, (c, b) in r[4].items():
                oc, ob = out.get(k, (0, 0))
                out[k] = (oc + c, ob + b)
        n = max(1, len(group))
        return ", ".join(f"{k} {c / n:.2f} ({b / n / 1024:.0f} KiB)" for k, (c, b) in sorted(out.items())) or "nothing"

    print(f"  in the device at issue, mean per read: slow: {mean_ahead(slow)}")
    print(f"  {'':36s}others: {mean_ahead(fast)}")
    with_flush = sum(1 for r in slow if r[4].get("flush") or r[4].get("write+fua"))
    print(f"  slow reads issued while a flush or FUA write was in the device: {with_flush} of {len(slow)}")
    if per_second:
        print("  per second: other reads MiB, writes MiB issued; critical reads; of them slower than "
              f"{slow_ms} ms")
        n = collections.Counter(int(r[3] // 1000) for r in reads)
        n_slow = collections.Counter(int(r[3] // 1000) for r in slow)
        first, last = min(n), max(n)
        for sec in range(first, last + 1):
            print(f"    {sec - first:4d} {moved[(sec, 'read')] / 2**20:8.0f} {moved[(sec, 'write')] / 2**20:8.0f}"
                  f" {n[sec]:7d} {n_slow[sec]:6d}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("record")
    r.add_argument("out")
    r.add_argument("--dev", default=None, help="MAJ:MIN (default: the disk of the current directory)")
    r.add_argument("cmd", nargs=argparse.REMAINDER)
    a = sub.add_parser("analyze")
    a.add_argument("trace")
    a.add_argument("--critical-kib", type=int, default=4)
    a.add_argument("--slow-ms", type=float, default=5.0)
    a.add_argument("--csv")
    a.add_argument("--per-second", action="store_true",
                   help="also a line per second of the critical reads: the device's other traffic and the slow reads")
    args = ap.parse_args()
    if args.what == "record":
        cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        if not cmd:
            ap.error("record: give the command after --")
        return record(args.out, args.dev or default_dev(), cmd)
    return analyze(args.trace, args.critical_kib, args.slow_ms, args.csv, args.per_second)


if __name__ == "__main__":
    sys.exit(main())
