"""Tests of tar_cpu.py: it runs the real tar with and without the interposer
(built by `make release-bins`) and writes its CSV; bad input fails loudly."""

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LIB = ROOT / "target/release/libpaio_preload.so"


def run(*args):
    return subprocess.run([sys.executable, str(HERE / "tar_cpu.py"), *map(str, args)],
                          capture_output=True, text=True)


def test_writes_one_row_of_paired_figures(tmp_path):
    assert LIB.is_file(), f"{LIB} is missing: run `make release-bins` first"
    out = tmp_path / "tar.csv"
    r = run("--lib", LIB, "--runs", 2, "--out", out)
    assert r.returncode == 0, r.stderr
    lines = out.read_text().splitlines()
    assert any(line.startswith("# command: python3 bench/preload/tar_cpu.py") for line in lines)
    assert any(line.startswith("# paio: commit ") for line in lines)
    header, row = [line for line in lines if not line.startswith("#")]
    assert header == ("pairs,files,plain_cpu_ms,preload_cpu_ms,added_ms,added_pct,"
                      "added_pct_min,added_pct_max")
    fields = row.split(",")
    assert fields[:2] == ["2", "20000"]
    plain, preload = float(fields[2]), float(fields[3])
    assert plain > 0 and preload > 0
    mid, lo, hi = map(float, fields[5:])
    assert lo <= mid <= hi
    assert "tar cf /dev/null, 20,000 files:" in r.stderr


def test_an_empty_directory_measures_the_start_alone(tmp_path):
    assert LIB.is_file(), f"{LIB} is missing: run `make release-bins` first"
    out = tmp_path / "start.csv"
    r = run("--lib", LIB, "--runs", 3, "--empty", "--out", out)
    assert r.returncode == 0, r.stderr
    lines = out.read_text().splitlines()
    assert any(line.endswith("tar_cpu.py --runs 3 --empty") for line in lines), lines
    assert any("over an empty directory" in line for line in lines), lines
    row = [line for line in lines if not line.startswith("#")][1]
    assert row.split(",")[:2] == ["3", "0"]
    assert "tar cf /dev/null, empty directory:" in r.stderr


def test_a_missing_library_is_refused_with_how_to_build_it(tmp_path):
    r = run("--lib", tmp_path / "nope.so", "--out", tmp_path / "x.csv")
    assert r.returncode != 0
    assert "nope.so does not exist" in r.stderr
    assert "cargo build --release -p paio-preload" in r.stderr
    assert not (tmp_path / "x.csv").exists()


def test_zero_runs_are_refused(tmp_path):
    r = run("--lib", LIB, "--runs", 0, "--out", tmp_path / "x.csv")
    assert r.returncode != 0
    assert "--runs must be at least 1" in r.stderr


def test_stats_makes_the_interposed_runs_write_statistics(tmp_path):
    # tar_cpu.py fails unless every interposed run wrote its file.
    assert LIB.is_file(), f"{LIB} is missing: run `make release-bins` first"
    out = tmp_path / "start-stats.csv"
    r = run("--lib", LIB, "--runs", 2, "--empty", "--stats", "--out", out)
    assert r.returncode == 0, r.stderr
    lines = out.read_text().splitlines()
    assert any(line.endswith("tar_cpu.py --runs 2 --empty --stats") for line in lines), lines
    assert any("each writing its statistics file, PAIO_STATS" in line for line in lines), lines


def test_stats_fails_when_nothing_writes_statistics(tmp_path):
    # A library that is not the interposer loads but writes nothing.
    fake = tmp_path / "libfake.so"
    src = tmp_path / "fake.c"
    src.write_text("int paio_fake;\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(fake), str(src)], check=True)
    r = run("--lib", fake, "--runs", 2, "--empty", "--stats", "--out", tmp_path / "x.csv")
    assert r.returncode != 0
    assert "wrote 0 statistics files, expected at least 2" in r.stderr
