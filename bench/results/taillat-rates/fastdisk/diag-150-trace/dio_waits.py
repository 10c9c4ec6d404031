"""Where the driver's threads waited, from `perf sched timehist -g --state`
lines of taillat_driver (grep taillat_driver): each line is a switch-out
with its kernel stack; the thread's next line gives how long it was off the
CPU after it. Prints the distribution of the waits that followed a switch-out
in a direct read (`__iomap_dio_rw`: the read's bio submitted, its completion
awaited), and the stacks of all waits over 3 ms that were not sleeps
between requests (nanosleep).

    python3 dio_waits.py th.txt
"""
import collections
import re
import sys

PAT = re.compile(r"^\s*([\d.]+)\s+\[(\d+)\]\s+taillat_driver\[(\d+)/\d+\]\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)"
                 r"\s+(\S)\s+(.*)$")


def main():
    last, waits = {}, []
    long_by_stack = collections.defaultdict(lambda: [0, 0.0])
    for line in open(sys.argv[1]):
        m = PAT.match(line)
        if not m:
            continue
        tid, wait, state, chain = m.group(3), float(m.group(4)), m.group(7), m.group(8).strip()
        if tid in last:
            prev_state, prev_chain = last[tid]
            if "__iomap_dio_rw" in prev_chain:
                waits.append(wait)
            if wait > 3.0 and "nanosleep" not in prev_chain:
                s = long_by_stack[(prev_state, " <- ".join(prev_chain.split(" <- ")[:5]))]
                s[0] += 1
                s[1] += wait
        last[tid] = (state, chain)
    waits.sort()
    n = len(waits)
    print(f"waits after a switch-out in a direct read: {n}")
    print(f"p50 {waits[n // 2]:.3f} p99 {waits[int(.99 * n)]:.3f} p99.9 {waits[int(.999 * n)]:.3f} "
          f"max {waits[-1]:.2f} ms")
    edges = [0, 0.5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 100]
    for a, b in zip(edges, edges[1:]):
        print(f"  [{a:4}, {b:4}) ms: {sum(1 for w in waits if a <= w < b):6}")
    print("waits over 3 ms (not nanosleep) by the stack they left from:")
    for (state, stack), (k, total) in sorted(long_by_stack.items(), key=lambda kv: -kv[1][1]):
        print(f"  {k:5} waits, {total:9.1f} ms | {state} {stack}")


if __name__ == "__main__":
    main()
