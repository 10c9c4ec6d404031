/* Results of positional calls that the interposer may split, printed one
 * per line as "<case> <result> <errno>" so a run under the interposer can be
 * compared byte for byte with a plain run: short reads at end of file, an
 * error after some progress (EFAULT on a later page), an error before any,
 * vectored calls crossing iovec boundaries, an O_APPEND descriptor, and the
 * caller's errno kept across a successful call. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "show.h"

int main(void) {
    long page = sysconf(_SC_PAGESIZE);
    /* A 10,000-byte file of a known pattern. */
    int fd = open("data.bin", O_RDWR | O_CREAT | O_TRUNC, 0644);
    unsigned char *pattern = malloc(65536);
    for (int i = 0; i < 65536; i++) pattern[i] = (unsigned char)(i * 7 + 3);
    if (fd < 0 || write(fd, pattern, 10000) != 10000) return 1;
    unsigned char *buf = malloc(1 << 20);

    /* Short read at end of file: 64 KiB asked, 10,000 there. */
    SHOW("pread-eof", pread(fd, buf, 65536, 0), buf);
    SHOW("pread-mid", pread(fd, buf, 65536, 5000), buf);
    SHOW("pread-past", pread(fd, buf, 65536, 20000), buf);
    /* Writes of 40 KiB in the middle, read back whole. */
    SHOW("pwrite", pwrite(fd, pattern, 40960, 3000), pattern);
    SHOW("pread-back", pread(fd, buf, 65536, 0), buf);

    /* Vectored: three buffers of odd sizes crossing piece boundaries. */
    struct iovec iov[3] = {{buf, 5000}, {buf + 10000, 9000}, {buf + 30000, 20000}};
    SHOW("preadv", preadv(fd, iov, 3, 100), buf);
    printf("preadv-sums %08x %08x %08x\n", sum(buf, 5000), sum(buf + 10000, 9000),
           sum(buf + 30000, 20000));
    struct iovec wiov[2] = {{pattern, 7000}, {pattern + 20000, 30000}};
    SHOW("pwritev", pwritev(fd, wiov, 2, 50000), pattern);
    SHOW("preadv2-flags0", preadv2(fd, iov, 3, 49000, 0), buf);
    SHOW("preadv2-hipri", preadv2(fd, iov, 3, 49000, RWF_HIPRI), buf);

    /* An error after progress: the second page of the buffer is not
     * writable, so the kernel stops there. */
    unsigned char *m = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return 2;
    mprotect(m + page, page, PROT_NONE);
    SHOW("pread-fault-after", pread(fd, m, 3 * page, 0), m);
    /* ... and before any: the first page is not writable. */
    SHOW("pread-fault-before", pread(fd, m + page, 2 * page, 0), NULL);
    /* A bad descriptor and a bad offset. */
    SHOW("pread-ebadf", pread(9999, buf, 65536, 0), NULL);
    SHOW("pread-einval", pread(fd, buf, 65536, -1), NULL);

    /* O_APPEND: positional writes append whatever the offset (Linux), so
     * the call must go as one. */
    int afd = open("append.bin", O_RDWR | O_CREAT | O_TRUNC | O_APPEND, 0644);
    SHOW("pwrite-append1", pwrite(afd, pattern, 40000, 0), pattern);
    SHOW("pwrite-append2", pwrite(afd, pattern + 1000, 40000, 0), pattern + 1000);
    SHOW("pread-append", pread(afd, buf, 1 << 20, 0), buf);

    /* A pipe is never split. */
    int p[2];
    if (pipe(p) != 0) return 3;
    SHOW("pipe-write", write(p[1], pattern, 1000), pattern);
    SHOW("pipe-read", read(p[0], buf, 65536), buf);
    return 0;
}
