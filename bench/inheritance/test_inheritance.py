"""Tests of bench/inheritance/run.py's parsing, policies and summary (no I/O)."""

import importlib.util
from pathlib import Path

import pytest

# Loaded under its own name (every experiment has a run.py).
_spec = importlib.util.spec_from_file_location("inheritance_run", Path(__file__).with_name("run.py"))
run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run)

DB_BENCH = """\
fillrandom   :      56.007 micros/op 17854 ops/sec 15.290 seconds 272999 operations;   17.3 MB/s
Microseconds per write:
Percentiles: P50: 6.68 P75: 8.97 P99: 2199.02 P99.9: 2836.20 P99.99: 2899.92
rocksdb.stall.micros COUNT : 12889842
"""


def test_db_bench_rate_percentiles_and_stall_time():
    ops, pct, stall = run.db_bench_result(DB_BENCH)
    assert ops == 17854.0
    assert pct[99.0] == 2199.02 and pct[99.9] == 2836.2
    assert stall == pytest.approx(12.889842)


def test_db_bench_without_statistics_is_an_error():
    with pytest.raises(run.DriverError):
        run.db_bench_result(DB_BENCH.replace("rocksdb.stall.micros", "rocksdb.other"))


def test_dd_statistics_line():
    err = ("1000+0 records in\n1000+0 records out\n"
           "1048576000 bytes (1.0 GB, 1000 MiB) copied, 1.2 s, 874 MB/s\n")
    assert run.dd_bytes(err) == 1048576000
    with pytest.raises(run.DriverError):
        run.dd_bytes("dd: error writing\n")


def test_byte_rates():
    assert run.byte_rate("8MiB/s") == 8 << 20
    assert run.byte_rate("1.5 GB/s") == 1_500_000_000
    for bad in ("8MiB", "fast/s", "8 ops/s"):
        with pytest.raises(ValueError):
            run.byte_rate(bad)


def test_percentiles_nearest_rank():
    p = run.percentiles_of(list(range(1, 1001)))
    assert p[50.0] == 500 and p[99.0] == 990 and p[99.9] == 999


def test_policies_carry_the_setup():
    assert "inherit = false" in run.loglock_policy(False)
    assert "inherit = true" in run.loglock_policy(True)
    assert 'threads = ["req-*"]' in run.loglock_policy(True)
    text = run.stalls_policy("8MiB/s")
    assert 'rate = "8MiB/s"' in text and "RATE" not in text


def test_rotation_moves_every_setup_to_the_front_in_turn():
    s = run.SETUPS["stalls"]
    firsts = [run.rotation(s, r)[0] for r in range(len(s))]
    assert sorted(firsts) == sorted(s)


def test_summary_ratios_against_paio_and_vanilla():
    rows = []
    for rnd, (pv, pp, pi) in enumerate([(100, 200, 50), (120, 220, 40), (90, 180, 60)]):
        for setup, p999 in (("vanilla", pv), ("paio", pp), ("paio-inherit", pi)):
            rows.append({"round": rnd, "case": "locks", "setup": setup, "p99": p999 / 2,
                         "p999": p999, "crit_ops": 10, "bg_mib": 100 if setup == "vanilla" else 90,
                         "stall_s": None})
    s = {e["setup"]: e for e in run.summarize(rows)}
    assert s["paio-inherit"]["p999"] == (50, 40, 60)
    assert s["paio-inherit"]["p999_paio_over"] == pytest.approx(200 / 50)
    assert s["paio"]["bg_of_vanilla"] == pytest.approx(0.9)
    table = run.markdown(run.summarize(rows))
    assert "| locks | paio-inherit | 3 |" in table


def test_stage_bytes_and_a_stage_that_limited_nothing(tmp_path):
    p = tmp_path / "s.json"
    p.write_text('{"channels": [{"name": "critical", "bytes": 1048576}, '
                 '{"name": "background", "bytes": 2097152}]}')
    assert run.stage_bytes(p) == {"critical_mib": 1.0, "background_mib": 2.0}
    p.write_text('{"channels": [{"name": "critical", "bytes": 5}]}')
    with pytest.raises(run.DriverError):
        run.stage_bytes(p)
    with pytest.raises(run.DriverError):
        run.stage_bytes(tmp_path / "missing.json")
