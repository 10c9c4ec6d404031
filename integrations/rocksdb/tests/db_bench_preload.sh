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
echo "db_bench on paio: OK"
