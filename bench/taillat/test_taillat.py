"""Unit tests of run.py's pure parts: table math, goal check, CSV parsing, schedule."""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run  # noqa: E402


def rows(setup, workload, kops, p99_ms, p50_ms=0.1):
    return [{"time_s": i + 1, "setup": setup, "workload": workload, "kops": k,
             "p99_us": p * 1000.0, "p50_us": p50_ms * 1000.0}
            for i, (k, p) in enumerate(zip(kops, p99_ms))]


def test_summarize_statistics():
    s = run.summarize(rows("baseline", "mixture", [10, 20, 30, 20], [1.0, 3.0, 5.0, 7.0]))
    assert len(s) == 1
    r = s[0]
    assert r["seconds"] == 4
    assert r["mean_kops"] == pytest.approx(20.0)
    assert r["p99_min_ms"] == pytest.approx(1.0)
    assert r["p99_max_ms"] == pytest.approx(7.0)
    assert r["p99_mean_ms"] == pytest.approx(4.0)
    # population stddev of 1,3,5,7 = sqrt(5); mean absolute deviation = 2
    assert r["p99_std_ms"] == pytest.approx(math.sqrt(5.0))
    assert r["p99_mad_ms"] == pytest.approx(2.0)


def test_summarize_ignores_latency_of_empty_seconds_but_counts_throughput():
    s = run.summarize(rows("paio", "mixture", [0, 10], [0.0, 2.0]))[0]
    assert s["mean_kops"] == pytest.approx(5.0)
    assert s["p99_min_ms"] == pytest.approx(2.0)
    assert s["p99_std_ms"] == pytest.approx(0.0)


def test_summarize_groups_and_orders():
    rs = (rows("paio", "writeheavy", [1], [1]) + rows("baseline", "writeheavy", [1], [1])
          + rows("autotuned", "mixture", [1], [1]) + rows("baseline", "mixture", [2], [2]))
    keys = [(s["workload"], s["setup"]) for s in run.summarize(rs)]
    assert keys == [("mixture", "baseline"), ("mixture", "autotuned"),
                    ("writeheavy", "baseline"), ("writeheavy", "paio")]


def summary(base, auto, paio):
    """(mean kops, max p99 ms) per setup -> summary rows."""
    out = []
    for setup, v in (("baseline", base), ("autotuned", auto), ("paio", paio)):
        if v:
            out.append({"workload": "mixture", "setup": setup, "mean_kops": v[0], "p99_max_ms": v[1]})
    return out


def test_goal_met():
    v = run.goal_verdict(summary((10.0, 20.0), (9.0, 8.0), (9.6, 5.0)))["mixture"]
    assert v["p99_vs_baseline"] == pytest.approx(4.0)
    assert v["p99_4x"] and v["below_autotuned"] and v["tput_ok"]
    assert v["tput_ratio"] == pytest.approx(0.96)
    assert v["met"] is True


@pytest.mark.parametrize("base,auto,paio,failing", [
    ((10.0, 19.0), (9.0, 8.0), (10.0, 5.0), "p99_4x"),          # only 3.8x
    ((10.0, 40.0), (9.0, 5.0), (10.0, 5.0), "below_autotuned"),  # equal to auto-tuned
    ((10.0, 40.0), (9.0, 8.0), (9.4, 5.0), "tput_ok"),           # 94 % of baseline
])
def test_goal_not_met(base, auto, paio, failing):
    v = run.goal_verdict(summary(base, auto, paio))["mixture"]
    assert v[failing] is False
    assert v["met"] is False


def test_goal_unknown_without_the_other_setups():
    v = run.goal_verdict(summary(None, None, (10.0, 5.0)))["mixture"]
    assert v["met"] is None and v["p99_4x"] is None
    assert run.goal_verdict(summary((10.0, 20.0), (9.0, 8.0), None)) == {}


def test_format_table_contains_numbers():
    s = run.summarize(rows("baseline", "mixture", [10, 20], [1.0, 3.0]) + rows("paio", "mixture", [10, 20], [0.5, 0.7]))
    text = run.format_table(s, run.goal_verdict(s))
    assert "| mixture | baseline | 2 | 15.00 | 1.00–3.00 | 3.00 |" in text
    assert "4.29x" in text  # 3.0 / 0.7


def test_target_kops_schedule():
    sc = run.Scale(num=1, write_buffer_mib=1, level_base_mib=1, target_file_mib=1, block_cache_mib=1,
                   valley_kops=5, peak_kops=20, initial_valley_s=10, peak_s=4, valley_s=1, duration_s=30)
    assert run.target_kops(sc, 0) == 5
    assert run.target_kops(sc, 9.9) == 5
    assert run.target_kops(sc, 10) == 20
    assert run.target_kops(sc, 13.9) == 20
    assert run.target_kops(sc, 14.5) == 5
    assert run.target_kops(sc, 15) == 20


def test_full_scale_phases_fit_the_duration():
    sc = run.FULL_SCALE
    cycles = (sc.duration_s - sc.initial_valley_s) / (sc.peak_s + sc.valley_s)
    assert cycles >= 5
    # time scale of the paper's 300/100/10 s phases is the same for all three
    assert sc.initial_valley_s / 300 == pytest.approx(sc.peak_s / 100)
    assert sc.valley_s / 10 == pytest.approx(sc.peak_s / 100)


def test_parse_driver_csv():
    text = "time_s,target_kops,kops,p50_us,p99_us,stall_ms\n1,5,4.9,30.5,400.0,0\n2,20,19.5,90,2500,1.5\n"
    rs = run.parse_driver_csv(text, "paio", "mixture")
    assert rs[1]["time_s"] == 2 and rs[1]["p99_us"] == 2500.0 and rs[1]["setup"] == "paio"
    with pytest.raises(ValueError):
        run.parse_driver_csv("time_s,kops\n1,2\n", "paio", "mixture")


def test_csv_roundtrip_and_check(tmp_path):
    rs = rows("baseline", "mixture", [5, 20], [1.0, 2.5])
    run.write_csv(tmp_path / "t.csv", rs)
    assert run.check_csv(tmp_path / "t.csv") == 2
    back = run.read_csv(tmp_path / "t.csv")
    assert back[1]["p99_us"] == pytest.approx(2500.0)
    run.write_csv(tmp_path / "z.csv", rows("paio", "mixture", [0, 0], [0, 0]))
    with pytest.raises(ValueError, match="zero throughput"):
        run.check_csv(tmp_path / "z.csv")


def test_paiod_config_is_the_issue_config():
    text = run.paiod_config(run.FULL_SCALE)
    assert 'kind = "silk"' in text
    assert 'kvs_bandwidth = "200MiB/s"' in text
    assert 'min_bandwidth = "10MiB/s"' in text
    assert 'period = "100ms"' in text
    assert 'writes_only = false' in text
    import dataclasses
    text = run.paiod_config(dataclasses.replace(run.FULL_SCALE, writes_only=1))
    assert 'writes_only = true' in text


def test_phase_and_per_phase_max():
    sc = run.Scale(num=1, write_buffer_mib=1, level_base_mib=1, target_file_mib=1, block_cache_mib=1,
                   valley_kops=5, peak_kops=20, initial_valley_s=2, peak_s=2, valley_s=1, duration_s=7)
    assert [run.phase_of(sc, t) for t in range(1, 8)] == [
        "initial", "initial", "peak", "peak", "valley", "peak", "peak"]
    s = run.summarize(rows("paio", "mixture", [5, 5, 20, 20, 5, 20, 20], [9, 1, 2, 3, 7, 4, 1]), sc)[0]
    assert s["p99_max_initial_ms"] == pytest.approx(9)
    assert s["p99_max_peak_ms"] == pytest.approx(4)
    assert s["p99_max_valley_ms"] == pytest.approx(7)
    assert "| mixture | paio | 9.00 | 4.00 | 7.00 |" in run.format_table([s])


def test_quantile():
    assert run.quantile([5, 1, 3, 2, 4], 0.95) == 5
    assert run.quantile([5, 1, 3, 2, 4], 0.5) == 3
    assert run.quantile([7], 0.1) == 7
