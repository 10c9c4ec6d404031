/* stdio through the interposer: buffered writes charged when they reach the
 * kernel (fflush, fclose, a full buffer, exit), reads when a refill does. */
#include <stdio.h>
#include <string.h>

int main(void) {
    char line[64];
    FILE *a = fopen("a.txt", "w");
    if (!a) return 1;
    for (int i = 0; i < 1000; i++) fputs("0123456789abcdefghi\n", a); /* 20,000 B */
    fwrite("tail", 1, 4, a);
    fflush(a);                                                        /* 20,004 B */
    fwrite("0123456789", 1, 10, a);
    fclose(a);                                                        /* 20,014 B */
    FILE *b = fopen("a.txt", "r");
    if (!b) return 1;
    long got = 0;
    while (fgets(line, sizeof line, b)) got += (long)strlen(line);
    fclose(b);
    /* Left in stdout's buffer (not a terminal): written by exit's flush. */
    printf("%s", "");
    fputs("read ", stdout);
    fprintf(stdout, "%ld\n", got);
    fputs("bye\n", stdout);
    return 0;
}
