/* The interposer's cost on metadata-heavy programs (tar, rsync, find): the
 * calls a small-files walk makes per file, paired like pread_loop.c.
 *
 *   meta_loop DIR ITERATIONS [archive|devnull]
 *       under LD_PRELOAD: alternates blocks of BLOCK "files" through the
 *       interposed calls and through libc's own (looked up in libc.so.6, so
 *       the interposer is bypassed) in one process, and prints
 *       "interposed_ns direct_ns added_ns": the means per file and the
 *       median over block pairs of the per-pair difference. One file is what
 *       GNU tar does per small file: with `archive` (the default), writing
 *       an archive, fstatat twice (tar stats, then checks the file did not
 *       change), openat, fstat, read, close; with `devnull`, as in
 *       `tar cf /dev/null`, where tar does not read the files, fstatat
 *       twice. DIR holds the files f0 .. f(FILES-1), page-cached. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "paired.h"

#define BLOCK 2000
#define FILES 64

typedef int (*fstatat_fn)(int, const char *, struct stat *, int);
typedef int (*openat_fn)(int, const char *, int, ...);
typedef int (*fstat_fn)(int, struct stat *);
typedef ssize_t (*read_fn)(int, void *, size_t);
typedef int (*close_fn)(int);

struct calls {
    fstatat_fn fstatat;
    openat_fn openat;
    fstat_fn fstat;
    read_fn read;
    close_fn close;
};

/* Whether a file is only stat'ed, as by `tar cf /dev/null`. */
static int stat_only;

/* Mean ns per file over `n` files through `c`; -1 on an error. */
static double time_block(const struct calls *c, int dir, long n) {
    char name[16], buf[4096];
    struct stat st;
    double start = now_ns();
    for (long i = 0; i < n; i++) {
        snprintf(name, sizeof name, "f%ld", i % FILES);
        if (c->fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return -1;
        if (stat_only) {
            if (c->fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return -1;
            continue;
        }
        int fd = c->openat(dir, name, O_RDONLY | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || c->fstat(fd, &st) != 0 || c->read(fd, buf, sizeof buf) < 0) return -1;
        if (c->close(fd) != 0) return -1;
        if (c->fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return -1;
    }
    return (now_ns() - start) / (double)n;
}

struct sides {
    const struct calls *interposed, *direct;
    int dir;
};

static double block(void *arg, int interposed, long pair) {
    const struct sides *s = arg;
    (void)pair;
    return time_block(interposed ? s->interposed : s->direct, s->dir, BLOCK);
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 4 || (argc == 4 && strcmp(argv[3], "archive") != 0 &&
                                 strcmp(argv[3], "devnull") != 0)) {
        fprintf(stderr, "usage: %s DIR ITERATIONS [archive|devnull]\n", argv[0]);
        return 2;
    }
    stat_only = argc == 4 && strcmp(argv[3], "devnull") == 0;
    long iterations = strtol(argv[2], NULL, 10);
    int dir = open(argv[1], O_RDONLY | O_DIRECTORY);
    if (dir < 0 || iterations <= 0) {
        perror("meta_loop: setup");
        return 1;
    }
    struct calls interposed = {fstatat, openat, fstat, read, close};
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    struct calls direct = {
        libc ? (fstatat_fn)dlsym(libc, "fstatat") : NULL,
        libc ? (openat_fn)dlsym(libc, "openat") : NULL,
        libc ? (fstat_fn)dlsym(libc, "fstat") : NULL,
        libc ? (read_fn)dlsym(libc, "read") : NULL,
        libc ? (close_fn)dlsym(libc, "close") : NULL,
    };
    if (!direct.fstatat || !direct.openat || !direct.fstat || !direct.read || !direct.close) {
        fprintf(stderr, "meta_loop: cannot find libc's own calls\n");
        return 1;
    }
    if (time_block(&direct, dir, BLOCK) < 0 || time_block(&interposed, dir, BLOCK) < 0) {
        perror("meta_loop: warm-up");
        return 1;
    }
    long pairs = iterations / BLOCK;
    if (pairs < 1) pairs = 1;
    struct sides sides = {&interposed, &direct, dir};
    int rc = paired_report(pairs, block, &sides, "meta_loop: a call failed");
    close(dir);
    return rc;
}
