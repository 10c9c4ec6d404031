/* Shared by the interposer benchmarks' clients (pread_loop.c, meta_loop.c):
 * the clock, and the paired method: blocks through the interposed calls
 * alternating with blocks through libc's own, and the median of the
 * per-pair differences. */
#ifndef PAIO_BENCH_PAIRED_H
#define PAIO_BENCH_PAIRED_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of `v[0 .. n)` (n >= 1); sorts `v`. */
static inline double median(double *v, long n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One block of the paired method, in pair `pair`: the mean ns per operation
 * through the interposed calls (`interposed` != 0) or libc's own; < 0 when a
 * call failed (errno set). */
typedef double (*paired_block)(void *arg, int interposed, long pair);

/* Runs `pairs` (>= 1) pairs of blocks, alternating which side goes first so
 * that neither always follows the other, and prints "interposed_ns
 * direct_ns added_ns": the means per operation and the median over pairs
 * of the per-pair difference. Returns 0, or 1 after perror(what) when a
 * block failed. */
static inline int paired_report(long pairs, paired_block block, void *arg, const char *what) {
    double *diff = malloc(sizeof(double) * (size_t)pairs);
    double sum_i = 0, sum_d = 0;
    if (!diff) {
        perror(what);
        return 1;
    }
    for (long p = 0; p < pairs; p++) {
        double t_i, t_d;
        if (p % 2 == 0) {
            t_i = block(arg, 1, p);
            t_d = block(arg, 0, p);
        } else {
            t_d = block(arg, 0, p);
            t_i = block(arg, 1, p);
        }
        if (t_i < 0 || t_d < 0) {
            perror(what);
            free(diff);
            return 1;
        }
        sum_i += t_i;
        sum_d += t_d;
        diff[p] = t_i - t_d;
    }
    double med = median(diff, pairs);
    printf("%.2f %.2f %.2f\n", sum_i / pairs, sum_d / pairs, med);
    free(diff);
    return 0;
}

#endif
