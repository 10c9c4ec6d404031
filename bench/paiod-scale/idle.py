#!/usr/bin/env python3
"""paiod with many connections that never speak (issue 14): starts paiod
with a descriptor soft limit of 1,024, opens --connections idle
connections, then reports paiod's resident memory and descriptors and
times one `paio status`. Before the connection caps, 5,000 idle
connections held 340 MB and 1,100 locked out `paio status`.

    python3 bench/paiod-scale/idle.py [--connections 5000] [--out FILE]

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=5000)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < args.connections + 64:
        raise expt.ExperimentError(f"the hard descriptor limit {hard} is below "
                                   f"{args.connections + 64}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with tempfile.TemporaryDirectory(prefix="paiod-idle-") as d:
        sock = Path(d) / "paiod.sock"
        paiod = subprocess.Popen(["bash", "-c", f'ulimit -Sn 1024 && exec "$0" --socket {sock} '
                                  "--log warn", str(REL / "paiod")])
        try:
            for _ in range(500):
                if sock.exists():
                    break
                time.sleep(0.01)
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
    report = [
        f"# command: {' '.join(sys.argv)}",
        f"# date_utc: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%M:%SZ}",
        f"# machine: {expt.machine_info(expt.REPO)}",
        f"# paio_commit: {expt.commit_info()}",
        f"idle connections opened: {args.connections}",
        f"paiod RSS: {before:.1f} MB at start, {held:.1f} MB with them open",
        f"paiod descriptors: {fds}",
        f"paio status: {took * 1e3:.0f} ms, {line}",
    ]
    print("\n".join(report))
    if args.out:
        args.out.write_text("\n".join(report) + "\n")
    return 0


if __name__ == "__main__":
    expt.run_main(main)
