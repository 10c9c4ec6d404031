/* The interposer overhead benchmark's client: times `iterations` preads of
 * `size` bytes at offset 0 of `file` (page-cached after a warm-up) and prints
 * the mean ns per call. Run with and without LD_PRELOAD by run.sh. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s FILE SIZE ITERATIONS\n", argv[0]);
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
    for (long i = 0; i < iterations / 10 + 1; i++) {
        if (pread(fd, buf, size, 0) != (ssize_t)size) {
            perror("pread_loop: warm-up pread");
            return 1;
        }
    }
    double start = now_ns();
    for (long i = 0; i < iterations; i++) {
        if (pread(fd, buf, size, 0) != (ssize_t)size) {
            perror("pread_loop: pread");
            return 1;
        }
    }
    double per_call = (now_ns() - start) / (double)iterations;
    printf("%.2f\n", per_call);
    close(fd);
    free(buf);
    return 0;
}
