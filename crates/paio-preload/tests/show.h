/* Shared by the C test programs whose output is compared byte for byte
 * between a plain run and a run under the interposer. */
#ifndef PAIO_TEST_SHOW_H
#define PAIO_TEST_SHOW_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* FNV-1a of `n` bytes at `p`. */
static uint32_t sum(const unsigned char *p, size_t n) {
    uint32_t s = 2166136261u;
    for (size_t i = 0; i < n; i++) s = (s ^ p[i]) * 16777619u;
    return s;
}

/* Runs `expr` with errno preset to 777 and prints
 * "<name> <result> <errno> <checksum of the result's bytes at buf>". */
#define SHOW(name, expr, buf)                                                 \
    do {                                                                      \
        errno = 777;                                                          \
        ssize_t r_ = (expr);                                                  \
        int e_ = errno;                                                       \
        printf("%s %zd %d %08x\n", name, r_, e_,                              \
               (buf) && r_ > 0 ? sum((const unsigned char *)(buf), r_) : 0u); \
    } while (0)

#endif
