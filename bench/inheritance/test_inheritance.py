"""Tests of bench/inheritance/run.py's parsing, policies, summary and plot."""

import importlib.util
import json
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
    # Within each round: 200/50, 220/40, 180/60.
    assert s["paio-inherit"]["p999_paio_over"] == pytest.approx((4.0, 3.0, 5.5))
    assert s["paio"]["bg_of_vanilla"] == pytest.approx((0.9, 0.9, 0.9))
    assert s["paio"]["stall_paio_over"] is None
    table = run.markdown(run.summarize(rows))
    assert "| locks | paio-inherit | 3 |" in table
    assert "| 4.0x (3.0..5.5) |" in table and "| 90 % (90..90) |" in table


def test_background_share_is_paired_within_each_round():
    # The medians (1000 against 1000) would say 100 %; each round says less.
    rows = []
    for rnd, (van, inh) in enumerate([(1000, 800), (1400, 1000), (600, 500)]):
        for setup, bg in (("vanilla", van), ("paio-inherit", inh)):
            rows.append({"round": rnd, "case": "dirty", "setup": setup, "p99": 1,
                         "p999": 2, "crit_ops": 1, "bg_mib": bg, "stall_s": None})
    s = {e["setup"]: e for e in run.summarize(rows)}
    assert s["paio-inherit"]["bg_mib"] == (800, 500, 1000)
    m, lo, hi = s["paio-inherit"]["bg_of_vanilla"]
    assert (m, lo, hi) == pytest.approx((0.8, 1000 / 1400, 500 / 600))


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


def lat_row(case, setup, p99, p999, rnd):
    return {"round": rnd, "case": case, "setup": setup, "p99": p99, "p999": p999}


# Listed out of order: panels follow ALL_CASES, categories SETUPS.
LAT_ROWS = [
    lat_row("stalls", "paio", 30, 300, 0),
    lat_row("locks", "paio-inherit", 10, 50, 0),
    lat_row("locks", "vanilla", 100, 1000, 0),
    lat_row("locks", "vanilla", 300, 3000, 1),
    lat_row("locks", "vanilla", 200, 1500, 2),
    lat_row("stalls", "vanilla", 20, 200, 0),
]


def test_latency_figure_bars_and_ranges():
    fig = run.latency_figure(LAT_ROWS)
    assert fig["columns"] == 2
    locks, stalls = fig["panels"]
    assert locks["title"].startswith("case locks") and stalls["title"].startswith("case stalls")
    assert locks["y_log"] and not locks.get("x_log")
    # Setups that ran, in SETUPS order (locks had no paio run).
    assert locks["categories"] == ["vanilla", "paio-inherit"]
    assert stalls["categories"] == ["vanilla", "paio"]
    assert (locks["x_min"], locks["x_max"]) == (-0.5, 1.5)
    p99, p999 = locks["series"][:2]
    assert (p99["label"], p99["kind"], p99["color"], p99["width"]) == ("p99", "bars", "blue", 0.33)
    assert (p999["label"], p999["kind"], p999["color"]) == ("p99.9", "bars", "red")
    # Medians over rounds, p99 left of the category, p99.9 right.
    assert p99["points"] == [[-0.175, 200], [0.825, 10]]
    assert p999["points"] == [[0.175, 1500], [1.175, 50]]
    # A black range line per bar, min to max over rounds, no legend entry.
    ranges = locks["series"][2:]
    assert all(s["kind"] == "line" and s["color"] == "black" and s["label"] == ""
               for s in ranges)
    assert [s["points"] for s in ranges] == [
        [[-0.175, 100], [-0.175, 300]], [[0.175, 1000], [0.175, 3000]],
        [[0.825, 10], [0.825, 10]], [[1.175, 50], [1.175, 50]]]
    assert stalls["series"][1]["points"] == [[0.175, 200], [1.175, 300]]


def test_latency_figure_leaves_a_missing_value_out():
    rows = [lat_row("dirty", "vanilla", 100, None, 0), lat_row("dirty", "paio", 50, 90, 0)]
    [panel] = run.latency_figure(rows)["panels"]
    assert panel["series"][1]["points"] == [[0.175, None], [1.175, 90]]
    assert len(panel["series"]) == 2 + 3


def test_plot_draws_a_png_through_paio_plot(tmp_path):
    png = run.plot(tmp_path, LAT_ROWS)
    assert png == tmp_path / "latency.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    spec = json.loads((tmp_path / "latency.figure.json").read_text())
    assert spec == run.latency_figure(LAT_ROWS)
