"""Unit tests of run.py's pure parts: table math, goal check, CSV parsing, schedule."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

# Loaded under its own name: every experiment has a run.py, and pytest runs
# them in one process, where a plain `import run` would get the first one.
_spec = importlib.util.spec_from_file_location("taillat_run", Path(__file__).with_name("run.py"))
run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run)


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
    # nearest rank: ceil(0.99 * 4) = 4th of 1, 3, 5, 7
    assert r["p99_p99_ms"] == pytest.approx(7.0)
    many = run.summarize(rows("paio", "mixture", [10] * 200, [1.0] * 197 + [2.0, 3.0, 50.0]))[0]
    assert many["p99_max_ms"] == pytest.approx(50.0)
    assert many["p99_p99_ms"] == pytest.approx(2.0)  # 198th of 200: one second does not decide it


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
    # Default: writes limited by Algorithm 1, compaction reads by the
    # device's read rate.
    assert 'writes_only = true' in text
    assert 'read_bandwidth = "200MiB/s"' in text
    # ... in 256 KiB pieces; 0 reads whole.
    assert 'read_split = "256KiB"' in text
    import dataclasses
    text = run.paiod_config(dataclasses.replace(run.FULL_SCALE, silk_read_split_kib=0))
    assert 'read_bandwidth = "200MiB/s"' in text and "read_split" not in text
    assert "read_latency_target" not in text
    text = run.paiod_config(dataclasses.replace(run.FULL_SCALE, silk_read_latency_us=2500))
    assert 'read_bandwidth = "200MiB/s"' in text and 'read_latency_target = "2500us"' in text
    # Compaction reads through a priority object: its split instead of read_split.
    text = run.paiod_config(dataclasses.replace(run.FULL_SCALE, silk_read_busy_depth=1))
    assert ('read_priority = { busy_depth = 1, depth = 4, window = "2000us", '
            'split = "256KiB" }') in text
    assert "read_split" not in text
    text = run.paiod_config(dataclasses.replace(run.FULL_SCALE, silk_read_busy_depth=0,
                                                silk_read_split_kib=0, silk_read_window_us=500))
    assert 'read_priority = { busy_depth = 0, depth = 4, window = "500us", split = "0KiB" }' in text
    assert "write_priority" not in text
    # Flush and compaction writes through priority objects (no split).
    text = run.paiod_config(dataclasses.replace(run.FULL_SCALE, silk_write_busy_depth=1))
    assert 'write_priority = { busy_depth = 1, depth = 4, window = "0us" }' in text
    with pytest.raises(run.RunError, match="needs writes_only=1"):
        run.paiod_config(dataclasses.replace(run.FULL_SCALE, silk_write_busy_depth=1, writes_only=0))
    text = run.paiod_config(dataclasses.replace(run.FULL_SCALE, silk_read_mib=150))
    assert 'read_bandwidth = "150MiB/s"' in text
    text = run.paiod_config(dataclasses.replace(run.FULL_SCALE, silk_read_mib=-1))
    assert 'writes_only = true' in text and "read_bandwidth" not in text
    assert "read_split" not in text
    # Algorithm 1 over reads and writes together: no read budget (paiod
    # refuses one without writes_only).
    text = run.paiod_config(dataclasses.replace(run.FULL_SCALE, writes_only=0))
    assert 'writes_only = false' in text and "read_bandwidth" not in text


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


# ------------------------------------------------------------ repeated runs


def run_rows(setup, workload, run_no, kops, p99_ms):
    return [dict(r, run=run_no) for r in rows(setup, workload, kops, p99_ms)]


def test_summarize_single_run_keeps_the_old_keys_and_values():
    sc = run.Scale(num=1, write_buffer_mib=1, level_base_mib=1, target_file_mib=1, block_cache_mib=1,
                   valley_kops=5, peak_kops=20, initial_valley_s=2, peak_s=2, valley_s=1, duration_s=5)
    plain = rows("paio", "mixture", [5, 5, 20, 20, 5], [9, 1, 2, 3, 7])
    old = run.summarize(plain, sc)[0]
    assert set(old) == {"workload", "setup", "seconds", "mean_kops", "p99_min_ms", "p99_max_ms",
                        "p99_p99_ms", "p99_mean_ms", "p99_std_ms", "p99_mad_ms",
                        "p99_max_initial_ms", "p99_max_peak_ms", "p99_max_valley_ms"}
    assert old["seconds"] == 5 and old["p99_max_ms"] == pytest.approx(9.0)
    # An explicit run 1 is the same as no run column.
    assert run.summarize([dict(r, run=1) for r in plain], sc)[0] == old


def test_summarize_two_runs_gives_medians_and_the_per_run_list():
    rs = (run_rows("paio", "mixture", 1, [10, 20], [1.0, 3.0])
          + run_rows("paio", "mixture", 2, [20, 40], [2.0, 6.0]))
    s = run.summarize(rs)
    assert len(s) == 1
    r = s[0]
    assert r["runs"] == 2
    assert r["p99_max_runs_ms"] == pytest.approx([3.0, 6.0])
    assert r["p99_p99_runs_ms"] == pytest.approx([3.0, 6.0])
    assert r["p99_max_ms"] == pytest.approx(4.5)     # median of 3 and 6
    assert r["p99_min_ms"] == pytest.approx(1.5)     # median of 1 and 2
    assert r["mean_kops"] == pytest.approx(22.5)     # median of 15 and 30
    assert r["p99_mean_ms"] == pytest.approx(3.0)    # median of 2 and 4
    assert r["seconds"] == 2 and isinstance(r["seconds"], int)


def test_summarize_three_runs_gives_medians_per_statistic_and_phase():
    sc = run.Scale(num=1, write_buffer_mib=1, level_base_mib=1, target_file_mib=1, block_cache_mib=1,
                   valley_kops=5, peak_kops=20, initial_valley_s=1, peak_s=2, valley_s=1, duration_s=4)
    # seconds 1: initial, 2-3: peak, 4: valley; runs listed out of order on purpose
    rs = (run_rows("baseline", "writeheavy", 3, [5, 20, 20, 5], [4.0, 2.5, 1.0, 1.0])
          + run_rows("baseline", "writeheavy", 1, [5, 20, 20, 5], [8.0, 1.0, 2.0, 3.0])
          + run_rows("baseline", "writeheavy", 2, [4, 18, 20, 5], [2.0, 9.0, 1.0, 0.5]))
    r = run.summarize(rs, sc)[0]
    assert r["runs"] == 3
    assert r["p99_max_runs_ms"] == pytest.approx([8.0, 9.0, 4.0])   # run order 1, 2, 3
    assert r["p99_max_ms"] == pytest.approx(8.0)
    assert r["p99_max_initial_ms"] == pytest.approx(4.0)           # of 8, 2, 4
    assert r["p99_max_peak_ms"] == pytest.approx(2.5)              # of 2, 9, 2.5
    assert r["p99_max_valley_ms"] == pytest.approx(1.0)            # of 3, 0.5, 1
    assert r["p99_max_peak_runs_ms"] == pytest.approx([2.0, 9.0, 2.5])
    assert r["mean_kops"] == pytest.approx(12.5)                   # of 12.5, 11.75, 12.5
    text = run.format_table([r])
    assert "median over 3 runs" in text
    assert "| writeheavy | baseline | 8.00, 9.00, 4.00 |" in text
    assert "| writeheavy | baseline | 4 | 12.50 | " in text


def test_format_table_single_run_has_no_median_note():
    s = run.summarize(rows("baseline", "mixture", [10, 20], [1.0, 3.0]))
    text = run.format_table(s)
    assert "median" not in text and "per run" not in text


def test_goal_verdict_compares_medians_over_runs():
    base = [run_rows("baseline", "mixture", k, [10, 10], [1.0, 40.0]) for k in (1, 2, 3)]
    auto = [run_rows("autotuned", "mixture", k, [10, 10], [1.0, 8.0]) for k in (1, 2, 3)]
    # paio's run 2 is bad (30 ms: not 4x below baseline, above auto-tuned), the median (6 ms) is good
    paio = [run_rows("paio", "mixture", k, [10, 10], [1.0, p]) for k, p in ((1, 5.0), (2, 30.0), (3, 6.0))]
    rs = sum(base + auto + paio, [])
    s = run.summarize(rs)
    v = run.goal_verdict(s)["mixture"]
    assert v["p99_vs_baseline"] == pytest.approx(40.0 / 6.0)
    assert v["p99_4x"] is True and v["below_autotuned"] is True and v["met"] is True
    # The bad run alone fails the goal.
    alone = run.goal_verdict(run.summarize(base[1] + auto[1] + paio[1]))["mixture"]
    assert alone["met"] is False and alone["below_autotuned"] is False
    # With two bad runs of three the median is bad.
    paio_bad = [run_rows("paio", "mixture", k, [10, 10], [1.0, p]) for k, p in ((1, 5.0), (2, 30.0), (3, 9.0))]
    v = run.goal_verdict(run.summarize(sum(base + auto + paio_bad, [])))["mixture"]
    assert v["below_autotuned"] is False and v["met"] is False


def test_read_csv_without_run_column_is_run_1(tmp_path):
    p = tmp_path / "old.csv"
    p.write_text("time_s,setup,workload,kops,p99_us,p50_us\n1,paio,mixture,5.000,1500.0,100.0\n"
                 "2,paio,mixture,20.000,2500.0,120.0\n")
    back = run.read_csv(p)
    assert [r["run"] for r in back] == [1, 1]
    assert back[1]["p99_us"] == pytest.approx(2500.0)
    assert run.summarize(back)[0]["p99_max_ms"] == pytest.approx(2.5)
    assert "runs" not in run.summarize(back)[0]


def test_csv_has_run_column_and_roundtrips_runs(tmp_path):
    rs = run_rows("paio", "mixture", 1, [5, 20], [1.0, 2.0]) + run_rows("paio", "mixture", 2, [5, 20], [1.5, 2.5])
    run.write_csv(tmp_path / "t.csv", rs)
    assert (tmp_path / "t.csv").read_text().splitlines()[0] == "time_s,setup,workload,run,kops,p99_us,p50_us"
    assert run.check_csv(tmp_path / "t.csv") == 4
    assert [r["run"] for r in run.read_csv(tmp_path / "t.csv")] == [1, 1, 2, 2]
    # zero throughput in one run of several is caught
    run.write_csv(tmp_path / "z.csv", rs + run_rows("paio", "mixture", 3, [0, 0], [0, 0]))
    with pytest.raises(ValueError, match="zero throughput"):
        run.check_csv(tmp_path / "z.csv")


def test_parse_driver_csv_sets_the_run():
    text = "time_s,target_kops,kops,p50_us,p99_us,stall_ms\n1,5,4.9,30.5,400.0,0\n"
    assert run.parse_driver_csv(text, "paio", "mixture")[0]["run"] == 1
    assert run.parse_driver_csv(text, "paio", "mixture", 3)[0]["run"] == 3


def test_repeat_option_and_run_dirs(tmp_path):
    assert run.parse_args([]).repeat == 1
    assert run.parse_args(["--repeat", "3"]).repeat == 3
    for bad in ("0", "-1"):
        with pytest.raises(SystemExit):
            run.parse_args(["--repeat", bad])
    assert run.run_dir(tmp_path, "writeheavy", "paio") == tmp_path / "writeheavy" / "paio"
    assert run.run_dir(tmp_path, "writeheavy", "paio", 2, 3) == tmp_path / "writeheavy" / "paio" / "run2"
    assert run.run_label("writeheavy", "paio") == "writeheavy/paio"
    assert run.run_label("writeheavy", "paio", 2, 3) == "writeheavy/paio run 2/3"


def test_round_order_rotates_so_no_setup_always_runs_first():
    setups = list(run.ALL_SETUPS)
    firsts = [run.round_order(setups, k)[0] for k in range(1, len(setups) + 1)]
    assert sorted(firsts) == sorted(setups)
    for k in range(1, 6):
        assert sorted(run.round_order(setups, k)) == sorted(setups)
    assert run.round_order(setups, 1) == setups


def test_the_goal_compares_paio_with_the_better_autotuned_mode():
    rows = summary((10.0, 40.0), (9.0, 8.0), (9.6, 6.0))
    rows.append({"workload": "mixture", "setup": "autotuned_all", "mean_kops": 9.0, "p99_max_ms": 4.0})
    v = run.goal_verdict(rows)["mixture"]
    assert v["autotuned"] == "autotuned_all"
    assert v["below_autotuned"] is False  # 6 ms is below kWritesOnly's 8 but not kAllIo's 4
    assert "(autotuned_all)" in run.format_table([], run.goal_verdict(rows))
    rows[-1]["p99_max_ms"] = 9.0
    v = run.goal_verdict(rows)["mixture"]
    assert v["autotuned"] == "autotuned" and v["below_autotuned"] is True


# ------------------------------------------------------------------ plots


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def plot_input():
    """4 s of baseline and paio under a 10 s schedule: valley 2 s, then peaks of 1 s."""
    sc = run.Scale(num=1, write_buffer_mib=1, level_base_mib=1, target_file_mib=1, block_cache_mib=1,
                   valley_kops=5, peak_kops=20, initial_valley_s=2, peak_s=1, valley_s=1, duration_s=4)
    rs = (rows("paio", "mixture", [5, 6, 19, 4], [1.0, 2.0, 8.0, 1.5], p50_ms=0.5)
          + rows("baseline", "mixture", [5, 5, 10, 8], [3.0, 4.0, 30.0, 12.0]))
    return rs, sc


def test_workload_figure_has_throughput_and_latency_per_setup():
    rs, sc = plot_input()
    fig = run.workload_figure(rs, "mixture", sc)
    json.dumps(fig, allow_nan=False)
    assert fig["title"] == ("Mixture (50:50): throughput and 99th percentile latency "
                            "(200 MiB/s device)")
    # Setups in ALL_SETUPS order, whatever the rows' order.
    assert [p.get("title", "") for p in fig["panels"]] == ["RocksDB", "", "PAIO", ""]
    tput, lat = fig["panels"][2:]
    load, kops, mean_line = tput["series"]
    assert load["label"].strip() == "client load" and load["dash"] == "dashed"
    assert load["color"] == "red" and load["kind"] == "line"
    assert [p for p in load["points"] if p[0] in (0.0, 1.9, 2.0, 2.9, 3.0, 4.0)] == [
        [0.0, 5], [1.9, 5], [2.0, 20], [2.9, 20], [3.0, 5], [4.0, 20]]
    assert kops["kind"] == "steps" and kops["label"].strip() == "PAIO"
    assert kops["points"] == [[1, 5], [2, 6], [3, 19], [4, 4]]
    assert mean_line["label"].strip() == "mean 8.50" and mean_line["dash"] == "dotted"
    assert mean_line["points"] == [[0.0, 8.5], [4.0, 8.5]]
    assert (tput["y_min"], tput["y_max"]) == (0.0, pytest.approx(23.0))  # peak_kops 20 + 15 %
    p99, p50 = lat["series"]
    assert p99["points"] == [[1, 1.0], [2, 2.0], [3, 8.0], [4, 1.5]] and p99["color"] == "orange"
    assert p50["points"][0] == [1, 0.5] and p50["kind"] == "steps"
    # Latency axes: up to the largest p99 of the run (baseline's 30 ms) + 10 %, the same for all.
    assert [p["y_max"] for p in fig["panels"][1::2]] == [pytest.approx(33.0)] * 2
    assert lat["x_label"] == "Time (s)" and fig["panels"][1]["x_label"] == ""
    # Labels of one length: every panel's legend as wide, the time axes aligned.
    assert len({len(s["label"]) for p in fig["panels"] for s in p["series"]}) == 1


def test_workload_figure_zoom_and_run():
    rs, sc = plot_input()
    fig = run.workload_figure(rs, "mixture", sc, lat_max_ms=5.0, run=2)
    assert fig["title"].endswith(", run 2")
    assert [p["y_max"] for p in fig["panels"][1::2]] == [5.0, 5.0]
    # Values above the cut stay as they are (drawn at the top of the axis).
    assert fig["panels"][1]["series"][0]["points"][2] == [3, 30.0]


def test_plot_workload_draws_a_png_with_paio_plot(tmp_path):
    rs, sc = plot_input()
    png = run.plot_workload(tmp_path / "mixture.png", rs, "mixture", sc)
    assert png == tmp_path / "mixture.png"
    assert png.read_bytes()[:8] == PNG_SIGNATURE
    spec = json.loads((tmp_path / "mixture.figure.json").read_text())
    assert spec == run.workload_figure(rs, "mixture", sc)


def test_summarize_slow_splits_the_wall_time():
    head = ",".join(run.SLOW_FIELDS)
    # wall 1000: 600 reading, 100 mutex, 200 CPU, 100 other
    a = "1.5,0,1000,200,100,0,0,0,0,2,600,8,1,600"
    # wall 3000: nothing but waiting elsewhere
    b = "2.5,1,3000,0,0,0,0,0,0,0,0,0,3,0"
    s = run.summarize_slow("\n".join([head, a, b]) + "\n", top=1)
    assert s["all"] == {"gets": 2, "wall_ms": 4.0, "median_wall_us": 2000.0, "block_reads_per_get": 1.0,
                        "block_read_pct": 15.0, "db_mutex_pct": 2.5, "cpu_pct": 5.0, "other_pct": 77.5}
    assert s["slowest"]["gets"] == 1 and s["slowest"]["other_pct"] == 100.0
    assert s["slowest_at_s"] == [2.5]
    assert "the 1 slowest" in run.format_slow("mixture/paio", s)


def test_summarize_slow_refuses_another_file():
    with pytest.raises(ValueError, match="expected the header"):
        run.summarize_slow("time_s,kops\n1,2\n")
    with pytest.raises(ValueError, match="an empty file"):
        run.summarize_slow("")


def test_disk_rates_and_blkio_rows():
    a = {"reads": 100, "read_sectors": 0, "read_ms": 10, "writes": 10, "write_sectors": 0,
         "write_ms": 5, "discard_sectors": 0}
    b = {"reads": 300, "read_sectors": 2048 * 50, "read_ms": 40, "writes": 10,
         "write_sectors": 2048, "write_ms": 5, "discard_sectors": 2048 * 4}
    d = run.expt.disk_rates(a, b, 2.0)
    assert d == {"read_mibs": 25.0, "write_mibs": 0.5, "read_ms": 0.15, "write_ms": 0.0,
                 "discard_mibs": 2.0}
    lines = run.blkio_rows([(1, 30.0, 2.0, d), (2, 1.0, 0.0, None)])
    assert lines[0] == run.BLKIO_HEADER
    assert lines[1] == "1,30.0,2.0,25.0,0.5,0.150,0.000,2.0"
    assert lines[2] == "2,1.0,0.0,,,,,"
    assert all(len(ln.split(",")) == len(run.BLKIO_HEADER.split(",")) for ln in lines)


def test_disk_counters_of_a_missing_device_is_none():
    assert run.expt.disk_counters("0:0") is None


def test_paiod_refusals_are_found():
    log = ("2026-11-27T23:04:48Z  INFO paio_control::server: stage 1 registered: rocksdb\n"
           "2026-11-27T23:04:48Z  WARN paio_control::server: stage 1 refused request Some(1) (Rule): "
           "rule 3: no object named \"reads\" in channel \"compaction\"\n")
    found = run.paiod_refusals(log)
    assert len(found) == 1 and "no object named" in found[0]
    assert run.paiod_refusals(log.splitlines()[0]) == []


def test_delete_rate_goes_to_every_setup():
    import dataclasses
    assert "--delete-rate-mib" not in run.driver_args(run.FULL_SCALE, "paio", "mixture")
    scale = dataclasses.replace(run.FULL_SCALE, delete_rate_mib=100)
    for setup in run.ALL_SETUPS:
        args = run.driver_args(scale, setup, "mixture")
        i = args.index("--delete-rate-mib")
        assert args[i + 1] == "100"


def test_stall_inheritance_off_goes_to_the_paio_setup_only(tmp_path):
    import dataclasses
    for setup in run.ALL_SETUPS:
        assert "--paio-stall-critical" not in run.driver_args(run.FULL_SCALE, setup, "writeheavy")
    scale = dataclasses.replace(run.FULL_SCALE, paio_stall_critical=0)
    for setup in run.ALL_SETUPS:
        args = run.driver_args(scale, setup, "writeheavy")
        if setup == "paio":
            assert args[args.index("--paio-stall-critical") + 1] == "0"
        else:
            assert "--paio-stall-critical" not in args
    with pytest.raises(run.RunError, match="paio_stall_critical=2: expected 0 or 1"):
        run.main(["--set", "paio_stall_critical=2", "--out", str(tmp_path)])
    assert run.FULL_SCALE.paio_stall_critical == 1
