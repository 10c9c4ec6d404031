/* Edge cases: I/O from .preinit_array (before the interposer's constructor),
 * a setenv there that getenv would see but the constructor's envp does not,
 * I/O from a thread-specific-data destructor at thread exit, and the
 * exported context call. Prints what it read; the test compares the output
 * with and without the interposer. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char early[16];

static void preinit(int argc, char **argv, char **envp) {
    (void)argc; (void)argv; (void)envp;
    int fd = open("in.txt", O_RDONLY);
    if (fd >= 0) {
        ssize_t n = read(fd, early, 5);
        if (n < 0) early[0] = '?';
        close(fd);
    }
    /* New variable: getenv would now find it, the envp passed to the
     * constructors does not contain it. */
    setenv("PAIO_STAGE_NAME", "from-getenv", 1);
}
__attribute__((section(".preinit_array"), used)) static void (*preinit_p)(int, char **, char **) = preinit;

static pthread_key_t key;
static void at_thread_exit(void *p) {
    int fd = open("tls.txt", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
        ssize_t n = write(fd, p, strlen(p));
        (void)n;
        close(fd);
    }
}
static void *thread(void *arg) {
    (void)arg;
    pthread_setspecific(key, "written-at-thread-exit");
    char buf[8];
    int fd = open("in.txt", O_RDONLY);
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    return (void *)n;
}

int main(void) {
    printf("early=%s\n", early);
    pthread_key_create(&key, at_thread_exit);
    pthread_t t;
    void *r;
    for (int i = 0; i < 4; i++) {
        pthread_create(&t, NULL, thread, NULL);
        pthread_join(t, &r);
    }
    printf("thread read %ld\n", (long)r);
    char buf[64] = {0};
    int fd = open("tls.txt", O_RDONLY);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    printf("tls=%ld %s\n", (long)n, buf);
    int (*set)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "paio_preload_set_context");
    int ok = set ? set("flush") : 0;
    fd = open("in.txt", O_RDONLY);
    n = read(fd, buf, 3);
    close(fd);
    printf("context call %d, read %ld\n", ok, (long)n);
    fflush(stdout);
    return 0;
}
