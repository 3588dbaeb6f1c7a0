// ctest-label: numeric
/*
 * test_quant.c — the reference (de)quantizers against gguf-py and ggml.
 *
 * Fixtures: tests/fixtures/quant/<type>.bin from tools/make_quant_fixtures.py
 * (layout in that file). For each stored type:
 * - dequantize: random raw blocks must decode to gguf-py's floats bit for bit
 *   (compared as bit patterns, so -0.0 and NaN payloads count too);
 * - quantize: the fixture's source floats must encode to the reference bytes
 *   exactly — gguf-py's (numpy's for F16) for F16, BF16 and the legacy types,
 *   ggml's quantize_row_*_ref for the K-quants; also in 1- and 3-block calls;
 *   and thousands of generated blocks (gen_blocks, the tool's generator
 *   reimplemented) must hash to the reference's FNV-1a per 64 blocks;
 * - round trip: quantize -> dequantize error within the bound given per
 *   type in rt_bounds[] below (derived for the legacy types, measured with
 *   margin for the K-quants' searches), on the fixture's sources and on generated
 *   gaussian, heavy-tailed, one-signed, mixed-scale, tiny and subnormal
 *   blocks; prints the worst element and the NMSE.
 * Also: F16/BF16 conversions exhaustively over all 65536 codes against an
 * independent ldexp decoder, the ties/overflow/subnormal/NaN rules
 * spelled out; every is_quant dtype in hr_dtype_table has a dequantizer and a
 * block struct of block_bytes; every output buffer carries guard bytes.
 */
#include "quant/blocks.h"
#include "quant/quant.h"
#include "test.h"
#include "util/dtype.h"
#include "util/fp16.h"

#include <float.h>
#include <stdbool.h>

/* ---------------------------------------------------------------- helpers */

#define GUARD_BYTES 64
#define GUARD_VALUE 0xA5

/* Buffer of n bytes followed by GUARD_BYTES sentinels (aligned for any block). */
static void *guarded_alloc(size_t n) {
    uint8_t *p = malloc(n + GUARD_BYTES);
    if (!p)
        abort();
    memset(p + n, GUARD_VALUE, GUARD_BYTES);
    return p;
}

static bool guard_intact(const void *buf, size_t n) {
    const uint8_t *p = buf;
    for (size_t i = 0; i < GUARD_BYTES; i++) {
        if (p[n + i] != GUARD_VALUE)
            return false;
    }
    return true;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* xorshift64* — seeded, so every run sees the same blocks */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double rng_uniform(void) { /* [0, 1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) * 0x1.0p-53;
}

static double rng_gauss(void) {
    double u = rng_uniform(), v = rng_uniform();
    return sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v);
}

/* ---------------------------------------------------------------- fixtures */

enum { SRC_NONE = 0, SRC_GGUF = 1, SRC_GGML = 2 };

#define FIXTURE_HEADER_BYTES 44

typedef struct {
    uint32_t ggml_type, block_elems, block_bytes, n_dq, n_q, q_source;
    uint32_t n_gen, gen_seed, gen_chunk;
    uint8_t *raw;     /* n_dq blocks */
    float *deq;       /* n_dq * block_elems */
    float *src;       /* n_q * block_elems */
    uint8_t *ref;     /* n_q blocks */
    uint64_t *hashes; /* n_gen / gen_chunk */
} fixture;

static void fixture_free(fixture *f) {
    free(f->raw);
    free(f->deq);
    free(f->src);
    free(f->ref);
    free(f->hashes);
    memset(f, 0, sizeof *f);
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Copies n bytes from the file image at *off into a fresh buffer. */
static void *take(const uint8_t *img, size_t *off, size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p)
        abort();
    memcpy(p, img + *off, n);
    *off += n;
    return p;
}

static bool fixture_load(const char *name, fixture *f) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/fixtures/quant/%s.bin", HR_SOURCE_DIR, name);
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "%s: cannot open (run tools/make_quant_fixtures.py)\n", path);
        return false;
    }
    uint8_t *img = NULL;
    size_t size = 0, cap = 0, got;
    do {
        if (size == cap) {
            cap = cap ? 2 * cap : 65536;
            img = realloc(img, cap);
            if (!img)
                abort();
        }
        got = fread(img + size, 1, cap - size, fp);
        size += got;
    } while (got > 0);
    fclose(fp);

    bool ok = false;
    memset(f, 0, sizeof *f);
    if (size < FIXTURE_HEADER_BYTES || memcmp(img, "HRQF", 4) != 0 || le32(img + 4) != 1) {
        fprintf(stderr, "%s: not an HRQF v1 fixture\n", path);
        goto done;
    }
    f->ggml_type = le32(img + 8);
    f->block_elems = le32(img + 12);
    f->block_bytes = le32(img + 16);
    f->n_dq = le32(img + 20);
    f->n_q = le32(img + 24);
    f->q_source = le32(img + 28);
    f->n_gen = le32(img + 32);
    f->gen_seed = le32(img + 36);
    f->gen_chunk = le32(img + 40);
    const uint64_t per_block = (uint64_t)f->block_bytes + 4ull * f->block_elems;
    if (f->block_elems == 0 || f->block_elems > 256 || f->block_bytes == 0 ||
        f->block_bytes > 512 || f->n_dq > 100000 || f->n_q > 100000 || f->n_gen > 100000 ||
        f->gen_chunk == 0 || f->n_gen % f->gen_chunk != 0 ||
        FIXTURE_HEADER_BYTES + per_block * (f->n_dq + (uint64_t)f->n_q) +
                8ull * (f->n_gen / f->gen_chunk) != size) {
        fprintf(stderr, "%s: header does not match the file size %zu\n", path, size);
        goto done;
    }
    size_t off = FIXTURE_HEADER_BYTES;
    f->raw = take(img, &off, (size_t)f->n_dq * f->block_bytes);
    f->deq = take(img, &off, (size_t)f->n_dq * f->block_elems * 4);
    f->src = take(img, &off, (size_t)f->n_q * f->block_elems * 4);
    f->ref = take(img, &off, (size_t)f->n_q * f->block_bytes);
    const uint32_t n_hash = f->n_gen / f->gen_chunk;
    f->hashes = malloc(8 * (size_t)(n_hash ? n_hash : 1));
    if (!f->hashes)
        abort();
    for (uint32_t i = 0; i < n_hash; i++, off += 8)
        f->hashes[i] = (uint64_t)le32(img + off) | (uint64_t)le32(img + off + 4) << 32;
    ok = true;
done:
    free(img);
    return ok;
}

/* ------------------------------------------------------- dtype table walk */

static void test_table(void) {
    static const size_t block_struct_bytes[HR_DTYPE_COUNT] = {
        [HR_DTYPE_Q8_0] = sizeof(block_q8_0), [HR_DTYPE_Q4_0] = sizeof(block_q4_0),
        [HR_DTYPE_Q4_1] = sizeof(block_q4_1), [HR_DTYPE_Q5_0] = sizeof(block_q5_0),
        [HR_DTYPE_Q5_1] = sizeof(block_q5_1), [HR_DTYPE_Q2_K] = sizeof(block_q2_K),
        [HR_DTYPE_Q3_K] = sizeof(block_q3_K), [HR_DTYPE_Q4_K] = sizeof(block_q4_K),
        [HR_DTYPE_Q5_K] = sizeof(block_q5_K), [HR_DTYPE_Q6_K] = sizeof(block_q6_K),
        [HR_DTYPE_Q8_K] = sizeof(block_q8_K), [HR_DTYPE_NF4] = sizeof(block_nf4),
        [HR_DTYPE_FP4] = sizeof(block_nf4),
    };
    for (int t = 0; t < HR_DTYPE_COUNT; t++) {
        const hr_dtype_info *d = &hr_dtype_table[t];
        if (d->is_quant) {
            CHECK_MSG(quant_can_dequantize((hr_dtype)t), "%s has no dequantizer", d->name);
            CHECK_MSG(block_struct_bytes[t] == (size_t)d->block_bytes,
                      "%s: struct is %zu bytes, table says %d", d->name, block_struct_bytes[t],
                      d->block_bytes);
            const bool codebook = t == HR_DTYPE_NF4 || t == HR_DTYPE_FP4;
            CHECK_MSG(d->block_elems == (codebook                    ? QUANT_QK_NF4
                                         : block_struct_bytes[t] < 64 ? QUANT_QK
                                                                      : QUANT_QK_K),
                      "%s: block_elems %d", d->name, d->block_elems);
        } else if (quant_can_dequantize((hr_dtype)t)) {
            CHECK_MSG(d->block_elems == 1, "%s: plain type with block_elems %d", d->name,
                      d->block_elems);
        }
    }
    const hr_dtype must_quantize[] = {
        HR_DTYPE_F32,  HR_DTYPE_F16,  HR_DTYPE_BF16, HR_DTYPE_Q8_0, HR_DTYPE_Q4_0,
        HR_DTYPE_Q4_1, HR_DTYPE_Q5_0, HR_DTYPE_Q5_1, HR_DTYPE_Q2_K, HR_DTYPE_Q3_K,
        HR_DTYPE_Q4_K, HR_DTYPE_Q5_K, HR_DTYPE_Q6_K, HR_DTYPE_Q8_K, HR_DTYPE_NF4, HR_DTYPE_FP4,
    };
    for (size_t i = 0; i < sizeof must_quantize / sizeof must_quantize[0]; i++)
        CHECK_MSG(quant_can_quantize(must_quantize[i]), "%s", hr_dtype_name(must_quantize[i]));
    CHECK(!quant_can_dequantize(HR_DTYPE_I32));
    CHECK(!quant_can_quantize(HR_DTYPE_I8));
    CHECK(!quant_can_dequantize(HR_DTYPE_COUNT));
}

/* ---------------------------------------------------------- fixture checks */

static void check_dequantize(hr_dtype t, const fixture *f) {
    const char *name = hr_dtype_name(t);
    const int64_t n = (int64_t)f->n_dq * f->block_elems;
    float *out = guarded_alloc((size_t)n * sizeof(float));
    quant_dequantize_row(t, f->raw, out, n);
    int64_t n_bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (f32_bits(out[i]) == f32_bits(f->deq[i]))
            continue;
        if (n_bad++ < 4) {
            fprintf(stderr, "  %s dequantize: block %lld elem %lld: got %a (0x%08x), gguf-py %a (0x%08x)\n",
                    name, (long long)(i / f->block_elems), (long long)(i % f->block_elems),
                    (double)out[i], f32_bits(out[i]), (double)f->deq[i], f32_bits(f->deq[i]));
        }
    }
    CHECK_MSG(n_bad == 0, "%s: %lld of %lld dequantized values differ from gguf-py", name,
              (long long)n_bad, (long long)n);
    CHECK_MSG(guard_intact(out, (size_t)n * sizeof(float)), "%s dequantize wrote past the row", name);
    free(out);
}

/* Compares n_block blocks of quantized bytes; prints the first differences. */
static int64_t diff_blocks(const char *what, const uint8_t *got, const uint8_t *want,
                           int64_t n_block, size_t block_bytes, int64_t block0) {
    int64_t n_bad = 0;
    for (int64_t b = 0; b < n_block; b++) {
        const uint8_t *g = got + b * block_bytes, *w = want + b * block_bytes;
        if (memcmp(g, w, block_bytes) == 0)
            continue;
        if (n_bad++ < 3) {
            size_t k = 0;
            while (g[k] == w[k])
                k++;
            fprintf(stderr, "  %s: block %lld first differs at byte %zu: got 0x%02x, want 0x%02x\n",
                    what, (long long)(block0 + b), k, g[k], w[k]);
        }
    }
    return n_bad;
}

static void check_quantize(hr_dtype t, const fixture *f) {
    const char *name = hr_dtype_name(t);
    if (f->n_q == 0) {
        printf("note: %s: fixture has no reference bytes (made with --no-ggml); quantize "
               "compared by round trip only\n", name);
        return;
    }
    const char *who = f->q_source == SRC_GGML ? "ggml" : "gguf-py";
    const int64_t n = (int64_t)f->n_q * f->block_elems;
    const size_t n_bytes = (size_t)f->n_q * f->block_bytes;
    uint8_t *out = guarded_alloc(n_bytes);
    quant_quantize_row(t, f->src, out, n);
    char what[64];
    snprintf(what, sizeof what, "%s quantize vs %s", name, who);
    const int64_t n_bad = diff_blocks(what, out, f->ref, f->n_q, f->block_bytes, 0);
    CHECK_MSG(n_bad == 0, "%s: %lld of %u blocks differ from %s's bytes", name, (long long)n_bad,
              f->n_q, who);
    CHECK_MSG(guard_intact(out, n_bytes), "%s quantize wrote past the row", name);

    /* the same data in calls of 1 and 3 blocks: no state leaks across calls */
    if (f->block_elems > 1) {
        for (int64_t step = 1; step <= 3; step += 2) {
            memset(out, 0, n_bytes);
            for (int64_t b = 0; b < (int64_t)f->n_q; b += step) {
                const int64_t nb = b + step <= (int64_t)f->n_q ? step : (int64_t)f->n_q - b;
                quant_quantize_row(t, f->src + b * f->block_elems, out + b * f->block_bytes,
                                   nb * f->block_elems);
            }
            CHECK_MSG(memcmp(out, f->ref, n_bytes) == 0, "%s: %lld-block calls differ", name,
                      (long long)step);
        }
    }
    free(out);
}

/* ---------------------------------------------------------- generated bulk */

/* splitmix64, and the block generator of tools/make_quant_fixtures.py
 * (gen_blocks there documents the draws). Integer-only: every value is an
 * integer below 2^24 times a power of two, so both sides get the same floats. */
static uint64_t splitmix_state;

static uint64_t splitmix_next(void) {
    uint64_t z = (splitmix_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void gen_blocks(uint32_t seed, int64_t n_block, int64_t be, float *x) {
    static const int spreads[4] = {0, 2, 6, 20};
    splitmix_state = seed;
    for (int64_t b = 0; b < n_block; b++) {
        const uint64_t r0 = splitmix_next();
        const int base = (int)(r0 & 15) - 4;
        const int spread = spreads[(r0 >> 4) & 3];
        const int mode = (int)((r0 >> 6) & 7);
        const bool neg = (r0 >> 9) & 1;
        for (int64_t g = 0; g < be / 16; g++) {
            const uint64_t r = splitmix_next();
            const int e = base - (int)(r % (uint64_t)(spread + 1));
            const int shape = mode < 4 ? mode : (int)((r >> 32) & 3);
            for (int i = 0; i < 16; i++) {
                const uint64_t z = splitmix_next();
                const int64_t a = (int64_t)(z & 0xfff) - 2048;
                const int64_t c = (int64_t)((z >> 12) & 0xfff) - 2048;
                int64_t v;
                switch (shape) {
                case 0: v = a; break;
                case 1: v = a * c; break;
                case 2: v = neg ? -llabs(a) : llabs(a); break;
                default: v = ((z >> 24) & 7) == 0 ? a * c : 0; break;
                }
                const int shift = shape == 1 || shape == 3 ? 22 : 11;
                x[(b * be) + g * 16 + i] = ldexpf((float)v, e - shift);
            }
        }
    }
}

static uint64_t fnv1a64(const uint8_t *p, size_t n) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001B3ull;
    return h;
}

static void check_generated(hr_dtype t, const fixture *f) {
    const char *name = hr_dtype_name(t);
    if (f->n_gen == 0) {
        if (f->block_elems > 1)
            printf("note: %s: fixture has no generated-block hashes (made with --no-ggml)\n", name);
        return;
    }
    const int64_t n = (int64_t)f->n_gen * f->block_elems;
    const size_t n_bytes = (size_t)f->n_gen * f->block_bytes;
    float *x = malloc((size_t)n * sizeof(float));
    uint8_t *q = guarded_alloc(n_bytes);
    if (!x)
        abort();
    gen_blocks(f->gen_seed, f->n_gen, f->block_elems, x);
    quant_quantize_row(t, x, q, n);
    const size_t chunk_bytes = (size_t)f->gen_chunk * f->block_bytes;
    int64_t n_bad = 0;
    for (uint32_t c = 0; c < f->n_gen / f->gen_chunk; c++) {
        if (fnv1a64(q + c * chunk_bytes, chunk_bytes) == f->hashes[c])
            continue;
        if (n_bad++ < 4)
            fprintf(stderr, "  %s: generated blocks %u..%u differ from the reference\n", name,
                    c * f->gen_chunk, (c + 1) * f->gen_chunk - 1);
    }
    CHECK_MSG(n_bad == 0, "%s: %lld of %u chunks of %u generated blocks differ from %s", name,
              (long long)n_bad, f->n_gen / f->gen_chunk, f->gen_chunk,
              f->q_source == SRC_GGML ? "ggml" : "gguf-py");
    CHECK_MSG(guard_intact(q, n_bytes), "%s quantize wrote past the row", name);
    free(x);
    free(q);
}

/* ---------------------------------------------------------- round trip */

/*
 * Error bound of quantize -> dequantize, per block (super-block for K):
 *   |x - y| <= k * span / levels + u (span + amax) + n_f16 * 2^-25
 *              + 1e-6 (span + amax) + 1e-36
 * amax = max |x|. span: amax for the symmetric types; max x - min x for
 * Q4_1/Q5_1; max(x, 0) - min(x, 0) for the K-quants with an offset, which
 * clamp the offset to <= 0 so their code range always reaches 0. levels:
 * code steps across span. u = 2^-11: relative rounding of an f16 scale, times
 * |code * scale| <= span, and of an f16 offset, |offset| <= amax. n_f16:
 * largest |code * sub-scale| multiplying an f16 super-scale (both scales
 * summed where there are two): covers the absolute 2^-25 rounding of an f16
 * subnormal scale, including a scale that rounds to 0. 1e-6 span: float
 * rounding of the scale reciprocals and products (a few ulps). 1e-36: blocks
 * with span below ~127 / FLT_MAX (subnormal floats) overflow the scale's
 * reciprocal and decode to 0, an error of at most span. Blocks whose scale
 * (or Q4_1/Q5_1's f16 offset) exceeds f16's 65504 are not bounded: skipped.
 * k, legacy types (exact): 0.5 for the round-to-nearest types (Q8_0, Q4_1,
 * Q5_1); 1 for Q4_0/Q5_0, whose code range is asymmetric ([-8, 7] times
 * d = max / -8): values of the other sign beyond 7.5 d clamp to 7, a full step.
 * k, K-quants: half a step of the sub-block's effective scale, but that scale
 * comes from a least-squares search and is quantized to 4-8 bits relative to
 * the super-block's largest, so codes clamp and sub-block steps can exceed
 * span / levels. No closed form bounds the search, so k is the worst
 * observed over the cases here (gaussian, heavy-tailed, one-signed,
 * mixed sub-block scales from 1e-4 to 1e2, outliers) with about 1.5x margin;
 * raising one needs a new case that shows why.
 */
typedef enum { SPAN_ABSMAX, SPAN_RANGE, SPAN_RANGE_WITH_ZERO } span_kind;

typedef struct {
    double levels;
    double k;
    double n_f16;
    span_kind span;
} rt_bound;

static const rt_bound rt_bounds[HR_DTYPE_COUNT] = {
    [HR_DTYPE_Q8_0] = {.levels = 127, .k = 0.5, .n_f16 = 127},
    [HR_DTYPE_Q4_0] = {.levels = 8, .k = 1.0, .n_f16 = 8},
    [HR_DTYPE_Q5_0] = {.levels = 16, .k = 1.0, .n_f16 = 16},
    [HR_DTYPE_Q4_1] = {.levels = 15, .k = 0.5, .n_f16 = 15 + 1, .span = SPAN_RANGE},
    [HR_DTYPE_Q5_1] = {.levels = 31, .k = 0.5, .n_f16 = 31 + 1, .span = SPAN_RANGE},
    /* K-quants: k = worst observed (in brackets: 4 seeds x 4096 generated
     * super-blocks of every fill_block kind, plus the fixture) times ~1.5 */
    [HR_DTYPE_Q2_K] = {.levels = 3, .k = 1.6, .n_f16 = 15 * 3 + 15,
                       .span = SPAN_RANGE_WITH_ZERO},                 /* [1.05] */
    [HR_DTYPE_Q3_K] = {.levels = 4, .k = 1.4, .n_f16 = 32 * 4},       /* [0.92] */
    [HR_DTYPE_Q4_K] = {.levels = 15, .k = 1.7, .n_f16 = 63 * 15 + 63,
                       .span = SPAN_RANGE_WITH_ZERO},                 /* [1.12] */
    [HR_DTYPE_Q5_K] = {.levels = 31, .k = 2.2, .n_f16 = 63 * 31 + 63,
                       .span = SPAN_RANGE_WITH_ZERO},                 /* [1.45] */
    [HR_DTYPE_Q6_K] = {.levels = 32, .k = 1.7, .n_f16 = 128 * 32},    /* [1.13] */
    [HR_DTYPE_Q8_K] = {.levels = 127, .k = 0.5, .n_f16 = 0},
};

typedef struct {
    double worst_ratio, sum_err2, sum_x2;
    int64_t worst_block, worst_elem, n_block, n_skipped;
    float worst_x, worst_y;
} rt_stats;

/* Quantizes and dequantizes n_block blocks of x, folding errors into st. */
static void round_trip(hr_dtype t, const float *x, int64_t n_block, rt_stats *st) {
    const hr_dtype_info *d = &hr_dtype_table[t];
    const rt_bound *rb = &rt_bounds[t];
    const int64_t be = d->block_elems, n = n_block * be;
    const size_t q_bytes = (size_t)n_block * (size_t)d->block_bytes;
    uint8_t *q = guarded_alloc(q_bytes);
    float *y = guarded_alloc((size_t)n * sizeof(float));
    quant_quantize_row(t, x, q, n);
    quant_dequantize_row(t, q, y, n);
    CHECK_MSG(guard_intact(q, q_bytes) && guard_intact(y, (size_t)n * sizeof(float)),
              "%s round trip wrote past a row", d->name);
    for (int64_t b = 0; b < n_block; b++) {
        const float *xb = x + b * be, *yb = y + b * be;
        double amax = 0, hi = xb[0], lo = xb[0];
        for (int64_t i = 0; i < be; i++) {
            amax = fmax(amax, fabs(xb[i]));
            hi = fmax(hi, xb[i]);
            lo = fmin(lo, xb[i]);
        }
        const double span = rb->span == SPAN_ABSMAX ? amax
                            : rb->span == SPAN_RANGE ? hi - lo
                                                     : fmax(hi, 0) - fmin(lo, 0);
        if (span / rb->levels >= 65504.0 || (rb->span == SPAN_RANGE && amax >= 65504.0)) {
            st->n_skipped++; /* a scale or (Q4_1/Q5_1) offset overflows f16: no bound */
            continue;
        }
        const double bound = rb->k * span / rb->levels + 0x1.0p-11 * (span + amax) +
                             rb->n_f16 * 0x1.0p-25 + 1e-6 * (span + amax) + 1e-36;
        st->n_block++;
        for (int64_t i = 0; i < be; i++) {
            const double err = fabs((double)xb[i] - (double)yb[i]);
            st->sum_err2 += err * err;
            st->sum_x2 += (double)xb[i] * xb[i];
            const double ratio = isfinite(err) ? err / bound : INFINITY;
            if (!(ratio <= st->worst_ratio)) {
                st->worst_ratio = ratio;
                st->worst_block = b;
                st->worst_elem = i;
                st->worst_x = xb[i];
                st->worst_y = yb[i];
            }
        }
    }
    free(q);
    free(y);
}

/* Generated blocks: kind cycles over the shapes the fixtures have few of. */
static void fill_block(float *x, int64_t be, int kind) {
    const double scale = pow(10.0, -3.0 + 6.0 * rng_uniform());
    for (int64_t i = 0; i < be; i++) {
        double v;
        switch (kind % 8) {
        case 0: v = rng_gauss(); break;
        case 1: v = rng_gauss() * exp(1.5 * rng_gauss()); break; /* heavy tail */
        case 2: v = rng_uniform(); break;
        case 3: v = -rng_uniform(); break;
        case 4: v = rng_gauss() * pow(10.0, -4.0 + 6.0 * (double)((i / 16) % 7) / 6.0); break;
        case 5: v = rng_gauss() * 1e-7; break;
        case 6: v = rng_gauss() * 1e-40; break; /* subnormal floats */
        default: v = rng_gauss() + 3.0; break; /* offset */
        }
        x[i] = (float)(kind % 8 >= 5 ? v : v * scale);
    }
    if (kind % 16 == 9) { /* one outlier */
        x[(int64_t)(rng_uniform() * (double)be)] *= 40.0f;
    }
}

static void check_round_trip(hr_dtype t, const fixture *f) {
    const hr_dtype_info *d = &hr_dtype_table[t];
    rt_stats st = {0};
    if (f->n_q > 0)
        round_trip(t, f->src, f->n_q, &st);
    const int64_t n_block = d->block_elems == QUANT_QK ? 512 : 64;
    float *x = malloc((size_t)(n_block * d->block_elems) * sizeof(float));
    if (!x)
        abort();
    for (int64_t b = 0; b < n_block; b++)
        fill_block(x + b * d->block_elems, d->block_elems, (int)b);
    round_trip(t, x, n_block, &st);
    free(x);
    printf("%-5s round trip: %lld blocks (%lld skipped: f16 overflow), nmse %.3e, worst "
           "err/bound %.3f (block %lld elem %lld: x %.6g y %.6g)\n",
           d->name, (long long)st.n_block, (long long)st.n_skipped,
           st.sum_x2 > 0 ? st.sum_err2 / st.sum_x2 : 0.0, st.worst_ratio,
           (long long)st.worst_block, (long long)st.worst_elem, (double)st.worst_x,
           (double)st.worst_y);
    CHECK_MSG(st.worst_ratio <= 1.0, "%s: round-trip error %.3f x the bound", d->name,
              st.worst_ratio);
}

/* ---------------------------------------------------------- f16 and bf16 */

/* Independent decoder: sign * mant * 2^(exp - 25), or the subnormal form. */
static float f16_reference(uint16_t h) {
    const int e = (h >> 10) & 31, m = h & 1023;
    float v;
    if (e == 31)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexpf((float)m, -24);
    else
        v = ldexpf((float)(1024 + m), e - 25);
    return (h & 0x8000) ? -v : v;
}

static void test_f16_exhaustive(void) {
    int64_t n_bad_dec = 0, n_bad_rt = 0, n_bad_nan = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = hr_f16_to_f32((uint16_t)h);
        const bool is_nan = ((h >> 10) & 31) == 31 && (h & 1023);
        if (is_nan) {
            /* NaN keeps sign and payload when widened; narrowing writes ggml's 0x7e00 */
            const uint32_t u = f32_bits(f);
            n_bad_nan += !(isnan(f) && (u >> 31) == (h >> 15) && ((u >> 13) & 1023) == (h & 1023));
            n_bad_nan += hr_f32_to_f16(f) != ((h & 0x8000) | 0x7e00);
            continue;
        }
        n_bad_dec += f32_bits(f) != f32_bits(f16_reference((uint16_t)h));
        n_bad_rt += hr_f32_to_f16(f) != h;
    }
    CHECK_MSG(n_bad_dec == 0, "%lld f16 codes decode wrong", (long long)n_bad_dec);
    CHECK_MSG(n_bad_rt == 0, "%lld f16 codes do not survive f16 -> f32 -> f16", (long long)n_bad_rt);
    CHECK_MSG(n_bad_nan == 0, "%lld f16 NaN codes mishandled", (long long)n_bad_nan);

    /* rounding rules, each case named */
    static const struct {
        uint32_t f32;
        uint16_t f16;
        const char *why;
    } cases[] = {
        {0x3f801000, 0x3c00, "1 + 2^-11: tie, rounds to even (down)"},
        {0x3f803000, 0x3c02, "1 + 3*2^-11: tie, rounds to even (up)"},
        {0x3f801001, 0x3c01, "just above a tie rounds up"},
        {0x477fe000, 0x7bff, "65504: largest finite"},
        {0x477fefff, 0x7bff, "just below 65520 stays finite"},
        {0x477ff000, 0x7c00, "65520: tie at the top rounds to infinity"},
        {0xc77ff000, 0xfc00, "-65520 -> -infinity"},
        {0x7f800000, 0x7c00, "infinity"},
        {0x80000000, 0x8000, "-0 keeps its sign"},
        {0x33000000, 0x0000, "2^-25: half the smallest subnormal, tie to even 0"},
        {0x33000001, 0x0001, "just above 2^-25 rounds up to 2^-24"},
        {0x33c00000, 0x0002, "3*2^-25: tie between 1 and 2 subnormal units, even 2"},
        {0x387fe000, 0x0400, "(1023.5)*2^-24: tie rounds up into the smallest normal"},
        {0x387fdfff, 0x03ff, "just below that tie stays the largest subnormal"},
        {0x38800000, 0x0400, "2^-14: smallest normal"},
        {0x00000001, 0x0000, "f32 subnormal -> 0"},
        {0xb3000001, 0x8001, "negative subnormal rounding"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint16_t got = hr_f32_to_f16(bits_f32(cases[i].f32));
        CHECK_MSG(got == cases[i].f16, "f16(0x%08x) = 0x%04x, want 0x%04x: %s", cases[i].f32, got,
                  cases[i].f16, cases[i].why);
    }
    CHECK(hr_f32_to_f16(bits_f32(0xffc00123)) == 0xfe00); /* NaN: ggml's quiet NaN, sign kept */
}

static void test_bf16_exhaustive(void) {
    int64_t n_bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = hr_bf16_to_f32((uint16_t)h);
        n_bad += f32_bits(f) != h << 16;
        const bool is_nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
        n_bad += hr_f32_to_bf16(f) != (is_nan ? (h | 0x40) : h); /* NaN made quiet */
    }
    CHECK_MSG(n_bad == 0, "%lld bf16 codes mishandled", (long long)n_bad);
    static const struct {
        uint32_t f32;
        uint16_t bf16;
    } cases[] = {
        {0x3f808000, 0x3f80}, /* tie, even below */
        {0x3f818000, 0x3f82}, /* tie, even above */
        {0x3f808001, 0x3f81}, /* above the tie */
        {0x3f807fff, 0x3f80}, /* below the tie */
        {0x7f7f8000, 0x7f80}, /* tie at the largest finite rounds to infinity */
        {0x80000001, 0x8000}, /* tiny negative subnormal */
        {0x7f800001, 0x7fc0}, /* signalling NaN made quiet */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint16_t got = hr_f32_to_bf16(bits_f32(cases[i].f32));
        CHECK_MSG(got == cases[i].bf16, "bf16(0x%08x) = 0x%04x, want 0x%04x", cases[i].f32, got,
                  cases[i].bf16);
    }
}

static void test_f32(void) {
    const float x[5] = {1.5f, -0.0f, INFINITY, bits_f32(0x7fa00001), FLT_TRUE_MIN};
    float *q = guarded_alloc(sizeof x), *y = guarded_alloc(sizeof x);
    quant_quantize_row(HR_DTYPE_F32, x, q, 5);
    quant_dequantize_row(HR_DTYPE_F32, q, y, 5);
    CHECK(memcmp(x, y, sizeof x) == 0); /* bits, NaN payload included */
    CHECK(guard_intact(q, sizeof x) && guard_intact(y, sizeof x));
    quant_dequantize_row(HR_DTYPE_F32, NULL, NULL, 0); /* empty rows are fine */
    free(q);
    free(y);
}

/* Blocks of subnormal floats: the scale's reciprocal overflows. ggml's
 * K-quant searches then hit nearest_int's assert (release builds write
 * garbage), so there is no reference; ours must decode to finite values
 * within the block's magnitude (in practice 0). */
static void test_subnormal_blocks(void) {
    float x[QUANT_QK_K], y[QUANT_QK_K];
    uint8_t q[512];
    for (int i = 0; i < QUANT_QK_K; i++)
        x[i] = (float)(rng_gauss() * 1e-40);
    for (int t = 0; t < HR_DTYPE_COUNT; t++) {
        if (!hr_dtype_table[t].is_quant)
            continue;
        quant_quantize_row((hr_dtype)t, x, q, QUANT_QK_K);
        quant_dequantize_row((hr_dtype)t, q, y, QUANT_QK_K);
        float amax = 0.0f;
        for (int i = 0; i < QUANT_QK_K; i++)
            amax = fmaxf(amax, fabsf(x[i]));
        bool ok = true;
        for (int i = 0; i < QUANT_QK_K; i++)
            ok = ok && isfinite(y[i]) && fabsf(x[i] - y[i]) <= amax;
        CHECK_MSG(ok, "%s: subnormal block does not round-trip to ~0", hr_dtype_table[t].name);
    }
}

/* ---------------------------------------------------------------- main */

int main(void) {
    test_table();
    test_f32();
    test_f16_exhaustive();
    test_bf16_exhaustive();
    test_subnormal_blocks();

    for (int t = 0; t < HR_DTYPE_COUNT; t++) {
        const hr_dtype_info *d = &hr_dtype_table[t];
        /* NF4/FP4 have no GGUF id: test_bnb checks them against bitsandbytes */
        if (t == HR_DTYPE_F32 || !quant_can_dequantize((hr_dtype)t) || d->ggml_type < 0)
            continue;
        fixture f;
        if (!fixture_load(d->name, &f)) {
            CHECK_MSG(false, "%s: fixture missing or malformed", d->name);
            continue;
        }
        CHECK_MSG(f.ggml_type == (uint32_t)d->ggml_type && f.block_elems == (uint32_t)d->block_elems &&
                      f.block_bytes == (uint32_t)d->block_bytes,
                  "%s: fixture is for ggml type %u (%u elems in %u bytes)", d->name, f.ggml_type,
                  f.block_elems, f.block_bytes);
        if (f.block_bytes == (uint32_t)d->block_bytes && f.block_elems == (uint32_t)d->block_elems) {
            check_dequantize((hr_dtype)t, &f);
            check_quantize((hr_dtype)t, &f);
            check_generated((hr_dtype)t, &f);
            if (d->is_quant)
                check_round_trip((hr_dtype)t, &f);
        }
        fixture_free(&f);
    }
    TEST_END();
}
