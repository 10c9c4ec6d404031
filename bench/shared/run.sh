#!/usr/bin/env bash
# A limit for a whole command of several processes: fio --numjobs=4 under
# `paio run --limit read=20MiB/s` (one bucket the four processes share,
# PAIO_SHARED) against the same limit in a policy whose bucket is each
# process's own (paio's behaviour before `shared`), 3 rounds, the order
# rotated. Then a pipeline and a file writer under
# `paio run --limit write=5MiB/s` (pipes and sockets counted, not limited)
# against the same shared limit on every descriptor (paio before the
# `stream` class). Writes bench/results/shared-limits/results.csv and
# pipes.csv with the command, date, machine and commit. About 2 minutes.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${OUT:-$root/bench/results/shared-limits}"
paio="$root/target/release/paio"
[ -x "$paio" ] || { echo "run.sh: build first: cargo build --release -p paio-cli -p paio-preload" >&2; exit 1; }
command -v fio >/dev/null || { echo "run.sh: fio is missing (make setup installs it)" >&2; exit 1; }
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
head -c 64M /dev/urandom >"$work/f"
cat >"$work/own.toml" <<'TOML'
[stage]
default_channel = "other"
[[channel]]
name = "read"
match = { request_type = "read" }
default_object = "limit"
[[channel.object]]
name = "limit"
kind = "drl"
rate = "20MiB/s"
[[channel]]
name = "other"
TOML
fio_args=(fio --name=r "--filename=$work/f" --rw=read --bs=64k --numjobs=4 --size=40M
    --ioengine=psync --group_reporting --output-format=json)
csv="$out/results.csv"
{
    echo "# benchmark: fio --numjobs=4 (4 processes, 40 MiB each, page-cached) under a 20 MiB/s read limit"
    echo "# command: bench/shared/run.sh"
    echo "# date_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# host: $(uname -n) $(nproc) cores, $(uname -r)"
    echo "# commit: $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet -- . ":!bench/results" || echo -dirty)"
    echo "# shared: paio run --limit read=20MiB/s (one bucket for the command); own: paio run --policy own.toml (the same limit, a bucket per process)"
    echo "round,setup,read_mib_s,seconds"
} >"$csv"
for round in 1 2 3; do
    setups=(shared own)
    [ $((round % 2)) -eq 0 ] && setups=(own shared)
    for setup in "${setups[@]}"; do
        if [ "$setup" = shared ]; then
            wrap=("$paio" run --limit read=20MiB/s --)
        else
            wrap=("$paio" run --policy "$work/own.toml" --)
        fi
        "${wrap[@]}" "${fio_args[@]}" >"$work/out.json"
        python3 - "$work/out.json" "$round" "$setup" >>"$csv" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]["read"]
print(f"{sys.argv[2]},{sys.argv[3]},{j['bw_bytes'] / 2**20:.2f},{j['runtime'] / 1000:.2f}")
PY
    done
done
cat "$csv"

# Pipes: `--limit write=5MiB/s` against one shared write bucket for every
# descriptor, pipes included.
cat >"$work/all.toml" <<'TOML'
[stage]
default_channel = "other"
[[channel]]
name = "write"
match = { request_type = "write" }
default_object = "limit"
[[channel.object]]
name = "limit"
kind = "drl"
rate = "5MiB/s"
shared = "write"
[[channel]]
name = "other"
TOML
pipes="$out/pipes.csv"
{
    sed -n '3,5p' "$csv"
    echo "# benchmark: 10 MiB under a 5 MiB/s write limit: 'pipe' = dd bs=1M count=10 | cat > /dev/null (10 MiB into a pipe, 10 MiB to /dev/null); 'file' = dd bs=1M count=10 of=FILE"
    echo "# limit: paio run --limit write=5MiB/s (pipes and sockets counted, not limited); every: paio run --policy all.toml (the same shared bucket for every descriptor)"
    echo "round,setup,command,seconds"
} >"$pipes"
for round in 1 2 3; do
    setups=(limit every)
    [ $((round % 2)) -eq 0 ] && setups=(every limit)
    for setup in "${setups[@]}"; do
        if [ "$setup" = limit ]; then
            wrap=("$paio" run --limit write=5MiB/s --)
        else
            wrap=("$paio" run --policy "$work/all.toml" --)
        fi
        for cmd in pipe file; do
            if [ "$cmd" = pipe ]; then
                line='dd if=/dev/zero bs=1M count=10 status=none | cat > /dev/null'
            else
                line="dd if=/dev/zero bs=1M count=10 status=none of=$work/out"
            fi
            start=$(date +%s.%N)
            "${wrap[@]}" sh -c "$line"
            end=$(date +%s.%N)
            echo "$round,$setup,$cmd,$(echo "$end - $start" | bc -l | xargs printf '%.2f')" >>"$pipes"
        done
    done
done
cat "$pipes"
