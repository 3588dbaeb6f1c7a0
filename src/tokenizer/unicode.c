/*
 * unicode.c — UTF-8 decoding with maximal-subpart replacement, White_Space,
 * the GPT-2 byte-level map, and the Script property lookup (a binary search
 * over the runs of unicode_scripts_data.c).
 *
 * The decoder follows table 3-7 of the Unicode standard (well-formed byte
 * sequences): the second byte's range depends on the lead (E0: A0..BF,
 * ED: 80..9F, F0: 90..BF, F4: 80..8F), which is what rules out overlong
 * forms, surrogates and code points past U+10FFFF. An ill-formed sequence is
 * replaced by one U+FFFD per maximal subpart: the longest prefix that could
 * still have begun a well-formed sequence, or one byte when there is none.
 */
#include "tokenizer/unicode.h"
#include "tokenizer/unicode_scripts.h"

#include <string.h>

int uni_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t b0 = s[0];
    if (b0 < 0x80) {
        *cp = b0;
        return 1;
    }
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    uint32_t v;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 2;
        v = b0 & 0x1Fu;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 3;
        v = b0 & 0x0Fu;
        if (b0 == 0xE0)
            lo = 0xA0; /* no overlong 3-byte forms */
        else if (b0 == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 4;
        v = b0 & 0x07u;
        if (b0 == 0xF0)
            lo = 0x90; /* no overlong 4-byte forms */
        else if (b0 == 0xF4)
            hi = 0x8F; /* nothing past U+10FFFF */
    } else {
        *cp = UNI_REPLACEMENT;
        return -1;
    }
    size_t i = 1;
    for (; i < need; i++) {
        if (i >= n)
            break;
        uint8_t b = s[i];
        uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h)
            break;
        v = (v << 6) | (b & 0x3Fu);
    }
    if (i < need) {
        *cp = UNI_REPLACEMENT;
        return -(int)i;
    }
    *cp = v;
    return (int)need;
}

size_t uni_next(const char *s, size_t n, uint32_t *cp) {
    const uint8_t *u = (const uint8_t *)s;
    size_t len = uni_seq_len(u[0]);
    if (len > n)
        len = n;
    uint32_t v;
    switch (len) {
    case 1: v = u[0]; break;
    case 2: v = ((u[0] & 0x1Fu) << 6) | (u[1] & 0x3Fu); break;
    case 3: v = ((u[0] & 0x0Fu) << 12) | ((u[1] & 0x3Fu) << 6) | (u[2] & 0x3Fu); break;
    default:
        v = ((u[0] & 0x07u) << 18) | ((u[1] & 0x3Fu) << 12) | ((u[2] & 0x3Fu) << 6) |
            (u[3] & 0x3Fu);
        break;
    }
    *cp = v;
    return len;
}

size_t uni_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

bool uni_valid(const char *s, size_t n) {
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0;
    while (i < n) {
        /* ASCII fast path: 8 bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, u + i, 8);
            if (w & 0x8080808080808080ull)
                break;
            i += 8;
        }
        if (i >= n)
            break;
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int r = uni_decode(u + i, n - i, &cp);
        if (r < 0)
            return false;
        i += (size_t)r;
    }
    return true;
}

size_t uni_sanitize(const char *s, size_t n, char *out) {
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t cp;
        int r = uni_decode(u + i, n - i, &cp);
        if (r > 0) {
            memcpy(out + o, s + i, (size_t)r);
            o += (size_t)r;
            i += (size_t)r;
        } else {
            o += uni_encode(UNI_REPLACEMENT, out + o);
            i += (size_t)-r;
        }
    }
    return o;
}

bool uni_is_space(uint32_t cp) {
    if (cp <= 0x20)
        return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    if (cp < 0x85)
        return false;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* Bytes that GPT-2 keeps as themselves: '!'..'~', U+00A1..U+00AC, U+00AE..U+00FF. */
static bool byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t uni_byte_to_cp(uint8_t b) {
    if (byte_is_printable(b))
        return b;
    /* the n-th non-printable byte (in byte order) maps to 256 + n:
     * 0x00..0x20 are 0..32, 0x7F..0xA0 are 33..66, 0xAD is 67 */
    if (b <= 0x20)
        return 256u + b;
    if (b <= 0xA0)
        return 256u + 33u + (uint32_t)(b - 0x7F);
    return 256u + 67u;
}

int uni_cp_to_byte(uint32_t cp) {
    if (cp < 256)
        return byte_is_printable(cp) ? (int)cp : -1;
    if (cp < 256 + 33)
        return (int)(cp - 256);
    if (cp < 256 + 67)
        return (int)(cp - 256 - 33 + 0x7F);
    if (cp == 256 + 67)
        return 0xAD;
    return -1;
}

uint8_t uni_script(uint32_t cp) {
    if (cp > 0x10FFFF)
        return UNI_SCRIPT_UNKNOWN;
    /* the last run starting at or before cp; run 0 starts at U+0000 */
    size_t lo = 0, hi = UNI_N_SCRIPT_RUNS;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (uni_script_runs[mid] >> 8 <= cp)
            lo = mid;
        else
            hi = mid;
    }
    return (uint8_t)(uni_script_runs[lo] & 0xFF);
}
