/* stdio byte by byte and formatted: the macros <stdio.h> inlines
 * (putc_unlocked, getc_unlocked: no call until a buffer is full or empty),
 * the one-byte calls, puts, the printf and scanf families and dprintf.
 * Every byte must
 * be charged (tests/calls.rs sums them), and none written to memory
 * streams. */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#ifdef PLAIN_SCANF
/* The symbol programs built as C89 with _GNU_SOURCE call (others call
 * __isoc99_fscanf, through <stdio.h>'s redirect). */
extern int scan_file(FILE *stream, const char *format, ...) __asm__("fscanf");
#elif defined(ISOC23_SCANF)
/* The symbol programs built on glibc 2.38 or later in C2X mode or with
 * _GNU_SOURCE call (tests/fake_isoc23.c provides it here). */
extern int scan_file(FILE *stream, const char *format, ...) __asm__("__isoc23_fscanf");
#else
#define scan_file fscanf
#endif

static void inline_bytes(FILE *f, int n, int c) {
    for (int i = 0; i < n; i++) putc_unlocked(c, f);
}

static int vf(FILE *f, const char *format, ...) {
    va_list args;
    va_start(args, format);
    int r = vfprintf(f, format, args);
    va_end(args);
    return r;
}

int main(void) {
    /* Memory streams move no I/O: none of this is charged. */
    char *text = NULL;
    size_t length = 0;
    FILE *m = open_memstream(&text, &length);
    if (!m) return 4;
    for (int i = 0; i < 1000; i++) fprintf(m, "%06d\n", i);
    inline_bytes(m, 5000, 'm');
    fputs("memory", m);
    fclose(m);
    free(text);
    char room[8192];
    FILE *fm = fmemopen(room, sizeof room, "w");
    if (!fm) return 5;
    inline_bytes(fm, 5000, 'f');
    fwrite("memory", 1, 6, fm);
    fclose(fm);

    FILE *a = fopen("a.txt", "w+");
    if (!a) return 1;
    inline_bytes(a, 10000, 'i');                       /* 10,000: 2 full buffers */
    for (int i = 0; i < 100; i++) fputc('f', a);       /* 100 */
    for (int i = 0; i < 100; i++) putc('p', a);        /* 100 */
    for (int i = 0; i < 100; i++) fprintf(a, "%05d\n", i); /* 600 */
    for (int i = 0; i < 100; i++) vf(a, "%04d", i);    /* 400 */
    inline_bytes(a, 50, 's');                          /* 50, then fseek flushes */
    if (fseek(a, 0, SEEK_END) != 0) return 2;
    inline_bytes(a, 70, 'n');                          /* 70, then fflush(NULL) */
    fflush(NULL);
    inline_bytes(a, 30, 'c');                          /* 30: written = 11,350 */
    rewind(a);
    long got = 0;                                      /* read back inline: 11,350 */
    for (int c; (c = getc_unlocked(a)) != EOF;) got++;
    rewind(a);
    for (int i = 0; i < 100; i++) got += fgetc(a) != EOF; /* 100 */
    for (int i = 0; i < 100; i++) got += getc(a) != EOF;  /* 100: read = 11,550 */
    fclose(a);

    int b = open("b.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (b < 0) return 3;
    for (int i = 0; i < 100; i++) dprintf(b, "%06d\n", i); /* 700 */
    close(b);

    FILE *c = fopen("c.txt", "w+");                    /* 210,000 out and back in */
    if (!c) return 6;
    for (int i = 0; i < 30000; i++) fprintf(c, "%06d\n", i);
    rewind(c);
    long sum = 0;
    for (int v; scan_file(c, "%d", &v) == 1;) sum += v; /* to EOF: every byte */
    fclose(c);
    if (sum != 30000L * 29999 / 2) return 7;

    puts("hello");                                     /* 6 */
    for (int i = 0; i < 10; i++) putchar('x');         /* 10 */
    printf("%ld\n", got);                              /* "11550\n": 6 */
    for (int i = 0; i < 20; i++) putchar_unlocked('y'); /* 20, left for exit */
    return 0;                                          /* stdout: 42 */
}
