/*
 * Creates one stage and frees it: the first stage of a process maps the
 * user's board of critical I/O (PAIO_BOARD). run.sh runs it as a
 * set-user-ID root program started by nobody, where the caller's
 * PAIO_BOARD must not be acted on with root's rights.
 */
#include <paio.h>

#include <stdio.h>

int main(void) {
    paio_stage *stage = NULL;
    if (paio_stage_new("secure", &stage) != PAIO_OK) {
        fprintf(stderr, "paio_stage_new failed: %s\n", paio_last_error());
        return 1;
    }
    paio_stage_free(stage);
    puts("stage created");
    return 0;
}
