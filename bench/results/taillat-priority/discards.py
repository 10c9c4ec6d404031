#!/usr/bin/env python3
"""Do a run's slow seconds fall on bursts of discards?

usage: discards.py RUN_DIR...   (each with driver.csv and blkio.csv with the
disk's columns, e.g. rounds-100/mixture/paio/run1)

Per run: the seconds whose Get p99 was over 2 ms, how many of them are
within one second of a second with over 150 MiB/s of discards at the disk,
how many such seconds the run had, and its three slowest seconds with the
discards at t-1, t, t+1 and the throttle's reads at t.
"""
import csv
import sys

SLOW_US = 2000.0
BURST_MIBS = 150.0


def load(run):
    drv = {int(r["time_s"]): float(r["p99_us"]) for r in csv.DictReader(open(f"{run}/driver.csv"))}
    blk = {int(r["time_s"]): r for r in csv.DictReader(open(f"{run}/blkio.csv"))}
    return drv, blk


def report(run):
    drv, blk = load(run)
    if blk and "disk_discard_mibs" not in next(iter(blk.values())):
        return f"{run}: blkio.csv has no disk columns (runs before commit 2f4e725): not analysed"
    disc = {t: float(r["disk_discard_mibs"]) for t, r in blk.items()}
    bursts = {t for t, v in disc.items() if v > BURST_MIBS}
    slow = sorted(t for t, p in drv.items() if p > SLOW_US)
    near = [t for t in slow if bursts & {t - 1, t, t + 1}]
    lines = [f"{run}: {len(slow)} seconds over {SLOW_US / 1000:g} ms, {len(near)} of them within 1 s of "
             f"one of the {len(bursts)} seconds with over {BURST_MIBS:g} MiB/s of discards"]
    for t in sorted(drv, key=lambda t: -drv[t])[:3]:
        around = ", ".join(f"{disc.get(t + o, 0):.0f}" for o in (-1, 0, 1))
        reads = float(blk[t]["read_mibs"]) if t in blk else float("nan")
        lines.append(f"  t={t}: p99 {drv[t] / 1000:.2f} ms, discards t-1,t,t+1 {around} MiB/s, "
                     f"reads {reads:.0f} MiB/s")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for run in sys.argv[1:]:
        print(report(run))
