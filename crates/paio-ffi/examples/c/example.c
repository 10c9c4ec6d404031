/*
 * A complete libpaio program: a stage that rate-limits the writes a
 * background "flush" job issues, while the foreground's requests pass.
 *
 * Build: cc -std=c99 example.c $(pkg-config --cflags --libs paio)
 * (crates/paio-ffi/tests/c/run.sh compiles and runs it on every test run.)
 */
#include <paio.h>

#include <stdio.h>
#include <stdlib.h>

/* Prints the failed call and libpaio's message, then exits. */
static void check(paio_status status, const char *what) {
    if (status != PAIO_OK) {
        fprintf(stderr, "%s failed: %s: %s\n", what, paio_status_str(status), paio_last_error());
        exit(1);
    }
}

static const char *POLICY =
    "[stage]\n"
    "name = \"example\"\n"
    "default_channel = \"foreground\"\n"
    "\n"
    "[[channel]]\n"
    "name = \"foreground\"\n"
    "\n"
    "[[channel]]\n"
    "name = \"background\"\n"
    "match = { request_context = \"flush\" }\n"
    "default_object = \"limit\"\n"
    "[[channel.object]]\n"
    "name = \"limit\"\n"
    "kind = \"drl\"\n"
    "rate = \"64MiB/s\"\n";

int main(void) {
    paio_stage *stage = NULL;
    paio_context ctx;
    paio_outcome outcome;
    uint16_t flush;
    char block[4096] = {0};
    char *stats = NULL;
    int i;

    check(paio_stage_from_policy(POLICY, "example-policy", &stage), "paio_stage_from_policy");

    /* Where the flush job starts: tag this thread's requests. */
    check(paio_request_context("flush", &flush), "paio_request_context");
    check(paio_set_request_context(flush), "paio_set_request_context");
    for (i = 0; i < 256; i++) {
        /* Before each write(2) of the flush job. */
        check(paio_context_new(PAIO_REQ_WRITE, sizeof block, &ctx), "paio_context_new");
        check(paio_stage_enforce(stage, &ctx, block, sizeof block, &outcome), "paio_stage_enforce");
        if (outcome.data != NULL) {
            /* An object transformed the content: write outcome.data instead. */
            paio_outcome_free(&outcome);
        }
    }
    check(paio_clear_request_context(), "paio_clear_request_context");

    /* A foreground read: no request context, default channel, no limit. */
    check(paio_context_new(PAIO_REQ_READ, sizeof block, &ctx), "paio_context_new");
    check(paio_stage_enforce(stage, &ctx, NULL, 0, NULL), "paio_stage_enforce");

    /* A control plane would call these periodically. */
    check(paio_stage_apply(stage,
                           "{\"rule\":\"configure\",\"channel\":\"background\",\"object\":\"limit\","
                           "\"config\":{\"kind\":\"drl\",\"rate\":\"128MiB/s\"}}"),
          "paio_stage_apply");
    check(paio_stage_collect(stage, &stats), "paio_stage_collect");
    printf("%s\n", stats);
    paio_string_free(stats);

    paio_stage_free(stage);
    return 0;
}
