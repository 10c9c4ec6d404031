#!/usr/bin/env bash
# The lock hooks' cost (priority inheritance, issue 12): an uncontended
# pthread_mutex_lock/unlock pair through the interposer against libc's own,
# paired inside one process (lock_loop ... paired), the same for a rwlock
# read lock (paired-read: the hooks record read holds), and a mutex contended by
# two threads, timed as whole runs without and with the interposer (order
# alternating by round). Medians over RUNS rounds with each figure's range.
# Writes bench/results/preload-locks.csv. Used by `make bench`.
#
#   RUNS=7 bench/preload/locks.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
runs="${RUNS:-7}"
pairs_iterations="${ITERATIONS:-20000000}"
contended_iterations="${CONTENDED:-2000000}"
out="${OUT:-$root/bench/results/preload-locks.csv}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cd "$root"
cargo build --release -q -p paio-preload
lib="$target/release/libpaio_preload.so"
[ -f "$lib" ] || { echo "locks.sh: $lib was not built" >&2; exit 1; }
cc -O2 -pthread -I"$here" -o "$work/lock_loop" "$here/lock_loop.c" -ldl

paired="" paired_read="" none="" preload=""
for ((r = 1; r <= runs; r++)); do
    v=$(LD_PRELOAD="$lib" "$work/lock_loop" "$pairs_iterations" paired)
    paired+="$(echo "$v" | cut -d' ' -f3) "
    v=$(LD_PRELOAD="$lib" "$work/lock_loop" "$pairs_iterations" paired-read)
    paired_read+="$(echo "$v" | cut -d' ' -f3) "
    if ((r % 2)); then
        none+="$("$work/lock_loop" "$contended_iterations" contended 2) "
        preload+="$(LD_PRELOAD="$lib" "$work/lock_loop" "$contended_iterations" contended 2) "
    else
        preload+="$(LD_PRELOAD="$lib" "$work/lock_loop" "$contended_iterations" contended 2) "
        none+="$("$work/lock_loop" "$contended_iterations" contended 2) "
    fi
    echo "lock hooks: round $r/$runs done" >&2
done

# shellcheck source=../common.sh
. "$root/bench/common.sh"
{
    results_header "lock hooks (priority inheritance): ns per pthread_mutex_lock/unlock pair" \
        "bench/preload/locks.sh (RUNS=$runs ITERATIONS=$pairs_iterations CONTENDED=$contended_iterations)"
    echo "# note: uncontended(_read) = added ns per mutex (rwlock read) lock/unlock pair, paired in one process (blocks of 100000 pairs through the interposer alternate with blocks through libc's own; median of per-pair differences), median over rounds; contended = 2 threads on one mutex, wall ns per pair over both threads, without (none) and with the interposer's default (preload), run order alternating by round"
    echo "case,runs,median_ns,min_ns,max_ns"
    echo "uncontended_added,$runs,$(echo "$paired" | median),$(echo "$paired" | range)"
    echo "uncontended_read_added,$runs,$(echo "$paired_read" | median),$(echo "$paired_read" | range)"
    echo "contended_none,$runs,$(echo "$none" | median),$(echo "$none" | range)"
    echo "contended_preload,$runs,$(echo "$preload" | median),$(echo "$preload" | range)"
} > "$out"
cat "$out" >&2
echo "wrote $out" >&2
