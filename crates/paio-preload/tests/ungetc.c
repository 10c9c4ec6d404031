/* Bytes pushed back with ungetc are read again but came from the kernel
 * once (or never, when the program pushes back a byte of its own):
 * tests/calls.rs checks that every byte of the file is charged once per
 * pass, whichever way the pushed-back bytes are read again. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define SIZE 100000

static unsigned long sum_of(const unsigned char *p, size_t n) {
    unsigned long s = 0;
    for (size_t i = 0; i < n; i++) s = s * 31 + p[i];
    return s;
}

int main(void) {
    static unsigned char data[SIZE], got[SIZE];
    for (int i = 0; i < SIZE; i++) data[i] = (unsigned char)("0123456789abcdef\n"[i % 17]);
    int fd = open("u.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, data, SIZE) != SIZE || close(fd) != 0) return 1;

    FILE *f = fopen("u.txt", "r");
    if (!f) return 2;

    /* A: the last byte of each read pushed back where it was (glibc moves
     * the read pointer back) and read again by the next fread, which the
     * interposer sees: 100,000. */
    size_t n = 0;
    for (;;) {
        size_t k = fread(got + n, 1, 5000 < SIZE - n ? 5000 : SIZE - n, f);
        if (k == 0) break;
        n += k;
        if (n == SIZE) break;
        if (ungetc(got[n - 1], f) == EOF) return 3;
        n--;
    }
    if (n != SIZE || memcmp(got, data, SIZE) != 0) return 4;

    /* B: a byte of the program's own pushed back every 1,000 bytes (glibc
     * keeps it in a separate backup area) and read by the inline macro:
     * the file's 100,000 bytes, not the pushed-back ones. */
    rewind(f);
    n = 0;
    int pushed = 0;
    for (int c; (c = getc_unlocked(f)) != EOF;) {
        got[n++] = (unsigned char)c;
        if (n % 1000 == 0) {
            if (ungetc('#', f) == EOF) return 5;
            if (getc_unlocked(f) != '#') return 6;
            pushed++;
        }
    }
    if (n != SIZE || pushed != 100 || memcmp(got, data, SIZE) != 0) return 7;

    /* C: a pushed-back byte discarded by fseek, then the file whole by
     * fgetc and fread: 10 + 100,000. */
    rewind(f);
    if (fread(got, 1, 10, f) != 10) return 8;
    if (ungetc('z', f) == EOF) return 9;
    if (fseek(f, 0, SEEK_SET) != 0) return 10;
    n = 0;
    for (int i = 0; i < 100; i++) got[n++] = (unsigned char)fgetc(f);
    while (n < SIZE) {
        size_t k = fread(got + n, 1, 3000, f);
        if (k == 0) break;
        n += k;
    }
    if (n != SIZE || memcmp(got, data, SIZE) != 0) return 11;
    fclose(f);
    printf("%lu\n", sum_of(got, SIZE));
    return 0;
}
