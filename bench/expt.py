"""Helpers shared by the experiment drivers (bench/bandwidth/run.py,
bench/taillat/run.py): the machine facts recorded in result headers, the
cgroup-v1 blkio cgroup that stands for a shared device, and the entry point
that turns errors and signals into exit codes.  Stdlib only.
"""

import csv
import datetime
import json
import math
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CGROUP_ROOT = Path("/sys/fs/cgroup/blkio")


class ExperimentError(Exception):
    """A failure with a message meant for the user (exit status 1)."""


def sh(argv):
    """stdout of `argv` (a list), stripped; "" if it cannot run."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def block_device_of(path):
    """(major, minor, name) of the whole disk holding `path` (for a
    partition, its disk: blkio throttles whole devices)."""
    dev = os.stat(path).st_dev
    maj, mnr = os.major(dev), os.minor(dev)
    if maj == 0:
        raise ExperimentError(f"{path} is not on a block device (device {maj}:{mnr}); "
                              "put the data directory on a disk-backed file system")
    sysdir = Path(f"/sys/dev/block/{maj}:{mnr}").resolve()
    if (sysdir / "partition").exists():
        sysdir = sysdir.parent
        maj, mnr = (int(x) for x in (sysdir / "dev").read_text().split(":"))
    return maj, mnr, sysdir.name


def machine_info(data_dir):
    """One line: CPU model, cores, RAM, kernel, and the data disk."""
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / (1 << 20):.0f}"
                break
    except (OSError, ValueError):
        pass
    try:
        maj, mnr, name = block_device_of(data_dir)
        size, rota = (sh(["lsblk", "-dno", "SIZE,ROTA", f"/dev/{name}"]).split() + ["?", "?"])[:2]
        disk = f"/dev/{name} ({maj}:{mnr}), size {size}, rotational {rota}"
    except (ExperimentError, OSError) as e:
        disk = f"unknown ({e})"
    return (f"cpu {cpu}, {os.cpu_count()} cores, {mem} GiB RAM, "
            f"kernel {platform.release()}, disk {disk}")


def commit_info():
    """HEAD's commit, and whether tracked files differ from it."""
    head = sh(["git", "-C", str(REPO), "rev-parse", "HEAD"]) or "?"
    dirty = sh(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"])
    return head + (" (working tree modified)" if dirty else "")


def disk_counters(device):
    """The disk `device`'s ("major:minor") own counters since boot, from
    /sys/dev/block/<device>/stat: a dict of `reads`, `read_sectors`,
    `read_ms`, `writes`, `write_sectors`, `write_ms`, `discard_sectors`
    (0 on kernels without discard fields), or None if it cannot be read.
    They count what reached the device, after any blkio throttle."""
    try:
        return parse_disk_stat(Path(f"/sys/dev/block/{device}/stat").read_text())
    except (OSError, ValueError):
        return None


def parse_disk_stat(text):
    """`disk_counters`' dict from the text of a block device's `stat` file;
    ValueError if it is not one."""
    f = [int(x) for x in text.split()]
    if len(f) < 11:
        raise ValueError(f"a block device's stat has at least 11 fields, got {len(f)}")
    return {"reads": f[0], "read_sectors": f[2], "read_ms": f[3], "writes": f[4],
            "write_sectors": f[6], "write_ms": f[7],
            "discard_sectors": f[13] if len(f) >= 15 else 0}


def disk_rates(a, b, seconds):
    """Per-second figures between two `disk_counters` samples `seconds`
    apart: read and write MiB/s, the mean device time of a read and of a
    write in ms (0 with none), discarded MiB/s."""
    d = {k: b[k] - a[k] for k in a}
    mib = 512 / (1 << 20) / seconds
    return {"read_mibs": d["read_sectors"] * mib, "write_mibs": d["write_sectors"] * mib,
            "read_ms": d["read_ms"] / d["reads"] if d["reads"] else 0.0,
            "write_ms": d["write_ms"] / d["writes"] if d["writes"] else 0.0,
            "discard_mibs": d["discard_sectors"] * mib}


class BlkioCgroup:
    """A cgroup-v1 blkio cgroup throttled on one disk: `read_bps` and, when
    given, `write_bps` bytes per second for every process in it together.

    With `required` false, a throttle that cannot be set up (not root, no
    v1 blkio hierarchy) leaves `path` None and explains in `note`; with it
    true, that raises ExperimentError.  `cleanup` moves leftover processes
    to the root cgroup and removes the directory."""

    def __init__(self, name, device, read_bps, write_bps=None, required=True):
        self.path = None
        self.device = device
        self.note = ""
        target = CGROUP_ROOT / name
        try:
            if not (CGROUP_ROOT / "blkio.throttle.read_bps_device").exists():
                raise OSError(f"{CGROUP_ROOT} has no blkio.throttle.read_bps_device "
                              "(no cgroup v1 blkio hierarchy mounted?)")
            target.mkdir(exist_ok=True)
            self.path = target
            (target / "blkio.throttle.read_bps_device").write_text(f"{device} {read_bps}\n")
            if write_bps is not None:
                (target / "blkio.throttle.write_bps_device").write_text(f"{device} {write_bps}\n")
        except OSError as e:
            self.cleanup()
            msg = (f"cannot set up the blkio throttle {target} ({device} {read_bps} B/s): {e}. "
                   "The experiment needs root and a cgroup v1 blkio hierarchy at "
                   f"{CGROUP_ROOT}.")
            if required:
                raise ExperimentError(msg) from e
            self.note = msg + " Running WITHOUT the shared throttle (demo only)."
            print(f"WARNING: {self.note}", flush=True)

    @property
    def procs_file(self):
        """The file a process writes its pid to in order to join, or None."""
        return str(self.path / "cgroup.procs") if self.path else None

    def io_bytes(self):
        """(read, write) bytes the throttle accounted on the device so far;
        (None, None) without a cgroup."""
        if not self.path:
            return None, None
        rd = wr = 0
        try:
            for line in (self.path / "blkio.throttle.io_service_bytes").read_text().splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[0] == self.device:
                    if parts[1] == "Read":
                        rd = int(parts[2])
                    elif parts[1] == "Write":
                        wr = int(parts[2])
        except (OSError, ValueError):
            pass
        return rd, wr

    def cleanup(self):
        if not self.path:
            return
        for _ in range(50):
            try:
                pids = (self.path / "cgroup.procs").read_text().split()
            except OSError:
                pids = []
            for pid in pids:  # leftovers go back to the root cgroup
                try:
                    (CGROUP_ROOT / "cgroup.procs").write_text(pid + "\n")
                except OSError:
                    pass
            try:
                self.path.rmdir()
                self.path = None
                return
            except OSError:
                time.sleep(0.1)
        print(f"WARNING: could not remove {self.path}", file=sys.stderr)
        self.path = None


def require(tools, bin_dir, bins):
    """An error naming the first of `tools` (on PATH) or `bins` (in
    `bin_dir`) that is missing, and how to get it."""
    for tool in tools:
        if not shutil.which(tool):
            raise ExperimentError(f"{tool} is not installed (make setup installs it)")
    for b in bins:
        if not (Path(bin_dir) / b).is_file():
            raise ExperimentError(f"{bin_dir}/{b} not found: build with `make release-bins`")


def header_lines(data_dir):
    """The first lines of a result header: the command, the date, the
    machine (with the disk holding `data_dir`) and the commit."""
    return [
        f"command: {shlex.join([sys.executable] + sys.argv)}",
        f"date (UTC): {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S}",
        f"machine: {machine_info(data_dir)}",
        f"commit: {commit_info()}",
    ]


def percentiles_of(samples, points):
    """{percentile: value} of `samples` at each of `points` (nearest rank)."""
    if not samples:
        raise ExperimentError("no samples")
    s = sorted(samples)
    out = {}
    for p in points:
        k = max(0, min(len(s) - 1, math.ceil(p * len(s) / 100.0 - 1e-9) - 1))
        out[float(p)] = s[k]
    return out


RATIO_NOTE = ("Ratios are taken within each round, between runs minutes apart, then shown "
              "as median (extremes) over the rounds.")


def spread(t, digits=0, scale=1.0, unit=""):
    """A (median, min, max) as "median<unit> (min..max)", each times `scale`
    with `digits` decimals; "-" for None."""
    if t is None:
        return "-"
    m, lo, hi = (scale * x for x in t)
    return f"{m:.{digits}f}{unit} ({lo:.{digits}f}..{hi:.{digits}f})"


def stop(proc, timeout=10.0):
    """Ends `proc` with SIGTERM, and SIGKILL after `timeout` seconds; waits.
    SIGTERM first because `paio run` forwards it to its command: a SIGKILL
    would end `paio run` alone and leave the command running on, into the
    next measurement."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()


def fio_bandwidth_mib(doc):
    """Sum of read and write bandwidth over a fio JSON document's jobs, MiB/s
    (fio's averages over each job's whole run)."""
    return sum(j["read"]["bw"] + j["write"]["bw"] for j in doc["jobs"]) / 1024.0


def fio_mib_between(raw, tag, first_s, last_s):
    """A background fio's MiB/s while a critical job ran: each of its
    jobs' per-second bandwidth samples (fio `--write_bw_log=raw/tag
    --log_avg_msec=1000`; `raw/{tag}_bw.N.log`, KiB/s over the second
    ending at the sample's time in ms, a line per data direction) whose
    second lies mostly within [`first_s`, `last_s`] of the background's
    run, averaged per job and direction and summed. None if no job has
    such a sample. (fio's own figure averages the whole run, the leads
    without critical work included.)"""
    total, found = 0.0, False
    for log in sorted(Path(raw).glob(f"{tag}_bw.*.log")):
        vals = {}
        for line in log.read_text().splitlines():
            parts = [x.strip() for x in line.split(",")]
            if len(parts) >= 3 and first_s * 1000 <= int(parts[0]) - 500 <= last_s * 1000:
                vals.setdefault(parts[2], []).append(int(parts[1]) / 1024.0)
        for v in vals.values():
            total += sum(v) / len(v)
            found = True
    return total if found else None


def round_ratios(rows, num, den, field, group=()):
    """Per round, `num`'s `field` over `den`'s, both rows of that round (and
    of equal values of each `group` key), as (median, min, max) over the
    rounds, or None when no round has both with a nonzero denominator. A
    ratio is taken within one round, where both setups met the same machine
    state, never between medians of different rounds."""
    def key(r):
        return (str(r["round"]),) + tuple(str(r[g]) for g in group)
    dens = {key(r): r for r in rows if r.get("setup") == den}
    ratios = []
    for r in rows:
        if r.get("setup") != num:
            continue
        d = dens.get(key(r))
        if d is None or r.get(field) is None or d.get(field) is None:
            continue
        a, b = float(r[field]), float(d[field])
        if b:
            ratios.append(a / b)
    if not ratios:
        return None
    return (statistics.median(ratios), min(ratios), max(ratios))


def rotation(setups, round_index):
    """The setups' order in round `round_index`: rotated by one each round."""
    k = round_index % len(setups)
    return list(setups[k:]) + list(setups[:k])


def write_runs(out, header, rows, fields, table):
    """OUT/runs.csv (`fields` of each row), OUT/runs.json (every row) and
    OUT/summary.md (the header lines, then `table`)."""
    with open(out / "runs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    (out / "runs.json").write_text(json.dumps(rows, indent=1))
    (out / "summary.md").write_text("\n".join(header) + "\n\n" + table)


def report_only(out, table):
    """Writes OUT/summary.md again from OUT/header.txt and OUT/runs.json with
    `table(rows)` (a driver's summary after its method changed, without
    running anything), prints it and returns 0."""
    rows = json.loads((out / "runs.json").read_text())
    header = (out / "header.txt").read_text().splitlines()
    text = table(rows)
    (out / "summary.md").write_text("\n".join(header) + "\n\n" + text)
    print(text)
    return 0


def write_header(out, header):
    """OUT/header.txt, and the same lines on stdout, before the rounds."""
    (out / "header.txt").write_text("\n".join(header) + "\n")
    print("\n".join(header), flush=True)


def finish(out, header, rows, fields, table, plot=None):
    """After the rounds: the files of `write_runs`, `table` on stdout, and
    `plot()` (which returns what it wrote, printed) unless it is None."""
    write_runs(out, header, rows, fields, table)
    print("\n" + table)
    if plot is not None:
        print(plot())


def plot(figure, png, bin_dir=None):
    """Draws `figure` into the PNG file `png` with `paio plot --figure`
    (the figure format: docs/cli.md, "paio plot"), keeping the figure
    beside it as PNG.figure.json so that it can be drawn again; returns
    `png`.  A y of None breaks a line (JSON has no NaN)."""
    png = Path(png)
    paio = Path(bin_dir or REPO / "target/release") / "paio"
    if not paio.is_file():
        raise ExperimentError(f"{paio} not found: build with `make release-bins`")
    spec = png.with_suffix(".figure.json")
    spec.write_text(json.dumps(figure, indent=1, allow_nan=False))
    r = subprocess.run([str(paio), "plot", "--figure", str(spec), "-o", str(png)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise ExperimentError(f"paio plot --figure {spec}: {r.stderr.strip()}")
    return png


def _sigterm(signum, frame):
    raise KeyboardInterrupt


def run_main(main, on_interrupt=None):
    """Runs `main()` and exits: its status; 1 after an ExperimentError
    (its message on stderr); 130 after SIGINT or SIGTERM, once
    `on_interrupt()` stopped what was running (the drivers' finally blocks
    remove their cgroups)."""
    signal.signal(signal.SIGTERM, _sigterm)
    try:
        sys.exit(main())
    except ExperimentError as e:
        print(f"run.py: error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        if on_interrupt:
            on_interrupt()
        print("run.py: interrupted; children stopped, cgroup removed", file=sys.stderr)
        sys.exit(130)
