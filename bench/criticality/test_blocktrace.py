"""Tests of bench/criticality/blocktrace.py's analysis of block-layer traces."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "blocktrace", Path(__file__).with_name("blocktrace.py"))
blocktrace = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(blocktrace)


def ev(t_ms, event, rwbs, sector, sectors, comm="fio"):
    ts = f"{1000 + t_ms / 1000:.6f}"
    if event == "block_rq_complete":
        return f"  <idle>-0 [001] ..s1. {ts}: {event}: 254,0 {rwbs} () {sector} + {sectors} none,0,0 [0]\n"
    return (f"  {comm}-42 [001] ..... {ts}: {event}: 254,0 {rwbs} {sectors * 512} () "
            f"{sector} + {sectors} none,0,0 [{comm}]\n")


def test_a_slow_read_is_split_into_queue_and_device_with_what_the_device_held(tmp_path, capsys):
    trace = tmp_path / "t.trace"
    trace.write_text("".join([
        # A flush (its completion has no sector) issued and completed first:
        # it must not count as in the device later.
        ev(0.0, "block_rq_issue", "FF", 0, 0, "kworker"),
        ev(0.5, "block_rq_complete", "FF", 18446744073709551615, 0),
        # A background 32 KiB write in the device while the first critical
        # read is issued; the read waits 1 ms in the scheduler, 9 ms below.
        ev(1.0, "block_rq_issue", "WS", 5000, 64),
        ev(1.0, "block_rq_insert", "RS", 1000, 8),
        ev(2.0, "block_rq_issue", "RS", 1000, 8),
        ev(3.0, "block_rq_complete", "WS", 5000, 64),
        ev(11.0, "block_rq_complete", "RS", 1000, 8),
        # A fast critical read with nothing else in the device.
        ev(20.0, "block_rq_issue", "RS", 2000, 8),
        ev(20.2, "block_rq_complete", "RS", 2000, 8),
        # A background read: not a critical one.
        ev(30.0, "block_rq_issue", "RS", 9000, 64),
        ev(31.0, "block_rq_complete", "RS", 9000, 64),
    ]))
    csv = tmp_path / "reads.csv"
    assert blocktrace.analyze(str(trace), 4, 5.0, str(csv), per_second=True) == 0
    out = capsys.readouterr().out
    assert "2 critical reads of 4 KiB" in out
    assert "scheduler queue  ms: p50 0.000  p99 1.000" in out
    assert "slower than 5.0 ms: 1 (50.00 %); of their time in the device: 90 %" in out
    assert "slow: write 1.00 (32 KiB)" in out
    assert "others: nothing" in out
    lines = csv.read_text().splitlines()
    assert lines[0].startswith("t_issue_ms,queue_ms,device_ms")
    assert [l.split(",")[1:4] for l in lines[1:]] == [["1.000", "9.000", "0"], ["0.000", "0.200", "0"]]
    # One second: 32 KiB of other reads, 32 KiB of writes, 2 critical reads, 1 slow.
    assert "       0        0        0       2      1" in out


def test_a_trace_without_critical_reads_says_so(tmp_path, capsys):
    trace = tmp_path / "t.trace"
    trace.write_text(ev(0.0, "block_rq_issue", "WS", 5000, 64) + ev(1.0, "block_rq_complete", "WS", 5000, 64))
    assert blocktrace.analyze(str(trace), 4, 5.0, None) == 1
    assert "no reads of 4 KiB" in capsys.readouterr().out


def test_a_missing_trace_or_a_bad_device_is_refused_with_what_to_do(tmp_path):
    import pytest
    with pytest.raises(SystemExit, match="no such trace"):
        blocktrace.analyze(str(tmp_path / "none.trace"), 4, 5.0, None)
    with pytest.raises(SystemExit, match="expected MAJ:MIN"):
        blocktrace.record(str(tmp_path / "t.trace"), "vda", ["true"])
