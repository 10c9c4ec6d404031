#!/bin/bash
# What makes this VM's disk slow for a 4 KiB direct read at queue depth 1,
# with no paio at all: the critical reader of the experiment beside plain
# fio backgrounds issuing what paio's pieces are (32 KiB direct requests,
# two sequential jobs of each kind at depth 1), each run traced at the block
# layer (bench/criticality/blocktrace.py). Backgrounds: none, readers,
# writers, both; ROUNDS rounds, the order rotated.
# Usage: OUT=dir [ROUNDS=2] [SECONDS=10] probe.sh   (root: tracefs)
set -eu
cd "$(dirname "$0")/../../../.."
out="${OUT:?set OUT to the output directory}"
rounds="${ROUNDS:-2}"
secs="${SECONDS_PER_RUN:-10}"
data="${DATA:-target/device-tail}"
mkdir -p "$out" "$data"
for f in crit read write; do
    [ -s "$data/$f.dat" ] || fio --name=lay --filename="$data/$f.dat" --size=2g --rw=write \
        --bs=1m --direct=1 --output=/dev/null
done
bg_read="--name=bgr --filename=$data/read.dat --rw=read --bs=32k --numjobs=2"
bg_write="--name=bgw --filename=$data/write.dat --rw=write --bs=32k --numjobs=2"
kinds=(none readers writers both)
{
    echo "command: OUT=$out ROUNDS=$rounds $0"
    echo "date (UTC): $(date -u '+%F %T')"
    echo "machine: $(nproc) cores, kernel $(uname -r), scheduler $(cat /sys/block/vda/queue/scheduler 2>/dev/null)"
    echo "commit: $(git rev-parse HEAD)"
} > "$out/header.txt"
for ((r = 0; r < rounds; r++)); do
    for ((i = 0; i < ${#kinds[@]}; i++)); do
        k=${kinds[$(((i + r) % ${#kinds[@]}))]}
        case $k in
            none) bg="" ;;
            readers) bg="$bg_read" ;;
            writers) bg="$bg_write" ;;
            both) bg="$bg_read $bg_write" ;;
        esac
        # shellcheck disable=SC2086
        python3 bench/criticality/blocktrace.py record "$out/$k-$r.trace" -- \
            fio --direct=1 --ioengine=psync --time_based --runtime="$secs" --group_reporting=0 \
            --output-format=json --output="$out/$k-$r.json" \
            --name=crit --filename="$data/crit.dat" --rw=randread --bs=4k $bg
        python3 bench/criticality/blocktrace.py analyze "$out/$k-$r.trace" > "$out/$k-$r.txt"
        # Traces are tens of MB: kept only when asked.
        if [ -n "${KEEP_TRACES:-}" ]; then gzip -f "$out/$k-$r.trace"; else rm "$out/$k-$r.trace"; fi
        echo "== $k, round $r"; head -5 "$out/$k-$r.txt"
    done
done
python3 - "$out" <<'PY' | tee "$out/summary.md"
import glob, json, os, re, statistics, sys
out = sys.argv[1]
rows = {}
for j in sorted(glob.glob(os.path.join(out, "*.json"))):
    kind, rnd = os.path.basename(j)[:-5].rsplit("-", 1)
    jobs = json.load(open(j))["jobs"]
    crit = next(x for x in jobs if x["jobname"] == "crit")
    pct = crit["read"]["clat_ns"]["percentile"]
    bg = sum(x["read"]["bw"] + x["write"]["bw"] for x in jobs if x["jobname"] != "crit") / 1024
    text = open(j[:-5] + ".txt").read()
    slow = float(re.search(r"slower than [\d.]+ ms: \d+ \(([\d.]+) %\)", text).group(1))
    queue = float(re.search(r"scheduler queue\s+ms: .*?p99.9 ([\d.]+)", text).group(1)) * 1000
    rows.setdefault(kind, []).append((pct["50.000000"] / 1e3, pct["99.000000"] / 1e3,
                                     pct["99.900000"] / 1e3, slow, queue, bg))
print("| background (32 KiB direct, 2 jobs each, depth 1) | critical p50 µs | p99 µs | p99.9 µs | reads > 5 ms | scheduler queue p99.9 µs | background MiB/s |")
print("|---|---:|---:|---:|---:|---:|---:|")
for kind in ("none", "readers", "writers", "both"):
    if kind not in rows:
        continue
    cols = list(zip(*rows[kind]))
    def f(i, fmt):
        v = cols[i]
        return f"{fmt.format(statistics.median(v))} ({fmt.format(min(v))}–{fmt.format(max(v))})"
    print(f"| {kind} | {f(0, '{:.0f}')} | {f(1, '{:.0f}')} | {f(2, '{:.0f}')} | {f(3, '{:.2f}')} % | "
          f"{f(4, '{:.0f}')} | {f(5, '{:.0f}')} |")
print()
print(f"Medians (extremes) of {len(next(iter(rows.values())))} rounds.")
PY
