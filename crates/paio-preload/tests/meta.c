/* Metadata calls in known numbers: `meta N` does N times what tar does per
 * small file (fstatat twice, openat, fstat, close) on the file "f" in the
 * current directory, and prints "meta N". The interposer must count every
 * call on its pass-through path and enforce every call where a rule limits
 * them. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long n = argc == 2 ? strtol(argv[1], NULL, 10) : 0;
    if (n <= 0) {
        fprintf(stderr, "usage: meta N\n");
        return 2;
    }
    struct stat st;
    for (long i = 0; i < n; i++) {
        if (fstatat(AT_FDCWD, "f", &st, AT_SYMLINK_NOFOLLOW) != 0) return perror("fstatat"), 1;
        int fd = openat(AT_FDCWD, "f", O_RDONLY | O_CLOEXEC);
        if (fd < 0) return perror("openat"), 1;
        if (fstat(fd, &st) != 0) return perror("fstat"), 1;
        if (close(fd) != 0) return perror("close"), 1;
        if (fstatat(AT_FDCWD, "f", &st, AT_SYMLINK_NOFOLLOW) != 0) return perror("fstatat"), 1;
    }
    printf("meta %ld\n", n);
    return 0;
}
