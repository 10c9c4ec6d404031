/* Calls that move bytes between two descriptors, through the interposer:
 * copy_file_range on the file offsets and from an explicit offset, sendfile
 * from an explicit offset, splice from a file into a pipe and from the pipe
 * into a file. Copies "in" to out1..out4 and prints how many bytes moved,
 * in how many calls, and how many of those moved some; then the calls with
 * a pipe at one end (the splices), and how many of those moved some. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

static long long moved, calls, moving;

static int count(ssize_t r, const char *what) {
    if (r < 0) {
        perror(what);
        return -1;
    }
    calls++;
    if (r > 0) {
        moved += r;
        moving++;
    }
    return r > 0;
}

static int open_out(const char *name) {
    return open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
}

int main(void) {
    int in = open("in", O_RDONLY);
    struct stat st;
    if (in < 0 || fstat(in, &st) != 0) return 1;

    int out = open_out("out1");
    int more;
    while ((more = count(copy_file_range(in, NULL, out, NULL, 1 << 30, 0), "copy_file_range")) > 0) {}
    if (more < 0) return 1;
    close(out);

    loff_t from = 1000;
    out = open_out("out2");
    while ((more = count(copy_file_range(in, &from, out, NULL, 300000, 0), "copy_file_range at")) > 0) {}
    if (more < 0 || from != st.st_size) return 1;
    close(out);

    off_t at = 0;
    out = open_out("out3");
    while ((more = count(sendfile(out, in, &at, 1 << 20), "sendfile")) > 0) {}
    if (more < 0 || at != st.st_size) return 1;
    close(out);

    int p[2];
    long long calls_before = calls, moving_before = moving;
    if (pipe(p) != 0 || lseek(in, 0, SEEK_SET) != 0) return 1;
    out = open_out("out4");
    for (;;) {
        ssize_t r = splice(in, NULL, p[1], NULL, 1 << 20, 0);
        if (count(r, "splice in") < 0) return 1;
        if (r == 0) break;
        for (ssize_t left = r; left > 0;) {
            ssize_t w = splice(p[0], NULL, out, NULL, (size_t)left, 0);
            if (count(w, "splice out") <= 0) return 1;
            left -= w;
        }
    }
    close(out);
    printf("%lld %lld %lld %lld %lld\n", moved, calls, moving, calls - calls_before,
           moving - moving_before);
    return 0;
}
