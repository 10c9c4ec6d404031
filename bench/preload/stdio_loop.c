/* The interposer's cost on stdio byte by byte and formatted, paired like
 * pread_loop.c.
 *
 *   stdio_loop FILE ITERATIONS PATTERN
 *       under LD_PRELOAD: alternates blocks of BLOCK operations through the
 *       interposed calls and through libc's own (looked up in libc.so.6, so
 *       the interposer is bypassed) in one process, and prints
 *       "interposed_ns direct_ns added_ns" per operation: the means and the
 *       median over block pairs of the per-pair difference. Patterns:
 *         fputc    one fputc call to a fully buffered stream on /dev/null;
 *         inline   one putc_unlocked there, the macro <stdio.h> inlines (a
 *                  call to __overflow once per buffer);
 *         fprintf  one fprintf(stream, "%d\n", i) there;
 *         getc     one getc_unlocked from FILE (page-cached, read over and
 *                  over), the inline macro (__uflow once per buffer). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "paired.h"

#define BLOCK 20000

typedef int (*fputc_fn)(int, FILE *);
typedef int (*overflow_fn)(FILE *, int);
typedef int (*uflow_fn)(FILE *);
typedef int (*fprintf_fn)(FILE *, const char *, ...);
typedef void (*rewind_fn)(FILE *);

struct calls {
    fputc_fn fputc;
    overflow_fn overflow;
    uflow_fn uflow;
    fprintf_fn fprintf;
    rewind_fn rewind;
};

enum pattern { FPUTC, INLINE, FPRINTF, GETC };

struct setup {
    const struct calls *interposed, *direct;
    FILE *out, *in;
    enum pattern pattern;
};

/* putc_unlocked's and getc_unlocked's inline bodies (<bits/stdio.h>), with
 * the call on a full or empty buffer made through `c`. */
static inline int put(const struct calls *c, int ch, FILE *f) {
    return f->_IO_write_ptr < f->_IO_write_end ? (unsigned char)(*f->_IO_write_ptr++ = (char)ch)
                                               : c->overflow(f, ch);
}

static inline int get(const struct calls *c, FILE *f) {
    return f->_IO_read_ptr < f->_IO_read_end ? *(unsigned char *)f->_IO_read_ptr++ : c->uflow(f);
}

/* Mean ns per operation over `n` through `c`; -1 on an error. */
static double time_block(const struct setup *s, const struct calls *c, long n) {
    double start = now_ns();
    for (long i = 0; i < n; i++) {
        switch (s->pattern) {
        case FPUTC:
            if (c->fputc('x', s->out) == EOF) return -1;
            break;
        case INLINE:
            if (put(c, 'x', s->out) == EOF) return -1;
            break;
        case FPRINTF:
            if (c->fprintf(s->out, "%ld\n", i) < 0) return -1;
            break;
        case GETC:
            if (get(c, s->in) == EOF) c->rewind(s->in);
            break;
        }
    }
    return (now_ns() - start) / (double)n;
}

static double block(void *arg, int interposed, long pair) {
    const struct setup *s = arg;
    (void)pair;
    return time_block(s, interposed ? s->interposed : s->direct, BLOCK);
}

int main(int argc, char **argv) {
    static const char *names[] = {"fputc", "inline", "fprintf", "getc"};
    int pattern = -1;
    for (int i = 0; argc == 4 && i < 4; i++)
        if (strcmp(argv[3], names[i]) == 0) pattern = i;
    if (pattern < 0) {
        fprintf(stderr, "usage: %s FILE ITERATIONS fputc|inline|fprintf|getc\n", argv[0]);
        return 2;
    }
    struct calls interposed = {fputc, __overflow, __uflow, fprintf, rewind};
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    struct calls direct = {
        libc ? (fputc_fn)dlsym(libc, "fputc") : NULL,
        libc ? (overflow_fn)dlsym(libc, "__overflow") : NULL,
        libc ? (uflow_fn)dlsym(libc, "__uflow") : NULL,
        libc ? (fprintf_fn)dlsym(libc, "fprintf") : NULL,
        libc ? (rewind_fn)dlsym(libc, "rewind") : NULL,
    };
    if (!direct.fputc || !direct.overflow || !direct.uflow || !direct.fprintf || !direct.rewind) {
        fprintf(stderr, "stdio_loop: cannot find libc's own calls\n");
        return 1;
    }
    struct setup s = {&interposed, &direct, fopen("/dev/null", "w"), fopen(argv[1], "r"),
                      (enum pattern)pattern};
    long iterations = strtol(argv[2], NULL, 10);
    if (!s.out || !s.in || iterations <= 0) {
        perror("stdio_loop: setup");
        return 1;
    }
    if (time_block(&s, &direct, BLOCK) < 0 || time_block(&s, &interposed, BLOCK) < 0) {
        perror("stdio_loop: warm-up");
        return 1;
    }
    long pairs = iterations / BLOCK;
    if (pairs < 1) pairs = 1;
    return paired_report(pairs, block, &s, "stdio_loop: a call failed");
}
