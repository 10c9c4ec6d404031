#!/usr/bin/env python3
"""sqlite3 commits with fsync for `seconds`: prints the latency of each
commit in microseconds as a JSON list (the critical `sqlite` workload of
bench/criticality/run.py)."""

import json
import os
import sqlite3
import sys
import time


def main(path, seconds):
    for suffix in ("", "-journal"):
        try:
            os.unlink(path + suffix)
        except FileNotFoundError:
            pass
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA synchronous=FULL")
    db.execute("PRAGMA journal_mode=DELETE")
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)")
    value = os.urandom(1000)
    samples = []
    end = time.monotonic() + seconds
    k = 0
    while time.monotonic() < end:
        t0 = time.perf_counter_ns()
        db.execute("BEGIN")
        db.execute("INSERT INTO t VALUES (?, ?)", (k, value))
        db.execute("COMMIT")
        samples.append((time.perf_counter_ns() - t0) / 1e3)
        k += 1
    db.close()
    json.dump(samples, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
