/* A vfork child's dup2 must not change its parent's descriptor table (the
 * child shares the parent's memory, not its descriptors): the parent's
 * pipe read end, known as a stream, is dup2'ed over by a file in the child;
 * the parent's next read of the pipe is still a stream's (untimed). Reads
 * argv[1] once (one timed read) and prints "ok". */
#include <fcntl.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    char b[4096];
    int p[2], f, st;
    pid_t pid;
    if (argc < 2 || pipe(p) != 0) {
        return 2;
    }
    if (write(p[1], "hello", 5) != 5 || read(p[0], b, 5) != 5) {
        return 1;
    }
    f = open(argv[1], O_RDONLY);
    if (f < 0 || read(f, b, sizeof b) <= 0) {
        return 1;
    }
    pid = vfork();
    if (pid == 0) {
        dup2(f, p[0]);
        _exit(0);
    }
    if (pid < 0 || waitpid(pid, &st, 0) != pid) {
        return 1;
    }
    if (write(p[1], "again", 5) != 5 || read(p[0], b, 5) != 5) {
        return 1;
    }
    printf("ok\n");
    return 0;
}
