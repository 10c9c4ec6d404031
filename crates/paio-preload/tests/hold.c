/* Holds one request admitted through libpaio's C ABI, for the board's
 * tests: builds a stage from the policy file argv[1], admits a 4 KiB read
 * (critical if argv[2] is "critical"), says "admitted" on stdout, waits for
 * a byte on stdin, completes the request and exits 0. Its stage maps the
 * board PAIO_BOARD names, as a program under the interposer does, so the
 * admitted request is in flight on the board for as long as it is held: a
 * storage request that is in flight at the test's will. */
#include <paio.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    paio_stage *stage = NULL;
    paio_context ctx;
    paio_ticket ticket;
    char byte;
    if (argc < 2) {
        fprintf(stderr, "usage: hold POLICY [critical]\n");
        return 2;
    }
    if (paio_stage_from_policy_file(argv[1], &stage) != PAIO_OK ||
        paio_context_new(PAIO_REQ_READ, 4096, &ctx) != PAIO_OK) {
        fprintf(stderr, "hold: %s\n", paio_last_error());
        return 1;
    }
    if (argc > 2 && strcmp(argv[2], "critical") == 0) {
        ctx.criticality = PAIO_CRITICAL;
    }
    if (paio_stage_admit(stage, &ctx, &ticket) != PAIO_OK) {
        fprintf(stderr, "hold: %s\n", paio_last_error());
        return 1;
    }
    printf("admitted\n");
    fflush(stdout);
    if (read(0, &byte, 1) != 1) {
        return 1;
    }
    paio_stage_complete(stage, &ticket, 4096);
    paio_stage_free(stage);
    return 0;
}
