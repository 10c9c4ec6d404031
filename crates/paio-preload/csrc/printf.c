/* The printf and scanf families for libpaio_preload.so. Stable Rust cannot define a
 * variadic function, so each one is here: it starts its argument list and
 * has libc's own v* function format it, inside the library's charging path
 * (stream_write / fd_write in src/printf.rs, handed over by
 * paio_c_printf_init when the library loads; before that, calls are made
 * uncharged). The functions are hidden; src/printf.rs exports them under
 * libc's names with one jump each. Errno: set only by libc's function (or
 * ENOSYS when libc lacks it); the Rust side restores its own. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#define HIDDEN __attribute__((visibility("hidden")))

/* One formatting call, run by the Rust side between its two looks at the
 * stream. */
struct call {
    void *real;
    FILE *stream;
    int fd;
    int flag; /* the _chk variants' fortify level; -1 for the others */
    const char *format;
    va_list args;
};

typedef int (*run_fn)(struct call *);
typedef int (*stream_fn)(FILE *stream, run_fn run, struct call *call);
typedef int (*fd_write_fn)(int fd, run_fn run, struct call *call);
static stream_fn stream_write, stream_read;
static fd_write_fn fd_write;

/* Called once by the library as it loads (src/printf.rs). */
HIDDEN void paio_c_printf_init(stream_fn write, fd_write_fn to_fd, stream_fn read) {
    __atomic_store_n(&stream_write, write, __ATOMIC_RELEASE);
    __atomic_store_n(&fd_write, to_fd, __ATOMIC_RELEASE);
    __atomic_store_n(&stream_read, read, __ATOMIC_RELEASE);
}

/* The next definition of `name` (libc's), looked up once. */
static void *next(void **slot, const char *name) {
    void *p = __atomic_load_n(slot, __ATOMIC_RELAXED);
    if (!p) {
        int saved = errno;
        p = dlsym(RTLD_NEXT, name);
        errno = saved;
        __atomic_store_n(slot, p, __ATOMIC_RELAXED);
    }
    return p;
}

static void *real_vfprintf, *real_vfprintf_chk, *real_vdprintf, *real_vdprintf_chk;
static void *real_vfscanf, *real_isoc99_vfscanf, *real_isoc23_vfscanf;

typedef int (*vfprintf_fn)(FILE *, const char *, va_list);
typedef int (*vfprintf_chk_fn)(FILE *, int, const char *, va_list);
typedef int (*vdprintf_fn)(int, const char *, va_list);
typedef int (*vdprintf_chk_fn)(int, int, const char *, va_list);
typedef int (*vfscanf_fn)(FILE *, const char *, va_list);

static int run_stream(struct call *c) {
    if (c->flag < 0)
        return ((vfprintf_fn)c->real)(c->stream, c->format, c->args);
    return ((vfprintf_chk_fn)c->real)(c->stream, c->flag, c->format, c->args);
}

static int run_fd(struct call *c) {
    if (c->flag < 0)
        return ((vdprintf_fn)c->real)(c->fd, c->format, c->args);
    return ((vdprintf_chk_fn)c->real)(c->fd, c->flag, c->format, c->args);
}

static int run_scan(struct call *c) {
    return ((vfscanf_fn)c->real)(c->stream, c->format, c->args);
}

static int nosys(void) {
    errno = ENOSYS;
    return -1;
}

/* Formats onto `stream` with `real` (vfprintf or __vfprintf_chk). */
static int to_stream(void *real, FILE *stream, int flag, const char *format, va_list args) {
    if (!real)
        return nosys();
    struct call c = {.real = real, .stream = stream, .fd = -1, .flag = flag, .format = format};
    va_copy(c.args, args);
    stream_fn charged = __atomic_load_n(&stream_write, __ATOMIC_ACQUIRE);
    int r = charged ? charged(stream, run_stream, &c) : run_stream(&c);
    va_end(c.args);
    return r;
}

/* Formats onto `fd` with `real` (vdprintf or __vdprintf_chk). */
static int to_fd(void *real, int fd, int flag, const char *format, va_list args) {
    if (!real)
        return nosys();
    struct call c = {.real = real, .stream = NULL, .fd = fd, .flag = flag, .format = format};
    va_copy(c.args, args);
    fd_write_fn charged = __atomic_load_n(&fd_write, __ATOMIC_ACQUIRE);
    int r = charged ? charged(fd, run_fd, &c) : run_fd(&c);
    va_end(c.args);
    return r;
}

/* Scans `stream` with `real` (vfscanf or __isoc99_vfscanf). */
static int from_stream(void *real, FILE *stream, const char *format, va_list args) {
    if (!real)
        return nosys();
    struct call c = {.real = real, .stream = stream, .fd = -1, .flag = -1, .format = format};
    va_copy(c.args, args);
    stream_fn charged = __atomic_load_n(&stream_read, __ATOMIC_ACQUIRE);
    int r = charged ? charged(stream, run_scan, &c) : run_scan(&c);
    va_end(c.args);
    return r;
}

#define VFSCANF next(&real_vfscanf, "vfscanf")
#define ISOC99_VFSCANF next(&real_isoc99_vfscanf, "__isoc99_vfscanf")
#define ISOC23_VFSCANF next(&real_isoc23_vfscanf, "__isoc23_vfscanf")
#define VFPRINTF next(&real_vfprintf, "vfprintf")
#define VFPRINTF_CHK next(&real_vfprintf_chk, "__vfprintf_chk")
#define VDPRINTF next(&real_vdprintf, "vdprintf")
#define VDPRINTF_CHK next(&real_vdprintf_chk, "__vdprintf_chk")

HIDDEN int paio_c_vfprintf(FILE *stream, const char *format, va_list args) {
    return to_stream(VFPRINTF, stream, -1, format, args);
}

HIDDEN int paio_c_vprintf(const char *format, va_list args) {
    return to_stream(VFPRINTF, stdout, -1, format, args);
}

HIDDEN int paio_c_fprintf(FILE *stream, const char *format, ...) {
    va_list args;
    va_start(args, format);
    int r = to_stream(VFPRINTF, stream, -1, format, args);
    va_end(args);
    return r;
}

HIDDEN int paio_c_printf(const char *format, ...) {
    va_list args;
    va_start(args, format);
    int r = to_stream(VFPRINTF, stdout, -1, format, args);
    va_end(args);
    return r;
}

HIDDEN int paio_c_vfprintf_chk(FILE *stream, int flag, const char *format, va_list args) {
    return to_stream(VFPRINTF_CHK, stream, flag, format, args);
}

HIDDEN int paio_c_vprintf_chk(int flag, const char *format, va_list args) {
    return to_stream(VFPRINTF_CHK, stdout, flag, format, args);
}

HIDDEN int paio_c_fprintf_chk(FILE *stream, int flag, const char *format, ...) {
    va_list args;
    va_start(args, format);
    int r = to_stream(VFPRINTF_CHK, stream, flag, format, args);
    va_end(args);
    return r;
}

HIDDEN int paio_c_printf_chk(int flag, const char *format, ...) {
    va_list args;
    va_start(args, format);
    int r = to_stream(VFPRINTF_CHK, stdout, flag, format, args);
    va_end(args);
    return r;
}

HIDDEN int paio_c_vdprintf(int fd, const char *format, va_list args) {
    return to_fd(VDPRINTF, fd, -1, format, args);
}

HIDDEN int paio_c_dprintf(int fd, const char *format, ...) {
    va_list args;
    va_start(args, format);
    int r = to_fd(VDPRINTF, fd, -1, format, args);
    va_end(args);
    return r;
}

HIDDEN int paio_c_vdprintf_chk(int fd, int flag, const char *format, va_list args) {
    return to_fd(VDPRINTF_CHK, fd, flag, format, args);
}

HIDDEN int paio_c_dprintf_chk(int fd, int flag, const char *format, ...) {
    va_list args;
    va_start(args, format);
    int r = to_fd(VDPRINTF_CHK, fd, flag, format, args);
    va_end(args);
    return r;
}

/* The scanf family, as `paio_c_<PREFIX>vfscanf` ... scanning with `real`:
 * C99 programs call the __isoc99_ forms (<stdio.h> redirects them), older
 * ones the plain names, and programs built on glibc 2.38 or later in C2X
 * mode or with _GNU_SOURCE (every C++ program) the __isoc23_ forms. */
#define SCAN_FAMILY(PREFIX, REAL)                                                        \
    HIDDEN int paio_c_##PREFIX##vfscanf(FILE *stream, const char *format, va_list args) { \
        return from_stream(REAL, stream, format, args);                                  \
    }                                                                                    \
    HIDDEN int paio_c_##PREFIX##vscanf(const char *format, va_list args) {               \
        return from_stream(REAL, stdin, format, args);                                   \
    }                                                                                    \
    HIDDEN int paio_c_##PREFIX##fscanf(FILE *stream, const char *format, ...) {          \
        va_list args;                                                                    \
        va_start(args, format);                                                          \
        int r = from_stream(REAL, stream, format, args);                                 \
        va_end(args);                                                                    \
        return r;                                                                        \
    }                                                                                    \
    HIDDEN int paio_c_##PREFIX##scanf(const char *format, ...) {                         \
        va_list args;                                                                    \
        va_start(args, format);                                                          \
        int r = from_stream(REAL, stdin, format, args);                                  \
        va_end(args);                                                                    \
        return r;                                                                        \
    }

SCAN_FAMILY(, VFSCANF)
SCAN_FAMILY(isoc99_, ISOC99_VFSCANF)
SCAN_FAMILY(isoc23_, ISOC23_VFSCANF)
