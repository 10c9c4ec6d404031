/* POSIX AIO: three aio_write calls (1000, 2000 and 3000 bytes), an
 * aio_fsync, then one lio_listio (LIO_WAIT) of two reads (500 and 700
 * bytes), a LIO_NOP and a NULL entry. Each request waited for with
 * aio_suspend; the bytes read back are checked. Prints "aio ok". */
#define _GNU_SOURCE
#include <aio.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int wait_for(struct aiocb *cb) {
    const struct aiocb *list[1] = {cb};
    while (aio_error(cb) == EINPROGRESS)
        if (aio_suspend(list, 1, NULL) != 0 && errno != EINTR) return -1;
    return aio_error(cb);
}

int main(void) {
    static char out[6000], in[1200];
    for (int i = 0; i < (int)sizeof out; i++) out[i] = (char)('a' + i % 26);
    int fd = open("aio.dat", O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return 1;
    struct aiocb w[3];
    size_t sizes[3] = {1000, 2000, 3000};
    off_t at = 0;
    for (int i = 0; i < 3; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].aio_fildes = fd;
        w[i].aio_buf = out + at;
        w[i].aio_nbytes = sizes[i];
        w[i].aio_offset = at;
        at += sizes[i];
        if (aio_write(&w[i]) != 0) return 2;
    }
    for (int i = 0; i < 3; i++)
        if (wait_for(&w[i]) != 0 || aio_return(&w[i]) != (ssize_t)sizes[i]) return 3;
    struct aiocb s;
    memset(&s, 0, sizeof s);
    s.aio_fildes = fd;
    if (aio_fsync(O_DSYNC, &s) != 0 || wait_for(&s) != 0) return 4;

    struct aiocb r[3];
    memset(r, 0, sizeof r);
    r[0].aio_fildes = fd;
    r[0].aio_lio_opcode = LIO_READ;
    r[0].aio_buf = in;
    r[0].aio_nbytes = 500;
    r[0].aio_offset = 0;
    r[1].aio_fildes = fd;
    r[1].aio_lio_opcode = LIO_READ;
    r[1].aio_buf = in + 500;
    r[1].aio_nbytes = 700;
    r[1].aio_offset = 500;
    r[2].aio_fildes = fd;
    r[2].aio_lio_opcode = LIO_NOP;
    struct aiocb *list[4] = {&r[0], NULL, &r[1], &r[2]};
    if (lio_listio(LIO_WAIT, list, 4, NULL) != 0) return 5;
    if (aio_return(&r[0]) != 500 || aio_return(&r[1]) != 700) return 6;
    if (memcmp(in, out, sizeof in) != 0) return 7;
    close(fd);
    printf("aio ok\n");
    return 0;
}
