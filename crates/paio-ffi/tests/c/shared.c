/*
 * Limits shared by processes through libpaio (`shared` on a drl, the
 * buckets in the file PAIO_SHARED names). run.sh runs it:
 *   - `shared N`: N requests through a shared bucket of 100 ops/s (burst 1),
 *     printing how long they took; two processes at once share the rate;
 *   - `refused`: without PAIO_SHARED the policy is refused, saying why.
 */
#define _POSIX_C_SOURCE 200809L
#include <paio.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *POLICY =
    "[stage]\n"
    "default_channel = \"all\"\n"
    "[[channel]]\n"
    "name = \"all\"\n"
    "default_object = \"limit\"\n"
    "[[channel.object]]\n"
    "name = \"limit\"\n"
    "kind = \"drl\"\n"
    "rate = \"100 ops/s\"\n"
    "burst = 1\n"
    "shared = \"ops\"\n";

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    paio_stage *stage = NULL;
    paio_context ctx;
    paio_status s;
    double start;
    int i, n;

    if (argc == 2 && strcmp(argv[1], "refused") == 0) {
        s = paio_stage_from_policy(POLICY, "shared-policy", &stage);
        if (s != PAIO_ERR_POLICY || stage != NULL || !strstr(paio_last_error(), "PAIO_SHARED")) {
            fprintf(stderr, "expected PAIO_ERR_POLICY naming PAIO_SHARED, got %s: %s\n",
                    paio_status_str(s), paio_last_error());
            return 1;
        }
        return 0;
    }
    if (argc != 3 || strcmp(argv[1], "shared") != 0) {
        fprintf(stderr, "usage: shared refused | shared shared N\n");
        return 2;
    }
    n = atoi(argv[2]);
    s = paio_stage_from_policy(POLICY, "shared-policy", &stage);
    if (s != PAIO_OK) {
        fprintf(stderr, "paio_stage_from_policy: %s: %s\n", paio_status_str(s), paio_last_error());
        return 1;
    }
    start = now_s();
    for (i = 0; i < n; i++) {
        if (paio_context_new(PAIO_REQ_WRITE, 0, &ctx) != PAIO_OK ||
            paio_stage_enforce(stage, &ctx, NULL, 0, NULL) != PAIO_OK) {
            fprintf(stderr, "enforce: %s\n", paio_last_error());
            return 1;
        }
    }
    printf("%.3f\n", now_s() - start);
    paio_stage_free(stage);
    return 0;
}
