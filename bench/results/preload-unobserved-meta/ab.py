#!/usr/bin/env python3
"""Before/after for commit 2ba8b3f (metadata calls nothing observes skip the
stage): GNU tar over bench/preload/tar_cpu.py's 20,000 small files (or an
empty directory with --empty), CPU time (user + system) of each run, three
setups in rotating order per round: no interposer, the library built before
the change (--old), and after it (--new), both with no PAIO_* variable (no
statistics file, no control plane: what `paio run -- tar ...` sets).
Prints each setup's median CPU time and, per library, the median over
rounds of its added CPU against the plain run of the same round.

    python3 ab.py --old /tmp/oldtarget/release/libpaio_preload.so \\
        --new target/release/libpaio_preload.so --rounds 200
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "preload"))
import tar_cpu  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", type=Path, required=True)
    ap.add_argument("--new", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--empty", action="store_true")
    args = ap.parse_args()
    libs = {"none": None, "old": args.old.resolve(), "new": args.new.resolve()}
    base = {k: v for k, v in os.environ.items() if not k.startswith("PAIO_") and k != "LD_PRELOAD"}
    names = list(libs)
    cpu = {k: [] for k in names}
    with tempfile.TemporaryDirectory() as tmp:
        tree = tar_cpu.make_tree(Path(tmp), args.empty)

        def one(k: str) -> float:
            env = dict(base) if libs[k] is None else dict(base, LD_PRELOAD=str(libs[k]))
            p = subprocess.Popen(["tar", "cf", "/dev/null", tree.name], cwd=tree.parent, env=env,
                                 stdout=subprocess.DEVNULL)
            _, status, usage = os.wait4(p.pid, 0)
            if os.waitstatus_to_exitcode(status) != 0:
                raise SystemExit(f"ab.py: tar failed under {k}")
            return (usage.ru_utime + usage.ru_stime) * 1000.0

        for k in names:
            one(k)
        for r in range(args.rounds):
            for k in names[r % 3:] + names[:r % 3]:
                cpu[k].append(one(k))
    what = "empty directory" if args.empty else "20,000 files"
    print(f"tar cf /dev/null, {what}, {args.rounds} rounds, setups rotating")
    for k in names:
        print(f"{k:5} CPU median {statistics.median(cpu[k]):7.3f} ms")
    for k in ("old", "new"):
        added = [a - b for a, b in zip(cpu[k], cpu["none"])]
        pct = [100 * (a - b) / b for a, b in zip(cpu[k], cpu["none"])]
        print(f"{k}: added {statistics.median(added):+.3f} ms per run, "
              f"{statistics.median(pct):+.2f} % (rounds {min(pct):+.1f} to {max(pct):+.1f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
