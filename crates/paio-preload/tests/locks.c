/* Priority inheritance through locks. A background thread ("bg-holder")
 * takes a lock, waits until the critical main thread ("crit-main") is
 * blocked on it, then writes; its writes while the critical thread waits are
 * lent criticality, its writes after it released the lock are not. Each
 * phase writes a size of its own, so the stage's per-channel bytes tell who
 * was critical when:
 *   mutex held, crit waiting:   10 x 4000 bytes (holder)
 *   rwlock held for writing, crit waiting to read: 10 x 2000 bytes (holder)
 *   after each release:         5 x 700 bytes (holder), twice
 *   crit's own writes:          3 x 300 bytes, twice
 * It also checks that glibc keeps the holder's thread id where the
 * interposer reads it (prints "offsets ok"). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static int phase_held = 0;     /* the holder took the lock of this phase */
static int crit_tid = 0;
static int fd = -1;

static void writes(int n, size_t size) {
    char buf[4096];
    memset(buf, 'x', sizeof buf);
    for (int i = 0; i < n; i++)
        if (pwrite(fd, buf, size, 0) != (ssize_t)size) _exit(3);
}

/* Until the critical thread sleeps (state S in /proc): it is blocked in
 * the lock, after the interposer's hook ran. */
static void until_crit_sleeps(void) {
    char path[64], st[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", crit_tid);
    for (;;) {
        int f = open(path, O_RDONLY);
        ssize_t n = read(f, st, sizeof st - 1);
        close(f);
        if (n > 0) {
            st[n] = 0;
            char *p = strrchr(st, ')');
            if (p && p[1] == ' ' && p[2] == 'S') return;
        }
        sched_yield();
    }
}

static void *holder(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m);
    if (m.__data.__owner != (int)syscall(SYS_gettid)) _exit(4);
    __atomic_store_n(&phase_held, 1, __ATOMIC_RELEASE);
    until_crit_sleeps();
    writes(10, 4000);
    pthread_mutex_unlock(&m);
    writes(5, 700);
    while (__atomic_load_n(&phase_held, __ATOMIC_ACQUIRE) != 2) sched_yield();
    pthread_rwlock_wrlock(&rw);
    if (rw.__data.__cur_writer != (int)syscall(SYS_gettid)) _exit(5);
    __atomic_store_n(&phase_held, 3, __ATOMIC_RELEASE);
    until_crit_sleeps();
    writes(10, 2000);
    pthread_rwlock_unlock(&rw);
    writes(5, 700);
    return NULL;
}

/* `locks split`: the holder writes 64 KiB in one pwrite that the policy
 * splits into slow 4 KiB pieces; once the first piece is in the file, the
 * critical thread blocks on the mutex and the rest of the call goes as one
 * critical request. */
static int writing = 0;

static void *split_holder(void *arg) {
    (void)arg;
    static char buf[65536];
    memset(buf, 's', sizeof buf);
    pthread_mutex_lock(&m);
    __atomic_store_n(&writing, 1, __ATOMIC_RELEASE);
    if (pwrite(fd, buf, sizeof buf, 0) != (ssize_t)sizeof buf) _exit(7);
    pthread_mutex_unlock(&m);
    return NULL;
}

static int split_mode(void) {
    prctl(PR_SET_NAME, "crit-main", 0, 0, 0);
    pthread_t bg;
    pthread_create(&bg, NULL, split_holder, NULL);
    while (!__atomic_load_n(&writing, __ATOMIC_ACQUIRE)) sched_yield();
    /* Block on the mutex only once the first piece is in the file: before
     * that, the loan would reach the call before it was split at all. */
    struct stat st;
    do {
        sched_yield();
        if (fstat(fd, &st) != 0) return 8;
    } while (st.st_size < 4096);
    pthread_mutex_lock(&m);
    pthread_mutex_unlock(&m);
    pthread_join(bg, NULL);
    puts("split ok");
    return 0;
}

/* `locks cond`: a helper thread signals a condition variable once, then
 * the critical main thread waits on it; the helper's writes while main
 * waits (10 x 3000 bytes) are lent criticality, its writes after it
 * signalled main (5 x 700) are not; main writes 3 x 300 bytes itself. */
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int registered = 0, ready = 0;

static void *cond_helper(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m);
    pthread_cond_signal(&cv); /* nobody waits yet: it names the helper */
    pthread_mutex_unlock(&m);
    __atomic_store_n(&registered, 1, __ATOMIC_RELEASE);
    until_crit_sleeps();
    writes(10, 3000);
    pthread_mutex_lock(&m);
    ready = 1;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&m);
    writes(5, 700);
    return NULL;
}

static int cond_mode(void) {
    prctl(PR_SET_NAME, "crit-main", 0, 0, 0);
    crit_tid = (int)syscall(SYS_gettid);
    pthread_t bg;
    pthread_create(&bg, NULL, cond_helper, NULL);
    while (!__atomic_load_n(&registered, __ATOMIC_ACQUIRE)) sched_yield();
    pthread_mutex_lock(&m);
    while (!ready) pthread_cond_wait(&cv, &m);
    pthread_mutex_unlock(&m);
    writes(3, 300);
    pthread_join(bg, NULL);
    puts("cond ok");
    return 0;
}

/* `locks readers`: a background thread holds the rwlock for reading; the
 * critical main thread blocks to write it and lends the reader its
 * criticality: the reader's writes while main waits (10 x 1500 bytes) are
 * critical, its writes after it released the lock (5 x 700) are not; main
 * writes 3 x 300 bytes itself. */
static void *reader(void *arg) {
    (void)arg;
    pthread_rwlock_rdlock(&rw);
    __atomic_store_n(&registered, 1, __ATOMIC_RELEASE);
    until_crit_sleeps();
    writes(10, 1500);
    pthread_rwlock_unlock(&rw);
    writes(5, 700);
    return NULL;
}

static int readers_mode(void) {
    prctl(PR_SET_NAME, "crit-main", 0, 0, 0);
    crit_tid = (int)syscall(SYS_gettid);
    pthread_t bg;
    pthread_create(&bg, NULL, reader, NULL);
    while (!__atomic_load_n(&registered, __ATOMIC_ACQUIRE)) sched_yield();
    pthread_rwlock_wrlock(&rw);
    pthread_rwlock_unlock(&rw);
    writes(3, 300);
    pthread_join(bg, NULL);
    puts("readers ok");
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "readers") == 0) {
        fd = open("log.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        return fd < 0 ? 1 : readers_mode();
    }
    if (argc == 2 && strcmp(argv[1], "cond") == 0) {
        fd = open("log.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        return fd < 0 ? 1 : cond_mode();
    }
    if (argc == 2 && strcmp(argv[1], "split") == 0) {
        fd = open("log.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        return fd < 0 ? 1 : split_mode();
    }
    if (offsetof(pthread_mutex_t, __data.__owner) != 8 ||
        offsetof(pthread_rwlock_t, __data.__cur_writer) != 24) {
        puts("offsets differ");
        return 6;
    }
    fd = open("log.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return 1;
    prctl(PR_SET_NAME, "crit-main", 0, 0, 0);
    crit_tid = (int)syscall(SYS_gettid);
    pthread_t bg;
    pthread_create(&bg, NULL, holder, NULL);
    pthread_setname_np(bg, "bg-holder");
    while (__atomic_load_n(&phase_held, __ATOMIC_ACQUIRE) != 1) sched_yield();
    pthread_mutex_lock(&m);
    pthread_mutex_unlock(&m);
    writes(3, 300);
    __atomic_store_n(&phase_held, 2, __ATOMIC_RELEASE);
    while (__atomic_load_n(&phase_held, __ATOMIC_ACQUIRE) != 3) sched_yield();
    pthread_rwlock_rdlock(&rw);
    pthread_rwlock_unlock(&rw);
    writes(3, 300);
    pthread_join(bg, NULL);
    puts("offsets ok");
    return 0;
}
