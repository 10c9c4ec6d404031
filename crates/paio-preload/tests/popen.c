/* popen's pipe is a stream: reads from `head` and writes to `cat` through
 * popen'd streams. Exit status 0 on success (nothing printed: stdio bytes
 * still buffered at exit are charged without a class). */
#include <stdio.h>
#include <string.h>

int main(void) {
    static char buf[1 << 16];
    FILE *in = popen("head -c 1000000 /dev/zero", "r");
    if (!in) return 2;
    size_t got = 0, n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) got += n;
    if (pclose(in) != 0 || got != 1000000) return 3;
    FILE *out = popen("cat > /dev/null", "w");
    if (!out) return 4;
    memset(buf, 'x', sizeof buf);
    for (int i = 0; i < 5; i++)
        if (fwrite(buf, 1, 20000, out) != 20000) return 5;
    if (pclose(out) != 0) return 6;
    return 0;
}
