#!/usr/bin/env python3
"""paiod against three abusive clients (issue 14), each against a fresh
paiod started with a descriptor soft limit of 1,024 (4,096 for the third):

  idle    --connections connections that never speak: paiod's resident
          memory and descriptors with them open, and one `paio status`
          timed (before the caps: 340 MB for 5,000, and 1,100 locked out
          `paio status`)
  unread  one client sending --unread-mib MiB of 5-byte invalid frames and
          never reading the replies: how much paiod read before it stopped,
          its memory growth, and whether it closed the client (before the
          outbox bound: 16 MiB took paiod from 4.4 to 568 MB)
  large   --large-stages stages each reporting --large-objects tiny objects
          (4,096: the most a stage may have): paiod's resident memory after
          their reports, and how many it closed for `max_stage_bytes`
          (before the cap each such stage made paiod keep its report, up to
          13.5 MB for 34,816 objects in a 1 MB frame)

    python3 bench/paiod-scale/abuse.py [--connections 5000] [--unread-mib 16]
        [--large-stages 1000] [--large-objects 4096] [--bin DIR] [--out FILE]

Stdlib only; prints (and with --out writes) one report with its header.
"""

import argparse
import datetime
import json
import os
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import expt  # noqa: E402

REL = expt.REPO / "target" / "release"


def rss_mb(pid):
    return next(int(l.split()[1]) for l in open(f"/proc/{pid}/status")
                if l.startswith("VmRSS")) / 1024


def start_paiod(sock, nofile=1024):
    paiod = subprocess.Popen(["bash", "-c", f'ulimit -Sn {nofile} && exec "$0" --socket {sock} '
                              "--log error", str(REL / "paiod")])
    for _ in range(500):
        if sock.exists():
            return paiod
        time.sleep(0.01)
    raise expt.ExperimentError("paiod did not create its socket within 5 s")


def unread(sock, mib, pid):
    """Sends `mib` MiB of invalid frames without reading: (bytes paiod
    took, peak RSS MB, whether paiod closed the connection)."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(sock))
    s.settimeout(0.2)
    chunk = b"\0\0\0\1x" * (64 * 1024 // 5)
    sent, peak, closed = 0, rss_mb(pid), False
    deadline = time.monotonic() + 60
    while sent < mib << 20 and time.monotonic() < deadline:
        try:
            sent += s.send(chunk)
        except socket.timeout:
            pass
        except OSError:
            closed = True
            break
        peak = max(peak, rss_mb(pid))
    s.close()
    return sent, peak, closed


def frame(msg):
    payload = json.dumps(msg, separators=(",", ":")).encode()
    return struct.pack(">I", len(payload)) + payload


def read_msg(s):
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (n,) = struct.unpack(">I", head)
    body = b""
    while len(body) < n:
        chunk = s.recv(n - len(body))
        if not chunk:
            return None
        body += chunk
    return json.loads(body)


def large(sock, stages, objects, pid):
    """Registers `stages` stages that answer their first two collects with
    `objects` tiny objects (256 per channel): (RSS MB after, stages paiod
    closed or refused, the report's bytes)."""
    noop = {"name": "default", "kind": "noop", "config": {"kind": "noop"}}
    channels = [{"name": f"c{c}", "objects": [{"name": f"o{o}", "kind": "noop"}
                                              for o in range(min(256, objects - 256 * c))]}
                for c in range((objects + 255) // 256)]
    stats = json.dumps({"stage": "large", "collected_at_ns": 1, "channels": channels},
                       separators=(",", ":"))
    conns = []
    for i in range(stages):
        s = socket.socket(socket.AF_UNIX)
        s.connect(str(sock))
        info = {"name": f"large{i}", "pid": os.getpid(), "host": "h", "labels": {},
                "classifiers": [], "channels": [{"name": "c", "objects": [noop],
                                                 "object_rules": [],
                                                 "default_object": "default"}],
                "channel_rules": [], "default_channel": None}
        s.sendall(frame({"type": "hello", "version": 1, "ppid": 1, "user": "0",
                         "info": info}))
        if (read_msg(s) or {}).get("type") != "welcome":
            raise expt.ExperimentError(f"stage {i} was not registered")
        conns.append(s)
    closed, answers = set(), {}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(closed) + sum(
            1 for n in answers.values() if n >= 2) < stages:
        for i, s in enumerate(conns):
            if i in closed or answers.get(i, 0) >= 2:
                continue
            s.settimeout(0.01)
            try:
                m = read_msg(s)
            except (socket.timeout, BlockingIOError):
                continue
            finally:
                s.settimeout(None)
            if m is None or m["type"] == "error":
                closed.add(i)
            elif m["type"] == "collect":
                payload = f'{{"type":"stats","id":{m["id"]},"stats":{stats}}}'.encode()
                s.sendall(struct.pack(">I", len(payload)) + payload)
                answers[i] = answers.get(i, 0) + 1
    time.sleep(1)
    after = rss_mb(pid)
    for s in conns:
        s.close()
    return after, len(closed), len(stats)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=5000)
    ap.add_argument("--unread-mib", type=int, default=16)
    ap.add_argument("--large-stages", type=int, default=1000)
    ap.add_argument("--large-objects", type=int, default=4096)
    ap.add_argument("--bin", type=Path, help="where paiod and paio are (target/release)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    global REL
    REL = args.bin or REL
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < args.connections + 64:
        raise expt.ExperimentError(f"the hard descriptor limit {hard} is below "
                                   f"{args.connections + 64}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with tempfile.TemporaryDirectory(prefix="paiod-idle-") as d:
        sock = Path(d) / "paiod.sock"
        paiod = start_paiod(sock)
        try:
            before = rss_mb(paiod.pid)
            conns = []
            for _ in range(args.connections):
                s = socket.socket(socket.AF_UNIX)
                s.connect(str(sock))
                conns.append(s)
            time.sleep(1)
            held = rss_mb(paiod.pid)
            fds = len(os.listdir(f"/proc/{paiod.pid}/fd"))
            t0 = time.perf_counter()
            st = subprocess.run([str(REL / "paio"), "status", "--socket", str(sock)],
                                capture_output=True, text=True)
            took = time.perf_counter() - t0
            if st.returncode != 0:
                raise expt.ExperimentError(f"paio status failed: {st.stderr}")
            line = next(l for l in st.stdout.splitlines() if l.startswith("connections:"))
        finally:
            paiod.kill()
            paiod.wait()
        sock.unlink()
        paiod = start_paiod(sock)
        try:
            start = rss_mb(paiod.pid)
            sent, peak, closed = unread(sock, args.unread_mib, paiod.pid)
        finally:
            paiod.kill()
            paiod.wait()
        sock.unlink()
        paiod = start_paiod(sock, nofile=max(4096, args.large_stages + 512))
        try:
            large_start = rss_mb(paiod.pid)
            large_rss, large_closed, large_bytes = large(sock, args.large_stages,
                                                         args.large_objects, paiod.pid)
        finally:
            paiod.kill()
            paiod.wait()
    report = [
        f"# command: {' '.join(sys.argv)}",
        f"# date_utc: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%M:%SZ}",
        f"# machine: {expt.machine_info(expt.REPO)}",
        f"# paio_commit: {expt.commit_info()}",
        f"idle connections opened: {args.connections}",
        f"paiod RSS: {before:.1f} MB at start, {held:.1f} MB with them open",
        f"paiod descriptors: {fds}",
        f"paio status: {took * 1e3:.0f} ms, {line}",
        f"unread client: {args.unread_mib} MiB of 5-byte invalid frames offered, "
        f"{sent} bytes taken by paiod, RSS {start:.1f} -> peak {peak:.1f} MB, "
        f"connection closed by paiod: {'yes' if closed else 'no'}",
        f"large stages: {args.large_stages} stages reporting {args.large_objects} objects "
        f"each ({large_bytes} bytes of JSON), RSS {large_start:.1f} -> {large_rss:.1f} MB "
        f"after two reports each, {large_closed} of them refused or closed by paiod",
    ]
    print("\n".join(report))
    if args.out:
        args.out.write_text("\n".join(report) + "\n")
    return 0


if __name__ == "__main__":
    expt.run_main(main)
