/* argv[1] threads wait in read(2), every other one on a pipe (as a
 * server's connection threads wait on sockets) and the rest on an eventfd
 * (an anonymous inode, as timerfd, signalfd and inotify are); the main
 * thread then reads argv[2] 100 times with pread, prints "100 reads", and
 * lets the waiting threads go. Under a priority object, waits for a peer
 * or an event held the object's slots: with as many waiting threads as its
 * depth, no read of the file ever went. */
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

static int fds[2];
static int event;

static void *pipe_waiter(void *arg) {
    char c;
    (void)arg;
    return read(fds[0], &c, 1) == 1 ? NULL : (void *)1;
}

static void *event_waiter(void *arg) {
    uint64_t v;
    (void)arg;
    return read(event, &v, sizeof v) == sizeof v ? NULL : (void *)1;
}

int main(int argc, char **argv) {
    int n = argc > 2 ? atoi(argv[1]) : 0, fd, i;
    pthread_t threads[64];
    char buf[4096];
    event = eventfd(0, EFD_SEMAPHORE);
    if (argc < 3 || n < 0 || n > 64 || pipe(fds) != 0 || event < 0) {
        fprintf(stderr, "usage: idle_pipe THREADS FILE\n");
        return 2;
    }
    for (i = 0; i < n; i++) {
        pthread_create(&threads[i], NULL, i % 2 ? event_waiter : pipe_waiter, NULL);
    }
    usleep(200000); /* the threads are in read(2) */
    fd = open(argv[2], O_RDONLY);
    if (fd < 0) {
        perror("open");
        return 1;
    }
    for (i = 0; i < 100; i++) {
        if (pread(fd, buf, sizeof buf, (off_t)i * 4096) < 0) {
            perror("pread");
            return 1;
        }
    }
    printf("100 reads\n");
    fflush(stdout);
    for (i = 0; i < n; i++) {
        uint64_t one = 1;
        if (i % 2 ? write(event, &one, sizeof one) != sizeof one : write(fds[1], "x", 1) != 1) {
            return 1;
        }
    }
    for (i = 0; i < n; i++) {
        pthread_join(threads[i], NULL);
    }
    return 0;
}
