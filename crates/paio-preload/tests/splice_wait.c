/* Splices what arrives on stdin (a pipe) into argv[1] until stdin ends:
 * a copy call that waits for its peer. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int out;
    ssize_t n;
    if (argc < 2 || (out = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0) {
        return 2;
    }
    while ((n = splice(0, NULL, out, NULL, 65536, 0)) > 0) {
    }
    return n < 0;
}
