#!/usr/bin/env bash
# Runs Debian's unmodified db_bench (7.8.3) on the paio FileSystem through
# libpaio_rocksdb_preload.so, twice:
#   1. --fs_uri=paio only: flushes and compactions are told apart by thread
#      name (all compactions count as compaction_ln);
#   2. plus --options_file=tests/small-db-options.ini, whose
#      listeners={id=paio} injects the paio listener: L0 and Ln compactions
#      are told apart.
# Checks the stage statistics written at exit (PAIO_ROCKSDB_STATS); that
# db_bench/paio-listener.ini (and db_bench/listener-options.sh for other
# flags) changes nothing but the listener; and the messages of issue 13.
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
run listener --options_file="$here/tests/small-db-options.ini"

# The shipped options file is db_bench's defaults plus the listener, and
# listener-options.sh keeps the flags it is given: a run with the options
# file has the same options as a run with the flags (RocksDB's option dump
# in LOG, addresses aside) and differs in OPTIONS only by the listener.
options_of() {  # options_of DIR: the option dump of the DB's LOG
    grep -E '^\S+ \S+ +(Options\.|  )' "$1/LOG" | sed -E 's/^\S+ \S+ +//; s/0x[0-9a-f]+/PTR/g'
}
same_options() {  # same_options NAME OPTIONS_FILE FLAGS...
    local name="$1" file="$2"; shift 2
    rm -rf "$work/db-$name-flags" "$work/db-$name-file"
    LD_PRELOAD="$preload" "$db_bench" --fs_uri=paio --benchmarks=fillseq --num=1000 \
        --db="$work/db-$name-flags" "$@" >"$work/$name.out" 2>&1 ||
        { cat "$work/$name.out" >&2; exit 1; }
    LD_PRELOAD="$preload" "$db_bench" --fs_uri=paio --benchmarks=fillseq --num=1000 \
        --db="$work/db-$name-file" --options_file="$file" >"$work/$name.out" 2>&1 ||
        { cat "$work/$name.out" >&2; exit 1; }
    if ! diff <(options_of "$work/db-$name-flags") <(options_of "$work/db-$name-file") >&2; then
        echo "$name: db_bench with $file has other options than with the flags ${*:-(none)}" >&2
        exit 1
    fi
    local a b
    a="$(ls "$work/db-$name-flags"/OPTIONS-* | sort | tail -1)"
    b="$(ls "$work/db-$name-file"/OPTIONS-* | sort | tail -1)"
    if [ "$(diff <(grep -v '^#' "$a") <(grep -v '^#' "$b") | grep -c '^[<>]')" != 2 ] ||
        ! grep -q 'listeners={PaioListener' "$b"; then
        echo "$name: OPTIONS should differ only by the paio listener:" >&2
        diff "$a" "$b" >&2 || true
        exit 1
    fi
    echo "$name: same options as db_bench's flags ${*:-(defaults)}, plus the paio listener"
}
DB_BENCH="$db_bench" bash "$here/db_bench/listener-options.sh" "$work/defaults.ini"
if ! diff "$work/defaults.ini" "$here/db_bench/paio-listener.ini" >&2; then
    echo "db_bench/paio-listener.ini is not what listener-options.sh writes for db_bench's defaults: regenerate it" >&2
    exit 1
fi
same_options paio-listener "$here/db_bench/paio-listener.ini"
DB_BENCH="$db_bench" bash "$here/db_bench/listener-options.sh" "$work/tuned.ini" \
    --write_buffer_size=16777216 --compression_type=none --max_background_jobs=4
grep -q '^  write_buffer_size=16777216$' "$work/tuned.ini"
same_options tuned "$work/tuned.ini" \
    --write_buffer_size=16777216 --compression_type=none --max_background_jobs=4

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
expect_error "a rate key given twice" '"flush" is given twice' \
    PAIO_ROCKSDB_RATES=flush=1MiB/s,flush=2MiB/s -- --fs_uri=paio
expect_error "policy naming a directory" 'is a directory; name the policy file itself' \
    PAIO_ROCKSDB_POLICY=/tmp -- --fs_uri=paio
expect_error "rate keys limiting the same bytes" '"background" and "flush" both limit' \
    PAIO_ROCKSDB_RATES=background=10MiB/s,flush=5MiB/s -- --fs_uri=paio
expect_error "bad stall inheritance switch" 'PAIO_ROCKSDB_STALL_INHERIT="yes": expected 1' \
    PAIO_ROCKSDB_STALL_INHERIT=yes -- --fs_uri=paio
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
# A set-user-ID program runs with the invoking user's environment: the
# plugin must not write PAIO_ROCKSDB_STATS with the program's rights (here
# root's, into a directory only root may write). The library comes in
# through /etc/ld.so.preload (the loader ignores LD_PRELOAD paths there), in
# a private mount namespace; db_bench is a set-user-ID root copy started by
# nobody. Started by root, the same command writes the file, so the check
# can fail.
[ "$(id -u)" = 0 ] ||
    { echo "db_bench_preload.sh: the set-user-ID check runs db_bench as nobody: run it as root" >&2; exit 1; }
for tool in unshare setpriv; do
    command -v "$tool" >/dev/null ||
        { echo "db_bench_preload.sh: $tool (util-linux) is needed" >&2; exit 1; }
done
chmod 755 "$work"
sec="$work/secure"
mkdir -m 755 "$sec" "$sec/root-only"
cp "$db_bench" "$sec/db_bench"
chmod 4755 "$sec/db_bench"
cp /etc/ld.so.cache "$sec/ld.so.cache"
set_id_run() {  # set_id_run [setpriv options...]: db_bench through the system preload
    unshare -m sh -c 'sec="$1"; preload="$2"; shift 2
        mount -t tmpfs paio-test /etc && cp "$sec/ld.so.cache" /etc/ &&
        echo "$preload" >/etc/ld.so.preload &&
        exec setpriv "$@" env PAIO_ROCKSDB_STATS="$sec/root-only/stats.json" \
            "$sec/db_bench" --fs_uri=paio --benchmarks=fillseq --num=1000 --db="$sec/db"' \
        sh "$sec" "$preload" "$@" >"$sec/out" 2>&1 </dev/null ||
        { cat "$sec/out" >&2; exit 1; }
    rm -rf "$sec/db"
}
set_id_run --reuid=0
[ -f "$sec/root-only/stats.json" ] ||
    { echo "db_bench_preload.sh: started by root, db_bench wrote no statistics:" >&2; cat "$sec/out" >&2; exit 1; }
rm "$sec/root-only/stats.json"
set_id_run --reuid=65534 --regid=65534 --clear-groups
if [ -n "$(ls -A "$sec/root-only")" ]; then
    echo "db_bench_preload.sh: a set-user-ID db_bench wrote the caller's PAIO_ROCKSDB_STATS as root:" >&2
    ls -l "$sec/root-only" >&2
    exit 1
fi
grep -q "PAIO_ROCKSDB_\* variables are ignored" "$sec/out" ||
    { echo "db_bench_preload.sh: the set-user-ID db_bench did not say it ignores PAIO_ROCKSDB_*:" >&2; cat "$sec/out" >&2; exit 1; }
echo "set-user-ID db_bench: $(grep -m1 'are ignored' "$sec/out")"

echo "db_bench on paio: OK"
