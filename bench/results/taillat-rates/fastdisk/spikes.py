"""A run's worst seconds next to what the disk did in them, and its slow
Gets by how close the throttle was to its limit in their second.

    python3 spikes.py RUN_DIR DISK_LOG.gz THROTTLE_MIBS [TOP]

RUN_DIR is a taillat run's <workload>/<setup>/ (driver.cmd, driver.csv,
slow_gets.csv if recorded); DISK_LOG.gz holds lines "<unix time> <the 17
fields of /sys/block/vda/stat>" sampled every 0.5 s (taken beside the runs,
before run.py recorded the disk itself in blkio.csv). A driver second t
covers (t-1, t] after the driver's start, placed by driver.csv's last
write (the driver writes it right after its last second), within ~0.1 s.
"""
import collections
import csv
import gzip
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import expt  # noqa: E402  (bench/expt.py: the disk's counters and rates)


def main():
    run, log, limit = sys.argv[1], sys.argv[2], float(sys.argv[3])
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 6
    rows = list(csv.DictReader(open(os.path.join(run, "driver.csv"))))
    t0 = os.path.getmtime(os.path.join(run, "driver.csv")) - float(rows[-1]["time_s"])
    samples = []
    with gzip.open(log, "rt") as f:
        for line in f:
            at, stat = line.split(maxsplit=1)
            samples.append((float(at), expt.parse_disk_stat(stat)))

    def disk(t):
        """The disk over driver second t: read ms per read, read MiB/s, discard MiB/s."""
        xs = [s for s in samples if t0 + t - 1 <= s[0] <= t0 + t]
        if len(xs) < 2:
            return None
        (ta, a), (tb, b) = xs[0], xs[-1]
        d = expt.disk_rates(a, b, tb - ta)
        return d["read_ms"], d["read_mibs"], d["discard_mibs"]

    print(f"{run}: the {top} seconds with the highest p99")
    for r in sorted(sorted(rows, key=lambda r: -float(r["p99_us"]))[:top], key=lambda r: int(r["time_s"])):
        d = disk(int(r["time_s"]))
        where = ("disk not sampled" if d is None else
                 f"disk: {d[0]:.2f} ms per read, reads {d[1]:.1f} MiB/s ({100 * d[1] / limit:.0f} % of the "
                 f"throttle), discards {d[2]:.0f} MiB/s")
        print(f"  t={r['time_s']:>3} p99 {float(r['p99_us']) / 1e3:.2f} ms, Get p99 "
              f"{float(r['read_p99_us']) / 1e3:.2f} ms, L0 {r['l0_files']}, compaction reads "
              f"{r['compact_read_mibs']} MiB/s | {where}")
    slow = collections.Counter()
    path = os.path.join(run, "slow_gets.csv")
    if os.path.exists(path):
        for r in csv.DictReader(open(path)):
            slow[int(float(r["at_s"])) + 1] += 1
    bins = collections.defaultdict(lambda: [0, 0, []])
    for r in rows:
        d = disk(int(r["time_s"]))
        if d is None:
            continue
        u = d[1] / limit
        b = ">= 97 %" if u >= 0.97 else "90-97 %" if u >= 0.9 else "75-90 %" if u >= 0.75 else "< 75 %"
        bins[b][0] += 1
        bins[b][1] += slow[int(r["time_s"])]
        bins[b][2].append(float(r["read_p99_us"]) / 1e3)
    print("  seconds by disk reads as a share of the throttle: seconds, slow Gets, Get p99 median and max (ms)")
    for b in ("< 75 %", "75-90 %", "90-97 %", ">= 97 %"):
        if b in bins:
            n, s, p = bins[b]
            p.sort()
            print(f"    {b:>8}: {n:3} s, {s:5} slow Gets ({s / n:.1f}/s), {p[len(p) // 2]:.2f}, {p[-1]:.2f}")


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`
    main()
