#!/usr/bin/env bash
# Runs Debian's unmodified db_bench (7.8.3) on the paio FileSystem through
# libpaio_rocksdb_preload.so, twice:
#   1. --fs_uri=paio only: flushes and compactions are told apart by thread
#      name (all compactions count as compaction_ln);
#   2. plus --options_file=db_bench/paio-options.ini, whose listeners={id=paio}
#      injects the paio listener: L0 and Ln compactions are told apart.
# Checks the stage statistics written at exit (PAIO_ROCKSDB_STATS).
# Usage: db_bench_preload.sh DB_BENCH PRELOAD_SO
set -euo pipefail
db_bench="$1"
preload="$2"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d /tmp/paio-db-bench.XXXXXX)"
trap 'rm -rf "$work"' EXIT

run() {  # run NAME EXTRA_ARGS...
    local name="$1"; shift
    PAIO_ROCKSDB_STATS="$work/$name.json" LD_PRELOAD="$preload" \
        "$db_bench" --fs_uri=paio --benchmarks=fillrandom,compact --num=100000 \
        --db="$work/db-$name" --write_buffer_size=1048576 \
        --max_bytes_for_level_base=4194304 --level0_file_num_compaction_trigger=2 \
        --target_file_size_base=1048576 "$@" >"$work/$name.out" 2>&1 ||
        { cat "$work/$name.out" >&2; exit 1; }
    grep -E 'fillrandom|paio' "$work/$name.out" || true
    python3 - "$work/$name.json" "$name" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); name = sys.argv[2]
ch = {c["name"]: c for c in d["channels"]}
obj = lambda c, o: next(x for x in ch[c]["objects"] if x["name"] == o)
row = {"flush": ch["flush"]["bytes"], "compaction_l0": obj("compaction", "l0")["bytes"],
       "compaction_ln": obj("compaction", "ln")["bytes"], "unthrottled": ch["unthrottled"]["bytes"],
       "foreground": ch["foreground"]["bytes"], "other": ch["other"]["bytes"]}
print(name, " ".join(f"{k}={v}" for k, v in row.items()))
assert row["flush"] > 0 and row["unthrottled"] > 0 and row["compaction_ln"] > 0, row
if name == "listener":
    assert row["compaction_l0"] > 0, row
else:
    assert row["compaction_l0"] == 0, row
PY
}

run thread-names
run listener --options_file="$here/db_bench/paio-options.ini"

# What a user gets wrong is said, not ignored (issue 13).
expect_error() {  # expect_error WHAT PATTERN ENV... -- DB_BENCH_ARGS...
    local what="$1" pattern="$2"; shift 2
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    if env "${envs[@]}" LD_PRELOAD="$preload" "$db_bench" --benchmarks=fillseq --num=1000 \
        --db="$work/db-msg" "$@" >"$work/msg.out" 2>&1; then
        status=0
    else
        status=$?
    fi
    if ! grep -q -- "$pattern" "$work/msg.out"; then
        echo "db_bench ($what): expected a message matching '$pattern'; got (status $status):" >&2
        cat "$work/msg.out" >&2
        exit 1
    fi
    echo "$what: $(grep -m1 -- "$pattern" "$work/msg.out")"
}
expect_error "rates with a colon" 'is not KEY=RATE' \
    PAIO_ROCKSDB_RATES=compaction_ln:1MiB/s -- --fs_uri=paio
expect_error "missing policy" 'cannot read the policy file /nonexistent/p.toml: No such file' \
    PAIO_ROCKSDB_POLICY=/nonexistent/p.toml -- --fs_uri=paio
expect_error "paiod not running" 'paiod is not answering at /nonexistent-dir/paiod.sock' \
    PAIO_ROCKSDB_SOCKET=/nonexistent-dir/paiod.sock -- --fs_uri=paio
expect_error "unwritable statistics" 'is not writable' \
    PAIO_ROCKSDB_STATS=/nonexistent-dir/stats.json -- --fs_uri=paio
# --env_uri=paio runs on the paio file system: the stage counts its I/O.
rm -rf "$work/db-env" "$work/env.json"
PAIO_ROCKSDB_STATS="$work/env.json" LD_PRELOAD="$preload" "$db_bench" --env_uri=paio \
    --benchmarks=fillseq --num=20000 --db="$work/db-env" >"$work/env.out" 2>&1 ||
    { cat "$work/env.out" >&2; exit 1; }
python3 - "$work/env.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
total = sum(c["bytes"] for c in d["channels"])
print("--env_uri=paio: the stage counted", total, "bytes")
assert total > 0, d
PY
echo "db_bench on paio: OK"
