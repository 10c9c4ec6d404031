"""Tests of bench/cluster/run.py's pure parts: the summary and the figure."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run  # noqa: E402


def row(nodes, p99, failover, rnd=1):
    return {"nodes": nodes, "stages": nodes * 100, "incomplete": 0, "cycle_p99_ms": p99,
            "failover_s": failover, "etcd_writes_per_s": nodes * 1.0,
            "cpu_ms_per_node_per_s": 0.5, "etcd_cpu_share": 0.4, "round": rnd,
            "reaction_p50_ms": 300.0, "reaction_p99_ms": 400.0,
            "etcd_put_p50_ms": 1.5, "etcd_put_p99_ms": p99 / 2}


def test_summary_pools_cycles_and_judges_the_goal():
    rows = [row(10, 9.0, 1.9), row(1000, 90.0, 1.8), row(1000, 99.0, 2.1, 2)]
    cycles = [(10, 5.0), (10, 9.0)] + [(1000, float(c)) for c in range(1, 101)]
    table = run.summarize(rows, cycles)
    lines = table.splitlines()
    assert lines[2].startswith("| 10 × 100 | 2 (0) | 5.0 / 9.0 / 9.0 | 9.0–9.0 | 1.5 / 4.5 "
                               "| 300.0 / 400.0 | 1.90 (1.90) |")
    assert lines[2].endswith("|  |")
    # 100 cycles 1..100: p50 = 50, p99 = 99, max = 100; one failover of
    # 2.1 s; etcd's put p99 is the median of the runs' (45 and 49.5).
    assert lines[3].startswith("| 1000 × 100 | 100 (0) | 50.0 / 99.0 / 100.0 | 90.0–99.0 "
                               "| 1.5 / 47.2 | 300.0 / 400.0 | 1.95 (1.80, 2.10) |")
    assert lines[3].endswith("p99 ≤ 100 ms: met |")
    assert len(lines) == 4


def test_summary_judges_the_cycle_and_the_short_lease_failover():
    rows = [row(1000, 120.0, 1.5)] + [dict(row(1000, 50.0, f, k), lease_s=1)
                                      for k, f in enumerate([1.2, 2.2, 1.4])]
    lines = run.summarize(rows, [(1000, 40.0), (1000, 120.0)]).splitlines()
    # The 1 s lease runs are not in the first table.
    assert lines[2].startswith("| 1000 × 100 | 2 (0) | 40.0 / 120.0 / 120.0 | 120.0–120.0 "
                               "| 1.5 / 60.0 | 300.0 / 400.0 | 1.50 (1.50) |")
    assert lines[2].endswith("p99 ≤ 100 ms: NOT met |")
    assert lines[6] == "| 1000 | 1 s | 600 ms | 1.40 (1.20, 2.20, 1.40) | failover ≤ 2 s: NOT met |"
    ok = [dict(row(1000, 50.0, 1.3), lease_s=1)]
    assert run.summarize(ok, []).splitlines()[-1].endswith("failover ≤ 2 s: met |")


def test_figure_has_one_line_per_percentile_over_nodes():
    f = run.figure([(10, 1.0), (10, 3.0), (100, 5.0), (100, 7.0)])
    s = f["panels"][0]["series"]
    assert [x["label"] for x in s] == ["p50", "p90", "p99"]
    assert s[0]["points"] == [[10, 1.0], [100, 5.0]]
    assert s[2]["points"] == [[10, 3.0], [100, 7.0]]
    assert f["panels"][0]["x_log"] is True


def test_cycles_read_back_as_written(tmp_path):
    p = tmp_path / "cycles.csv"
    p.write_text("nodes,cycle_ms\n10,1.5\n1000,99.0\n")
    assert run.read_cycles(p) == [(10, 1.5), (1000, 99.0)]
