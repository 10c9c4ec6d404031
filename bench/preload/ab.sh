#!/usr/bin/env bash
# Before/after comparison of the request path's cost for two builds of paio
# (two cargo target directories holding release builds of paio-bench,
# libpaio_preload.so and libpaio.so), in one session: ROUNDS rounds, the
# builds' order alternating from round to round; each round runs, per build,
# `paio-bench criticality --runs 3` (the two-phase pair through the core) and
# pread_loop's in-process paired figure under the interposer with every call
# through a priority object, non-critical and with PAIO_CRITICAL=1 (0 B
# preads, ns added per call over libc's own pread), and the C ABI's pair
# through the same object (bench/ffi/pair_loop.c: ffi_pair_normal,
# ffi_pair_critical, ns per pair). Prints one line per
# measurement and a summary (median over rounds, with the rounds' range)
# into OUT/ab.txt, headed by the command, date, machine and commits.
#
#   bench/preload/ab.sh A_TARGET_DIR A_NAME B_TARGET_DIR B_NAME [ROUNDS]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
[ $# -ge 4 ] || { sed -n 2,13p "$0" >&2; exit 2; }
declare -A dir=([a]="$1" [b]="$3") name=([a]="$2" [b]="$4")
rounds="${5:-4}"
out="${OUT:-$root/bench/results/criticality-fastpath}"
for k in a b; do
    for f in paio-bench libpaio_preload.so libpaio.so; do
        [ -f "${dir[$k]}/release/$f" ] || { echo "ab.sh: ${dir[$k]}/release/$f is missing (cargo build --release)" >&2; exit 2; }
    done
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cc -O2 -o "$work/pread_loop" "$here/pread_loop.c" -ldl
for k in a b; do
    cc -O2 -I"$root/crates/paio-ffi/include" -o "$work/pair_loop_$k" \
        "$root/bench/ffi/pair_loop.c" -L"${dir[$k]}/release" -lpaio -Wl,-rpath,"${dir[$k]}/release"
done
head -c 1048576 /dev/urandom > "$work/file"

mkdir -p "$out"
log="$out/ab.txt"
{
    echo "# command: bench/preload/ab.sh $* (ROUNDS=$rounds)"
    echo "# date_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# machine: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo), $(nproc) cores, kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# a = ${name[a]}: ${dir[a]}; b = ${name[b]}: ${dir[b]}"
    echo "# paio source: commit $(git -C "$root" rev-parse --short HEAD)"
    echo "# lines: round build item ns"
} > "$log"

for ((r = 1; r <= rounds; r++)); do
    order=(a b)
    ((r % 2)) || order=(b a)
    for k in "${order[@]}"; do
        "${dir[$k]}/release/paio-bench" criticality --runs 3 --out "$work" 2>&1 |
            awk -v r="$r" -v n="${name[$k]}" '/^ +(pair_|clock_ticks)/ {print r, n, $1, $2}' >> "$log"
        lib="${dir[$k]}/release/libpaio_preload.so"
        for c in priority critical; do
            crit=0
            [ "$c" = critical ] && crit=1
            v=$(env LD_PRELOAD="$lib" PAIO_POLICY="$here/priority.toml" PAIO_CRITICAL=$crit \
                "$work/pread_loop" "$work/file" 0 2000000 paired)
            echo "$r ${name[$k]} preload_$c $(echo "$v" | cut -d' ' -f3)" >> "$log"
        done
        for c in normal critical; do
            arg=""
            [ "$c" = critical ] && arg=critical
            v=$("$work/pair_loop_$k" "$here/priority.toml" 2000000 $arg)
            echo "$r ${name[$k]} ffi_pair_$c $(echo "$v" | cut -d' ' -f1)" >> "$log"
        done
    done
    echo "ab.sh: round $r/$rounds done" >&2
done

{
    echo
    echo "# summary: item, then per build the median over rounds (min..max)"
    awk '!/^#/ && NF == 4 {v[$3 " " $2] = v[$3 " " $2] " " $4; items[$3] = 1; builds[$2] = 1}
        END {
            for (i in items) {
                line = i
                for (b in builds) {
                    n = split(v[i " " b], a, " ")
                    for (x = 1; x <= n; x++) for (y = x + 1; y <= n; y++) if (a[y] + 0 < a[x] + 0) {t = a[x]; a[x] = a[y]; a[y] = t}
                    med = (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
                    line = line sprintf("  %s %.1f (%s..%s)", b, med, a[1], a[n])
                }
                print line
            }
        }' "$log" | sort
} >> "$log"
tail -n +1 "$log" | sed -n '/# summary/,$p'
echo "wrote $log" >&2
