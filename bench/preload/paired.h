/* Shared by the interposer benchmarks' clients (pread_loop.c, meta_loop.c):
 * the clock and the median of the per-pair differences. */
#ifndef PAIO_BENCH_PAIRED_H
#define PAIO_BENCH_PAIRED_H

#include <stdlib.h>
#include <time.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of `v[0 .. n)` (n >= 1); sorts `v`. */
static double median(double *v, long n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#endif
