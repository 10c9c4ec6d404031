"""Tests of bench/criticality/run.py's parsing, summary and plots."""

import importlib.util
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

# Loaded under its own name: every experiment has a run.py, and pytest runs
# them in one process, where a plain `import run` would get the first one.
_spec = importlib.util.spec_from_file_location("criticality_run", Path(__file__).with_name("run.py"))
run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run)


def test_fio_clat_percentiles_in_microseconds():
    doc = {"jobs": [{"read": {"iops": 1234.5, "clat_ns": {"percentile": {
        "50.000000": 54000, "99.000000": 85000, "99.900000": 171000}}}}]}
    pct, ops = run.fio_clat_us(doc)
    assert pct == {50.0: 54.0, 99.0: 85.0, 99.9: 171.0}
    assert ops == 1234.5


def test_fio_without_percentiles_is_an_error():
    with pytest.raises(run.DriverError):
        run.fio_clat_us({"jobs": [{"read": {"iops": 1, "clat_ns": {}}}]})


def test_fio_bandwidth_sums_reads_and_writes_of_every_job():
    doc = {"jobs": [{"read": {"bw": 1024}, "write": {"bw": 0}},
                    {"read": {"bw": 0}, "write": {"bw": 2048}}]}
    assert run.fio_bandwidth_mib(doc) == 3.0


DB_BENCH = """\
readrandom   :     295.653 micros/op 3382 ops/sec 3.000 seconds 10147 operations;    1.3 MB/s (10147 of 10147 found)
Microseconds per read:
Count: 10147 Average: 295.6 StdDev: 200.1
Min: 50  Median: 298.2  Max: 9000
Percentiles: P50: 298.20 P75: 410.00 P99: 756.00 P99.9: 1223.00 P99.99: 4000.00
"""


def test_db_bench_percentiles_and_rate():
    pct, ops = run.db_bench_percentiles(DB_BENCH)
    assert pct[50.0] == 298.2 and pct[99.0] == 756.0 and pct[99.9] == 1223.0
    assert pct[99.99] == 4000.0
    assert ops == 3382.0


def test_db_bench_without_percentiles_is_an_error():
    with pytest.raises(run.DriverError):
        run.db_bench_percentiles("readrandom : 1 micros/op 5 ops/sec\n")


def test_percentiles_of_samples_nearest_rank():
    pct = run.percentiles_of(list(range(1, 1001)), points=(50, 99, 99.9))
    assert pct == {50.0: 500, 99.0: 990, 99.9: 999}


def test_rotation_moves_the_first_setup_each_round():
    s = ("a", "b", "c")
    assert run.rotation(s, 0) == ["a", "b", "c"]
    assert run.rotation(s, 1) == ["b", "c", "a"]
    assert run.rotation(s, 3) == ["a", "b", "c"]


def row(setup, p999, bg, alone, rnd=0):
    return {"round": rnd, "setup": setup, "workload": "fio", "p50_us": 1, "p99_us": 2,
            "p999_us": p999, "crit_ops": 10, "bg_mib": bg, "bg_alone_mib": alone}


def test_summary_medians_extremes_and_ratios_against_vanilla():
    rows = [row("vanilla", 3000, 1000, 1000, 0), row("vanilla", 6000, 1200, 1100, 1),
            row("vanilla", 9000, 800, 900, 2),
            row("paio", 1000, 900, 1000, 0), row("paio", 500, 700, 1000, 1),
            row("paio", 2000, 950, 1050, 2)]
    s = {e["setup"]: e for e in run.summarize(rows)}
    assert s["vanilla"]["p999_us"] == (6000, 3000, 9000)
    assert s["paio"]["p999_us"] == (1000, 500, 2000)
    # Within each round: 3000/1000, 6000/500, 9000/2000; 900/1000,
    # 700/1200, 950/800; 1000/1000, 1000/1100, 1050/900.
    assert s["paio"]["p999_vs_vanilla"] == pytest.approx((4.5, 3.0, 12.0))
    assert s["paio"]["bg_vs_vanilla"] == pytest.approx((0.9, 700 / 1200, 950 / 800))
    assert s["paio"]["bg_alone_vs_vanilla"] == pytest.approx((1.0, 1000 / 1100, 1050 / 900))
    table = run.markdown(run.summarize(rows))
    assert "| fio | paio | 3 | 1 (1..1) | 2 (2..2) | 1000 (500..2000) | 4.5x (3.0..12.0) |" in table
    assert "| 90 % (58..119) |" in table


def test_paiod_config_is_a_criticality_policy_with_the_target():
    text = run.paiod_config("1ms", 99.9, (4, 3))
    assert 'kind = "criticality"' in text
    assert 'latency_target = "1ms"' in text
    assert "percentile = 99.9" in text
    assert "max_depth = 4\nbusy_depth = 3\n" in text and "decrease" not in text
    assert "decrease = 0.75\n" in run.paiod_config("1ms", 99.9, (4, 3), 0.75)
    assert "min_depth = 3\n" in run.paiod_config("1ms", 99.9, (4, 3), min_depth=3)


def test_the_target_keeps_the_background_policys_depths():
    shipped = (run.HERE / "background.toml").read_text()
    assert run.priority_depths(shipped, "background.toml") == (4, 3)
    two = ('[[channel]]\nname = "a"\n[[channel.object]]\nname = "p"\nkind = "priority"\n'
           '[[channel]]\nname = "b"\n[[channel.object]]\nname = "q"\nkind = "priority"\n'
           'depth = 8\n[[channel.object]]\nname = "d"\nkind = "drl"\nrate = "1MiB/s"\n')
    assert run.priority_depths(two, "two.toml") == (8, 1)
    with pytest.raises(run.DriverError, match="none.toml: no priority object"):
        run.priority_depths('[[channel]]\nname = "a"\n', "none.toml")


def test_paio_target_is_a_setup():
    a = run.parse_args(["--setups", "vanilla,paio-target", "--target", "2ms"])
    assert a.setups == ["vanilla", "paio-target"] and a.target == "2ms"


def test_quick_smoke_runs_every_paio_setup():
    a = run.parse_args(["--quick"])
    assert a.setups == ["vanilla", "paio", "paio-target"] and a.rounds == 1
    assert a.target == "300us"


def test_stages_that_left_counts_paiod_log_lines():
    log = ("2026-11-24T21:20:34Z  INFO paio_control::server: stage 4 (background pid 2600) left\n"
           "2026-11-24T21:20:34Z  INFO paio_control::server: stage 2 (preload pid 2589) left\n"
           "2026-11-24T21:20:35Z  INFO paiod: shutting down\n")
    assert run.stages_that_left(log) == 2
    assert run.stages_that_left("2026 INFO paiod: shutting down\n") == 0


def cdf_row(setup, workload, p999, pct, rnd=0):
    return {"round": rnd, "setup": setup, "workload": workload, "p999_us": p999,
            "percentiles": pct}


# As in runs.json: the percentiles' keys are strings there.
CDF_ROWS = [
    cdf_row("vanilla", "fio", 300, {"50.0": 100, "99.9": 300, "99.0": 200}, 0),
    cdf_row("vanilla", "fio", 900, {"50.0": 110, "99.9": 900, "99.0": 500}, 1),
    cdf_row("vanilla", "fio", 600, {"50.0": 105, "99.9": 600, "99.0": 400}, 2),
    cdf_row("paio", "fio", 80, {50.0: 40, 99.0: 60, 99.9: 80}),
    cdf_row("paio", "sqlite", 9000, {"10.0": 1000, "5.0": 900, "99.9": 9000}),
]


def test_latency_cdf_figure_has_a_panel_per_workload_and_the_median_round():
    fig = run.latency_cdf_figure(CDF_ROWS)
    assert fig["columns"] == 2
    assert [p["title"] for p in fig["panels"]] == [
        "critical fio: latency CDF (median round)", "critical sqlite: latency CDF (median round)"]
    fio, sqlite = fig["panels"]
    assert fio["x_log"] and not fio.get("y_log")
    assert (fio["y_min"], fio["y_max"]) == (0, 100)
    lines = [s for s in fio["series"] if s["kind"] == "line"]
    # Setups in ALL_SETUPS order, each its own colour.
    assert [(s["label"], s["color"]) for s in lines] == [("vanilla", "blue"), ("paio", "purple")]
    # vanilla: round 2 (p99.9 600, the median of 300, 600, 900); points
    # [latency, percentile] in percentile order.
    assert lines[0]["points"] == [[105, 50.0], [400, 99.0], [600, 99.9]]
    assert lines[1]["points"] == [[40, 50.0], [60, 99.0], [80, 99.9]]
    # The dots at the same points, without a legend entry.
    dots = [s for s in fio["series"] if s["kind"] == "points"]
    assert [(s["label"], s["color"], s["points"]) for s in dots] == [
        ("", "blue", lines[0]["points"]), ("", "purple", lines[1]["points"])]
    # Percentile order is numeric, not the strings' ("10.0" < "5.0").
    assert sqlite["series"][0]["points"] == [[900, 5.0], [1000, 10.0], [9000, 99.9]]


def test_background_figure_draws_a_line_per_setup_from_the_fio_logs(tmp_path):
    # fio bandwidth logs: msec, KiB/s, ...; one file per job.
    (tmp_path / "r0-paio-fio_bw.1.log").write_text("1000, 1024, 0, 0\n2000, 2048, 0, 0\n")
    (tmp_path / "r0-paio-fio_bw.2.log").write_text("1000, 512, 1, 0\n2000, 512, 1, 0\n")
    (tmp_path / "r0-vanilla-fio_bw.1.log").write_text("1999, 3072, 0, 0\n")
    (tmp_path / "r1-static-fio_bw.1.log").write_text("1000, 1024, 0, 0\n")
    per_s = run.background_per_second(tmp_path)
    assert per_s == {"vanilla": {1: 3.0}, "paio": {1: 1.5, 2: 2.5}}
    fig = run.background_figure(per_s)
    [panel] = fig["panels"]
    assert panel["y_label"] == "background MiB/s (fio)" and panel["x_label"] == "s"
    assert [(s["label"], s["kind"], s["color"], s["points"]) for s in panel["series"]] == [
        ("vanilla", "line", "blue", [[1, 3.0]]),
        ("paio", "line", "purple", [[1, 1.5], [2, 2.5]])]


def test_plot_draws_pngs_through_paio_plot(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "r0-vanilla-fio_bw.1.log").write_text("1000, 1024, 0, 0\n2000, 900, 0, 0\n")
    written = run.plot(tmp_path, CDF_ROWS)
    assert written == [tmp_path / "latency-cdf.png", tmp_path / "background-throughput.png"]
    for png in written:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    spec = json.loads((tmp_path / "latency-cdf.figure.json").read_text())
    assert spec == run.latency_cdf_figure(CDF_ROWS)
    # Without fio logs, no background plot.
    (tmp_path / "raw" / "r0-vanilla-fio_bw.1.log").unlink()
    assert run.plot(tmp_path, CDF_ROWS) == [tmp_path / "latency-cdf.png"]


def test_stop_lets_a_wrapper_end_its_command(tmp_path):
    # Like `paio run`, the wrapper passes SIGTERM on; SIGKILL would have
    # left its command running.
    pid_file = tmp_path / "child.pid"
    wrapper = subprocess.Popen(
        ["sh", "-c", f'sleep 60 & c=$!; echo $c > {pid_file}; '
         'trap "kill $c; wait $c; exit 143" TERM; wait $c'])
    while not pid_file.exists() or not pid_file.read_text().strip():
        time.sleep(0.01)
    child = int(pid_file.read_text())
    run.expt.stop(wrapper)
    assert wrapper.returncode == 143
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)


def test_stop_kills_what_ignores_sigterm():
    p = subprocess.Popen(["sh", "-c", 'trap "" TERM; sleep 60 & wait $!; sleep 60'])
    time.sleep(0.2)
    t0 = time.monotonic()
    run.expt.stop(p, timeout=0.3)
    assert p.returncode == -signal.SIGKILL
    assert time.monotonic() - t0 < 5


def test_rotate_runs_each_setup_once_per_round_in_rotated_order(tmp_path):
    out = subprocess.run(
        ["bash", str(run.HERE / "rotate.sh"), str(tmp_path / "o"), "2", "fio",
         "a=--setups vanilla", "b=--setups paio-target --target 3ms"],
        env={**os.environ, "DRY": "1", "BIN": "/bin"}, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [ln.split("--out ")[1].rsplit("/", 1)[1] for ln in lines[:-1]] == \
        ["r0-a", "r0-b", "r1-b", "r1-a"]
    assert "--setups paio-target --target 3ms --no-plot" in lines[1]
    assert "--workloads fio --bin-dir /bin" in lines[0] and lines[-1] == "ALLDONE"
    assert not (tmp_path / "o").exists(), "a dry run makes nothing"


def test_rotate_refuses_a_setup_without_its_arguments(tmp_path):
    out = subprocess.run(["bash", str(run.HERE / "rotate.sh"), str(tmp_path), "1", "fio", "a"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "expected NAME=ARGS, got 'a'" in out.stderr
    out = subprocess.run(["bash", str(run.HERE / "rotate.sh"), str(tmp_path)],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "usage:" in out.stderr


@pytest.mark.parametrize("notrunc, size", [(False, 1 << 20), (True, 3 << 20)])
def test_dd_writer_truncates_unless_asked_to_overwrite_in_place(tmp_path, notrunc, size):
    target = tmp_path / "bg-dd.dat"
    target.write_bytes(b"x" * (3 << 20))
    subprocess.run(run.dd_command(target, 1, notrunc), check=True)
    assert target.stat().st_size == size
    assert target.read_bytes()[: 1 << 20] == bytes(1 << 20)


def test_background_is_measured_over_the_critical_jobs_seconds_only(tmp_path):
    # Two jobs, 1 s samples; the critical job ran from 2 s to 5 s of the
    # background's run: the leads (400 MiB/s) are left out.
    for job, during in ((1, 10 * 1024), (2, 30 * 1024)):
        samples = [(1000, 400 * 1024), (2010, 400 * 1024), (3020, during), (4030, during),
                   (5040, during), (6050, 400 * 1024), (7060, 400 * 1024)]
        (tmp_path / f"r0-paio-fio_bw.{job}.log").write_text(
            "".join(f"{t}, {kib}, 0, 0, 0\n" for t, kib in samples))
    assert run.expt.fio_mib_between(tmp_path, "r0-paio-fio", 2, 5) == 40.0
    assert run.expt.fio_mib_between(tmp_path, "r0-other", 2, 5) is None


def test_a_job_reading_and_writing_counts_both_directions(tmp_path):
    (tmp_path / "r0-mixed_bw.1.log").write_text(
        "3000, 10240, 0, 0, 0\n3000, 20480, 1, 0, 0\n4000, 10240, 0, 0, 0\n4000, 20480, 1, 0, 0\n")
    assert run.expt.fio_mib_between(tmp_path, "r0-mixed", 2, 5) == 30.0
