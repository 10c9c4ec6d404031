/* Four threads write to one stream at once, through locked calls (fputs,
 * fprintf, fputc) and through the inline putc_unlocked under the stream's
 * lock, while each also writes a stream of its own: every byte must be
 * charged once (tests/calls.rs compares with the files' sizes). */
#include <pthread.h>
#include <stdio.h>

static FILE *shared;

static void *writer(void *arg) {
    long id = (long)arg;
    char name[32];
    snprintf(name, sizeof name, "own%ld.txt", id);
    FILE *own = fopen(name, "w");
    if (!own) return (void *)1;
    for (int i = 0; i < 5000; i++) {
        fputs("line\n", shared);
        fprintf(shared, "%ld:%04d\n", id, i);
        fputc('.', shared);
        flockfile(shared);
        putc_unlocked('u', shared);
        putc_unlocked('\n', shared);
        funlockfile(shared);
        putc_unlocked('o', own);
        fprintf(own, "%d\n", i);
    }
    return fclose(own) == 0 ? NULL : (void *)1;
}

int main(void) {
    shared = fopen("shared.txt", "w");
    if (!shared) return 1;
    pthread_t t[4];
    for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, writer, (void *)i);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        if (r) return 2;
    }
    return fclose(shared) == 0 ? 0 : 3;
}
