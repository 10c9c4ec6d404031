"""Unit tests for the pure parts of bench/bandwidth/run.py.

Run with `python3 -m pytest bench/bandwidth`.
"""

import importlib.util
import json
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("bw_run", Path(__file__).with_name("run.py"))
run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run)


def rows_for(setup, inst, start, values):
    """Samples at 1 s steps after `start`, as compute_table expects."""
    return [{"time_s": start + k + 1, "setup": setup, "instance": inst, "MiB_per_s": v}
            for k, v in enumerate(values)]


# ------------------------------------------------------------- fio log parsing


def test_parse_bw_log_converts_kib_to_mib_and_keeps_reads_only():
    text = "1000, 307200, 0, 0, 0\n2001, 51200, 0, 262144, 0\n2001, 999, 1, 0, 0\n\n"
    assert run.parse_bw_log(text) == [(1000, 300.0), (2001, 50.0)]


def test_parse_bw_log_accepts_six_columns():
    assert run.parse_bw_log("3000, 1024, 0, 0, 0, 0\n") == [(3000, 1.0)]


def test_parse_bw_log_rejects_garbage():
    with pytest.raises(ValueError):
        run.parse_bw_log("1000 2000\n")


def test_parse_status_stream_leaves_incomplete_object():
    a = '{"timestamp_ms": 1, "jobs": [{"read": {"io_bytes": 10}}]}\n'
    b = '{"timestamp_ms": 2, "jobs": [{"read": {"io_bytes": 20}}]}\n'
    text = a + b[:20]
    objs, pos = run.parse_status_stream(text)
    assert [o["timestamp_ms"] for o in objs] == [1]
    objs2, pos2 = run.parse_status_stream(a + b, pos)
    assert [o["timestamp_ms"] for o in objs2] == [2]
    assert run.parse_status_stream(a + b, pos2)[0] == []


def test_samples_to_rows_offsets_by_launch_time():
    rows = run.samples_to_rows("static", "I2", 12.5, [(1000, 40.0), (2000, 39.5)])
    assert [(r["time_s"], r["MiB_per_s"]) for r in rows] == [(13.5, 40.0), (14.5, 39.5)]
    assert {r["setup"] for r in rows} == {"static"} and {r["instance"] for r in rows} == {"I2"}


def test_csv_roundtrip(tmp_path):
    rows = run.samples_to_rows("paio", "I1", 0.0, [(1000, 30.25)])
    run.write_csv(tmp_path / "x.csv", rows)
    assert run.read_csv(tmp_path / "x.csv") == rows
    assert (tmp_path / "x.csv").read_text().splitlines()[0] == "time_s,setup,instance,MiB_per_s"


# ------------------------------------------------------------------ the table


def test_pct_met_excludes_first_and_last_and_uses_tolerance():
    # 30 MiB/s guarantee, 95 % tolerance -> 28.5 is met, 28.4 is not.
    vals = [1.0, 30.0, 28.5, 28.4, 31.0, 2.0]  # first and last are partial seconds
    rows = rows_for("baseline", "I1", 0.0, vals)
    runs = {"baseline": {"I1": {"guarantee": 30.0, "start_s": 0.0, "end_s": 6.0}}}
    t = run.compute_table(rows, runs, maxb=204.8)
    r = t["instances"][0]
    assert (r["intervals"], r["met"]) == (4, 3)
    assert r["pct_met"] == pytest.approx(75.0)
    assert r["mean"] == pytest.approx((30.0 + 28.5 + 28.4 + 31.0) / 4)


def test_intervals_where_demand_does_not_fit_are_not_counted():
    # MaxB 100: I1 (60) alone fits; while I2 (60) is also active, 120 > 100.
    runs = {"s": {"I1": {"guarantee": 60.0, "start_s": 0.0, "end_s": 10.0},
                  "I2": {"guarantee": 60.0, "start_s": 4.0, "end_s": 7.0}}}
    rows = rows_for("s", "I1", 0.0, [10.0] * 10) + rows_for("s", "I2", 4.0, [10.0] * 3)
    t = run.compute_table(rows, runs, maxb=100.0)
    i1 = next(r for r in t["instances"] if r["instance"] == "I1")
    # inner samples end at 2..9; the seconds ending at 5, 6 and 7 overlap I2's
    # run [4, 7] (touching at an end point is not overlapping).
    assert i1["intervals"] == 5
    assert i1["met"] == 0 and i1["pct_met"] == 0.0
    i2 = next(r for r in t["instances"] if r["instance"] == "I2")
    assert i2["intervals"] == 0 and i2["pct_met"] is None


def test_completion_and_makespan():
    runs = {"baseline": {"I1": {"guarantee": 30.0, "start_s": 0.0, "end_s": 50.0},
                         "I2": {"guarantee": 40.0, "start_s": 10.0, "end_s": 62.5}},
            "static": {"I1": {"guarantee": 30.0, "start_s": 0.0, "end_s": 120.0},
                       "I2": {"guarantee": 40.0, "start_s": 10.0, "end_s": 70.0}}}
    t = run.compute_table([], runs, maxb=204.8)
    assert t["makespan"] == {"baseline": 62.5, "static": 120.0}
    comp = {(r["setup"], r["instance"]): r["completion_s"] for r in t["instances"]}
    assert comp == {("baseline", "I1"): 50.0, ("baseline", "I2"): 52.5,
                    ("static", "I1"): 120.0, ("static", "I2"): 60.0}
    md = run.format_table(t)
    assert "| static | 120.0 | 1.92x |" in md


def test_plan_scales_everything_by_one_factor():
    maxb, insts = run.plan(0.2, 1536)
    assert maxb == pytest.approx(204.8)
    assert [i.guarantee for i in insts] == [30.0, 40.0, 60.0, 70.0]
    assert [i.epochs for i in insts] == [6, 5, 5, 4]
    starts = [i.start_s for i in insts]
    assert starts == sorted(starts) and starts[0] == 0.0 and len(set(starts)) == 4
    assert sum(i.guarantee for i in insts) <= maxb


def test_paiod_config_has_the_interface_fields():
    maxb, insts = run.plan(0.2, 512)
    cfg = run.paiod_config(maxb, insts)
    assert 'max_bandwidth = "204.8MiB/s"' in cfg
    assert 'kind = "max_min"' in cfg and 'group_by = "job"' in cfg and "calibrate = true" in cfg
    assert cfg.count("[[policy.group]]") == 4 and 'demand = "70MiB/s"' in cfg


# ---------------------------------------------------------------- the plot


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def plot_input():
    """Two setups, two instances, MaxB 100."""
    runs = {"baseline": {"I1": {"guarantee": 30.0, "start_s": 0.0, "end_s": 4.0},
                         "I2": {"guarantee": 40.0, "start_s": 1.0, "end_s": 3.5}},
            "paio": {"I1": {"guarantee": 30.0, "start_s": 0.0, "end_s": 5.0},
                     "I2": {"guarantee": 40.0, "start_s": 1.0, "end_s": 6.0}}}
    rows = (rows_for("baseline", "I1", 0.0, [60.0, 50.0, 55.0])
            + rows_for("baseline", "I2", 1.0, [45.0, 41.0])
            + rows_for("paio", "I1", 0.0, [30.0, 31.0, 29.0, 30.0])
            + rows_for("paio", "I2", 1.0, [70.0, 69.0, 71.0, 70.0, 68.0]))
    return rows[::-1], runs, 100.0  # out of order: the figure sorts by time


def test_figure_has_a_panel_per_setup_with_bandwidth_guarantees_and_maxb():
    rows, runs, maxb = plot_input()
    fig = run.figure(rows, runs, maxb)
    json.dumps(fig, allow_nan=False)
    assert [p["title"] for p in fig["panels"]] == ["baseline (makespan 4 s)", "paio (makespan 6 s)"]
    base, paio = fig["panels"]
    assert (base["y_min"], base["y_max"]) == (0.0, pytest.approx(115.0))
    assert base["x_max"] == paio["x_max"] == 6.0  # one time axis for all setups
    assert paio["x_label"] == "time (s)" and base["x_label"] == ""
    i1, g1, i2, g2, top = base["series"]
    assert i1["label"] == "I1 (30 MiB/s)" and i1["color"] == "blue" and i1["kind"] == "line"
    assert i1["points"] == [[1.0, 60.0], [2.0, 50.0], [3.0, 55.0]]
    assert i2["points"] == [[2.0, 45.0], [3.0, 41.0]] and i2["color"] == "orange"
    # The guarantee: dashed, the instance's colour, from its start to its end, no legend.
    assert g2 == {"label": "", "kind": "line", "dash": "dashed", "color": "orange", "width": 1,
                  "points": [[1.0, 40.0], [3.5, 40.0]]}
    assert g1["points"] == [[0.0, 30.0], [4.0, 30.0]] and g1["color"] == "blue"
    assert top["label"] == "MaxB 100 MiB/s" and top["dash"] == "dotted" and top["color"] == "black"
    assert top["points"] == [[0.0, 100.0], [6.0, 100.0]]
    assert paio["series"][2]["points"][-1] == [6.0, 68.0]


def test_figure_keeps_the_guarantee_of_an_instance_without_samples():
    runs = {"static": {"I3": {"guarantee": 60.0, "start_s": 2.0, "end_s": 9.0}}}
    fig = run.figure([], runs, 200.0)
    g, top = fig["panels"][0]["series"]
    assert g["points"] == [[2.0, 60.0], [9.0, 60.0]] and g["color"] == "green"
    assert top["points"] == [[0.0, 200.0], [9.0, 200.0]]


def test_plot_draws_a_png_with_paio_plot(tmp_path):
    rows, runs, maxb = plot_input()
    png = run.plot(tmp_path / "bandwidth.png", rows, runs, maxb)
    assert png == tmp_path / "bandwidth.png"
    assert png.read_bytes()[:8] == PNG_SIGNATURE
    assert json.loads((tmp_path / "bandwidth.figure.json").read_text()) == run.figure(rows, runs, maxb)
