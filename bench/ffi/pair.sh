#!/usr/bin/env bash
# The C ABI's two-phase pair (issue 11): paio_stage_admit + paio_stage_complete
# through libpaio.so, as a C caller such as the RocksDB plugin pays it, for a
# non-critical and a critical request through one priority object
# (bench/preload/priority.toml), on one thread with no call in between
# (pair_loop.c). RUNS rounds, the two kinds' order alternating by round;
# medians over rounds of each run's median block, with the rounds' range.
# Writes bench/results/ffi-pair.csv. Used by `make bench`.
#
#   RUNS=7 bench/ffi/pair.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
runs="${RUNS:-7}"
iterations="${ITERATIONS:-2000000}"
out="${OUT:-$root/bench/results/ffi-pair.csv}"
policy="$root/bench/preload/priority.toml"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cd "$root"
cargo build --release -q -p paio-ffi
[ -f "$target/release/libpaio.so" ] || { echo "pair.sh: $target/release/libpaio.so was not built" >&2; exit 1; }
cc -O2 -Wall -I"$root/crates/paio-ffi/include" -o "$work/pair_loop" \
    "$here/pair_loop.c" -L"$target/release" -lpaio -Wl,-rpath,"$target/release"

normal="" critical=""
for ((r = 1; r <= runs; r++)); do
    kinds=(normal critical)
    ((r % 2)) || kinds=(critical normal)
    for k in "${kinds[@]}"; do
        arg=""
        [ "$k" = critical ] && arg=critical
        v=$("$work/pair_loop" "$policy" "$iterations" $arg | cut -d' ' -f1)
        if [ "$k" = critical ]; then critical+="$v "; else normal+="$v "; fi
    done
    echo "C ABI pair: round $r/$runs done" >&2
done

# shellcheck source=../common.sh
. "$root/bench/common.sh"
{
    results_header "the C ABI's two-phase pair (paio_stage_admit + paio_stage_complete), ns per pair" \
        "bench/ffi/pair.sh (RUNS=$runs ITERATIONS=$iterations)"
    echo "# clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo unknown)"
    echo "# note: one thread, a 4 KiB read context through one priority object (bench/preload/priority.toml), no call between the phases; each run's figure is the median over blocks of 10000 pairs; critical = the thread marked with paio_set_thread_critical"
    echo "case,runs,median_ns,min_ns,max_ns"
    echo "pair_normal,$runs,$(echo "$normal" | median),$(echo "$normal" | range)"
    echo "pair_critical,$runs,$(echo "$critical" | median),$(echo "$critical" | range)"
} > "$out"
cat "$out"
