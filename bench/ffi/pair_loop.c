/* The C ABI's two-phase pair, as a C caller (the RocksDB plugin) pays it.
 *
 *   pair_loop POLICY ITERATIONS [critical]
 *
 * builds a stage from the policy file POLICY (bench/preload/priority.toml:
 * every request through one priority object), then times ITERATIONS
 * `paio_stage_admit` + `paio_stage_complete` pairs of a 4 KiB read context
 * on one thread, in blocks of BLOCK pairs, and prints the median ns per pair
 * over the blocks, then the smallest and largest block. With `critical`
 * the thread is marked critical first (`paio_set_thread_critical`), so the
 * pairs are critical requests. No call is issued between the phases: the
 * figure is the pair's own cost (its two latency timestamps included).
 * Exit 1 with the failing call named if libpaio refuses anything. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../preload/paired.h"
#include "paio.h"

#define BLOCK 10000

static int fail(const char *what) {
    fprintf(stderr, "pair_loop: %s failed: %s\n", what, paio_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 4 || (argc == 4 && strcmp(argv[3], "critical") != 0)) {
        fprintf(stderr, "usage: pair_loop POLICY ITERATIONS [critical]\n");
        return 2;
    }
    long n = atol(argv[2]);
    if (n < BLOCK) {
        fprintf(stderr, "pair_loop: ITERATIONS must be at least %d\n", BLOCK);
        return 2;
    }
    paio_stage *stage = NULL;
    if (paio_stage_from_policy_file(argv[1], &stage) != PAIO_OK) {
        return fail("paio_stage_from_policy_file");
    }
    if (argc == 4 && paio_set_thread_critical(1) != PAIO_OK) {
        return fail("paio_set_thread_critical");
    }
    paio_context ctx;
    if (paio_context_new(PAIO_REQ_READ, 4096, &ctx) != PAIO_OK) {
        return fail("paio_context_new");
    }
    long blocks = n / BLOCK;
    double *ns = malloc(sizeof(double) * (size_t)blocks);
    if (!ns) {
        perror("pair_loop");
        return 1;
    }
    /* One warm-up block: the thread's table cache, its counter slot. */
    for (long b = -1; b < blocks; b++) {
        double start = now_ns();
        for (long i = 0; i < BLOCK; i++) {
            paio_ticket t;
            if (paio_stage_admit(stage, &ctx, &t) != PAIO_OK) {
                return fail("paio_stage_admit");
            }
            if (paio_stage_complete(stage, &t, 4096) != PAIO_OK) {
                return fail("paio_stage_complete");
            }
        }
        if (b >= 0) {
            ns[b] = (now_ns() - start) / BLOCK;
        }
    }
    double lo = ns[0], hi = ns[0];
    for (long b = 1; b < blocks; b++) {
        lo = ns[b] < lo ? ns[b] : lo;
        hi = ns[b] > hi ? ns[b] : hi;
    }
    printf("%.2f %.2f %.2f\n", median(ns, blocks), lo, hi);
    free(ns);
    paio_stage_free(stage);
    return 0;
}
