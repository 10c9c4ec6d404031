/* 16+ failing calls: prints "name ret errno" for each; run with and without
 * the interposer, the outputs must be identical. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define T(name, call) do { errno = 0; long r = (long)(call); printf("%-16s %ld %d\n", name, r, errno); } while (0)

int main(void) {
    char buf[64];
    struct stat st;
    struct iovec iov = { buf, sizeof buf };
    int p[2];
    if (pipe(p) != 0) return 2;
    int ro = open("ro.txt", O_RDONLY);
    if (ro < 0) return 3;
    mkdir("full", 0700);
    close(open("full/x", O_CREAT | O_WRONLY, 0600));
    T("open-missing", open("missing/x", O_RDONLY));
    T("openat-badfd", openat(9999, "x", O_RDONLY));
    T("creat-dir", creat("full", 0600));
    T("read-badfd", read(9999, buf, sizeof buf));
    T("write-rofd", write(ro, "x", 1));
    T("pread-pipe", pread(p[0], buf, 1, 0));
    T("pwrite-rofd", pwrite(ro, "x", 1, 0));
    T("readv-badfd", readv(9999, &iov, 1));
    T("writev-rofd", writev(ro, &iov, 1));
    T("close-badfd", close(9999));
    T("fstat-badfd", fstat(9999, &st));
    T("stat-missing", stat("missing", &st));
    T("unlink-missing", unlink("missing"));
    T("rename-missing", rename("missing", "other"));
    T("mkdir-exists", mkdir("full", 0700));
    T("rmdir-notempty", rmdir("full"));
    T("truncate-missing", truncate("missing", 0));
    T("ftruncate-rofd", ftruncate(ro, 0));
    T("fsync-badfd", fsync(9999));
    T("fdatasync-badfd", fdatasync(9999));
    T("dup2-badfd", dup2(9999, 10));
    T("fcntl-badfd", fcntl(9999, F_DUPFD, 0));
    T("cfr-badfd", copy_file_range(9999, NULL, 1, NULL, 10, 0));
    T("fallocate-pipe", fallocate(p[1], 0, 0, 10));
    T("fopen-missing", fopen("missing", "r") == NULL);
    /* Success leaves errno alone, even when the call had to wait. */
    errno = 777;
    long r = read(ro, buf, 5);
    printf("read-ok %ld %d %.5s\n", r, errno, buf);
    errno = 778;
    r = stat("ro.txt", &st);
    printf("stat-ok %ld %d %ld\n", r, errno, (long)st.st_size);
    return 0;
}
