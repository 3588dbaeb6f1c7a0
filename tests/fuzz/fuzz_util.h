/*
 * fuzz_util.h — what the fuzz targets share: where the data files are, and
 * the check that text is well-formed UTF-8.
 */
#ifndef HR_FUZZ_UTIL_H
#define HR_FUZZ_UTIL_H

#include <stddef.h>
#include <stdlib.h>

/* HR_SOURCE_DIR (compile definition, or the environment variable of that
 * name), else the current folder */
static inline const char *fuzz_root_dir(void) {
#ifdef HR_SOURCE_DIR
    return HR_SOURCE_DIR;
#else
    const char *e = getenv("HR_SOURCE_DIR");
    return e ? e : ".";
#endif
}

static inline int fuzz_valid_utf8(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t k = c < 0x80 ? 1 : c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
        if (k == 0 || i + k > n)
            return 0;
        /* second-byte ranges rule out overlongs, surrogates and > U+10FFFF */
        unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
        unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
        if (k > 1 && (u[i + 1] < lo || u[i + 1] > hi))
            return 0;
        for (size_t j = 2; j < k; j++)
            if ((u[i + j] & 0xC0) != 0x80)
                return 0;
        i += k;
    }
    return 1;
}

#endif
