/* argv[1] threads wait in read(2) on a pipe (as a server's connection
 * threads wait on sockets); the main thread then reads argv[2] 100 times
 * with pread, prints "100 reads", and lets the waiting threads go. Under a
 * priority object of depth 4, waits for a peer held the object's slots:
 * with 4 waiting threads no read of the file ever went. */
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int fds[2];

static void *waiter(void *arg) {
    char c;
    (void)arg;
    return read(fds[0], &c, 1) == 1 ? NULL : (void *)1;
}

int main(int argc, char **argv) {
    int n = argc > 2 ? atoi(argv[1]) : 0, fd, i;
    pthread_t threads[64];
    char buf[4096];
    if (argc < 3 || n < 0 || n > 64 || pipe(fds) != 0) {
        fprintf(stderr, "usage: idle_pipe THREADS FILE\n");
        return 2;
    }
    for (i = 0; i < n; i++) {
        pthread_create(&threads[i], NULL, waiter, NULL);
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
        if (write(fds[1], "x", 1) != 1) {
            return 1;
        }
    }
    for (i = 0; i < n; i++) {
        pthread_join(threads[i], NULL);
    }
    return 0;
}
