"""Tests of bench/original/compare.py's parsing, rotation and ratios (no benchmark runs)."""

import argparse
import importlib.util
import stat
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("original_compare",
                                               Path(__file__).with_name("compare.py"))
compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare)

RESULTS = Path(__file__).resolve().parents[1] / "results"

# What the original's paio_bench prints for one run (debug lines trimmed).
PAIO_BENCH_OUT = """Operation size: 0
Starting worker thread #1 (140165592995520) ...
[2026-11-25 13:00:56] [paio:debug_explicit] NoopObject destructor {0, counter, 2000000}
Run: 1
\tIOPS (KOps/s):\t13198.778
\tThr (GiB/s):\t0.000
----------------------------------
Setup results: /tmp/paio-results/microbenchmarks-perf-results/micro-perf-results-1-0
\tIOPS (KOps/s):\t13198.778
"""

DRL_BENCH_OUT = """---------------------------
DRL object enforce (100000)
Ops:         100000\tDuration: 1.004727
Est. IOPS:   100000 Ops/s
Real IOPS:   99529.538 Ops/s
---------------------------
"""


def test_original_micro_is_the_run_block_in_mops():
    assert compare.parse_original_micro(PAIO_BENCH_OUT) == pytest.approx(13.198778)


def test_original_micro_without_a_run_block_is_an_error():
    with pytest.raises(compare.expt.ExperimentError, match="Run: 1"):
        compare.parse_original_micro("Operation size: 0\n")


def test_original_drl_is_the_enforce_phase_rate():
    assert compare.parse_original_drl(DRL_BENCH_OUT) == pytest.approx(99529.538)


def test_original_drl_at_another_rate_is_an_error():
    with pytest.raises(compare.expt.ExperimentError, match="expected 100000"):
        compare.parse_original_drl(DRL_BENCH_OUT.replace("(100000)", "(50000)"))


def test_paio_csvs_are_read_past_their_comment_header():
    micro = compare.read_paio_csv(RESULTS / "micro.csv")
    assert compare.paio_micro_mops(micro, 1, 0) == pytest.approx(86.9345)
    with pytest.raises(compare.expt.ExperimentError, match="3 threads"):
        compare.paio_micro_mops(micro, 3, 0)
    window, incl = compare.paio_drl_rates(compare.read_paio_csv(RESULTS / "drl.csv"))
    assert (window, incl) == (pytest.approx(100000.7), pytest.approx(100095.146))


def test_rounds_rotate_through_every_start():
    base = ["a", "b", "c"]
    assert [compare.rotated(base, r) for r in range(4)] == [
        ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]


def test_ratios_are_taken_within_a_round():
    rows = []
    for rnd, (o1, p1, o2, p2) in enumerate([(10, 100, 5, 200), (20, 100, 10, 190)], 1):
        rows += [dict(round=rnd, impl="original", bench="micro", threads=1, size_bytes=0,
                      unit="mops_s", value=o1),
                 dict(round=rnd, impl="paio", bench="micro", threads=1, size_bytes=0,
                      unit="mops_s", value=p1),
                 dict(round=rnd, impl="original", bench="micro", threads=2, size_bytes=0,
                      unit="mops_s", value=o2),
                 dict(round=rnd, impl="paio", bench="micro", threads=2, size_bytes=0,
                      unit="mops_s", value=p2),
                 dict(round=rnd, impl="original", bench="drl", threads=1, size_bytes=0,
                      unit="ops_s_incl_burst", value=99_500)]
    got = {(r["round"], r["name"]): r["value"] for r in compare.ratios(rows)}
    assert got[(1, "speedup_1t_0B")] == 10
    assert got[(2, "speedup_1t_0B")] == 5
    assert got[(1, "scaling_2t_paio")] == 2
    assert got[(2, "scaling_2t_original")] == 0.5
    assert got[(1, "drl_err_pct_original_ops_s_incl_burst")] == pytest.approx(-0.5)
    assert (1, "speedup_2t_0B_vs_own_channel") not in got


def _fake(path, text):
    path.write_text("#!/bin/sh\necho \"$PWD $*\" > args\ncat <<'EOF'\n" + text + "EOF\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_the_original_runs_from_its_build_directory_with_the_configured_flags(tmp_path):
    _fake(tmp_path / "paio_bench", PAIO_BENCH_OUT)
    _fake(tmp_path / "drl_bench", DRL_BENCH_OUT)
    args = argparse.Namespace(original=tmp_path, own_channel=None, no_drl=False)
    [row] = compare.measure(("original", "micro", 1, 4096), args)
    assert row["value"] == pytest.approx(13.198778)
    assert (tmp_path / "args").read_text().split() == [
        str(tmp_path), "--runs=1", "--wtime=0", "--threads=1", "--size=4096", "--ops=4000000"]
    [row] = compare.measure(("original", "drl", 1, 0), args)
    assert row["unit"] == "ops_s_incl_burst"
    assert "--enforcement_ops=1000000" in (tmp_path / "args").read_text()


def test_a_failing_benchmark_is_an_error_with_its_output(tmp_path):
    (tmp_path / "paio_bench").write_text("#!/bin/sh\necho boom\nexit 3\n")
    (tmp_path / "paio_bench").chmod(0o755)
    args = argparse.Namespace(original=tmp_path, own_channel=None, no_drl=True)
    with pytest.raises(compare.expt.ExperimentError, match="exited 3:\nboom"):
        compare.measure(("original", "micro", 1, 0), args)
