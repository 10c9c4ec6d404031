#!/usr/bin/env python3
"""The interposer's cost on whole programs that move their bytes through
stdio a byte or a line at a time: `cut -c1-5` (getc_unlocked and
putc_unlocked, inlined), `mawk '{ print $2 }'` (fwrite and putc) and
`od -c` (printf-style output), over a generated page-cached text file,
output to /dev/null.

CPU time (user + system) of each program process, from its own resource
usage (wait4), under library A (`--lib`) against library B (`--vs LIB`, or
no interposer at all without it). Runs come in pairs, one of each back to
back, the order alternating from pair to pair; the ratio A/B is computed per
pair, so drift between pairs cancels. Reports, per program, the median over
pairs of A/B - 1 and its extremes, with each side's median CPU time, and
writes a CSV with the command, date, machine and commit.

    python3 bench/preload/stdio_programs.py --lib target/release/libpaio_preload.so \\
        --vs /tmp/old/target/release/libpaio_preload.so --pairs 10

With --instructions, each program runs once per side under valgrind's
callgrind over a 2 MiB input instead (od: its first 100,000 bytes per MiB),
and the CSV holds the instructions
each side executed: exact and repeatable where CPU time on a shared VM is
not (the program's own count without any interposer is given too).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tar_cpu import results_header  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OD_BYTES = 5 * 1024 * 1024


def programs(text: Path) -> dict:
    return {
        "cut": ["cut", "-c1-5", str(text)],
        "mawk": ["mawk", "{ print $2 }", str(text)],
        "od": ["od", "-c", "-N", str(OD_BYTES), str(text)],
    }


def cpu_ms(argv: list, env: dict) -> float:
    """CPU ms (user + system) of one run of `argv`; raises on failure."""
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    if code != 0:
        raise SystemExit(f"stdio_programs: `{' '.join(argv)}` exited {code}: {err.strip()}")
    return (usage.ru_utime + usage.ru_stime) * 1000.0


def instructions(argv: list, env: dict, tmp: Path) -> int:
    """Instructions executed by one run of `argv` (callgrind, whole process)."""
    out = tmp / "callgrind.out"
    r = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv],
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit(f"stdio_programs: callgrind of `{' '.join(argv)}` exited "
                         f"{r.returncode}: {r.stderr.strip()[-500:]}")
    for line in out.read_text().splitlines():
        if line.startswith("summary:") or line.startswith("totals:"):
            return int(line.split()[1])
    raise SystemExit(f"stdio_programs: no instruction total in {out}")


def make_text(path: Path, mib: int) -> None:
    """About `mib` MiB of numbered lines ("N 7N abcdefghij")."""
    with path.open("w") as f:
        i, size = 0, 0
        while size < mib * 1024 * 1024:
            chunk = "".join(f"{n} {n * 7} abcdefghij\n" for n in range(i, i + 10000))
            f.write(chunk)
            size += len(chunk)
            i += 10000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", type=Path, required=True, help="libpaio_preload.so (A)")
    ap.add_argument("--vs", type=Path, help="another libpaio_preload.so (B; default: none)")
    ap.add_argument("--pairs", type=int, default=10, help="pairs of runs per program (default 10)")
    ap.add_argument("--mib", type=int, help="input size in MiB (default 50; with "
                    "--instructions, 2)")
    ap.add_argument("--instructions", action="store_true",
                    help="count instructions with callgrind instead (2 MiB input)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/preload-stdio-programs.csv",
                    help="CSV to write (default bench/results/preload-stdio-programs.csv)")
    args = ap.parse_args()
    if args.mib is None:
        args.mib = 2 if args.instructions else 50
    if args.instructions:
        return count_instructions(args)
    for lib in [args.lib] + ([args.vs] if args.vs else []):
        if not lib.is_file():
            raise SystemExit(f"stdio_programs: {lib} does not exist; build it with "
                             "`cargo build --release -p paio-preload`")
    if args.pairs < 1 or args.mib < 1:
        raise SystemExit("stdio_programs: --pairs and --mib must be at least 1")
    for tool in ("cut", "mawk", "od"):
        if shutil.which(tool) is None:
            raise SystemExit(f"stdio_programs: `{tool}` is not installed")
    base = {k: v for k, v in os.environ.items() if not k.startswith("PAIO_")}
    base.pop("LD_PRELOAD", None)
    env_a = dict(base, LD_PRELOAD=str(args.lib.resolve()))
    env_b = dict(base, LD_PRELOAD=str(args.vs.resolve())) if args.vs else base
    rows = []
    with tempfile.TemporaryDirectory(prefix="paio-stdio-") as tmp:
        text = Path(tmp) / "text"
        make_text(text, args.mib)
        for name, argv in programs(text).items():
            cpu_ms(argv, env_a)  # warm the page cache and both sides
            cpu_ms(argv, env_b)
            a, b, ratio = [], [], []
            for i in range(args.pairs):
                order = ("a", "b") if i % 2 == 0 else ("b", "a")
                got = {k: cpu_ms(argv, env_a if k == "a" else env_b) for k in order}
                a.append(got["a"])
                b.append(got["b"])
                ratio.append(100.0 * (got["a"] / got["b"] - 1.0))
            med = statistics.median(ratio)
            rows.append(f"{name},{args.pairs},{statistics.median(b):.1f},"
                        f"{statistics.median(a):.1f},{med:.2f},{min(ratio):.2f},{max(ratio):.2f}")
            print(f"{name}: {statistics.median(b):.1f} ms CPU under B, "
                  f"{statistics.median(a):.1f} ms under A: {med:+.2f} % "
                  f"(pairs {min(ratio):+.2f} to {max(ratio):+.2f} %)", file=sys.stderr)
    b_name = str(args.vs) if args.vs else "no interposer"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        results_header(
            "CPU time (user + system) of programs moving bytes through stdio a byte or a "
            f"line at a time, over {args.mib} MiB of page-cached text (od: its first "
            f"{OD_BYTES} bytes), output to /dev/null, under A = LD_PRELOAD={args.lib} "
            f"against B = {b_name} (no policy: the interposer's pass-through default)",
            f"python3 bench/preload/stdio_programs.py --pairs {args.pairs} --mib {args.mib}"
            f"{' --vs B' if args.vs else ''}")
        + "# note: pairs of runs, one under each side back to back, order alternating; "
        "a_vs_b_pct is the median over pairs of (A / B - 1), with its extremes; "
        "cpu_ms the median over runs of each side\n"
        "program,pairs,b_cpu_ms,a_cpu_ms,a_vs_b_pct,a_vs_b_pct_min,a_vs_b_pct_max\n"
        + "".join(r + "\n" for r in rows))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def count_instructions(args) -> int:
    """The --instructions mode: one callgrind run per program and side."""
    for lib in [args.lib] + ([args.vs] if args.vs else []):
        if not lib.is_file():
            raise SystemExit(f"stdio_programs: {lib} does not exist; build it with "
                             "`cargo build --release -p paio-preload`")
    if shutil.which("valgrind") is None:
        raise SystemExit("stdio_programs: --instructions needs valgrind (apt-get install valgrind)")
    base = {k: v for k, v in os.environ.items() if not k.startswith("PAIO_")}
    base.pop("LD_PRELOAD", None)
    sides = [("none", base), ("a", dict(base, LD_PRELOAD=str(args.lib.resolve())))]
    if args.vs:
        sides.insert(1, ("b", dict(base, LD_PRELOAD=str(args.vs.resolve()))))
    rows = []
    with tempfile.TemporaryDirectory(prefix="paio-stdio-") as tmp:
        text = Path(tmp) / "text"
        make_text(text, args.mib)
        od_bytes = args.mib * 100_000
        for name, argv in programs(text).items():
            argv = argv[:2] + ["-N", str(od_bytes), str(text)] if name == "od" else argv
            got = {side: instructions(argv, env, Path(tmp)) for side, env in sides}
            pct = {k: 100.0 * (v / got["none"] - 1.0) for k, v in got.items()}
            rows.append(f"{name},{got['none']},{got.get('b', '')},{got['a']},"
                        + (f"{pct['b']:.2f}" if "b" in pct else "") + f",{pct['a']:.2f}")
            print(f"{name}: {got['none']:,} instructions without an interposer, "
                  + (f"{got['b']:,} under B ({pct['b']:+.2f} %), " if "b" in got else "")
                  + f"{got['a']:,} under A ({pct['a']:+.2f} %)", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        results_header(
            "instructions (valgrind callgrind, whole process, one run each) of programs "
            f"moving bytes through stdio a byte or a line at a time over {args.mib} MiB of "
            f"text (od: its first {args.mib * 100_000} bytes), output to /dev/null, without "
            f"an interposer, under B = {args.vs or '(none given)'} and under A = {args.lib}",
            f"python3 bench/preload/stdio_programs.py --instructions --mib {args.mib}"
            f"{' --vs B' if args.vs else ''}")
        + "# note: b_pct and a_pct are each side's instructions over the program's own "
        "without an interposer, minus 1\n"
        "program,none_instructions,b_instructions,a_instructions,b_pct,a_pct\n"
        + "".join(r + "\n" for r in rows))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
