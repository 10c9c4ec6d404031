"""Tests of bench/soak/run.py's helpers (no paiod)."""

import csv
import importlib.util
import json
import os
import struct
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("soak_run", Path(__file__).with_name("run.py"))
run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run)


def test_a_frame_is_a_length_prefixed_json_document():
    f = run.frame({"type": "ctl", "id": 1})
    (n,) = struct.unpack(">I", f[:4])
    assert n == len(f) - 4 and f[4:] == b'{"type": "ctl", "id": 1}'


def test_status_of_a_missing_socket_is_none(tmp_path):
    assert run.status(tmp_path / "none.sock") is None


def test_this_process_has_memory_and_descriptors():
    rss, fds = run.proc_sample(os.getpid())
    assert rss > 0 and fds >= 3
    assert run.proc_sample(2 ** 22 + 12345) == (None, None)


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def soak_input():
    """Three seconds of samples (paiod not answering in the second) and a restart."""
    samples = [
        {"t_s": 60.0, "incarnation": 1, "paiod_rss_mb": 5.0, "paiod_fds": 14, "stages": 4,
         "writers_mib_s": 16.0},
        {"t_s": 120.0, "incarnation": 2, "paiod_rss_mb": None, "paiod_fds": None,
         "stages": None, "writers_mib_s": 15.0},
        {"t_s": 180.0, "incarnation": 2, "paiod_rss_mb": 7.0, "paiod_fds": 34, "stages": 4,
         "writers_mib_s": 17.0},
    ]
    restarts = [{"restart": 1, "t_s": 90.0, "reregistered_s": 0.06}]
    return samples, restarts


def test_figure_has_three_panels_over_minutes_with_the_restarts():
    samples, restarts = soak_input()
    fig = run.figure(samples, restarts)
    json.dumps(fig, allow_nan=False)
    assert [p["y_label"] for p in fig["panels"]] == ["paiod RSS (MB)", "paiod descriptors",
                                                     "writers (MiB/s)"]
    rss, fds, writers = fig["panels"]
    assert writers["x_label"].startswith("minutes") and rss["x_label"] == ""
    assert (rss["x_min"], rss["x_max"]) == (0.0, 3.0)
    # The values in minutes, a missing one None (a break in the line).
    assert rss["series"][-1]["points"] == [[1.0, 5.0], [2.0, None], [3.0, 7.0]]
    assert fds["series"][-1]["points"] == [[1.0, 14], [2.0, None], [3.0, 34]]
    # y: the values' range with 5 % margins; the restart spans it, light grey.
    assert (rss["y_min"], rss["y_max"]) == (pytest.approx(4.9), pytest.approx(7.1))
    line = rss["series"][0]
    assert line["color"] == "lightgrey" and line["label"] == ""
    assert line["points"] == [[1.5, rss["y_min"]], [1.5, rss["y_max"]]]
    assert writers["series"][0]["points"] == [[1.5, pytest.approx(14.9)], [1.5, pytest.approx(17.1)]]
    assert all(len(p["series"]) == 2 for p in fig["panels"])


def test_figure_of_a_run_without_values_or_restarts():
    fig = run.figure([{"t_s": 30.0, "incarnation": 1, "paiod_rss_mb": None, "paiod_fds": None,
                       "stages": None, "writers_mib_s": 3.0}], [])
    rss = fig["panels"][0]
    assert (rss["y_min"], rss["y_max"]) == (0.0, 1.0)
    assert rss["series"] == [{"label": "", "kind": "line", "color": "blue", "width": 1,
                              "points": [[0.5, None]]}]


def test_read_rows_reads_what_main_writes(tmp_path):
    samples, restarts = soak_input()
    path = tmp_path / "samples.csv"
    with open(path, "w", newline="") as f:
        f.write("# command: x\n# date_utc: y\n")
        w = csv.DictWriter(f, fieldnames=list(samples[0]))
        w.writeheader()
        w.writerows(samples)
    assert run.read_rows(path) == samples


def test_replot_draws_soak_png_from_the_csv_files(tmp_path):
    samples, restarts = soak_input()
    for name, rows in (("samples.csv", samples), ("restarts.csv", restarts)):
        with open(tmp_path / name, "w", newline="") as f:
            f.write("# command: x\n")
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    png = run.replot(tmp_path)
    assert png == tmp_path / "soak.png"
    assert png.read_bytes()[:8] == PNG_SIGNATURE
    assert json.loads((tmp_path / "soak.figure.json").read_text()) == run.figure(samples, restarts)
