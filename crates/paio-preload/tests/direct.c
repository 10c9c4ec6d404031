/* Direct (O_DIRECT) positional calls that the interposer may split into
 * pieces in flight together, printed one per line as
 * "<case> <result> <errno> <checksum>" so a run under the interposer can be
 * compared byte for byte with a plain run: whole reads and writes, a short
 * read at end of file, a read starting past it, a write extending the file,
 * an error before any progress, a misaligned offset, and the caller's
 * errno kept; with the argument "fault", an error after progress.
 *
 * With the argument "rings" it prints instead how many io_uring
 * descriptors the process has after a large direct read, and again after
 * closefrom(3), a loop of close() over every descriptor from 3 up and
 * close_range(3, ~0U, 0), each followed by a read whose checksum is
 * printed. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MIB (1 << 20)

#include "show.h"

static int rings(void) {
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    struct dirent *e;
    char path[300], link[64];
    while ((e = readdir(d))) {
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t l = readlink(path, link, sizeof link - 1);
        if (l > 0) {
            link[l] = 0;
            if (strstr(link, "io_uring")) n++;
        }
    }
    closedir(d);
    return n;
}

/* A file of `len` bytes of a known pattern, written without O_DIRECT. */
static void make(const char *name, size_t len, const unsigned char *pattern) {
    int fd = open(name, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, pattern, len) != (ssize_t)len || fsync(fd) != 0) {
        perror(name);
        exit(1);
    }
    close(fd);
}

static int open_direct(const char *name) {
    int fd = open(name, O_RDWR | O_DIRECT);
    if (fd < 0) {
        fprintf(stderr, "open(%s, O_DIRECT): %s: the test directory's file system "
                        "must support direct I/O\n", name, strerror(errno));
        exit(2);
    }
    return fd;
}

int main(int argc, char **argv) {
    long page = sysconf(_SC_PAGESIZE);
    unsigned char *pattern = malloc(4 * MIB);
    for (int i = 0; i < 4 * MIB; i++) pattern[i] = (unsigned char)(i * 7 + 3 + i / 4093);
    unsigned char *buf, *wbuf;
    if (posix_memalign((void **)&buf, 4096, 4 * MIB) ||
        posix_memalign((void **)&wbuf, 4096, 4 * MIB))
        return 1;
    memcpy(wbuf, pattern + 12345, 4 * MIB - 12345);
    /* 2 MiB + 10,000 bytes: the end is not block-aligned. */
    make("direct.bin", 2 * MIB + 10000, pattern);
    int fd = open_direct("direct.bin");

    if (argc > 1 && strcmp(argv[1], "rings") == 0) {
        SHOW("read", pread(fd, buf, MIB, 0), buf);
        printf("rings %d\n", rings());
        closefrom(3);
        fd = open_direct("direct.bin");
        SHOW("read-after-closefrom", pread(fd, buf, MIB, 4096), buf);
        printf("rings-after-closefrom %d\n", rings());
        for (int i = 3; i < 4096; i++) close(i);
        fd = open_direct("direct.bin");
        SHOW("read-after-close-loop", pread(fd, buf, MIB, 8192), buf);
        printf("rings-after-close-loop %d\n", rings());
        /* Two descriptors on either side of the ring's number go too. */
        int lo = open("direct.bin", O_RDONLY), hi = fcntl(lo, F_DUPFD, 1000);
        SHOW("close-range", close_range(3, ~0U, 0), NULL);
        SHOW("closed", (ssize_t)(fcntl(lo, F_GETFD) + fcntl(hi, F_GETFD)), NULL);
        fd = open_direct("direct.bin");
        SHOW("read-after-close-range", pread(fd, buf, MIB, 12288), buf);
        printf("rings-after-close-range %d\n", rings());
        return 0;
    }

    SHOW("pread-whole", pread(fd, buf, MIB, 0), buf);
    SHOW("pread-offset", pread(fd, buf, MIB, 64 * 1024), buf);
    /* End of file inside the call: 2 MiB + 10,000 bytes of file. */
    SHOW("pread-eof", pread(fd, buf, MIB, 3 * MIB / 2), buf);
    SHOW("pread-past", pread(fd, buf, MIB, 4 * MIB), buf);
    /* Writes inside the file, read back. */
    SHOW("pwrite-inside", pwrite(fd, wbuf, MIB, 256 * 1024), wbuf);
    SHOW("pread-back", pread(fd, buf, 2 * MIB, 0), buf);
    /* A write extending the file. */
    SHOW("pwrite-extend", pwrite(fd, wbuf, MIB, 2 * MIB), wbuf);
    SHOW("pread-extended", pread(fd, buf, 4 * MIB, 0), buf);
    /* An error after progress: the buffer's 17th page is not writable.
     * The kernel's answer depends on where it breaks the call into device
     * requests (-1 EFAULT when one request covers the whole buffer); the
     * interposer's pieces return the progress, as buffered calls do: only
     * with the argument "fault". */
    unsigned char *m = mmap(NULL, 64 * page, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return 3;
    mprotect(m + 16 * page, page, PROT_NONE);
    if (argc > 1 && strcmp(argv[1], "fault") == 0) {
        SHOW("pread-fault-after", pread(fd, m, 64 * page, 0), m);
        return 0;
    }
    SHOW("pread-fault-before", pread(fd, m + 16 * page, 32 * page, 0), NULL);
    /* O_DIRECT refuses a misaligned offset. */
    SHOW("pread-misaligned", pread(fd, buf, MIB, 100), NULL);
    return 0;
}
