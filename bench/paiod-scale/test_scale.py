"""Tests of bench/paiod-scale/run.py's helpers (no paiod)."""

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("paiod_scale_run",
                                               Path(__file__).with_name("run.py"))
run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run)


def test_configs_are_stages_at_a_period():
    assert run.parse_configs("200@100,10000@1000") == [(200, 100), (10000, 1000)]
    for bad in ("1000", "a@b", "0@100", "10@0"):
        with pytest.raises(run.expt.ExperimentError, match="--configs"):
            run.parse_configs(bad)


def test_percentiles_are_nearest_rank():
    v = list(range(1, 101))
    assert run.percentile(v, 50) == 50
    assert run.percentile(v, 99) == 99
    assert run.percentile(v, 100) == 100
    assert run.percentile([7.0], 99) == 7.0
    assert run.percentile([], 50) is None


def test_cpu_seconds_of_this_process():
    assert run.cpu_seconds(__import__("os").getpid()) >= 0


def test_a_stage_reports_what_it_was_told_to_create():
    s = run.Stage(3)
    s.objects["read"].append("paiod")
    st = s.stats(7)["stats"]
    read = next(c for c in st["channels"] if c["name"] == "read")
    assert [o["name"] for o in read["objects"]] == ["default", "paiod"]
    assert read["objects"][1]["bytes"] == read["bytes"] > 0
    assert run.hello(3)["info"]["labels"] == {"job": "g", "i": "3"}


def row(n, p, p99, cpu):
    return {"stages": n, "period_ms": p, "paiod_period_p50_ms": 100.0,
            "paiod_period_p99_ms": p99, "paiod_period_max_ms": p99 + 5,
            "stage_gap_p99_ms": p99 + 10, "paiod_cpu_share": cpu,
            "status_ms_median": 5.0, "status_ms_max": 9.0, "scrape_ms_median": 7.0,
            "scrape_ms_max": 8.0, "scrape_bytes": 3_000_000}


def test_the_summary_takes_medians_and_judges_the_goal():
    lines = run.summarize([row(1000, 100, 101.0, 0.15), row(1000, 100, 109.0, 0.25),
                           row(1000, 100, 102.0, 0.18), row(200, 100, 100.5, 0.05)])
    joined = "\n".join(lines)
    assert "| 1000 @ 100 ms | 100.0 / 102.0 (101–109)" in joined
    assert "0.180 (0.15–0.25)" in joined
    assert "CPU ≤ 20%: met" in joined
    assert "| 200 @ 100 ms |" in joined and joined.count("met") == 1
    lines = run.summarize([row(1000, 100, 120.0, 0.1)])
    assert "**not met**" in "\n".join(lines)
