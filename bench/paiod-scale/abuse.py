#!/usr/bin/env python3
"""paiod against two abusive clients (issue 14), each against a fresh
paiod started with a descriptor soft limit of 1,024:

  idle    --connections connections that never speak: paiod's resident
          memory and descriptors with them open, and one `paio status`
          timed (before the caps: 340 MB for 5,000, and 1,100 locked out
          `paio status`)
  unread  one client sending --unread-mib MiB of 5-byte invalid frames and
          never reading the replies: how much paiod read before it stopped,
          its memory growth, and whether it closed the client (before the
          outbox bound: 16 MiB took paiod from 4.4 to 568 MB)

    python3 bench/paiod-scale/abuse.py [--connections 5000] [--unread-mib 16] [--out FILE]

Stdlib only; prints (and with --out writes) one report with its header.
"""

import argparse
import datetime
import os
import resource
import socket
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


def start_paiod(sock):
    paiod = subprocess.Popen(["bash", "-c", f'ulimit -Sn 1024 && exec "$0" --socket {sock} '
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=5000)
    ap.add_argument("--unread-mib", type=int, default=16)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
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
    ]
    print("\n".join(report))
    if args.out:
        args.out.write_text("\n".join(report) + "\n")
    return 0


if __name__ == "__main__":
    expt.run_main(main)
