/* utf8.c — see utf8.h. */
#include "util/utf8.h"

size_t hr_utf8_valid_prefix(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t k = c < 0x80 ? 1 : c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
        if (k == 0 || k > n - i)
            return i;
        /* second-byte ranges rule out overlongs, surrogates and > U+10FFFF */
        unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
        unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
        if (k > 1 && (u[i + 1] < lo || u[i + 1] > hi))
            return i;
        for (size_t j = 2; j < k; j++)
            if ((u[i + j] & 0xC0) != 0x80)
                return i;
        i += k;
    }
    return n;
}
