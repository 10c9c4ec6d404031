#!/usr/bin/env bash
# Writes a RocksDB options file for `db_bench --options_file` that is the
# options db_bench itself would use with the given flags, plus the paio
# listener (listeners={id=paio}, registered by libpaio_rocksdb_preload.so).
#
#   listener-options.sh OUT.ini [DB_BENCH_FLAGS...]
#   e.g. listener-options.sh /tmp/paio.ini --write_buffer_size=16777216 --compression_type=lz4
#
# Why: with --options_file db_bench ignores its flags for RocksDB options
# (see `db_bench --help`, -options_file), so an options file written by
# hand silently changes the workload. This script runs db_bench once with
# the flags (one key, in a temporary directory), takes the OPTIONS file
# RocksDB wrote, puts the paio listener in [DBOptions] and the block cache
# db_bench made (its capacity is not in OPTIONS files) in the table options.
# DB_BENCH names the binary (default: db_bench on PATH).
set -euo pipefail
if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then
    echo "usage: $0 OUT.ini [DB_BENCH_FLAGS...]" >&2
    exit 2
fi
out="$1"; shift
db_bench="${DB_BENCH:-db_bench}"
tmp="$(mktemp -d /tmp/paio-listener-options.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
if ! "$db_bench" "$@" --benchmarks=fillseq --num=1 --db="$tmp/db" --use_existing_db=false \
    >"$tmp/out" 2>&1; then
    echo "$0: db_bench failed with the flags given:" >&2
    cat "$tmp/out" >&2
    exit 1
fi
options="$(ls "$tmp"/db/OPTIONS-* 2>/dev/null | sort -t- -k2n | tail -1)"
if [ -z "$options" ]; then
    echo "$0: db_bench wrote no OPTIONS file in $tmp/db" >&2
    exit 1
fi
cache="$(awk '/^ *block_cache_options:/ { in_cache = 1 }
    in_cache && /capacity :/ { cap = $3 }
    in_cache && /num_shard_bits :/ { bits = $3 }
    cap != "" && bits != "" { printf "{capacity=%s;num_shard_bits=%s}", cap, bits; exit }' \
    "$tmp/db/LOG")"
{
    echo "# db_bench's own options for: ${*:-(its defaults)}"
    echo "# plus the paio listener; written by integrations/rocksdb/db_bench/listener-options.sh"
    awk -v cache="$cache" '
        /^\[/ { section = $0 }
        section == "[DBOptions]" && /^ *listeners=/ { print "  listeners={id=paio}"; next }
        { print }
        /^\[TableOptions\/BlockBasedTable / && cache != "" { print "  block_cache=" cache }
    ' "$options"
} >"$out"
grep -q '^  listeners={id=paio}$' "$out" || {
    echo "$0: no listeners line in [DBOptions] of $options: not a RocksDB 7.8 options file?" >&2
    exit 1
}
