/* Wide-character stdio on files: the interposer does not charge it and
 * must say so, once per process (tests/calls.rs). */
#include <stdio.h>
#include <wchar.h>

int main(void) {
    FILE *a = fopen("wide-a.txt", "w");
    FILE *b = fopen("wide-b.txt", "w");
    if (!a || !b) return 1;
    for (int i = 0; i < 100; i++) fwprintf(a, L"%ls %d\n", L"wide", i);
    fputws(L"left open until exit\n", b);
    if (fclose(a) != 0) return 2;
    printf("done\n");
    return 0;
}
