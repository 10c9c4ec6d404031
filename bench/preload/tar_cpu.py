#!/usr/bin/env python3
"""The interposer's cost on a whole metadata-heavy program (issue 13): GNU
tar archiving 20,000 small files (100 B to 2.4 KiB, 20 directories) to
/dev/null, with no limit at all (LD_PRELOAD alone: the interposer's embedded
pass-through default; with nothing observing the counts, its metadata calls
skip the stage), against the same tar without it.

CPU time (user + system) of each tar process, from its own resource usage
(wait4). Runs come in pairs, one tar of each kind back to back, the order
alternating from pair to pair; the added CPU is computed per pair, so drift
between pairs cancels. Reports the median over pairs of the added share and
its extremes, with each side's median CPU time, and writes a CSV with the
command, date, machine and commit.

    python3 bench/preload/tar_cpu.py --lib target/release/libpaio_preload.so --runs 30

With --empty, tar archives an empty directory instead: what remains is the
library's cost at each process start and exit (loading, the stage, the
board), reported in ms added per process (bench/results/preload-start.csv).
With --stats, each run under the interposer also writes its statistics file
(PAIO_STATS), as every process under `paio run --stats` or `--summary` does:
then every metadata call is counted (bench/results/preload-tar-stats.csv).
"""

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DIRS, PER_DIR = 20, 1000


def make_tree(base: Path, empty: bool) -> Path:
    """20,000 files of 100 B to 2.4 KiB under base/files, written once (none
    with `empty`)."""
    tree = base / "files"
    tree.mkdir()
    for d in range(0 if empty else DIRS):
        sub = tree / f"d{d}"
        sub.mkdir(parents=True)
        for i in range(PER_DIR):
            (sub / f"f{i}").write_bytes(os.urandom(100 + (i * 37) % 2300))
    return tree


def tar_cpu_ms(tar: str, tree: Path, env: dict) -> float:
    """CPU ms (user + system) of one `tar cf /dev/null TREE`; raises on failure."""
    p = subprocess.Popen([tar, "cf", "/dev/null", tree.name], cwd=tree.parent, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    if p.returncode != 0:
        raise SystemExit(f"tar_cpu: `tar cf /dev/null` exited {p.returncode}: {err.strip()}")
    return (usage.ru_utime + usage.ru_stime) * 1000.0


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def results_header(benchmark: str, command: str) -> str:
    """The lines that head a results CSV: what was measured, the command,
    date, machine and commit (bench/common.sh's results_header, in Python)."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    return (f"# benchmark: {benchmark}\n"
            f"# command: {command}\n"
            f"# date_utc: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n"
            f"# host: {platform.node()}\n"
            f"# cpu: {cpu_model()}; cores: {os.cpu_count()}\n"
            f"# kernel: {platform.release()}\n"
            f"# paio: commit {commit}\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", type=Path, required=True, help="libpaio_preload.so")
    ap.add_argument("--runs", type=int, default=30, help="pairs of tar runs (default 30)")
    ap.add_argument("--empty", action="store_true",
                    help="an empty directory: the library's start and exit alone")
    ap.add_argument("--stats", action="store_true",
                    help="the interposed tar writes its statistics file (PAIO_STATS)")
    ap.add_argument("--out", type=Path, help="CSV to write (default "
                    "bench/results/preload-tar.csv, with --empty preload-start.csv; "
                    "with --stats, -stats before .csv)")
    args = ap.parse_args()
    tar = shutil.which("tar")
    if tar is None:
        raise SystemExit("tar_cpu: GNU tar is not installed (apt-get install tar)")
    if not args.lib.is_file():
        raise SystemExit(f"tar_cpu: {args.lib} does not exist; build it with "
                         "`cargo build --release -p paio-preload`")
    if args.runs < 1:
        raise SystemExit("tar_cpu: --runs must be at least 1")
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("PAIO_")}
    base_env.pop("LD_PRELOAD", None)
    pre_env = dict(base_env, LD_PRELOAD=str(args.lib.resolve()))
    with tempfile.TemporaryDirectory(prefix="paio-tar-") as tmp:
        if args.stats:
            pre_env["PAIO_STATS"] = str(Path(tmp) / "stats.%p.json")
        tree = make_tree(Path(tmp), args.empty)
        # Warm the page cache and the dentry cache for both kinds.
        tar_cpu_ms(tar, tree, base_env)
        tar_cpu_ms(tar, tree, pre_env)
        plain, preload, added, added_ms = [], [], [], []
        for i in range(args.runs):
            order = ("plain", "preload") if i % 2 == 0 else ("preload", "plain")
            got = {}
            for kind in order:
                got[kind] = tar_cpu_ms(tar, tree, base_env if kind == "plain" else pre_env)
            plain.append(got["plain"])
            preload.append(got["preload"])
            added.append(100.0 * (got["preload"] / got["plain"] - 1.0))
            added_ms.append(got["preload"] - got["plain"])
            if (i + 1) % 10 == 0:
                print(f"tar_cpu: {i + 1}/{args.runs} pairs", file=sys.stderr)
        if args.stats:
            written = len(list(Path(tmp).glob("stats.*.json")))
            if written < args.runs:
                raise SystemExit(f"tar_cpu: --stats: the interposed runs wrote {written} "
                                 f"statistics files, expected at least {args.runs}; is "
                                 f"{args.lib} the interposer?")
    med, med_ms = statistics.median(added), statistics.median(added_ms)
    files = 0 if args.empty else DIRS * PER_DIR
    row = (f"{args.runs},{files},{statistics.median(plain):.3f},"
           f"{statistics.median(preload):.3f},{med_ms:.3f},{med:.2f},{min(added):.2f},"
           f"{max(added):.2f}")
    out = args.out or ROOT / "bench/results" / (
        ("preload-start" if args.empty else "preload-tar")
        + ("-stats" if args.stats else "") + ".csv")
    what = ("an empty directory (the library's start and exit)" if args.empty else
            "20,000 small files (100 B-2.4 KiB, page-cached)")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        results_header(
            f"CPU time (user + system) of `tar cf /dev/null` over {what}, "
            "without and with LD_PRELOAD=libpaio_preload.so "
            "(no policy: the interposer's pass-through default"
            f"{'; each writing its statistics file, PAIO_STATS' if args.stats else ''})",
            f"python3 bench/preload/tar_cpu.py --runs {args.runs}"
            f"{' --empty' if args.empty else ''}{' --stats' if args.stats else ''}")
        + "# note: pairs of runs, one of each kind back to back, order alternating; "
        "added_ms and added_pct are medians over pairs of (with - without) and "
        "(with / without - 1), the latter with its extremes; "
        "cpu_ms the median over runs of each kind\n"
        "pairs,files,plain_cpu_ms,preload_cpu_ms,added_ms,added_pct,added_pct_min,added_pct_max\n"
        f"{row}\n")
    label = "empty directory" if args.empty else "20,000 files"
    print(f"tar cf /dev/null, {label}: {statistics.median(plain):.2f} ms CPU without, "
          f"{statistics.median(preload):.2f} ms with the interposer: +{med_ms:.3f} ms, "
          f"+{med:.2f} % (pairs {min(added):.2f} to {max(added):.2f} %)", file=sys.stderr)
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
