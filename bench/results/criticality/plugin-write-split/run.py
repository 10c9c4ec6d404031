#!/usr/bin/env python3
"""RocksDB's direct flush and compaction writes whole or in pieces (the
RocksDB plugin's write splitting), next to a critical reader in another
process: fio 4 KiB random reads at queue depth 1 (O_DIRECT) under
`paio run --critical`, beside db_bench fillrandom with direct I/O for flush
and compaction through the plugin's preload library, its write objects
`flush/limit`, `compaction/l0`, `compaction/ln` priority objects (depth 4,
busy_depth 1) and its compaction reads one too (64 KiB pieces) in both paio
setups; the setups differ only in the write objects' `split`. Setups
interleaved, order rotated per round. Writes --out (JSON, one record per
run) and prints a table (medians over rounds, with extremes).

    python3 run.py [--rounds 3] [--seconds 20] [--split 64KiB] [--value-size 4000] [--data DIR] [--out FILE]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]
PAIO = ROOT / "target/release/paio"
PRELOAD = ROOT / "integrations/rocksdb/build/libpaio_rocksdb_preload.so"
LAYOUT = ROOT / "integrations/rocksdb/paio-rocksdb.toml"
SETUPS = ("vanilla", "paio-whole", "paio-split")


def policy(write_split):
    """The plugin's layout with its write objects as priority objects
    (write_split: their `split`) and the compaction reads' in 64 KiB."""
    text = LAYOUT.read_text()
    for name in ("limit", "l0", "ln"):
        old = f'name = "{name}"\nkind = "drl"\nrate = "100GiB/s"\n'
        assert old in text, name
        text = text.replace(old, f'name = "{name}"\nkind = "priority"\ndepth = 4\n'
                                 f'busy_depth = 1\nsplit = "{write_split}"\n')
    # The compaction reads' object: the second `reads` (after the
    # compaction channel's header).
    head, tail = text.split('name = "compaction"', 1)
    old = 'name = "reads"\nkind = "drl"\nrate = "100GiB/s"\n'
    assert old in tail
    tail = tail.replace(old, 'name = "reads"\nkind = "priority"\ndepth = 4\nbusy_depth = 1\n'
                             'split = "64KiB"\n', 1)
    return head + 'name = "compaction"' + tail


def fio_clat(path):
    job = json.loads(Path(path).read_text())["jobs"][0]["read"]
    pct = job["clat_ns"]["percentile"]
    return {"p50_us": pct["50.000000"] / 1e3, "p99_us": pct["99.000000"] / 1e3,
            "p999_us": pct["99.900000"] / 1e3, "iops": job["iops"]}


def one(setup, args, tag):
    data = Path(args.data)
    db = data / "db"
    shutil.rmtree(db, ignore_errors=True)
    env = dict(os.environ)
    bench = ["db_bench", "--benchmarks=fillrandom", f"--db={db}", "--num=50000000",
             f"--value_size={args.value_size}", f"--duration={args.seconds + 4}",
             "--use_direct_io_for_flush_and_compaction=true", "--compression_type=none",
             "--threads=1", "--disable_wal=false"]
    if setup != "vanilla":
        pol = data / f"{setup}.toml"
        pol.write_text(policy("0" if setup == "paio-whole" else args.split))
        env.update(LD_PRELOAD=str(PRELOAD), PAIO_ROCKSDB_POLICY=str(pol),
                   PAIO_ROCKSDB_STATS=str(data / f"{tag}.stats.json"))
        bench.append("--fs_uri=paio")
    bg = subprocess.Popen(bench, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2)
    j = data / f"{tag}.fio.json"
    fio = ["fio", "--name=crit", f"--filename={data / 'crit.dat'}", "--rw=randread", "--bs=4k",
           "--direct=1", "--ioengine=psync", "--time_based", f"--runtime={args.seconds}",
           "--percentile_list=50:99:99.9", "--output-format=json", f"--output={j}"]
    if setup != "vanilla":
        fio = [str(PAIO), "run", "--critical", "--"] + fio
    subprocess.run(fio, check=True, stdout=subprocess.DEVNULL)
    out, err = bg.communicate()
    if bg.returncode != 0:
        sys.exit(f"db_bench failed ({bg.returncode}): {err[-2000:]}")
    m = re.search(r"fillrandom\s*:\s*([\d.]+) micros/op (\d+) ops/sec.*?;\s*([\d.]+) MB/s", out)
    if not m:
        sys.exit(f"no fillrandom line in db_bench's output:\n{out[-2000:]}")
    r = fio_clat(j)
    r.update(setup=setup, tag=tag, bg_ops=int(m.group(2)), bg_mbs=float(m.group(3)))
    if setup != "vanilla":
        st = json.loads((data / f"{tag}.stats.json").read_text())
        for ch in st["channels"]:
            for o in ch.get("objects", []):
                if (ch["name"], o["name"]) in (("flush", "limit"), ("compaction", "l0"),
                                               ("compaction", "ln")):
                    r.setdefault("write_ops", 0)
                    r.setdefault("write_bytes", 0)
                    r["write_ops"] += o["ops"]
                    r["write_bytes"] += o["bytes"]
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--split", default="64KiB")
    ap.add_argument("--value-size", type=int, default=4000)
    ap.add_argument("--out", default=str(HERE / "results.json"))
    ap.add_argument("--data", default=str(ROOT / "target/write-split-data"))
    args = ap.parse_args()
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    crit = data / "crit.dat"
    if not crit.exists() or crit.stat().st_size < 1 << 30:
        subprocess.run(["fio", "--name=fill", f"--filename={crit}", "--rw=write", "--bs=1m",
                        "--size=1g", "--direct=1"], check=True, stdout=subprocess.DEVNULL)
    results = []
    for rnd in range(args.rounds):
        order = SETUPS[rnd % 3:] + SETUPS[:rnd % 3]
        for setup in order:
            r = one(setup, args, f"r{rnd}-{setup}")
            r["round"] = rnd
            results.append(r)
            print(json.dumps(r), flush=True)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"\n| setup | fio p50 µs | p99 µs | p99.9 µs | fio IOPS | db_bench ops/s | MB/s | writes (avg KiB) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for s in SETUPS:
        rs = [r for r in results if r["setup"] == s]
        def f(k, fmt="{:.0f}"):
            v = [r[k] for r in rs]
            return (fmt.format(statistics.median(v)) + " (" + fmt.format(min(v)) + "–"
                    + fmt.format(max(v)) + ")")
        avg = "–" if s == "vanilla" else "{:.0f}".format(
            statistics.median(r["write_bytes"] / max(r["write_ops"], 1) / 1024 for r in rs))
        print(f"| {s} | {f('p50_us')} | {f('p99_us')} | {f('p999_us')} | {f('iops')} | "
              f"{f('bg_ops')} | {f('bg_mbs', '{:.1f}')} | {avg} |")


if __name__ == "__main__":
    main()
