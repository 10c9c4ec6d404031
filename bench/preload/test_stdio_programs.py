"""Tests of stdio_programs.py: it runs the real programs with and without
the interposer (built by `make release-bins`) and writes its CSV; bad input
fails loudly."""

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LIB = HERE.parents[1] / "target/release/libpaio_preload.so"


def run(*args):
    return subprocess.run([sys.executable, str(HERE / "stdio_programs.py"), *map(str, args)],
                          capture_output=True, text=True)


def test_writes_one_row_per_program(tmp_path):
    assert LIB.is_file(), f"{LIB} is missing: run `make release-bins` first"
    out = tmp_path / "p.csv"
    r = run("--lib", LIB, "--vs", LIB, "--pairs", 1, "--mib", 1, "--out", out)
    assert r.returncode == 0, r.stderr
    lines = out.read_text().splitlines()
    assert any(line.startswith("# command: python3 bench/preload/stdio_programs.py")
               for line in lines)
    data = [line for line in lines if not line.startswith("#")]
    assert data[0] == ("program,pairs,b_cpu_ms,a_cpu_ms,a_vs_b_pct,a_vs_b_pct_min,"
                       "a_vs_b_pct_max")
    assert [row.split(",")[0] for row in data[1:]] == ["cut", "mawk", "od"]
    for row in data[1:]:
        assert float(row.split(",")[2]) > 0 and float(row.split(",")[3]) > 0


def test_a_missing_library_is_refused(tmp_path):
    r = run("--lib", tmp_path / "nope.so", "--out", tmp_path / "p.csv")
    assert r.returncode != 0
    assert "does not exist" in r.stderr


def test_counts_instructions_without_and_with_the_interposer(tmp_path):
    assert LIB.is_file(), f"{LIB} is missing: run `make release-bins` first"
    out = tmp_path / "i.csv"
    r = run("--instructions", "--lib", LIB, "--mib", 1, "--out", out)
    assert r.returncode == 0, r.stderr
    data = [line for line in out.read_text().splitlines() if not line.startswith("#")]
    assert data[0] == "program,none_instructions,b_instructions,a_instructions,b_pct,a_pct"
    for row in data[1:]:
        name, none, b, a, b_pct, pct = row.split(",")
        assert name in ("cut", "mawk", "od") and b == "" and b_pct == ""
        # The interposer runs code of its own in every process.
        assert int(a) > int(none) > 0 and float(pct) > 0
