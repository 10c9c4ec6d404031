/* A pipe's read end, known as a stream after one read, is closed where the
 * interposer does not see it (mode "rawclose": syscall(SYS_close)); a
 * regular file then gets its number, by open(2) or received over a Unix
 * socket (mode "scmraw"). The file's reads are storage I/O: the number's
 * entry must be reset when the file arrives. Reads argv[2] in 64 KiB reads
 * and prints the bytes read. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

static void send_fd(int s, int fd) {
    char c = 'x', cb[CMSG_SPACE(sizeof(int))];
    struct iovec io = {&c, 1};
    struct msghdr m = {0};
    struct cmsghdr *h;
    m.msg_iov = &io;
    m.msg_iovlen = 1;
    m.msg_control = cb;
    m.msg_controllen = sizeof cb;
    h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(h), &fd, sizeof fd);
    if (sendmsg(s, &m, 0) != 1) {
        perror("sendmsg");
    }
}

static int recv_fd(int s) {
    char c, cb[CMSG_SPACE(sizeof(int))];
    struct iovec io = {&c, 1};
    struct msghdr m = {0};
    int fd;
    m.msg_iov = &io;
    m.msg_iovlen = 1;
    m.msg_control = cb;
    m.msg_controllen = sizeof cb;
    if (recvmsg(s, &m, 0) < 0) {
        return -1;
    }
    memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof fd);
    return fd;
}

int main(int argc, char **argv) {
    static char b[65536];
    int p[2], fd = -1;
    long got = 0;
    ssize_t n;
    if (argc < 3 || pipe(p) != 0) {
        fprintf(stderr, "usage: fd_reuse rawclose|scmraw FILE\n");
        return 2;
    }
    if (write(p[1], "hello", 5) != 5 || read(p[0], b, 5) != 5) {
        return 1;
    }
    if (strcmp(argv[1], "rawclose") == 0) {
        syscall(SYS_close, p[0]);
        fd = open(argv[2], O_RDONLY);
    } else {
        int sv[2], f;
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
            return 1;
        }
        f = open(argv[2], O_RDONLY);
        send_fd(sv[1], f);
        close(f);
        syscall(SYS_close, p[0]);
        fd = recv_fd(sv[0]);
    }
    if (fd != p[0]) {
        fprintf(stderr, "the file got %d, not the pipe's %d\n", fd, p[0]);
        return 1;
    }
    while ((n = read(fd, b, sizeof b)) > 0) {
        got += n;
    }
    printf("%ld\n", got);
    return 0;
}
