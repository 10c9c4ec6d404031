# Shared by the shell benchmarks (bench/preload/run.sh, bench/preload/locks.sh,
# bench/ffi/pair.sh); sourced, needs `root` (the repository) set.

# Of the space-separated numbers on stdin: one per line in order, the
# median, the least, the largest, and "least,largest".
sorted() { tr ' ' '\n' | grep -v '^$' | sort -g; }
median() { sorted | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
minimum() { sorted | head -1; }
maximum() { sorted | tail -1; }
range() { local s; s=$(sorted); echo "$(echo "$s" | head -1),$(echo "$s" | tail -1)"; }

# results_header WHAT COMMAND: the lines every results CSV starts with (what
# it measures, the command that wrote it, when, where, on which commit).
results_header() {
    echo "# benchmark: $1"
    echo "# command: $2"
    echo "# date_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# host: $(hostname)"
    echo "# cpu: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo); cores: $(nproc)"
    echo "# kernel: $(uname -r)"
    echo "# paio: commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
}
