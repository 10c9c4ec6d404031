/* Threads named critical by a policy's [criticality] threads: a worker
 * named by its parent (as RocksDB names its pool threads), the main thread
 * naming itself with prctl, and a background worker under another name.
 * Each reads `data.bin` ten times with its own read size, so the stage's
 * per-channel bytes tell who was critical. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static int named = 0;

static void reads(size_t n) {
    char buf[4096];
    int fd = open("data.bin", O_RDONLY);
    for (int i = 0; i < 10; i++)
        if (pread(fd, buf, n, 0) != (ssize_t)n) _exit(3);
    close(fd);
}

static void *worker(void *arg) {
    pthread_mutex_lock(&m);
    while (!named) pthread_cond_wait(&c, &m);
    pthread_mutex_unlock(&m);
    reads((size_t)arg);
    return NULL;
}

int main(void) {
    int fd = open("data.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    char zeros[4096] = {0};
    if (fd < 0 || write(fd, zeros, sizeof zeros) != sizeof zeros) return 1;
    close(fd);
    pthread_t crit, bg;
    pthread_create(&crit, NULL, worker, (void *)1000);
    pthread_create(&bg, NULL, worker, (void *)70);
    if (pthread_setname_np(crit, "crit-worker") || pthread_setname_np(bg, "bg-worker"))
        return 2;
    pthread_mutex_lock(&m);
    named = 1;
    pthread_cond_broadcast(&c);
    pthread_mutex_unlock(&m);
    pthread_join(crit, NULL);
    pthread_join(bg, NULL);
    prctl(PR_SET_NAME, "crit-main", 0, 0, 0);
    reads(300);
    prctl(PR_SET_NAME, "plain-main", 0, 0, 0);
    reads(5);
    puts("done");
    return 0;
}
