/* A descriptor whose part of the interposer's descriptor table cannot be
 * mapped (the address space capped with RLIMIT_AS): its calls still work,
 * it has no file class, and the process says so once on stderr.
 * argv[1]: a file of at least 100 bytes. Prints "ok" on success. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    struct rlimit files;
    if (getrlimit(RLIMIT_NOFILE, &files) != 0) return 3;
    if (files.rlim_max != RLIM_INFINITY && files.rlim_max < 9100) {
        fprintf(stderr, "needs RLIMIT_NOFILE's hard limit >= 9100, is %lu\n",
                (unsigned long)files.rlim_max);
        return 4;
    }
    files.rlim_cur = 9100;
    if (setrlimit(RLIMIT_NOFILE, &files) != 0) return 5;
    char buf[100];
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0 || pread(fd, buf, sizeof buf, 0) != sizeof buf) return 6;

    /* Cap the address space a page above what is mapped now: less than a
     * chunk of the table. */
    long pages = 0;
    FILE *statm = fopen("/proc/self/statm", "r");
    if (!statm || fscanf(statm, "%ld", &pages) != 1) return 7;
    fclose(statm);
    struct rlimit as, capped;
    if (getrlimit(RLIMIT_AS, &as) != 0) return 8;
    capped.rlim_cur = (rlim_t)(pages + 1) * (rlim_t)sysconf(_SC_PAGESIZE);
    capped.rlim_max = as.rlim_max;
    if (setrlimit(RLIMIT_AS, &capped) != 0) return 9;

    int moved = 0;
    for (int hi = 9000; hi < 9003; hi++) {
        if (dup2(fd, hi) != hi) return 10;
        if (pread(hi, buf, sizeof buf, 0) != sizeof buf) return 11;
        moved += sizeof buf;
        close(hi);
    }
    if (setrlimit(RLIMIT_AS, &as) != 0) return 12;
    close(fd);
    printf("ok %d\n", moved);
    return 0;
}
