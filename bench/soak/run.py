#!/usr/bin/env python3
"""paiod soak test (issue 14): mixed load for --minutes with paiod killed
and restarted every --kill-every seconds and an abusive client running.

Load, all unmodified programs under paio (stages register with paiod):

  writers  2 x `paio run --control` of a Python writer: 4 MiB files of
           seeded random bytes in 256 KiB writes, fsync, a manifest line per
           file (its SHA-256) once the file is whole; each keeps its last 8
  reader   `paio run --control` of a Python reader that re-reads finished
           files and checks them against the manifest, continuously
  rocksdb  db_bench with the plugin (LD_PRELOAD, --fs_uri=paio,
           PAIO_ROCKSDB_SOCKET), fillrandom then readrandom with checksum
           verification, one process after another (stages come and go)
  churn    a short `paio run --control` of sh/sha256sum every 2 s
  abuse    every 5 s a client that sends 2 MiB of invalid frames and never
           reads, and 300 connections that never speak, held 20 s

paiod runs the static policy: group `w` (the writers) at --rate on channel
write. Checked, and the run fails on any miss:

  - no data lost: the reader (continuously) and a final pass (each
    writer's last 8 files) find every finished file equal to its manifest
    entry; every db_bench run succeeds (it verifies block checksums)
  - every restart re-registers the long-lived stages (the writers and the
    reader) within 5 s: the time is recorded per restart
  - enforcement holds across restarts: the writers' combined rate (bytes
    passed to write(2), /proc/<pid>/io), per second, stays within 10 % of
    --rate (stages keep their last rules while paiod is away)
  - paiod's memory and descriptors stay flat: sampled every second; the
    peak of each incarnation (between restarts) is recorded, and the last
    incarnations' peaks must be within 1.5x of the first ones'

Results: OUT/samples.csv (per second), OUT/restarts.csv, OUT/summary.md,
OUT/soak.png (--replot draws it again from OUT/samples.csv and
OUT/restarts.csv). Stdlib; plots through `paio plot`.
"""

import argparse
import csv
import datetime
import hashlib
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import expt  # noqa: E402

REL = expt.REPO / "target" / "release"
PRELOAD = expt.REPO / "integrations" / "rocksdb" / "build" / "libpaio_rocksdb_preload.so"
MIB = 1 << 20

WRITER = r'''
import hashlib, os, random, sys, time
d, name = sys.argv[1], sys.argv[2]
seq = 0
while True:
    path = os.path.join(d, f"{name}-{seq:06d}.dat")
    rng = random.Random(f"{name}-{seq}")
    h = hashlib.sha256()
    with open(path, "wb") as f:
        for _ in range(16):                      # 4 MiB per file
            chunk = rng.randbytes(256 * 1024)
            f.write(chunk)
            h.update(chunk)
            f.flush()
        os.fsync(f.fileno())
    with open(os.path.join(d, f"{name}.manifest"), "a") as m:
        m.write(f"{os.path.basename(path)} {h.hexdigest()}\n")
        m.flush()
    if seq >= 8:                                 # disk stays bounded
        os.remove(os.path.join(d, f"{name}-{seq - 8:06d}.dat"))
    seq += 1
'''

READER = r'''
import hashlib, os, sys, time
d = sys.argv[1]
checked = bad = 0
while True:
    for m in [f for f in os.listdir(d) if f.endswith(".manifest")]:
        lines = open(os.path.join(d, m)).read().splitlines()
        for line in lines[-4:]:
            name, digest = line.split()
            try:
                data = open(os.path.join(d, name), "rb").read()
            except FileNotFoundError:
                continue                                 # deleted meanwhile
            checked += 1
            if hashlib.sha256(data).hexdigest() != digest:
                bad += 1
                print(f"MISMATCH {name}", flush=True)
    print(f"checked {checked} bad {bad}", flush=True)
    time.sleep(1)
'''


def frame(obj):
    b = json.dumps(obj).encode()
    return struct.pack(">I", len(b)) + b


def status(sock):
    """paiod's status, or None when it does not answer."""
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(2)
            s.connect(str(sock))
            s.sendall(frame({"type": "ctl", "id": 1, "command": {"op": "status"}}))
            head = s.recv(4, socket.MSG_WAITALL)
            (n,) = struct.unpack(">I", head)
            buf = b""
            while len(buf) < n:
                chunk = s.recv(n - len(buf))
                if not chunk:
                    return None
                buf += chunk
            return json.loads(buf)["status"]
    except (OSError, ValueError, KeyError, struct.error):
        return None


def proc_sample(pid):
    """(rss bytes, open descriptors) of a process, or (None, None)."""
    try:
        rss = next(int(l.split()[1]) * 1024 for l in open(f"/proc/{pid}/status")
                   if l.startswith("VmRSS:"))
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        return rss, fds
    except (OSError, StopIteration):
        return None, None


class Soak:
    def __init__(self, args, work):
        self.args = args
        self.work = work
        self.sock = work / "paiod.sock"
        self.data = work / "data"
        self.data.mkdir()
        self.stop = threading.Event()
        self.failures = []
        self.procs = []
        self.paiod = None
        self.incarnation = 0
        self.lock = threading.Lock()

    def fail(self, what):
        with self.lock:
            self.failures.append(f"{time.strftime('%H:%M:%S')} {what}")
        print(f"FAIL: {what}", flush=True)

    def start_paiod(self):
        cfg = self.work / "paiod.toml"
        cfg.write_text(f'period = "100ms"\n[policy]\nkind = "static"\ngroup_by = "job"\n'
                       f'channel = "write"\n[[policy.group]]\nname = "w"\n'
                       f'rate = "{self.args.rate}MiB/s"\n')
        log = open(self.work / f"paiod-{self.incarnation}.log", "w")
        self.paiod = subprocess.Popen([str(REL / "paiod"), "--config", str(cfg), "--socket",
                                       str(self.sock), "--log", "warn"], stderr=log)
        self.incarnation += 1
        t0 = time.monotonic()
        while status(self.sock) is None:
            if time.monotonic() - t0 > 10:
                raise expt.ExperimentError("paiod did not answer within 10 s of starting")
            time.sleep(0.02)
        return t0

    def paio_run(self, name, label, argv, **kw):
        cmd = [str(REL / "paio"), "run", "--control", str(self.sock), "--name", name]
        if label:
            cmd += ["--label", label]
        return subprocess.Popen(cmd + ["--"] + argv, **kw)

    def long_lived(self):
        for i in range(2):
            self.procs.append(self.paio_run(f"writer{i}", "job=w",
                                            [sys.executable, "-c", WRITER, str(self.data),
                                             f"w{i}"], stdout=subprocess.DEVNULL))
        self.reader_out = open(self.work / "reader.log", "w")
        self.procs.append(self.paio_run("reader", "job=r",
                                        [sys.executable, "-c", READER, str(self.data)],
                                        stdout=self.reader_out))

    def rocksdb_loop(self):
        runs = 0
        while not self.stop.is_set():
            db = self.work / "db"
            env = dict(os.environ, LD_PRELOAD=str(PRELOAD), PAIO_ROCKSDB_SOCKET=str(self.sock))
            r = subprocess.run(["db_bench", "--fs_uri=paio", "--benchmarks=fillrandom,readrandom",
                                "--num=200000", "--reads=20000", "--verify_checksum=1",
                                f"--db={db}", "--write_buffer_size=1048576"],
                               env=env, capture_output=True, text=True)
            runs += 1
            if r.returncode != 0:
                self.fail(f"db_bench run {runs} exited {r.returncode}: {r.stderr[-500:]}")
            subprocess.run(["rm", "-rf", str(db)])
        self.rocksdb_runs = runs

    def churn_loop(self):
        n = 0
        while not self.stop.wait(2):
            f = self.work / "churn.bin"
            p = self.paio_run("churn", "job=c", ["sh", "-c", f"head -c 4194304 /dev/urandom > {f}"
                                                 f" && sha256sum {f} > /dev/null"])
            if p.wait() != 0:
                self.fail(f"churn process {n} exited {p.returncode}")
            n += 1

    def abuse_loop(self):
        while not self.stop.wait(5):
            try:
                s = socket.socket(socket.AF_UNIX)
                s.settimeout(0.5)
                s.connect(str(self.sock))
                try:
                    s.sendall(b"\0\0\0\1x" * (2 * MIB // 5))
                except OSError:
                    pass  # paiod stopped reading or closed: expected
                idle = []
                for _ in range(300):
                    c = socket.socket(socket.AF_UNIX)
                    try:
                        c.connect(str(self.sock))
                        idle.append(c)
                    except OSError:
                        c.close()
                self.stop.wait(20)
                for c in idle:
                    c.close()
                s.close()
            except OSError:
                pass  # paiod restarting

    def run(self):
        a = self.args
        started = time.monotonic()
        self.start_paiod()
        self.long_lived()
        threads = [threading.Thread(target=f, daemon=True)
                   for f in (self.rocksdb_loop, self.churn_loop, self.abuse_loop)]
        for t in threads:
            t.start()
        samples, restarts = [], []
        last_kill = time.monotonic()
        written_prev, t_prev = self.written(), time.monotonic()
        peaks = {}
        end = started + a.minutes * 60
        next_progress = started + 60
        while time.monotonic() < end:
            time.sleep(1)
            now = time.monotonic()
            written = self.written()
            rate = (written - written_prev) / (now - t_prev) / MIB
            written_prev, t_prev = written, now
            rss, fds = proc_sample(self.paiod.pid)
            st = status(self.sock)
            stages = len(st["stages"]) if st else None
            samples.append({"t_s": round(now - started, 1), "incarnation": self.incarnation,
                            "paiod_rss_mb": rss and round(rss / 1e6, 2), "paiod_fds": fds,
                            "stages": stages, "writers_mib_s": round(rate, 2)})
            if now >= next_progress:
                # A line a minute: how far, and what the soak watches.
                next_progress += 60
                print(f"[{(now - started) / 60:.0f}/{a.minutes:g} min] paiod rss "
                      f"{samples[-1]['paiod_rss_mb']} MB, {fds} fds, {stages} stages, "
                      f"writers {rate:.1f} MiB/s, {len(restarts)} restarts, "
                      f"{len(self.failures)} failures", flush=True)
            if rss:
                p = peaks.setdefault(self.incarnation, [0, 0])
                p[0], p[1] = max(p[0], rss), max(p[1], fds)
            if now - started > 10 and rate > a.rate * 1.10 * (1 + 2 / (now - started)):
                self.fail(f"writers at {rate:.1f} MiB/s, limit {a.rate} MiB/s (t={now - started:.0f} s)")
            for p in self.procs:
                if p.poll() is not None:
                    self.fail(f"a long-lived stage exited with {p.returncode}")
                    self.procs.remove(p)
            if now - last_kill >= a.kill_every:
                self.paiod.send_signal(signal.SIGKILL)
                self.paiod.wait()
                t0 = self.start_paiod()
                want = {f"writer{i}" for i in range(2)} | {"reader"}
                while True:
                    st = status(self.sock) or {"stages": []}
                    have = {s["name"] for s in st["stages"]}
                    if want <= have:
                        break
                    if time.monotonic() - t0 > 5:
                        self.fail(f"restart {len(restarts) + 1}: {sorted(want - have)} not "
                                  "registered within 5 s")
                        break
                    time.sleep(0.02)
                restarts.append({"restart": len(restarts) + 1,
                                 "t_s": round(t0 - started, 1),
                                 "reregistered_s": round(time.monotonic() - t0, 3)})
                last_kill = time.monotonic()
        self.stop.set()
        for t in threads:
            t.join(timeout=600)
        for p in self.procs:
            p.terminate()
            p.wait()
        self.paiod.terminate()
        self.paiod.wait()
        self.final_check()
        return samples, restarts, peaks

    def written(self):
        """Bytes the writers passed to write(2) so far (`wchar` of
        /proc/<pid>/io of each `paio run`'s child)."""
        total = 0
        for p in self.procs[:2]:
            try:
                kids = Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()
                for kid in kids:
                    for line in Path(f"/proc/{kid}/io").read_text().splitlines():
                        if line.startswith("wchar:"):
                            total += int(line.split()[1])
            except OSError:
                pass
        return total

    def final_check(self):
        """Every file a writer finished and has not deleted (its last 8)
        equals its manifest entry."""
        self.files_checked = 0
        for m in self.data.glob("*.manifest"):
            for line in m.read_text().splitlines()[-8:]:
                name, digest = line.split()
                path = self.data / name
                if not path.exists():
                    self.fail(f"{name} is missing")
                elif hashlib.sha256(path.read_bytes()).hexdigest() != digest:
                    self.fail(f"{name} differs from its manifest entry")
                else:
                    self.files_checked += 1
        text = (self.work / "reader.log").read_text()
        if "MISMATCH" in text:
            self.fail("the reader found a mismatch")
        self.reader_last = (text.strip().splitlines() or ["nothing"])[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--kill-every", type=float, default=60)
    ap.add_argument("--rate", type=int, default=16, help="writers' group rate, MiB/s")
    ap.add_argument("--out", type=Path, default=expt.REPO / "bench" / "results" / "soak")
    ap.add_argument("--replot", action="store_true",
                    help="only draw OUT/soak.png again from OUT/samples.csv and OUT/restarts.csv")
    args = ap.parse_args()
    if args.replot:
        print(replot(args.out))
        return 0
    for exe in (REL / "paio", REL / "paiod", REL / "libpaio_preload.so", PRELOAD):
        if not exe.exists():
            raise expt.ExperimentError(f"{exe} missing: run `make soak` (it builds everything)")
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    # Read before the run: the binaries are what this tree built.
    header = [f"command: {' '.join(sys.argv)}", f"date_utc: {started}",
              f"machine: {expt.machine_info(expt.REPO)}", f"paio_commit: {expt.commit_info()}"]
    with tempfile.TemporaryDirectory(prefix="paio-soak-", dir=expt.REPO / "target") as d:
        soak = Soak(args, Path(d))
        samples, restarts, peaks = soak.run()
    inc = sorted(peaks)
    first, last = inc[1:4] or inc[:1], inc[-3:]  # incarnation 1 also starts the load
    peak_rss = lambda ids: max(peaks[i][0] for i in ids)
    peak_fds = lambda ids: max(peaks[i][1] for i in ids)
    if peak_rss(last) > 1.5 * peak_rss(first) or peak_fds(last) > 1.5 * peak_fds(first) + 8:
        soak.fail(f"paiod grew: peak RSS {peak_rss(first)} -> {peak_rss(last)} bytes, "
                  f"descriptors {peak_fds(first)} -> {peak_fds(last)}")
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("samples.csv", samples), ("restarts.csv", restarts)):
        with open(args.out / name, "w", newline="") as f:
            for h in header:
                f.write(f"# {h}\n")
            if rows:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
    rereg = [r["reregistered_s"] for r in restarts]
    rates = [s["writers_mib_s"] for s in samples if s["t_s"] > 10]
    summary = ["# paiod soak", ""] + [f"- {h}" for h in header] + ["",
        f"- duration {args.minutes} min, paiod killed every {args.kill_every:g} s: "
        f"{len(restarts)} restarts",
        f"- re-registration of the writers and the reader after a restart: max "
        f"{max(rereg, default=0):.2f} s, median "
        f"{sorted(rereg)[len(rereg) // 2] if rereg else 0:.2f} s",
        f"- writers' combined rate per second after 10 s: max {max(rates, default=0):.1f} MiB/s "
        f"(limit {args.rate})",
        f"- paiod peak RSS per incarnation: first {peak_rss(first) / 1e6:.1f} MB, last "
        f"{peak_rss(last) / 1e6:.1f} MB; peak descriptors first {peak_fds(first)}, last "
        f"{peak_fds(last)}",
        f"- files checked at the end: {soak.files_checked}; reader: {soak.reader_last}; "
        f"db_bench runs: {soak.rocksdb_runs}",
        f"- failures: {len(soak.failures)}"] + [f"  - {x}" for x in soak.failures]
    (args.out / "summary.md").write_text("\n".join(summary) + "\n")
    plot(samples, restarts, args.out / "soak.png")
    print("\n".join(summary))
    return 1 if soak.failures else 0


PANELS = (("paiod_rss_mb", "paiod RSS (MB)"), ("paiod_fds", "paiod descriptors"),
          ("writers_mib_s", "writers (MiB/s)"))


def y_range(values):
    """(low, high) of a panel's y axis: the values' range with 5 % margins;
    (0, 1) without values."""
    if not values:
        return 0.0, 1.0
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.05 if hi > lo else (abs(lo) * 0.05 or 1.0)
    return lo - pad, hi + pad


def figure(samples, restarts):
    """The figure of `plot` (paio plot's format, bench/expt.py): paiod's
    RSS, its descriptors and the writers' combined rate per second over
    minutes, one panel each; a light grey vertical line at each restart."""
    t = [s["t_s"] / 60 for s in samples] + [r["t_s"] / 60 for r in restarts]
    x_min, x_max = (min(0.0, min(t)), max(t)) if t else (0.0, 1.0)
    panels = []
    for k, (key, label) in enumerate(PANELS):
        lo, hi = y_range([s[key] for s in samples if s[key] is not None])
        series = [{"label": "", "kind": "line", "color": "lightgrey", "width": 2,
                   "points": [[r["t_s"] / 60, lo], [r["t_s"] / 60, hi]]} for r in restarts]
        series.append({"label": "", "kind": "line", "color": "blue", "width": 1,
                       "points": [[s["t_s"] / 60, s[key]] for s in samples]})
        panels.append({"y_label": label, "x_min": x_min, "x_max": x_max, "y_min": lo,
                       "y_max": hi, "series": series,
                       "x_label": "minutes (grey: paiod killed and restarted)"
                       if k == len(PANELS) - 1 else ""})
    return {"title": "", "columns": 1, "panel_width": 990, "panel_height": 260,
            "panels": panels}


def plot(samples, restarts, path):
    """Draws `figure` into the PNG `path` with target/release/paio."""
    return expt.plot(figure(samples, restarts), path, REL)


def read_rows(path):
    """samples.csv or restarts.csv as `main` wrote them: its `#` lines
    skipped, numbers as floats, empty fields None."""
    with open(path, newline="") as f:
        lines = [line for line in f if not line.startswith("#")]
    return [{k: float(v) if v != "" else None for k, v in r.items()}
            for r in csv.DictReader(lines)]


def replot(out):
    """Draws OUT/soak.png again from OUT/samples.csv and OUT/restarts.csv."""
    return plot(read_rows(out / "samples.csv"), read_rows(out / "restarts.csv"),
                out / "soak.png")


if __name__ == "__main__":
    expt.run_main(main)
