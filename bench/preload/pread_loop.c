/* The interposer overhead benchmark's client.
 *
 *   pread_loop FILE SIZE ITERATIONS
 *       times ITERATIONS preads of SIZE bytes at offset 0 of FILE (page-cached
 *       after a warm-up) and prints the mean ns per call. run.sh runs it with
 *       and without LD_PRELOAD.
 *
 *   pread_loop FILE SIZE ITERATIONS paired
 *       under LD_PRELOAD: alternates blocks of BLOCK calls through `pread`
 *       (the interposer's) and through libc's own pread (looked up in
 *       libc.so.6, so the interposer is bypassed) in one process, and prints
 *       "interposed_ns direct_ns added_ns": the means per call and the median
 *       over block pairs of the per-pair difference. Both sides share the
 *       process, its caches and the CPU's clock at that moment, so drift
 *       between separate runs does not enter the difference. Successive
 *       pairs read into buffers at OFFSETS different offsets within a page
 *       (steps of 4096 / OFFSETS bytes): which cache sets, and which low 12
 *       address bits, a buffer shares with the interposer's data is an
 *       accident of layout that ASLR does not vary (it moves whole pages),
 *       and it changes the cost of the first loads after the kernel's copy
 *       by several ns; cycling the offset measures the typical cost rather
 *       than one accident. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "paired.h"

#define BLOCK 10000
#define OFFSETS 8

typedef ssize_t (*pread_fn)(int, void *, size_t, off_t);

/* Mean ns per call of `n` preads through `f`; -1 on a short read. */
static double time_block(pread_fn f, int fd, char *buf, size_t size, long n) {
    double start = now_ns();
    for (long i = 0; i < n; i++) {
        if (f(fd, buf, size, 0) != (ssize_t)size) {
            return -1;
        }
    }
    return (now_ns() - start) / (double)n;
}

struct sides {
    pread_fn direct;
    int fd;
    char *area;
    size_t size;
};

/* Successive pairs read into buffers at OFFSETS offsets within a page. */
static double block(void *arg, int interposed, long pair) {
    const struct sides *s = arg;
    char *b = s->area + (pair / 2 % OFFSETS) * (4096 / OFFSETS);
    return time_block(interposed ? pread : s->direct, s->fd, b, s->size, BLOCK);
}

int main(int argc, char **argv) {
    if (argc != 4 && !(argc == 5 && strcmp(argv[4], "paired") == 0)) {
        fprintf(stderr, "usage: %s FILE SIZE ITERATIONS [paired]\n", argv[0]);
        return 2;
    }
    size_t size = strtoul(argv[2], NULL, 10);
    long iterations = strtol(argv[3], NULL, 10);
    char *buf = malloc(size ? size : 1);
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0 || !buf || iterations <= 0) {
        perror("pread_loop: setup");
        return 1;
    }
    if (time_block(pread, fd, buf, size, iterations / 10 + 1) < 0) {
        perror("pread_loop: warm-up pread");
        return 1;
    }
    if (argc == 4) {
        double per_call = time_block(pread, fd, buf, size, iterations);
        if (per_call < 0) {
            perror("pread_loop: pread");
            return 1;
        }
        printf("%.2f\n", per_call);
        return 0;
    }

    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    pread_fn direct = libc ? (pread_fn)dlsym(libc, "pread") : NULL;
    if (!direct || direct == pread) {
        fprintf(stderr, "pread_loop: cannot find libc's own pread\n");
        return 1;
    }
    long pairs = iterations / BLOCK;
    if (pairs < 1) {
        pairs = 1;
    }
    char *area = aligned_alloc(4096, 2 * 4096 + (size ? size : 1));
    if (!area || time_block(direct, fd, area, size, BLOCK) < 0) {
        perror("pread_loop: setup");
        return 1;
    }
    struct sides sides = {direct, fd, area, size};
    int rc = paired_report(pairs, block, &sides, "pread_loop: pread");
    free(area);
    close(fd);
    free(buf);
    return rc;
}
