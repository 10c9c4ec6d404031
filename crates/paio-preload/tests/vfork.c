/* vfork children that call interposed functions and _exit before/without
 * exec: the parent's statistics must be unaffected by a push from the child. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
    char buf[100];
    int fd = open("in.txt", O_RDONLY);
    ssize_t n = read(fd, buf, sizeof buf);
    for (int i = 0; i < 20; i++) {
        pid_t pid = vfork();
        if (pid == 0) {
            int nul = open("/dev/null", O_WRONLY);
            dup2(nul, 3);
            close(nul);
            _exit(7);
        }
        int st;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 7) return 1;
    }
    close(fd);
    printf("read %ld\n", (long)n);
    return 0;
}
