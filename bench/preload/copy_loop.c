/* The interposer's cost on calls that move bytes between two descriptors,
 * paired like pread_loop.c.
 *
 *   copy_loop FILE ITERATIONS [splice|copy]
 *       under LD_PRELOAD: alternates blocks of BLOCK calls through the
 *       interposed calls and through libc's own (looked up in libc.so.6, so
 *       the interposer is bypassed) in one process, and prints
 *       "interposed_ns direct_ns added_ns" per call: the means and the
 *       median over block pairs of the per-pair difference. `splice` (the
 *       default): 4 KiB from FILE (page-cached, at offset 0) into a pipe,
 *       then from the pipe into a scratch file, two calls, as a proxy or a
 *       pipeline copies a pipe's worth at a time; `copy`: copy_file_range
 *       of 4 KiB from FILE into the scratch file (at offset 0 both). The
 *       scratch file is FILE.out. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "paired.h"

#define BLOCK 2000
#define CHUNK 4096

typedef ssize_t (*splice_fn)(int, loff_t *, int, loff_t *, size_t, unsigned int);
typedef ssize_t (*cfr_fn)(int, loff_t *, int, loff_t *, size_t, unsigned int);

struct calls {
    splice_fn splice;
    cfr_fn copy_file_range;
};

struct setup {
    const struct calls *interposed, *direct;
    int in, out, pipe[2];
    int copy;
};

/* Mean ns per call over `n` rounds through `c`; -1 on an error. */
static double time_block(const struct setup *s, const struct calls *c, long n) {
    double start = now_ns();
    for (long i = 0; i < n; i++) {
        loff_t from = 0, to = 0;
        if (s->copy) {
            if (c->copy_file_range(s->in, &from, s->out, &to, CHUNK, 0) != CHUNK) return -1;
            continue;
        }
        if (c->splice(s->in, &from, s->pipe[1], NULL, CHUNK, 0) != CHUNK) return -1;
        if (c->splice(s->pipe[0], NULL, s->out, &to, CHUNK, 0) != CHUNK) return -1;
    }
    return (now_ns() - start) / (double)(s->copy ? n : 2 * n);
}

static double block(void *arg, int interposed, long pair) {
    const struct setup *s = arg;
    (void)pair;
    return time_block(s, interposed ? s->interposed : s->direct, BLOCK);
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 4 ||
        (argc == 4 && strcmp(argv[3], "splice") != 0 && strcmp(argv[3], "copy") != 0)) {
        fprintf(stderr, "usage: %s FILE ITERATIONS [splice|copy]\n", argv[0]);
        return 2;
    }
    struct calls interposed = {splice, copy_file_range};
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    struct calls direct = {
        libc ? (splice_fn)dlsym(libc, "splice") : NULL,
        libc ? (cfr_fn)dlsym(libc, "copy_file_range") : NULL,
    };
    if (!direct.splice || !direct.copy_file_range) {
        fprintf(stderr, "copy_loop: cannot find libc's own calls\n");
        return 1;
    }
    char scratch[4096];
    snprintf(scratch, sizeof scratch, "%s.out", argv[1]);
    struct setup s = {&interposed, &direct, open(argv[1], O_RDONLY),
                      open(scratch, O_WRONLY | O_CREAT | O_TRUNC, 0644), {-1, -1},
                      argc == 4 && strcmp(argv[3], "copy") == 0};
    long iterations = strtol(argv[2], NULL, 10);
    if (s.in < 0 || s.out < 0 || pipe(s.pipe) != 0 || iterations <= 0) {
        perror("copy_loop: setup");
        return 1;
    }
    if (time_block(&s, &direct, BLOCK) < 0 || time_block(&s, &interposed, BLOCK) < 0) {
        perror("copy_loop: warm-up");
        return 1;
    }
    long pairs = iterations / BLOCK;
    if (pairs < 1) pairs = 1;
    int rc = paired_report(pairs, block, &s, "copy_loop: a call failed");
    unlink(scratch);
    return rc;
}
