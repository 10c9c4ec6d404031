/* Reads /proc/self/maps with one 1 MiB read(2) and prints how many bytes it
 * got. The file's size is 0 to fstat, so a read bounded by what the file
 * holds is admitted for 0 bytes and moves more: the bytes beyond the bound
 * are charged after the call. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(void) {
    static char buf[1 << 20];
    int fd = open("/proc/self/maps", O_RDONLY);
    ssize_t n;
    if (fd < 0) {
        perror("open");
        return 1;
    }
    n = read(fd, buf, sizeof buf);
    if (n <= 0) {
        perror("read");
        return 1;
    }
    printf("%zd\n", n);
    return 0;
}
