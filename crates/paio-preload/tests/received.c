/* A descriptor received over a Unix socket (SCM_RIGHTS) gets its file
 * class, as the descriptor it was sent from had: sent, closed and received
 * through recvmmsg (Python's test covers recvmsg), then read.
 * argv[1]: a file of at least 100 bytes. Prints "ok" on success. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) != 0) return 3;
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) return 4;

    char byte = 'x';
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    struct msghdr out = {.msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = control.buf, .msg_controllen = sizeof control.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&out);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    if (sendmsg(sv[0], &out, 0) != 1) return 5;
    /* The number is free again: the received descriptor may get it back. */
    if (close(fd) != 0) return 6;

    memset(&control, 0, sizeof control);
    struct mmsghdr in;
    memset(&in, 0, sizeof in);
    in.msg_hdr.msg_iov = &iov;
    in.msg_hdr.msg_iovlen = 1;
    in.msg_hdr.msg_control = control.buf;
    in.msg_hdr.msg_controllen = sizeof control.buf;
    if (recvmmsg(sv[1], &in, 1, 0, NULL) != 1) return 7;
    c = CMSG_FIRSTHDR(&in.msg_hdr);
    if (!c || c->cmsg_type != SCM_RIGHTS) return 8;
    int got;
    memcpy(&got, CMSG_DATA(c), sizeof got);

    char buf[100];
    if (pread(got, buf, sizeof buf, 0) != sizeof buf) return 9;
    puts("ok");
    return 0;
}
