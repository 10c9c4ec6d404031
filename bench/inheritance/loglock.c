/* Case 1 of the inheritance experiment (bench/inheritance/run.py): request
 * threads that share a log mutex with a background checkpointer.
 *
 *   loglock SECONDS DATA LOG CKPT THREADS
 *
 * THREADS request threads, named "req-N", each loop for SECONDS: read 4 KiB
 * at a random aligned offset of DATA (O_DIRECT), then append a 256-byte
 * record to LOG under the log mutex, then think 1 ms; each request's
 * latency (read + lock + append) is recorded. One background thread, named
 * "bg-ckpt", loops: take the log mutex, write 1 MiB to CKPT (O_DIRECT, at a
 * rotating offset), release it, sleep 5 ms; a checkpoint that must not
 * interleave with log appends, as in many storage engines.
 *
 * Prints JSON: {"latency_us": [...], "ckpt_mib": N, "seconds": S}. Nothing
 * in it knows about paio: under `paio run` the request threads are marked
 * critical by name, and inheritance lends the checkpointer their
 * criticality while they wait for the mutex. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 16
#define MAX_SAMPLES 1000000

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int data_fd, log_fd, ckpt_fd;
static off_t data_blocks;
static double end_at;
static atomic_long ckpt_bytes;
static double *samples[MAX_THREADS];
static long counts[MAX_THREADS];

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void *request(void *arg) {
    long id = (long)arg;
    char name[16];
    snprintf(name, sizeof name, "req-%ld", id);
    pthread_setname_np(pthread_self(), name);
    void *buf;
    if (posix_memalign(&buf, 4096, 4096)) die("posix_memalign");
    char rec[256];
    memset(rec, 'r', sizeof rec);
    unsigned seed = (unsigned)id * 7919u + 1;
    while (now_s() < end_at && counts[id] < MAX_SAMPLES) {
        double t0 = now_s();
        off_t off = (off_t)(rand_r(&seed) % data_blocks) * 4096;
        if (pread(data_fd, buf, 4096, off) != 4096) die("pread");
        pthread_mutex_lock(&log_lock);
        if (write(log_fd, rec, sizeof rec) != (ssize_t)sizeof rec) die("write log");
        pthread_mutex_unlock(&log_lock);
        samples[id][counts[id]++] = (now_s() - t0) * 1e6;
        usleep(1000);
    }
    free(buf);
    return NULL;
}

static void *checkpoint(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "bg-ckpt");
    void *buf;
    if (posix_memalign(&buf, 4096, 1 << 20)) die("posix_memalign");
    memset(buf, 'c', 1 << 20);
    off_t off = 0;
    while (now_s() < end_at) {
        pthread_mutex_lock(&log_lock);
        if (pwrite(ckpt_fd, buf, 1 << 20, off) != 1 << 20) die("pwrite ckpt");
        pthread_mutex_unlock(&log_lock);
        atomic_fetch_add(&ckpt_bytes, 1 << 20);
        off = (off + (1 << 20)) % (64 << 20);
        usleep(5000);
    }
    free(buf);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: loglock SECONDS DATA LOG CKPT THREADS\n");
        return 2;
    }
    double seconds = atof(argv[1]);
    int threads = atoi(argv[5]);
    if (seconds <= 0 || threads < 1 || threads > MAX_THREADS) return 2;
    if ((data_fd = open(argv[2], O_RDONLY | O_DIRECT)) < 0) die(argv[2]);
    struct stat st;
    if (fstat(data_fd, &st) || st.st_size < 4096) die("data file size");
    data_blocks = st.st_size / 4096;
    if ((log_fd = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644)) < 0) die(argv[3]);
    if ((ckpt_fd = open(argv[4], O_WRONLY | O_CREAT | O_DIRECT, 0644)) < 0) die(argv[4]);
    for (int i = 0; i < threads; i++)
        if (!(samples[i] = malloc(sizeof(double) * MAX_SAMPLES))) die("malloc");
    double start = now_s();
    end_at = start + seconds;
    pthread_t req[MAX_THREADS], bg;
    pthread_create(&bg, NULL, checkpoint, NULL);
    for (long i = 0; i < threads; i++) pthread_create(&req[i], NULL, request, (void *)i);
    for (int i = 0; i < threads; i++) pthread_join(req[i], NULL);
    pthread_join(bg, NULL);
    double took = now_s() - start;
    printf("{\"seconds\": %.3f, \"ckpt_mib\": %.1f, \"latency_us\": [", took,
           (double)atomic_load(&ckpt_bytes) / (1 << 20));
    int first = 1;
    for (int i = 0; i < threads; i++)
        for (long j = 0; j < counts[i]; j++) {
            printf("%s%.1f", first ? "" : ",", samples[i][j]);
            first = 0;
        }
    printf("]}\n");
    return 0;
}
