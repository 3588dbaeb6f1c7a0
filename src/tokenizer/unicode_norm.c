/*
 * unicode_norm.c — NFC and NFD (Unicode Standard Annex #15), for
 * tokenizer.json normalizers (Qwen2's is NFC).
 *
 * Steps: decode; decompose every code point fully (the one-level table
 * applied recursively, Hangul syllables by arithmetic); put each run of
 * non-starters in canonical order (a stable insertion sort by combining
 * class: runs are a few marks long); for NFC, compose: each character joins
 * the last starter when no character between them has class 0 or a class
 * >= its own and (starter, character) is a primary composite.
 *
 * Text made only of code points below U+0300 is already in NFC (nothing
 * there decomposes in a way NFC keeps, and every composition pair's second
 * character is at or above U+0300), so it passes through without copying;
 * that covers ASCII and Latin-1 prompts.
 *
 * NFKC/NFKD would need the compatibility mappings as well (three times the
 * table); no tokenizer headroom targets uses them, so tokjson.c refuses them.
 */
#include "tokenizer/tok_impl.h"

#include "tokenizer/unicode.h"
#include "tokenizer/unicode_norm.h"
#include "util/alloc.h"

#include <string.h>

/* Hangul syllable arithmetic (Unicode 15, section 3.12) */
#define H_SBASE 0xAC00u
#define H_LBASE 0x1100u
#define H_VBASE 0x1161u
#define H_TBASE 0x11A7u
#define H_LCOUNT 19u
#define H_VCOUNT 21u
#define H_TCOUNT 28u
#define H_NCOUNT (H_VCOUNT * H_TCOUNT)
#define H_SCOUNT (H_LCOUNT * H_NCOUNT)

static uint32_t ccc_of(uint32_t cp) {
    if (cp < 0x300)
        return 0;
    size_t lo = 0, hi = UNI_N_CCC;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < uni_ccc[mid].first)
            hi = mid;
        else if (cp > uni_ccc[mid].last)
            lo = mid + 1;
        else
            return uni_ccc[mid].ccc;
    }
    return 0;
}

static const uint32_t *decomp_of(uint32_t cp) {
    if (cp < 0xC0)
        return NULL;
    size_t lo = 0, hi = UNI_N_DECOMP;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint32_t m = uni_decomp[mid][0] & 0x7FFFFFFFu;
        if (cp < m)
            hi = mid;
        else if (cp > m)
            lo = mid + 1;
        else
            return uni_decomp[mid];
    }
    return NULL;
}

static uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= H_LBASE && a < H_LBASE + H_LCOUNT && b >= H_VBASE && b < H_VBASE + H_VCOUNT)
        return H_SBASE + ((a - H_LBASE) * H_VCOUNT + (b - H_VBASE)) * H_TCOUNT;
    if (a >= H_SBASE && a < H_SBASE + H_SCOUNT && (a - H_SBASE) % H_TCOUNT == 0 && b > H_TBASE &&
        b < H_TBASE + H_TCOUNT)
        return a + (b - H_TBASE);
    size_t lo = 0, hi = UNI_N_COMP;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const uint32_t *e = uni_comp[mid];
        if (a < e[0] || (a == e[0] && b < e[1]))
            hi = mid;
        else if (a > e[0] || b > e[1])
            lo = mid + 1;
        else
            return e[2];
    }
    return 0;
}

/* Appends the full canonical decomposition of cp. cap: at most 4 code
 * points come out of one (the longest canonical decomposition). */
static size_t decompose(uint32_t cp, uint32_t *out) {
    if (cp >= H_SBASE && cp < H_SBASE + H_SCOUNT) {
        uint32_t s = cp - H_SBASE;
        size_t n = 0;
        out[n++] = H_LBASE + s / H_NCOUNT;
        out[n++] = H_VBASE + (s % H_NCOUNT) / H_TCOUNT;
        if (s % H_TCOUNT)
            out[n++] = H_TBASE + s % H_TCOUNT;
        return n;
    }
    const uint32_t *d = decomp_of(cp);
    if (!d) {
        out[0] = cp;
        return 1;
    }
    size_t n = decompose(d[1], out);
    if (d[2])
        n += decompose(d[2], out + n);
    return n;
}

hr_status norm_unicode(tok_ctx *c, tok_norm_kind kind, const char *s, size_t n, const char **out,
                       size_t *out_len, int slot) {
    if (kind == TOK_NORM_NFC) {
        bool low = true;
        for (size_t i = 0; i < n && low; i++)
            low = (uint8_t)s[i] < 0xCC; /* lead bytes below 0xCC: code points < U+0300 */
        if (low) {
            *out = s;
            *out_len = n;
            return HR_OK;
        }
    }
    /* at most n code points in, 4 out for each */
    uint32_t *cps = hr_malloc((4 * n + 4) * sizeof *cps);
    if (!cps)
        return hr_err_set(c->err, HR_ERR_NOMEM, "out of memory while normalizing");
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += uni_next(s + i, n - i, &cp);
        m += decompose(cp, cps + m);
    }
    /* canonical ordering: stable sort of each run of non-starters */
    for (size_t i = 1; i < m; i++) {
        uint32_t cc = ccc_of(cps[i]);
        if (cc == 0)
            continue;
        uint32_t x = cps[i];
        size_t j = i;
        while (j > 0) {
            uint32_t pc = ccc_of(cps[j - 1]);
            if (pc == 0 || pc <= cc)
                break;
            cps[j] = cps[j - 1];
            j--;
        }
        cps[j] = x;
    }
    if (kind == TOK_NORM_NFC && m > 0) {
        size_t w = 0;
        long starter = -1;
        int last_ccc = -1; /* class of the last kept character after the starter */
        for (size_t i = 0; i < m; i++) {
            uint32_t cp = cps[i];
            int cc = (int)ccc_of(cp);
            if (starter >= 0 && (last_ccc < 0 || last_ccc < cc)) {
                uint32_t comp = compose(cps[starter], cp);
                if (comp) {
                    cps[starter] = comp;
                    continue;
                }
            }
            cps[w++] = cp;
            if (cc == 0) {
                starter = (long)w - 1;
                last_ccc = -1;
            } else {
                last_ccc = cc;
            }
        }
        m = w;
    }
    hr_status st = tok_reserve(c, (void **)&c->nbuf[slot], &c->ncap[slot], 4 * m + 1, 1);
    if (st == HR_OK) {
        size_t o = 0;
        for (size_t i = 0; i < m; i++)
            o += uni_encode(cps[i], c->nbuf[slot] + o);
        *out = c->nbuf[slot];
        *out_len = o;
    }
    hr_free(cps);
    return st;
}
