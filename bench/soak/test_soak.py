"""Tests of bench/soak/run.py's helpers (no paiod)."""

import importlib.util
import os
import struct
from pathlib import Path

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
