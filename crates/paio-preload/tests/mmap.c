/* mmap under the interposer. argv[1]:
 *   file    maps argv[2] (a regular file) three times and sums its bytes;
 *   anon    maps anonymous memory and /dev/zero (no file data);
 *   errors  calls that fail: an unaligned offset, a bad descriptor, a
 *           length of 0, mmap64 on a closed descriptor; prints each errno.
 * Prints what it found; the interposer must not change it. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int file(const char *path) {
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return 2;
    unsigned long sum = 0;
    for (int i = 0; i < 3; i++) {
        unsigned char *p = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) return 3;
        for (off_t j = 0; j < st.st_size; j++) sum += p[j];
        munmap(p, st.st_size);
    }
    close(fd);
    printf("sum %lu\n", sum);
    return 0;
}

static int anon(void) {
    char *a = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) return 4;
    memset(a, 7, 1 << 20);
    int z = open("/dev/zero", O_RDWR);
    char *b = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, z, 0);
    if (z < 0 || b == MAP_FAILED || b[100] != 0) return 5;
    printf("anon %d\n", a[12345] + b[0]);
    return 0;
}

static int errors(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 6;
    errno = 0;
    void *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 100);
    printf("unaligned %d %d\n", p == MAP_FAILED, errno);
    errno = 0;
    p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, 999, 0);
    printf("bad fd %d %d\n", p == MAP_FAILED, errno);
    errno = 0;
    p = mmap(NULL, 0, PROT_READ, MAP_SHARED, fd, 0);
    printf("empty %d %d\n", p == MAP_FAILED, errno);
    close(fd);
    errno = 0;
    p = mmap64(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    printf("closed %d %d\n", p == MAP_FAILED, errno);
    /* A success leaves errno as it was. */
    errno = 42;
    p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    printf("kept %d %d\n", p != MAP_FAILED, errno);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return 1;
    if (!strcmp(argv[1], "file") && argc == 3) return file(argv[2]);
    if (!strcmp(argv[1], "anon")) return anon();
    if (!strcmp(argv[1], "errors") && argc == 3) return errors(argv[2]);
    return 1;
}
