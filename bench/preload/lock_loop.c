/* The lock hooks' cost (priority inheritance, crates/paio-preload/src/locks.rs).
 *
 *   lock_loop ITERATIONS paired
 *       under LD_PRELOAD: alternates blocks of uncontended
 *       pthread_mutex_lock + pthread_mutex_unlock pairs through the
 *       interposer's functions and through libc's own (looked up in
 *       libc.so.6), and prints "interposed_ns direct_ns added_ns" per pair
 *       (paired.h).
 *
 *   lock_loop ITERATIONS paired-read
 *       the same for pthread_rwlock_rdlock + pthread_rwlock_unlock (the
 *       interposer records each read hold, glibc records no readers).
 *
 *   lock_loop ITERATIONS contended THREADS
 *       THREADS threads each take one shared mutex ITERATIONS times around
 *       a counter increment; prints the wall-clock ns per lock/unlock pair
 *       (over all threads). run.sh runs it with and without LD_PRELOAD. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "paired.h"

#define BLOCK 100000

typedef int (*lock_fn)(pthread_mutex_t *);

struct sides {
    lock_fn lock[2], unlock[2]; /* [direct, interposed] */
    pthread_mutex_t m;
    long counter;
};

static double block(void *arg, int interposed, long pair) {
    (void)pair;
    struct sides *s = arg;
    lock_fn lock = s->lock[interposed], unlock = s->unlock[interposed];
    double start = now_ns();
    for (long i = 0; i < BLOCK; i++) {
        if (lock(&s->m) != 0) return -1;
        s->counter++;
        if (unlock(&s->m) != 0) return -1;
    }
    return (now_ns() - start) / BLOCK;
}

typedef int (*rw_fn)(pthread_rwlock_t *);

struct rw_sides {
    rw_fn lock[2], unlock[2]; /* [direct, interposed] */
    pthread_rwlock_t l;
    long counter;
};

static double rw_block(void *arg, int interposed, long pair) {
    (void)pair;
    struct rw_sides *s = arg;
    rw_fn lock = s->lock[interposed], unlock = s->unlock[interposed];
    double start = now_ns();
    for (long i = 0; i < BLOCK; i++) {
        if (lock(&s->l) != 0) return -1;
        s->counter++;
        if (unlock(&s->l) != 0) return -1;
    }
    return (now_ns() - start) / BLOCK;
}

static pthread_mutex_t shared = PTHREAD_MUTEX_INITIALIZER;
static long shared_counter;
static long per_thread;

static void *contend(void *arg) {
    (void)arg;
    for (long i = 0; i < per_thread; i++) {
        pthread_mutex_lock(&shared);
        shared_counter++;
        pthread_mutex_unlock(&shared);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: lock_loop ITERATIONS paired|paired-read | lock_loop ITERATIONS contended THREADS\n");
        return 2;
    }
    long iterations = atol(argv[1]);
    if (strcmp(argv[2], "paired") == 0) {
        void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
        struct sides s = {
            .lock = {(lock_fn)dlsym(libc, "pthread_mutex_lock"), pthread_mutex_lock},
            .unlock = {(lock_fn)dlsym(libc, "pthread_mutex_unlock"), pthread_mutex_unlock},
        };
        if (!libc || !s.lock[0] || !s.unlock[0]) {
            fprintf(stderr, "lock_loop: libc's own pthread_mutex_lock not found\n");
            return 1;
        }
        pthread_mutex_init(&s.m, NULL);
        block(&s, 1, 0); /* warm-up */
        block(&s, 0, 0);
        return paired_report(iterations / BLOCK > 0 ? iterations / BLOCK : 1, block, &s, "lock_loop");
    }
    if (strcmp(argv[2], "paired-read") == 0) {
        void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
        struct rw_sides s = {
            .lock = {(rw_fn)dlsym(libc, "pthread_rwlock_rdlock"), pthread_rwlock_rdlock},
            .unlock = {(rw_fn)dlsym(libc, "pthread_rwlock_unlock"), pthread_rwlock_unlock},
        };
        if (!libc || !s.lock[0] || !s.unlock[0]) {
            fprintf(stderr, "lock_loop: libc's own pthread_rwlock_rdlock not found\n");
            return 1;
        }
        pthread_rwlock_init(&s.l, NULL);
        rw_block(&s, 1, 0); /* warm-up */
        rw_block(&s, 0, 0);
        return paired_report(iterations / BLOCK > 0 ? iterations / BLOCK : 1, rw_block, &s, "lock_loop");
    }
    if (strcmp(argv[2], "contended") == 0 && argc == 4) {
        int n = atoi(argv[3]);
        if (n < 1 || n > 64) return 2;
        pthread_t t[64];
        per_thread = iterations;
        double start = now_ns();
        for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, contend, NULL);
        for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
        double ns = (now_ns() - start) / ((double)iterations * n);
        if (shared_counter != iterations * n) return 1;
        printf("%.2f\n", ns);
        return 0;
    }
    return 2;
}
