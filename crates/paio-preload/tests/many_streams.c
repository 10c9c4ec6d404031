/* More streams open at once than the interposer's table holds (512): each
 * gets one byte through fputc, then all are closed. The interposer must say
 * once that some are not tracked, and still charge every fputc byte. */
#include <stdio.h>

#define STREAMS 700

int main(void) {
    static FILE *f[STREAMS];
    for (int i = 0; i < STREAMS; i++) {
        char name[32];
        snprintf(name, sizeof name, "s%d.txt", i);
        if (!(f[i] = fopen(name, "w"))) return 1;
        if (fputc('x', f[i]) == EOF) return 2;
    }
    for (int i = 0; i < STREAMS; i++)
        if (fclose(f[i]) != 0) return 3;
    return 0;
}
