#!/usr/bin/env bash
# Interposer overhead (issue 3): one 0 B and one 4 KiB pread on a page-cached
# file, timed without the interposer, with its pass-through default, and with
# file classification plus a Noop channel, and through a priority object as
# a non-critical and as a critical request (issue 11). Reports the median ns per call over
# RUNS interleaved runs, the overhead against no interposer, and instructions
# per call counted with valgrind's callgrind where valgrind is installed
# (perf has no hardware counters on these VMs). The overhead is measured two
# ways: across processes (median with the interposer minus median without),
# and paired inside one process (pread_loop ... paired: blocks through the
# interposer alternate with blocks through libc's own pread; the median of
# the per-pair differences, then the median over runs), which cancels the
# drift between runs that dominates the first figure on a shared VM. Writes
# bench/results/preload.csv. Then the small-files case (issue 13): meta_loop
# times what `tar c` does per small file (fstatat twice, openat, fstat, read,
# close), paired the same way, and the added ns per file and its share of
# the file's cost go to bench/results/preload-smallfiles.csv, without and
# with a statistics file (which makes every metadata call counted), and
# under the policy of `paio run --limit` (pipes and sockets classified:
# one fstat per open). Last,
# GNU tar as a whole (tar_cpu.py): over 20,000 small files (preload-tar.csv;
# with statistics files, preload-tar-stats.csv), over an empty directory for
# the library's start and exit (preload-start.csv), and the same writing
# statistics files (preload-start-stats.csv). Copy calls (copy_loop.c:
# 4 KiB splices through a pipe and copy_file_range, paired the same way,
# with the default policy and under a rate in bytes) go to
# preload-copy.csv; stdio byte by byte and formatted (stdio_loop.c: fputc,
# the inline putc_unlocked, fprintf, the inline getc_unlocked, paired the
# same way) to preload-stdio.csv, and whole programs doing so
# (stdio_programs.py: cut, mawk, od) to preload-stdio-programs.csv. Used by
# `make bench`.
#
#   RUNS=7 ITERATIONS=2000000 bench/preload/run.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
runs="${RUNS:-7}"
iterations="${ITERATIONS:-2000000}"
out="${OUT:-$root/bench/results/preload.csv}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cd "$root"
cargo build --release -q -p paio-preload
lib="$target/release/libpaio_preload.so"
[ -f "$lib" ] || { echo "run.sh: $lib was not built" >&2; exit 1; }
cc -O2 -o "$work/pread_loop" "$here/pread_loop.c" -ldl
cc -O2 -o "$work/meta_loop" "$here/meta_loop.c" -ldl
cc -O2 -o "$work/copy_loop" "$here/copy_loop.c" -ldl
cc -O2 -o "$work/stdio_loop" "$here/stdio_loop.c" -ldl

mkdir -p "$work/data" "$work/small" "$work/stats"
head -c 1048576 /dev/urandom > "$work/data/file"
for ((i = 0; i < 64; i++)); do head -c $((100 + i * 37)) /dev/urandom > "$work/small/f$i"; done
cat > "$work/classified.toml" <<POLICY
[stage]
name = "overhead"
default_channel = "other"

[[channel]]
name = "data-reads"
match = { file_class = "data", request_type = "read" }
default_object = "pass"

[[channel.object]]
name = "pass"
kind = "noop"

[[channel]]
name = "other"
POLICY

# A rate in bytes on reads, too high to make anything wait: what a copy
# call pays to find its size before the call.
cat > "$work/bytes.toml" <<POLICY
[[channel]]
name = "read"
match = { request_type = "read" }
default_object = "rate"

[[channel.object]]
name = "rate"
kind = "drl"
rate = "100GiB/s"
POLICY

# The policy of `paio run --limit write=...` without its shared bucket: a
# DRL on writes, too high to make anything wait, and pipes and sockets (the
# file class `stream`) left out of it; naming the class makes the library
# look at every descriptor an open returns (one fstat).
cat > "$work/limited.toml" <<POLICY
[[channel]]
name = "write"
match = { request_type = "write" }
default_object = "limit"

[[channel.object]]
name = "limit"
kind = "drl"
rate = "100GiB/s"

[[channel.object]]
name = "streams"
kind = "noop"
match = { file_class = "stream" }
POLICY

# setup NAME: the environment of each configuration.
env_for() {
    case "$1" in
        none) echo "" ;;
        passthrough) echo "LD_PRELOAD=$lib" ;;
        counted) echo "LD_PRELOAD=$lib PAIO_STATS=$work/stats/%p.json" ;;
        classified) echo "LD_PRELOAD=$lib PAIO_POLICY=$work/classified.toml PAIO_FILE_CLASSES=data=$work/data" ;;
        priority) echo "LD_PRELOAD=$lib PAIO_POLICY=$here/priority.toml" ;;
        critical) echo "LD_PRELOAD=$lib PAIO_POLICY=$here/priority.toml PAIO_CRITICAL=1" ;;
        bytes) echo "LD_PRELOAD=$lib PAIO_POLICY=$work/bytes.toml" ;;
        limited) echo "LD_PRELOAD=$lib PAIO_POLICY=$work/limited.toml" ;;
    esac
}

# paired_round ROUND ADDED DIRECT PROGRAM INPUT COUNT SETUP... -- PATTERN...:
# one round of a paired client (meta_loop, copy_loop: "PROGRAM INPUT COUNT
# PATTERN" prints "interposed_ns direct_ns added_ns") under each setup and
# pattern, the setups' order rotating by one each round; its figures are
# appended to the associative arrays named ADDED and DIRECT (keys
# "setup,pattern").
paired_round() {
    local round="$1" program="$4" input="$5" count="$6" c pattern v
    local -n added_to="$2" direct_to="$3"
    shift 6
    local setups=()
    while [ "$1" != -- ]; do setups+=("$1"); shift; done
    shift
    local by=$(((round - 1) % ${#setups[@]}))
    for c in "${setups[@]:by}" "${setups[@]:0:by}"; do
        for pattern in "$@"; do
            # shellcheck disable=SC2046
            v=$(env $(env_for "$c") "$program" "$input" "$count" "$pattern")
            added_to[$c,$pattern]+="$(echo "$v" | cut -d' ' -f3) "
            direct_to[$c,$pattern]+="$(echo "$v" | cut -d' ' -f2) "
        done
    done
}

configs=(none passthrough classified priority critical)
sizes=(0 4096)
files="${FILES:-200000}"
# What tar does per file writing an archive, and for `tar cf /dev/null`.
patterns=(archive devnull)
copy_patterns=(splice copy)
stdio_patterns=(fputc inline fprintf getc)
declare -A samples paired small_added small_direct copy_added copy_direct stdio_added stdio_direct
for ((r = 1; r <= runs; r++)); do
    # The configurations' order rotates by one each round.
    shift_by=$(((r - 1) % ${#configs[@]}))
    order=("${configs[@]:shift_by}" "${configs[@]:0:shift_by}")
    for size in "${sizes[@]}"; do
        for c in "${order[@]}"; do
            # shellcheck disable=SC2046
            v=$(env $(env_for "$c") "$work/pread_loop" "$work/data/file" "$size" "$iterations")
            samples[$c,$size]+="$v "
            if [ "$c" != none ]; then
                # shellcheck disable=SC2046
                v=$(env $(env_for "$c") "$work/pread_loop" "$work/data/file" "$size" "$iterations" paired)
                paired[$c,$size]+="$(echo "$v" | cut -d' ' -f3) "
            fi
        done
    done
    # Small files, then copy calls (sendfile, copy_file_range, splice).
    paired_round "$r" small_added small_direct "$work/meta_loop" "$work/small" "$files" \
        passthrough counted classified limited -- "${patterns[@]}"
    paired_round "$r" copy_added copy_direct "$work/copy_loop" "$work/data/file" \
        "${COPIES:-200000}" passthrough bytes -- "${copy_patterns[@]}"
    paired_round "$r" stdio_added stdio_direct "$work/stdio_loop" "$work/data/file" \
        "${STDIO_OPS:-4000000}" passthrough counted -- "${stdio_patterns[@]}"
    echo "preload overhead: run $r/$runs done" >&2
done

# shellcheck source=../common.sh
. "$root/bench/common.sh"

# Instructions per call: callgrind's total for 2N minus N calls, over N.
instructions() {
    local c="$1" size="$2" n=20000 a b
    command -v valgrind >/dev/null || { echo "n/a"; return; }
    a=$(env $(env_for "$c") valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        "$work/pread_loop" "$work/data/file" "$size" "$n" 2>&1 >/dev/null | awk '/Collected/ {print $4}')
    b=$(env $(env_for "$c") valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        "$work/pread_loop" "$work/data/file" "$size" $((2 * n)) 2>&1 >/dev/null | awk '/Collected/ {print $4}')
    if [ -n "$a" ] && [ -n "$b" ]; then
        # The warm-up runs n/10 + 1 calls too: (2n + 2n/10) - (n + n/10) = 1.1 n.
        awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN {printf "%.0f", (b - a) / (1.1 * n)}'
    else
        echo "n/a"
    fi
}

{
    results_header "interposer overhead: pread of SIZE bytes from a page-cached file, ns per call" \
        "bench/preload/run.sh (RUNS=$runs ITERATIONS=$iterations)"
    echo "# loadavg_start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# note: none = no LD_PRELOAD; passthrough = the interposer's embedded default (read/write/metadata Noop channels with statistics); classified = PAIO_FILE_CLASSES + a policy matching file_class and request_type to a Noop channel; priority = every call admitted and completed through a priority object (defaults), non-critical; critical = the same with PAIO_CRITICAL=1 (every call critical, on the shared board)"
    echo "# note: ns_median is the median over runs of the mean ns per call of each run; overhead_ns = ns_median - the none median at the same size; instructions_per_call from valgrind callgrind (total instructions for 2N calls minus N calls)"
    echo "# note: paired_overhead_ns is the median over runs of each run's in-process paired figure (median over pairs of 10000-call blocks of interposed minus libc-direct ns per call); paired_min/paired_max its range over runs"
    echo "config,size_bytes,runs,iterations,ns_median,ns_min,ns_max,overhead_ns,paired_overhead_ns,paired_min,paired_max,instructions_per_call,instructions_overhead"
} > "$out"

printf '\n%-12s %6s %10s %16s %10s %18s %14s\n' config size "ns/call" "min-max" "overhead" "paired (min-max)" "instr/call" >&2
for size in "${sizes[@]}"; do
    base=$(echo "${samples[none,$size]}" | median)
    base_ins=$(instructions none "$size")
    for c in "${configs[@]}"; do
        med=$(echo "${samples[$c,$size]}" | median)
        min=$(echo "${samples[$c,$size]}" | minimum)
        max=$(echo "${samples[$c,$size]}" | maximum)
        over=$(awk -v m="$med" -v b="$base" 'BEGIN {printf "%.2f", m - b}')
        if [ "$c" = none ]; then ins="$base_ins"; else ins=$(instructions "$c" "$size"); fi
        ins_over=$(awk -v i="$ins" -v b="$base_ins" 'BEGIN {if (i == "n/a" || b == "n/a") print "n/a"; else printf "%d", i - b}')
        if [ "$c" = none ]; then
            pmed=0.00 pmin=0.00 pmax=0.00
        else
            pmed=$(echo "${paired[$c,$size]}" | median)
            pmin=$(echo "${paired[$c,$size]}" | minimum)
            pmax=$(echo "${paired[$c,$size]}" | maximum)
        fi
        echo "$c,$size,$runs,$iterations,$med,$min,$max,$over,$pmed,$pmin,$pmax,$ins,$ins_over" >> "$out"
        printf '%-12s %6s %10s %16s %10s %18s %14s\n' "$c" "$size" "$med" "$min-$max" "+$over" "+$pmed ($pmin-$pmax)" "$ins (+$ins_over)" >&2
    done
done
echo "wrote $out" >&2

small_out="${SMALL_OUT:-$root/bench/results/preload-smallfiles.csv}"
{
    results_header "interposer cost per small file on page-cached 100-2.4 KiB files, ns per file: pattern archive is what tar c does per file writing an archive (fstatat x2, openat, fstat, read, close), devnull what tar cf /dev/null does (fstatat x2)" \
        "bench/preload/run.sh (RUNS=$runs FILES=$files)"
    echo "# note: paired in one process (meta_loop.c): blocks of 2000 files through the interposed calls alternate with blocks through libc's own; added_ns is the median over runs of each run's median per-pair difference; direct_ns the median over runs of libc's own ns per file; added_pct = added_ns / direct_ns"
    echo "# note: passthrough = the embedded default policy with nothing observing the counts (no PAIO_STATS, no PAIO_CONTROL: metadata calls skip the stage); counted = the same writing a statistics file (PAIO_STATS, as under paio run --summary or --stats: every metadata call counted); classified = PAIO_FILE_CLASSES + a policy with file classes, no statistics file; limited = the policy of paio run --limit write=... (a DRL on writes too high to wait, pipes and sockets left out: every open's descriptor looked at with one fstat), no statistics file"
    echo "config,pattern,runs,files,direct_ns,added_ns,added_min,added_max,added_pct"
} > "$small_out"
# paired_rows OUT COUNT ADDED DIRECT CONFIG... -- PATTERN...: for each
# configuration and pattern, the median, extremes and share of the paired
# figures kept in the associative arrays named ADDED and DIRECT (keys
# "config,pattern", space-separated samples), appended to OUT as a CSV row
# (COUNT in its fourth column) and shown on stderr.
paired_rows() {
    local out="$1" count="$2" c pattern d a amin amax pct
    local -n added_of="$3" direct_of="$4"
    shift 4
    local configs=()
    while [ "$1" != -- ]; do configs+=("$1"); shift; done
    shift
    printf '\n%-12s %-8s %12s %22s %10s\n' config pattern "direct ns" "added ns (min-max)" "added %" >&2
    for c in "${configs[@]}"; do
        for pattern in "$@"; do
            d=$(echo "${direct_of[$c,$pattern]}" | median)
            a=$(echo "${added_of[$c,$pattern]}" | median)
            amin=$(echo "${added_of[$c,$pattern]}" | minimum)
            amax=$(echo "${added_of[$c,$pattern]}" | maximum)
            pct=$(awk -v a="$a" -v d="$d" 'BEGIN {printf "%.2f", 100 * a / d}')
            echo "$c,$pattern,$runs,$count,$d,$a,$amin,$amax,$pct" >> "$out"
            printf '%-12s %-8s %12s %22s %10s\n' "$c" "$pattern" "$d" "+$a ($amin-$amax)" "$pct%" >&2
        done
    done
    echo "wrote $out" >&2
}
paired_rows "$small_out" "$files" small_added small_direct \
    passthrough counted classified limited -- "${patterns[@]}"

copy_out="${COPY_OUT:-$root/bench/results/preload-copy.csv}"
{
    results_header "interposer cost per call moving 4 KiB between two descriptors, page-cached: pattern splice is a splice from a file into a pipe then from the pipe into a file (per call), copy a copy_file_range from file to file" \
        "bench/preload/run.sh (RUNS=$runs COPIES=${COPIES:-200000})"
    echo "# note: paired in one process (copy_loop.c): blocks of 2000 calls (splice: 2000 pairs) through the interposed calls alternate with blocks through libc's own; added_ns is the median over runs of each run's median per-pair difference; direct_ns the median over runs of libc's own ns per call; added_pct = added_ns / direct_ns"
    echo "# note: passthrough = the embedded default policy, no statistics file (the read admitted before the call without its size, completed with what moved); bytes = a drl in bytes on reads at 100 GiB/s (never waits): the read is admitted with the most the call can move, found with fstat, lseek, FIONREAD and F_GETPIPE_SZ"
    echo "config,pattern,runs,calls,direct_ns,added_ns,added_min,added_max,added_pct"
} > "$copy_out"
paired_rows "$copy_out" "${COPIES:-200000}" copy_added copy_direct \
    passthrough bytes -- "${copy_patterns[@]}"

stdio_out="${STDIO_OUT:-$root/bench/results/preload-stdio.csv}"
{
    results_header "interposer cost per stdio operation: pattern fputc is one fputc call to a fully buffered stream on /dev/null, inline one putc_unlocked there (the macro <stdio.h> inlines: a call to __overflow once per 4 KiB), fprintf one fprintf(stream, \"%ld\\n\", i) there, getc one getc_unlocked (inline: __uflow once per buffer) from a page-cached 1 MiB file read over and over" \
        "bench/preload/run.sh (RUNS=$runs STDIO_OPS=${STDIO_OPS:-4000000})"
    echo "# note: paired in one process (stdio_loop.c): blocks of 20000 operations through the interposed calls alternate with blocks through libc's own (the inline patterns call libc's __overflow/__uflow directly); added_ns is the median over runs of each run's median per-pair difference; direct_ns the median over runs of libc's own ns per operation; added_pct = added_ns / direct_ns"
    echo "# note: passthrough = the embedded default policy, no statistics file; counted = the same writing a statistics file (PAIO_STATS)"
    echo "config,pattern,runs,operations,direct_ns,added_ns,added_min,added_max,added_pct"
} > "$stdio_out"
paired_rows "$stdio_out" "${STDIO_OPS:-4000000}" stdio_added stdio_direct \
    passthrough counted -- "${stdio_patterns[@]}"

# The whole program the issue measured: GNU tar archiving 20,000 small files
# to /dev/null, CPU time with and without the interposer, paired.
python3 "$here/tar_cpu.py" --lib "$lib" --runs "${TAR_RUNS:-$((runs * 40))}" \
    --out "${TAR_OUT:-$root/bench/results/preload-tar.csv}"
# The same with every metadata call counted: each interposed run writes its
# statistics file (as under `paio run --stats` or `--summary`).
python3 "$here/tar_cpu.py" --lib "$lib" --runs "${TAR_RUNS:-$((runs * 40))}" --stats \
    --out "${TAR_STATS_OUT:-$root/bench/results/preload-tar-stats.csv}"
# The library's start and exit alone: the same tar on an empty directory.
python3 "$here/tar_cpu.py" --lib "$lib" --runs "${START_RUNS:-$((runs * 60))}" --empty \
    --out "${START_OUT:-$root/bench/results/preload-start.csv}"
# The same, each interposed run writing its statistics file (as under
# `paio run --stats` or `--summary`).
python3 "$here/tar_cpu.py" --lib "$lib" --runs "${START_RUNS:-$((runs * 60))}" --empty --stats \
    --out "${START_STATS_OUT:-$root/bench/results/preload-start-stats.csv}"
# Whole programs moving their bytes through stdio a byte or a line at a
# time (cut, mawk, od), with and without the interposer.
python3 "$here/stdio_programs.py" --lib "$lib" --pairs "${STDIO_PAIRS:-$((runs * 4))}" \
    --out "${STDIO_PROGRAMS_OUT:-$root/bench/results/preload-stdio-programs.csv}"
