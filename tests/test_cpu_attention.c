// ctest-label: numeric
/*
 * test_cpu_attention.c — the CPU attention over f32, f16, bf16, q8_0 and
 * q4_0 KV caches (K and V of one type or of two), and the vec.h primitives it
 * runs on, at every SIMD level this CPU has.
 *
 * Primitives: dot_rows and axpy_rows of each level and element type against
 * a double-precision oracle over the stored (widened, exact) x, for m = 1..9
 * rows (tiles of 4 and every remainder) and lengths 1..40 and around 64 and
 * 128 (every SIMD tail). Rows of a end in NaN padding (a kernel that reads
 * past n returns NaN), x is followed by NaN guard elements, y's strides leave
 * sentinels between the rows that must stay untouched. For q8_0 and q4_0, x is
 * a row of n/32 blocks (n = 32 .. 256) whose oracle values are
 * quant_dequantize_row's; the blocks are quantized random values, all-zero
 * blocks, blocks of the largest f16 scale with extreme codes and blocks of a
 * subnormal scale; guard blocks of NaN scale follow the row.
 *
 * Attention: one backend per (K type, V type) on the same steps (a prefill of
 * two sequences through a shuffled block table, then a step mixing a decode
 * row and a chunk), on layer 1 of 2, with group sizes 3, 8, 4, 2 and 1 and
 * head sizes that are not multiples of 16 (f32 and 16-bit caches only) and
 * multiples of 32 (every type). Each output is checked against a double
 * reference over the cache's own K and V (rounded, or quantized by the
 * reference quantizer and dequantized: kv_store must have written exactly
 * those blocks), and against the f32 cache.
 *
 * Tolerances (u = 2^-24, gamma(n) = n u / (1 - n u), Higham's bound for a sum
 * of n products in any order):
 *   dot_rows: |y - sum a x| <= gamma(n + 2) sum |a x|;
 *   axpy_rows: one FMA, or a product and a sum: |y - (y0 + a x)| <= gamma(2) (|y0| + |a x|).
 *   Attention over its own cache, per (row, head): each score s_i (a dot of
 *   Dh products, then the scale, itself rounded) is off by e_i <= gamma(Dh + 4) S_i with
 *   S_i = sum |q k_i| / sqrt(Dh); s_i - max is rounded once more (u R, R the
 *   largest |s_i - max|). Score errors of at most E = max e_i + u R move each
 *   p_i by a factor within exp(+-2E); expf, the sum of n_ctx terms and the
 *   division add gamma(n_ctx + 4) relative; the weighted sum of v adds
 *   gamma(n_ctx + 1) of A_d = sum p_i |v_id|. So, with a margin of 2,
 *     |o_d - ref_d| <= 2 A_d (exp(2E) - 1 + gamma(n_ctx + 4) + gamma(n_ctx + 1)).
 *   A 16-bit cache against the f32 one: rounding k and v to 16 bits moves each
 *   element by at most r |x| (r = 2^-9 for bf16's 8 significant bits, 2^-11 for
 *   f16's 11) plus, for f16, half its smallest subnormal 2^-25. A score moves
 *   by at most D = max_i (r S_i + 2^-25 sum |q| / sqrt(Dh)), each p_i by a
 *   factor within exp(+-2D), each v by r |v| (+ 2^-25): the references differ
 *   by at most A_d (exp(2D) - 1 + r) (+ 2^-25), and each output is within the
 *   bound above of its reference; the check is the sum, the rounding part
 *   with a margin of 2.
 *   A q8_0 / q4_0 cache against the f32 one: no a-priori relative bound (an
 *   element's error is up to half a step of its block's scale), so the moves
 *   are measured: D = max_i sum_d |q_d| |dk_id| / sqrt(Dh) for K, and
 *   W_d = max_i |dv_id| for V; p_i moves by a factor within exp(+-2D), so the
 *   references differ by at most (exp(2D) - 1) (A_d + W_d) + W_d, checked with
 *   the same margin of 2.
 */
#include "backend/backend.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/vec.h"
#include "model/model.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "test.h"
#include "util/fp16.h"

#include <stdbool.h>
#include <stdint.h>

static const double U = 5.9604644775390625e-08; /* 2^-24, f32 unit roundoff */
static const double F16_TINY = 2.98023223876953125e-08; /* 2^-25, half f16's least subnormal */

static double gamma_n(double n) { return n * U / (1.0 - n * U); }

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 40) / (double)(1ull << 23) - 1.0);
}

enum { N_TYPES = 5 };
static const hr_dtype kv_types[N_TYPES] = {HR_DTYPE_F32, HR_DTYPE_F16, HR_DTYPE_BF16,
                                           HR_DTYPE_Q8_0, HR_DTYPE_Q4_0};

static bool is_block(hr_dtype t) { return t == HR_DTYPE_Q8_0 || t == HR_DTYPE_Q4_0; }

/* f rounded to type t and widened back: what a cache of type t holds */
static float round_to(hr_dtype t, float f) {
    if (t == HR_DTYPE_F16)
        return hr_f16_to_f32(hr_f32_to_f16(f));
    if (t == HR_DTYPE_BF16)
        return hr_bf16_to_f32(hr_f32_to_bf16(f));
    return f;
}

static size_t elem_bytes(hr_dtype t) { return t == HR_DTYPE_F32 ? 4 : 2; }

/* One row of n values as a cache of type t holds it, widened back: 16-bit
 * rounding element by element, or the reference quantizer's blocks
 * dequantized (n a multiple of 32) */
static void round_row(hr_dtype t, const float *src, float *dst, int32_t n) {
    if (!is_block(t)) {
        for (int32_t i = 0; i < n; i++)
            dst[i] = round_to(t, src[i]);
        return;
    }
    block_q8_0 blocks[8]; /* n <= 256: q8_0's 34-byte blocks are the larger */
    quant_quantize_row(t, src, blocks, n);
    quant_dequantize_row(t, blocks, dst, n);
}

/* ---- the primitives ------------------------------------------------------ */

enum { X_GUARD = 16 }; /* NaN elements after x */

/* n random values of type t (some zero, some tiny, some large) and X_GUARD
 * NaNs after them; xw gets the stored values widened */
static void *make_x(hr_dtype t, int64_t n, double *xw) {
    void *x = malloc((size_t)(n + X_GUARD) * elem_bytes(t));
    for (int64_t i = 0; i < n + X_GUARD; i++) {
        float f = i >= n ? NAN : frand();
        if (i < n && i % 7 == 3)
            f *= 1e-6f; /* f16 subnormals */
        if (i < n && i % 11 == 5)
            f *= 300.0f;
        if (i < n && i % 13 == 0)
            f = 0.0f;
        f = round_to(t, f);
        if (i < n)
            xw[i] = f;
        if (t == HR_DTYPE_F32)
            ((float *)x)[i] = f;
        else if (t == HR_DTYPE_F16)
            ((uint16_t *)x)[i] = hr_f32_to_f16(f);
        else
            ((uint16_t *)x)[i] = hr_f32_to_bf16(f);
    }
    return x;
}

enum { GUARD_BLOCKS = 2 }; /* blocks of NaN scale after a block row */

/* n / 32 blocks of type t (q8_0 or q4_0), then GUARD_BLOCKS blocks whose
 * scale is NaN; xw gets the reference's dequantized values. Block ib is, by
 * ib % 4: quantized random values (a few large, a few zero), all zero, the
 * largest f16 scale (65504) with extreme codes, a subnormal scale with
 * random codes. */
static void *make_blocks(hr_dtype t, int64_t n, double *xw) {
    const int64_t nb = n / QUANT_QK;
    const size_t bb = t == HR_DTYPE_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_0);
    uint8_t *x = malloc((size_t)(nb + GUARD_BLOCKS) * bb);
    float vals[QUANT_QK], deq[QUANT_QK];
    for (int64_t ib = 0; ib < nb + GUARD_BLOCKS; ib++) {
        uint8_t *blk = x + (size_t)ib * bb;
        for (int j = 0; j < QUANT_QK; j++)
            vals[j] = j % 11 == 5 ? frand() * 300.0f : j % 13 == 0 ? 0.0f : frand();
        quant_quantize_row(t, vals, blk, QUANT_QK);
        uint16_t d;
        switch (ib >= nb ? 4 : ib % 4) {
        case 1:
            memset(blk, 0, bb);
            break;
        case 2:
            d = 0x7bff; /* 65504 */
            memcpy(blk, &d, 2);
            for (size_t j = 2; j < bb; j++) /* codes -127 / 127, or nibbles 0 and 15 */
                blk[j] = t == HR_DTYPE_Q8_0 ? (j % 2 ? 0x81 : 0x7f) : (j % 2 ? 0x0f : 0xf0);
            break;
        case 3:
            d = (uint16_t)(1 + (rng >> 50) % 0x3ff); /* subnormal */
            memcpy(blk, &d, 2);
            break;
        case 4:
            d = 0x7e00; /* NaN: a kernel that reads past the row returns NaN */
            memcpy(blk, &d, 2);
            break;
        default:
            break;
        }
        if (ib < nb) {
            quant_dequantize_row(t, blk, deq, QUANT_QK);
            for (int j = 0; j < QUANT_QK; j++)
                xw[ib * QUANT_QK + j] = deq[j];
        }
    }
    return x;
}

static cpu_dot_rows_fn pick_dot(const cpu_vec_ops *v, hr_dtype t) {
    return cpu_vec_dot_rows_for(v, t);
}

static cpu_axpy_rows_fn pick_axpy(const cpu_vec_ops *v, hr_dtype t) {
    return cpu_vec_axpy_rows_for(v, t);
}

static const float SENTINEL = 12345.0f;

/* One (level, type, m, n) case of both primitives; returns the worst
 * |error| / bound (> 1 fails, NaN fails). */
static double check_rows(const cpu_vec_ops *v, hr_dtype t, int32_t m, int64_t n) {
    const int64_t lda = n + 3, ldy_dot = 3, ldy_axpy = n + 2;
    float *a = malloc((size_t)(m * lda) * sizeof *a);
    float *yd = malloc((size_t)(m * ldy_dot) * sizeof *yd);
    float *ya = malloc((size_t)(m * ldy_axpy) * sizeof *ya);
    float *y0 = malloc((size_t)(m * ldy_axpy) * sizeof *y0);
    double *xw = malloc((size_t)n * sizeof *xw);
    void *x = is_block(t) ? make_blocks(t, n, xw) : make_x(t, n, xw);
    for (int64_t i = 0; i < m * lda; i++)
        a[i] = i % lda < n ? frand() : NAN;
    for (int64_t i = 0; i < m * ldy_dot; i++)
        yd[i] = SENTINEL;
    for (int64_t i = 0; i < m * ldy_axpy; i++)
        ya[i] = y0[i] = i % ldy_axpy < n ? frand() : SENTINEL;
    float ax[2 * 9]; /* the a_j of axpy_rows: ax[0], ax[2], ... (m <= 9) */
    for (int i = 0; i < 2 * 9; i++)
        ax[i] = i % 2 ? NAN : frand();
    const int64_t lda_axpy = 2;

    pick_dot(v, t)(yd, ldy_dot, a, lda, m, x, n);
    pick_axpy(v, t)(ya, ldy_axpy, ax, lda_axpy, m, x, n);

    double worst = 0.0;
    for (int32_t j = 0; j < m; j++) {
        double ref = 0.0, mag = 0.0;
        for (int64_t i = 0; i < n; i++) {
            ref += (double)a[j * lda + i] * xw[i];
            mag += fabs((double)a[j * lda + i] * xw[i]);
        }
        double err = fabs((double)yd[j * ldy_dot] - ref) / (gamma_n((double)n + 2) * mag + 1e-38);
        worst = isnan(err) || err > worst ? (isnan(err) ? INFINITY : err) : worst;
        if (yd[j * ldy_dot + 1] != SENTINEL || yd[j * ldy_dot + 2] != SENTINEL)
            worst = INFINITY;
        double aj = ax[j * lda_axpy];
        for (int64_t i = 0; i < ldy_axpy; i++) {
            float got = ya[j * ldy_axpy + i];
            if (i >= n) {
                if (got != SENTINEL)
                    worst = INFINITY;
                continue;
            }
            double y_in = y0[j * ldy_axpy + i], want = y_in + aj * xw[i];
            double bound = gamma_n(2) * (fabs(y_in) + fabs(aj * xw[i])) + 1e-38;
            double e = fabs((double)got - want) / bound;
            worst = isnan(e) || e > worst ? (isnan(e) ? INFINITY : e) : worst;
        }
    }
    free(a);
    free(yd);
    free(ya);
    free(y0);
    free(xw);
    free(x);
    return worst;
}

static void test_primitives(void) {
    static const int64_t lens[] = {1,  2,  3,  5,  7,  8,  9,  15, 16, 17, 20, 23, 24, 31, 32,
                                   33, 36, 40, 47, 63, 64, 65, 80, 96, 127, 128, 129, 200};
    static const int64_t block_lens[] = {32, 64, 96, 128, 160, 256}; /* 1 .. 8 blocks */
    for (int level = 0; level <= (int)cpu_level_supported(); level++) {
        cpu_level_set((cpu_level)level);
        const cpu_vec_ops *v = cpu_vec_ops_get();
        for (int ti = 0; ti < N_TYPES; ti++) {
            const bool blk = is_block(kv_types[ti]);
            const int64_t *ls = blk ? block_lens : lens;
            const size_t n_ls = blk ? sizeof block_lens / sizeof block_lens[0]
                                    : sizeof lens / sizeof lens[0];
            double worst = 0.0;
            for (int32_t m = 1; m <= 9; m++)
                for (size_t li = 0; li < n_ls; li++) {
                    double w = check_rows(v, kv_types[ti], m, ls[li]);
                    CHECK_MSG(w <= 1.0, "%s %s m=%d n=%lld: error %.3g x bound",
                              cpu_level_name((cpu_level)level), hr_dtype_name(kv_types[ti]), m,
                              (long long)ls[li], w);
                    worst = w > worst ? w : worst;
                }
            printf("rows   %-6s x=%-4s m 1..9, n %s   err/bound %.3f  %s\n",
                   cpu_level_name((cpu_level)level), hr_dtype_name(kv_types[ti]),
                   blk ? "32..256" : "1..200 ", worst, worst <= 1.0 ? "OK" : "FAIL");
        }
    }
    cpu_level_set(cpu_level_supported());
}

/* ---- attention ----------------------------------------------------------- */

typedef struct {
    const char *name;
    int32_t H, Hkv, Dh;
} att_shape;

enum { BS = 16, MAX_BLOCKS = 8, N_SEQ = 2, N_LAYER = 2, LAYER = 1, MAX_ROWS = 128 };
enum { MAX_CTX = BS * MAX_BLOCKS };

/* the rows of one step: segments of consecutive positions */
typedef struct {
    hr_step step;
    int32_t tokens[MAX_ROWS], pos[MAX_ROWS], slot[MAX_ROWS];
    step_segment segs[4];
} step_buf;

static void add_segment(step_buf *s, const int32_t *bt, int32_t seq, int32_t p0, int32_t n) {
    int32_t row0 = s->step.n_rows;
    for (int32_t i = 0; i < n; i++) {
        int32_t p = p0 + i;
        s->tokens[row0 + i] = 0;
        s->pos[row0 + i] = p;
        s->slot[row0 + i] = bt[seq * MAX_BLOCKS + p / BS] * BS + p % BS;
    }
    s->segs[s->step.n_seg++] = (step_segment){.seq = seq, .pos0 = p0, .n = n, .row0 = row0};
    s->step.n_rows += n;
    s->step.tokens = s->tokens, s->step.pos = s->pos, s->step.slot = s->slot;
    s->step.segs = s->segs, s->step.block_tables = bt;
}

typedef struct {
    hr_backend *b;
    be_weight *w; /* one matrix: the backend sizes its matmul workspace by it */
    be_tensor qkv, att;
} side;

/* Double reference of one (row, head) over the cached k, v (n_ctx, Dh) rows
 * of the head's kv head, stride ld: o (Dh), A (Dh) = sum p |v|, and the
 * largest score error E of the bound in the header; with r > 0 also the
 * largest score move D of rounding k to 16 bits (r relative, tiny absolute). */
static void reference(const float *q, const float *k, const float *v, int64_t ld, int32_t n_ctx,
                      int32_t Dh, double r, double tiny, double *o, double *A, double *E,
                      double *D) {
    double s[MAX_CTX], S[MAX_CTX];
    const double scale = 1.0 / sqrt((double)Dh);
    double mx = -INFINITY, qabs = 0.0;
    for (int32_t d = 0; d < Dh; d++)
        qabs += fabs(q[d]);
    *D = 0.0;
    for (int32_t i = 0; i < n_ctx; i++) {
        double dot = 0.0, mag = 0.0;
        for (int32_t d = 0; d < Dh; d++) {
            dot += (double)q[d] * k[i * ld + d];
            mag += fabs((double)q[d] * k[i * ld + d]);
        }
        s[i] = dot * scale, S[i] = mag * scale;
        mx = s[i] > mx ? s[i] : mx;
        double move = r * S[i] + tiny * qabs * scale;
        *D = move > *D ? move : *D;
    }
    double sum = 0.0, R = 0.0, emax = 0.0;
    for (int32_t i = 0; i < n_ctx; i++) {
        R = fabs(s[i] - mx) > R ? fabs(s[i] - mx) : R;
        emax = gamma_n(Dh + 4) * S[i] > emax ? gamma_n(Dh + 4) * S[i] : emax;
        s[i] = exp(s[i] - mx);
        sum += s[i];
    }
    *E = emax + U * R;
    for (int32_t d = 0; d < Dh; d++)
        o[d] = A[d] = 0.0;
    for (int32_t i = 0; i < n_ctx; i++)
        for (int32_t d = 0; d < Dh; d++) {
            o[d] += s[i] / sum * v[i * ld + d];
            A[d] += s[i] / sum * fabs(v[i * ld + d]);
        }
}

/* The caches compared: (K type, V type); the first is the f32 base. */
typedef struct {
    hr_dtype k, v;
} kv_pair;
static const kv_pair kv_pairs[] = {
    {HR_DTYPE_F32, HR_DTYPE_F32},   {HR_DTYPE_F16, HR_DTYPE_F16},   {HR_DTYPE_BF16, HR_DTYPE_BF16},
    {HR_DTYPE_Q8_0, HR_DTYPE_Q8_0}, {HR_DTYPE_Q4_0, HR_DTYPE_Q4_0}, {HR_DTYPE_Q8_0, HR_DTYPE_Q4_0},
    {HR_DTYPE_BF16, HR_DTYPE_Q8_0}, {HR_DTYPE_Q4_0, HR_DTYPE_F16},
};
enum { N_PAIRS = sizeof kv_pairs / sizeof kv_pairs[0] };

/* relative rounding of a 16-bit cache: 2^-9 (bf16), 2^-11 (f16); 0 otherwise */
static double rel_rounding(hr_dtype t) {
    return t == HR_DTYPE_BF16 ? 1.0 / 512 : t == HR_DTYPE_F16 ? 1.0 / 2048 : 0.0;
}

static void test_attention(const att_shape *sh) {
    hr_error err;
    const int32_t H = sh->H, Hkv = sh->Hkv, Dh = sh->Dh, grp = H / Hkv;
    const int64_t qkv_cols = (int64_t)(H + 2 * Hkv) * Dh, att_cols = (int64_t)H * Dh;
    hr_model_info in = {.n_embd = 32, .n_layer = N_LAYER, .n_head = H, .n_head_kv = Hkv,
                        .head_dim = Dh, .n_ff = 64, .n_vocab = 16, .rms_eps = 1e-5f,
                        .rope_theta = 10000.0f};
    float inv_freq[64];
    for (int32_t i = 0; i < Dh / 2; i++)
        inv_freq[i] = 1.0f / powf(10000.0f, (float)(2 * i) / (float)Dh);
    /* a shuffled block table: a sequence's pages are not contiguous */
    int32_t bt[N_SEQ * MAX_BLOCKS];
    for (int32_t i = 0; i < N_SEQ * MAX_BLOCKS; i++)
        bt[i] = i;
    for (int32_t i = N_SEQ * MAX_BLOCKS - 1; i > 0; i--) {
        int32_t j = (int32_t)((frand() + 1.0f) * 0.5f * (float)(i + 1)) % (i + 1), t = bt[i];
        bt[i] = bt[j];
        bt[j] = t;
    }
    float wdata[32 * 4];
    for (int i = 0; i < 32 * 4; i++)
        wdata[i] = frand();
    model_tensor wt = {.name = "w", .dtype = HR_DTYPE_F32, .n_dims = 2, .ne = {32, 4, 1, 1},
                       .n_bytes = sizeof wdata, .data = (const uint8_t *)wdata};
    const model_tensor *wp = &wt;

    /* the pairs this head size takes: block types need Dh % 32 == 0 */
    bool on[N_PAIRS];
    for (int pi = 0; pi < N_PAIRS; pi++)
        on[pi] = Dh % 32 == 0 || (!is_block(kv_pairs[pi].k) && !is_block(kv_pairs[pi].v));

    side sides[N_PAIRS] = {{0}};
    bool ok = true;
    for (int pi = 0; pi < N_PAIRS && ok; pi++) {
        be_config cfg = {.max_rows = MAX_ROWS, .max_out = 1, .n_seq_max = N_SEQ,
                         .max_blocks_per_seq = MAX_BLOCKS, .n_block = N_SEQ * MAX_BLOCKS,
                         .block_size = BS, .kv_dtype = kv_pairs[pi].k,
                         .kv_dtype_v = kv_pairs[pi].v, .rope_inv_freq = inv_freq};
        be_params p = {.n_threads = 2};
        side *s = &sides[pi];
        ok = backend_cpu_create(&in, &p, &s->b, &err) == HR_OK &&
             s->b->ops->weight_create(s->b, &wp, NULL, 1, NULL, &s->w, &err) == HR_OK &&
             s->b->ops->tensor_alloc(s->b, MAX_ROWS, qkv_cols, false, &s->qkv, &err) == HR_OK &&
             s->b->ops->tensor_alloc(s->b, MAX_ROWS, att_cols, false, &s->att, &err) == HR_OK;
        CHECK_MSG(ok, "%s: setup: %s", sh->name, err.msg);
        if (!ok)
            break;
        hr_status st = s->b->ops->kv_alloc(s->b, &cfg, &err);
        if (on[pi]) {
            CHECK_OK(st, &err);
            ok = st == HR_OK;
        } else { /* a block type on a head size it does not divide: refused */
            CHECK_MSG(st == HR_ERR_UNSUPPORTED && strstr(err.msg, "multiple of 32"),
                      "%s kv %s:%s: %s", sh->name, hr_dtype_name(kv_pairs[pi].k),
                      hr_dtype_name(kv_pairs[pi].v), err.msg);
        }
    }

    /* the cached k and v (after rope) of each sequence, f32 as computed:
     * (N_SEQ, MAX_CTX, Hkv, Dh) */
    const int64_t ld_kv = (int64_t)Hkv * Dh;
    float *k_f32 = calloc((size_t)(N_SEQ * MAX_CTX * ld_kv), sizeof(float));
    float *v_f32 = calloc((size_t)(N_SEQ * MAX_CTX * ld_kv), sizeof(float));
    float *k_t = malloc((size_t)(MAX_CTX * ld_kv) * sizeof(float)); /* one sequence, rounded */
    float *v_t = malloc((size_t)(MAX_CTX * ld_kv) * sizeof(float));
    float *host_qkv = malloc((size_t)(MAX_ROWS * qkv_cols) * sizeof(float));
    float *rot = malloc((size_t)(MAX_ROWS * qkv_cols) * sizeof(float));
    float *out[N_PAIRS][CPU_LEVEL_COUNT];
    for (int pi = 0; pi < N_PAIRS; pi++)
        for (int l = 0; l < CPU_LEVEL_COUNT; l++)
            out[pi][l] = malloc((size_t)(MAX_ROWS * att_cols) * sizeof(float));
    double *o_ref = malloc((size_t)Dh * sizeof(double)), *A = malloc((size_t)Dh * sizeof(double));
    double *o32 = malloc((size_t)Dh * sizeof(double)), *A32 = malloc((size_t)Dh * sizeof(double));
    double *W = malloc((size_t)Dh * sizeof(double));

    /* step 1: prefill 70 positions of sequence 0 and 33 of sequence 1;
     * step 2: a decode row of sequence 0 and a 5-row chunk of sequence 1 */
    step_buf steps[2];
    memset(steps, 0, sizeof steps);
    add_segment(&steps[0], bt, 0, 0, 70);
    add_segment(&steps[0], bt, 1, 0, 33);
    add_segment(&steps[1], bt, 1, 33, 5);
    add_segment(&steps[1], bt, 0, 70, 1);

    for (int si = 0; si < 2 && ok; si++) {
        const hr_step *st = &steps[si].step;
        const int32_t B = st->n_rows;
        for (int64_t i = 0; i < B * qkv_cols; i++)
            host_qkv[i] = frand() * 2.0f;
        for (int pi = 0; pi < N_PAIRS; pi++) {
            if (!on[pi])
                continue;
            side *s = &sides[pi];
            const hr_backend_ops *o = s->b->ops;
            CHECK_OK(o->begin_step(s->b, st, &err), &err);
            CHECK_OK(o->write_tensor(s->b, &s->qkv, B, host_qkv, &err), &err);
            o->rope_kv_store(s->b, LAYER, &s->qkv, inv_freq, ROPE_STYLE_NEOX, H, Hkv, Dh);
            for (int l = 0; l <= (int)cpu_level_supported(); l++) {
                cpu_level_set((cpu_level)l);
                o->attention(s->b, LAYER, &s->att, &s->qkv);
                CHECK_OK(o->read_tensor(s->b, &s->att, B, out[pi][l], &err), &err);
            }
            cpu_level_set(cpu_level_supported());
        }
        /* the rotated q and k (the same on every side: rope is f32) */
        CHECK_OK(sides[0].b->ops->read_tensor(sides[0].b, &sides[0].qkv, B, rot, &err), &err);
        for (int32_t r = 0; r < B; r++) {
            int32_t seq = -1;
            for (int32_t g = 0; g < st->n_seg; g++)
                if (r >= st->segs[g].row0 && r < st->segs[g].row0 + st->segs[g].n)
                    seq = st->segs[g].seq;
            const float *row = rot + r * qkv_cols;
            memcpy(k_f32 + ((int64_t)seq * MAX_CTX + st->pos[r]) * ld_kv, row + (int64_t)H * Dh,
                   (size_t)ld_kv * sizeof(float));
            memcpy(v_f32 + ((int64_t)seq * MAX_CTX + st->pos[r]) * ld_kv,
                   row + (int64_t)(H + Hkv) * Dh, (size_t)ld_kv * sizeof(float));
        }

        /* every row, head, cache pair and level against the references */
        double worst_own[N_PAIRS] = {0}, worst_f32[N_PAIRS] = {0};
        for (int32_t r = 0; r < B; r++) {
            int32_t seq = -1;
            for (int32_t g = 0; g < st->n_seg; g++)
                if (r >= st->segs[g].row0 && r < st->segs[g].row0 + st->segs[g].n)
                    seq = st->segs[g].seq;
            const int32_t n_ctx = st->pos[r] + 1;
            for (int32_t h = 0; h < H; h++) {
                const int32_t g = h / grp;
                const float *q = rot + r * qkv_cols + (int64_t)h * Dh;
                const float *k32 = k_f32 + (int64_t)seq * MAX_CTX * ld_kv + (int64_t)g * Dh;
                const float *v32 = v_f32 + (int64_t)seq * MAX_CTX * ld_kv + (int64_t)g * Dh;
                double E32, unused;
                reference(q, k32, v32, ld_kv, n_ctx, Dh, 0.0, 0.0, o32, A32, &E32, &unused);
                for (int pi = 0; pi < N_PAIRS; pi++) {
                    if (!on[pi])
                        continue;
                    const hr_dtype kt = kv_pairs[pi].k, vt = kv_pairs[pi].v;
                    for (int32_t i = 0; i < n_ctx; i++) {
                        round_row(kt, k32 + i * ld_kv, k_t + i * Dh, Dh);
                        round_row(vt, v32 + i * ld_kv, v_t + i * Dh, Dh);
                    }
                    /* K's score move: a priori for 16 bits, measured for blocks */
                    double E, D;
                    reference(q, k_t, v_t, Dh, n_ctx, Dh, rel_rounding(kt),
                              kt == HR_DTYPE_F16 ? F16_TINY : 0.0, o_ref, A, &E, &D);
                    if (is_block(kt)) {
                        D = 0.0;
                        for (int32_t i = 0; i < n_ctx; i++) {
                            double move = 0.0;
                            for (int32_t d = 0; d < Dh; d++)
                                move += fabs((double)q[d]) *
                                        fabs((double)k_t[i * Dh + d] - k32[i * ld_kv + d]);
                            move /= sqrt((double)Dh);
                            D = move > D ? move : D;
                        }
                    }
                    /* V's move W_d: a priori for 16 bits (r A32 + tiny), measured for blocks */
                    for (int32_t d = 0; d < Dh; d++) {
                        W[d] = rel_rounding(vt) * A32[d] + (vt == HR_DTYPE_F16 ? F16_TINY : 0.0);
                        if (is_block(vt))
                            for (int32_t i = 0; i < n_ctx; i++) {
                                double dv = fabs((double)v_t[i * Dh + d] - v32[i * ld_kv + d]);
                                W[d] = dv > W[d] ? dv : W[d];
                            }
                    }
                    const double f32_part =
                        exp(2 * E) - 1 + gamma_n(n_ctx + 4) + gamma_n(n_ctx + 1);
                    const double f32_part32 =
                        exp(2 * E32) - 1 + gamma_n(n_ctx + 4) + gamma_n(n_ctx + 1);
                    for (int l = 0; l <= (int)cpu_level_supported(); l++)
                        for (int32_t d = 0; d < Dh; d++) {
                            const double got = out[pi][l][r * att_cols + (int64_t)h * Dh + d];
                            const double got32 = out[0][l][r * att_cols + (int64_t)h * Dh + d];
                            /* against its own cache's reference */
                            double tol = 2 * A[d] * f32_part + 1e-30;
                            double e = fabs(got - o_ref[d]) / tol;
                            e = isnan(e) ? INFINITY : e;
                            worst_own[pi] = e > worst_own[pi] ? e : worst_own[pi];
                            /* against the f32 cache, through the rounding bound */
                            double tol32 = 2 * A[d] * f32_part + 2 * A32[d] * f32_part32 +
                                           2 * ((exp(2 * D) - 1) * (A32[d] + W[d]) + W[d]) +
                                           1e-30;
                            double e32 = fabs(got - got32) / tol32;
                            e32 = isnan(e32) ? INFINITY : e32;
                            worst_f32[pi] = e32 > worst_f32[pi] ? e32 : worst_f32[pi];
                        }
                }
            }
        }
        for (int pi = 0; pi < N_PAIRS; pi++) {
            if (!on[pi])
                continue;
            char name[32];
            snprintf(name, sizeof name, "%s:%s", hr_dtype_name(kv_pairs[pi].k),
                     hr_dtype_name(kv_pairs[pi].v));
            bool pass = worst_own[pi] <= 1.0 && worst_f32[pi] <= 1.0;
            printf("attn   %-14s kv=%-9s step %d (%3d rows)  err/bound own %.3f  vs f32 %.3f  "
                   "%s\n",
                   sh->name, name, si + 1, B, worst_own[pi], worst_f32[pi],
                   pass ? "OK" : "FAIL");
            CHECK_MSG(pass, "%s kv=%s step %d: %.3g (own), %.3g (vs f32) x bound", sh->name,
                      name, si + 1, worst_own[pi], worst_f32[pi]);
        }
    }

    for (int pi = 0; pi < N_PAIRS; pi++) {
        if (sides[pi].b)
            sides[pi].b->ops->free(sides[pi].b);
        for (int l = 0; l < CPU_LEVEL_COUNT; l++)
            free(out[pi][l]);
    }
    free(k_f32);
    free(v_f32);
    free(k_t);
    free(v_t);
    free(host_qkv);
    free(rot);
    free(o_ref);
    free(A);
    free(o32);
    free(A32);
    free(W);
}

int main(void) {
    printf("cpu supports %s\n", cpu_level_name(cpu_level_supported()));
    test_primitives();
    static const att_shape shapes[] = {
        {"gqa3 Dh36", 6, 2, 36},   /* a group of 3 (one tile), tails at 8 and 16 lanes */
        {"gqa8 Dh64", 8, 1, 64},   /* two tiles of 4; two blocks of 32 */
        {"mha Dh20", 4, 4, 20},    /* groups of 1 */
        {"gqa4 Dh32", 8, 2, 32},   /* the embedded model's shape: one block per row */
        {"gqa2 Dh96", 4, 2, 96},   /* three blocks per row */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        test_attention(&shapes[i]);
    TEST_END();
}
