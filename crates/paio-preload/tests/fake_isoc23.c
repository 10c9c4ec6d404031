/* glibc 2.38's __isoc23_ scanf forms for a glibc without them (this test
 * machine's): scanning with the next __isoc99_vfscanf (libc's; never the
 * interposer's, which is loaded before this library). The bytewise test
 * links its -DISOC23_SCANF build against this library, so that the
 * program calls __isoc23_fscanf as one built on glibc 2.38 does, and the
 * interposer's own __isoc23_ forms find this one as the next. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>

typedef int (*vfscanf_fn)(FILE *, const char *, va_list);

int __isoc23_vfscanf(FILE *stream, const char *format, va_list args) {
    static vfscanf_fn next;
    if (!next) next = (vfscanf_fn)dlsym(RTLD_NEXT, "__isoc99_vfscanf");
    return next(stream, format, args);
}

int __isoc23_fscanf(FILE *stream, const char *format, ...) {
    va_list args;
    va_start(args, format);
    int r = __isoc23_vfscanf(stream, format, args);
    va_end(args);
    return r;
}
