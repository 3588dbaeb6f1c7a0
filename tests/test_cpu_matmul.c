// ctest-label: numeric
// ctest-timeout: 900
/*
 * test_cpu_matmul.c — cpu_matmul against a double-precision oracle, for every
 * weight dtype, both modes, every SIMD level this CPU has, 1 and 2 threads.
 *
 * Each case builds random weights (quantized from random floats with
 * quant_quantize_row, or random bytes with finite scales so that every code
 * value and scale bit pattern occurs), random activations (dense, or sparse so
 * that a misplaced element cannot hide in the sum), strided x and y with NaN in
 * x's padding (a kernel that reads it returns NaN) and sentinels around and
 * between y's rows (which must stay untouched). The oracle sums in double
 * over the dequantized weights (quant_dequantize_row). Also checked bit for
 * bit: each level's weight converters against quant_dequantize_row, its
 * activation quantizer against the reference one (whole rows and split
 * between threads), 1 against 2 threads; and the thread pool (sums, the
 * in-task barrier, waking workers that went to sleep).
 *
 * Tolerances (u = 2^-24, gamma(n) = n*u / (1 - n*u), Higham's bound for any
 * order of n floating-point operations of a sum of products):
 *   EXACT: w is exact (the kernels convert bit-identically to the reference
 *     dequantizer) and y is the sum of the K products w*x (each rounded once,
 *     by FMA or mul) and the bias, added in some order (per-lane FMA chains,
 *     then lanes, K-slices and the bias combined). Any such order has at most
 *     K + 2 roundings on the path of each term, so with a margin of 2:
 *       |y - sum w x - bias| <= gamma(K + 4) * (sum |w x| + |bias|).
 *   FAST: the kernel computes exactly sum w * x^ with x^ = d*q the 8-bit
 *     activations (integer dot products are exact), up to f32 rounding of the
 *     per-block terms. Formats with a minimum split w = s*c + m and sum s*c*x^
 *     and m*x^ separately; |s*c| <= |w| + |m| and |m| stays within a few block
 *     maxima A (max |w| over the 32-block), so with the same operation count
 *       |y - sum w x^ - bias| <= gamma(K + 8) * (sum (|w| + 4A) |x^| + |bias|),
 *     and against the unrounded activations, since |x - x^| <= d/2 per element:
 *       |y - sum w x - bias| <= that + sum |w| d/2.
 *   Both bounds are checked; the first (tight) one catches a wrong block scale
 *   or a misplaced code that the 8-bit rounding would otherwise hide.
 *   FAST with F16 weights (calls without quantized parts): the same bounds
 *     with x^ = f16(x), whose error |x - x^| <= 2^-11 |x| (or 2^-25 for
 *     subnormal f16) takes the place of d/2; with BF16 weights (calls
 *     without quantized or F16 parts) x^ = bf16(x), and |x - x^| taken
 *     element by element. (vdpbf16ps flushes bf16 denormals: below the
 *     1e-30 floor of every tolerance.)
 * F32 ignores the mode and is held to the EXACT bound in both, as are F16
 * and BF16 parts in a call whose x^ is another type's.
 */
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/threadpool.h"
#include "quant/quant.h"
#include "test.h"
#include "util/dtype.h"
#include "util/fp16.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

static const hr_dtype all_dtypes[] = {
    HR_DTYPE_F32,  HR_DTYPE_F16,  HR_DTYPE_BF16, HR_DTYPE_Q8_0, HR_DTYPE_Q4_0,
    HR_DTYPE_Q4_1, HR_DTYPE_Q5_0, HR_DTYPE_Q5_1, HR_DTYPE_Q2_K, HR_DTYPE_Q3_K,
    HR_DTYPE_Q4_K, HR_DTYPE_Q5_K, HR_DTYPE_Q6_K, HR_DTYPE_NF4,  HR_DTYPE_FP4,
};
#define N_DTYPES ((int)(sizeof(all_dtypes) / sizeof(all_dtypes[0])))

/* ---------------------------------------------------------------- random */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rng_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static float rng_uniform(void) { /* [-1, 1) */
    return (float)((double)rng_u32() / 2147483648.0 - 1.0);
}

static float rng_normal(void) {
    float s = 0.0f;
    for (int i = 0; i < 4; i++)
        s += rng_uniform();
    return s * 0.8660254f; /* variance 1 */
}

/* ---------------------------------------------------------------- weights */

/* Offsets of the f16 scale fields of each block type (blocks.h). */
static void fix_block_scales(hr_dtype t, uint8_t *blk) {
    int off[2] = {-1, -1};
    switch (t) {
    case HR_DTYPE_Q8_0:
    case HR_DTYPE_Q4_0:
    case HR_DTYPE_Q5_0:
    case HR_DTYPE_NF4:
    case HR_DTYPE_FP4:
        off[0] = 0;
        break;
    case HR_DTYPE_Q4_1:
    case HR_DTYPE_Q5_1:
    case HR_DTYPE_Q4_K:
    case HR_DTYPE_Q5_K:
        off[0] = 0;
        off[1] = 2;
        break;
    case HR_DTYPE_Q2_K:
        off[0] = 80;
        off[1] = 82;
        break;
    case HR_DTYPE_Q3_K:
        off[0] = 108;
        break;
    case HR_DTYPE_Q6_K:
        off[0] = 208;
        break;
    default:
        break;
    }
    for (int i = 0; i < 2; i++) {
        if (off[i] < 0)
            continue;
        uint16_t h = hr_f32_to_f16(rng_uniform() * 0.05f);
        memcpy(blk + off[i], &h, 2);
    }
}

typedef struct {
    hr_dtype t;
    int64_t n_rows;
    bool bias;
} part_spec;

typedef struct {
    cpu_mat mat;
    void *data;  /* stored weights */
    float *w;    /* (n_rows, K) dequantized */
    float *bias; /* n_rows or NULL */
} part_data;

static void make_part(part_data *pd, const part_spec *ps, int64_t K, bool random_bytes) {
    const hr_dtype t = ps->t;
    const size_t row_bytes = cpu_mm_row_bytes(t, K);
    pd->data = malloc(row_bytes * (size_t)ps->n_rows + 1);
    pd->w = malloc(sizeof(float) * (size_t)(ps->n_rows * K) + 1);
    float *src = malloc(sizeof(float) * (size_t)K);
    const hr_dtype_info *info = &hr_dtype_table[t];
    for (int64_t r = 0; r < ps->n_rows; r++) {
        uint8_t *row = (uint8_t *)pd->data + (size_t)r * row_bytes;
        if (random_bytes && info->is_quant) {
            for (size_t i = 0; i < row_bytes; i++)
                row[i] = (uint8_t)rng_u32();
            for (int64_t b = 0; b < K / info->block_elems; b++)
                fix_block_scales(t, row + b * info->block_bytes);
        } else {
            float scale = 0.1f + 0.9f * (float)(rng_u32() % 1000) / 1000.0f;
            for (int64_t k = 0; k < K; k++)
                src[k] = rng_normal() * scale;
            if (r % 5 == 1) /* an all-zero first block */
                for (int64_t k = 0; k < info->block_elems && k < K; k++)
                    src[k] = 0.0f;
            if (r % 5 == 2) /* a block of large magnitude */
                for (int64_t k = 0; k < 32 && k < K; k++)
                    src[K - 1 - k] *= 1000.0f;
            if (r % 7 == 3) /* offset (min) formats see an all-positive row */
                for (int64_t k = 0; k < K; k++)
                    src[k] = src[k] < 0 ? -src[k] + 0.5f : src[k] + 0.5f;
            quant_quantize_row(t, src, row, K);
        }
        quant_dequantize_row(t, row, pd->w + r * K, K);
    }
    free(src);
    pd->bias = NULL;
    if (ps->bias) {
        pd->bias = malloc(sizeof(float) * (size_t)ps->n_rows + 1);
        for (int64_t r = 0; r < ps->n_rows; r++)
            pd->bias[r] = rng_normal();
    }
    pd->mat = (cpu_mat){.dtype = t, .data = pd->data, .n_rows = ps->n_rows, .bias = pd->bias};
}

static void free_part(part_data *pd) {
    free(pd->data);
    free(pd->w);
    free(pd->bias);
}

/* ---------------------------------------------------------------- oracle */

/* x^ by the FAST rule (matmul.h), in double, and its block scales. */
static void quantize_ref(const float *x, int64_t K, double *xh, double *dblk) {
    for (int64_t ib = 0; ib < K / 32; ib++) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++)
            amax = fmaxf(amax, fabsf(x[ib * 32 + i]));
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const float d = amax / 127.0f;
        dblk[ib] = d;
        for (int i = 0; i < 32; i++)
            xh[ib * 32 + i] = (double)d * (double)rintf(x[ib * 32 + i] * id);
    }
}

static double gamma_n(int64_t n) {
    const double u = 1.0 / 16777216.0;
    return (double)n * u / (1.0 - (double)n * u);
}

/* ---------------------------------------------------------------- cases */

enum { X_DENSE, X_SPARSE, X_ZERO_ROW };

typedef struct {
    int64_t B, K;
    int n_parts;
    part_spec parts[4];
    int x_kind;
    bool strided;
    bool random_bytes;
} mm_case;

#define GUARD 16
#define SENTINEL (-12345.5f)

static cpu_pool *pools[3]; /* index = thread count */
static void *scratch;
static size_t scratch_bytes;

static void *get_scratch(int64_t B, int64_t K) {
    size_t need = cpu_matmul_scratch_bytes(B, K, 2);
    if (need > scratch_bytes) {
        free(scratch);
        scratch = aligned_alloc(64, (need + 63) / 64 * 64);
        scratch_bytes = need;
    }
    return scratch;
}

typedef struct {
    double worst_exact, worst_fast_tight, worst_fast_loose;
    int n_cases, n_fail;
} stats;

static stats results[CPU_LEVEL_COUNT][2][HR_DTYPE_COUNT];

static void run_case(const mm_case *c) {
    const int64_t B = c->B, K = c->K;
    part_data pd[4];
    cpu_mat mats[4];
    int64_t N = 0;
    for (int p = 0; p < c->n_parts; p++) {
        make_part(&pd[p], &c->parts[p], K, c->random_bytes);
        mats[p] = pd[p].mat;
        N += c->parts[p].n_rows;
    }
    const int64_t ldx = c->strided ? K + 3 : K;
    const int64_t ldy = c->strided ? N + 5 : N;

    /* x with NaN padding */
    float *x = malloc(sizeof(float) * (size_t)(B * ldx) + 1);
    for (int64_t b = 0; b < B; b++) {
        for (int64_t k = 0; k < ldx; k++) {
            float v;
            if (k >= K)
                v = NAN;
            else if (c->x_kind == X_SPARSE)
                v = rng_u32() % 29 == 0 ? rng_normal() * 3.0f : 0.0f;
            else if (c->x_kind == X_ZERO_ROW && b % 2 == 0)
                v = 0.0f;
            else
                v = rng_normal();
            x[b * ldx + k] = v;
        }
    }

    /* oracle: per (b, n) sums in double */
    const size_t nbn = (size_t)(B * N);
    double *ref = calloc(nbn + 1, sizeof(double));
    double *ref_abs = calloc(nbn + 1, sizeof(double));
    double *refh = calloc(nbn + 1, sizeof(double));
    double *refh_abs = calloc(nbn + 1, sizeof(double));
    double *qerr = calloc(nbn + 1, sizeof(double));
    const bool legacy_k = K % 32 == 0;
    bool any_f16 = false, any_bf16 = false, any_quant = false;
    for (int p = 0; p < c->n_parts; p++) {
        any_f16 = any_f16 || c->parts[p].t == HR_DTYPE_F16;
        any_bf16 = any_bf16 || c->parts[p].t == HR_DTYPE_BF16;
        any_quant = any_quant || hr_dtype_table[c->parts[p].t].is_quant;
    }
    /* FAST rounds x to f16, else bf16, without quantized parts (matmul.h) */
    const hr_dtype x16_type = any_quant ? HR_DTYPE_COUNT
                              : any_f16 ? HR_DTYPE_F16
                              : any_bf16 ? HR_DTYPE_BF16
                                         : HR_DTYPE_COUNT;
    double *xh = malloc(sizeof(double) * (size_t)K);
    double *dblk = malloc(sizeof(double) * (size_t)(K / 32 + 1));
    for (int64_t b = 0; b < B; b++) {
        const float *xb = x + b * ldx;
        if (legacy_k)
            quantize_ref(xb, K, xh, dblk);
        int64_t col = 0;
        for (int p = 0; p < c->n_parts; p++) {
            const bool part_f16 = c->parts[p].t == x16_type;
            for (int64_t r = 0; r < c->parts[p].n_rows; r++, col++) {
                const float *w = pd[p].w + r * K;
                double s = 0, sa = 0, sh = 0, sha = 0, qe = 0, amax = 0;
                for (int64_t k = 0; part_f16 && k < K; k++) {
                    const double x16 = x16_type == HR_DTYPE_F16 ? hr_f16_to_f32(hr_f32_to_f16(xb[k]))
                                                                : hr_bf16_to_f32(hr_f32_to_bf16(xb[k]));
                    sh += (double)w[k] * x16;
                    sha += fabs((double)w[k] * x16);
                    qe += fabs((double)w[k]) * fabs(xb[k] - x16);
                }
                for (int64_t k = 0; k < K; k++) {
                    if (k % 32 == 0) {
                        amax = 0;
                        for (int64_t i = k; i < k + 32 && i < K; i++)
                            amax = fmax(amax, fabs((double)w[i]));
                    }
                    s += (double)w[k] * xb[k];
                    sa += fabs((double)w[k] * xb[k]);
                    if (legacy_k && !part_f16) {
                        sh += (double)w[k] * xh[k];
                        sha += (fabs((double)w[k]) + 4 * amax) * fabs(xh[k]);
                        qe += fabs((double)w[k]) * dblk[k / 32] / 2;
                    }
                }
                double bias = pd[p].bias ? pd[p].bias[r] : 0.0;
                size_t i = (size_t)(b * N + col);
                ref[i] = s + bias;
                ref_abs[i] = sa + fabs(bias);
                refh[i] = sh + bias;
                refh_abs[i] = sha + fabs(bias);
                qerr[i] = qe;
            }
        }
    }

    const size_t ybytes = (size_t)(B * ldy + 2 * GUARD);
    float *ybuf[3];
    for (int t = 1; t <= 2; t++)
        ybuf[t] = malloc(sizeof(float) * ybytes);

    for (int level = 0; level < CPU_LEVEL_COUNT; level++) {
        if (cpu_level_set((cpu_level)level) != (cpu_level)level)
            continue;
        for (int mode = 0; mode < 2; mode++) {
            for (int t = 1; t <= 2; t++) {
                for (size_t i = 0; i < ybytes; i++)
                    ybuf[t][i] = SENTINEL;
                cpu_matmul(pools[t], get_scratch(B, K), (cpu_matmul_mode)mode, ybuf[t] + GUARD,
                           ldy, x, ldx, B, K, mats, c->n_parts);
            }
            /* guards and the gaps between rows */
            bool guards_ok = true, threads_same = true;
            for (size_t i = 0; i < ybytes; i++) {
                int64_t j = (int64_t)i - GUARD;
                bool inside = j >= 0 && j < B * ldy && j % ldy < N;
                if (!inside && ybuf[1][i] != SENTINEL)
                    guards_ok = false;
                if (!inside && ybuf[2][i] != SENTINEL)
                    guards_ok = false;
                if (inside && memcmp(&ybuf[1][i], &ybuf[2][i], sizeof(float)) != 0)
                    threads_same = false;
            }
            /* numerics, per part dtype */
            int64_t col0 = 0;
            for (int p = 0; p < c->n_parts; p++) {
                const hr_dtype dt = c->parts[p].t;
                const bool fast = mode == CPU_MATMUL_FAST && (hr_dtype_table[dt].is_quant || dt == x16_type);
                stats *st = &results[level][mode][dt];
                double worst = 0, worst_tight = 0, worst_loose = 0;
                int64_t wb = 0, wn = 0;
                for (int64_t b = 0; b < B; b++) {
                    for (int64_t r = 0; r < c->parts[p].n_rows; r++) {
                        size_t i = (size_t)(b * N + col0 + r);
                        double yv = ybuf[1][GUARD + b * ldy + col0 + r];
                        double e;
                        if (!fast) {
                            double tol = gamma_n(K + 4) * ref_abs[i] + 1e-30;
                            e = fabs(yv - ref[i]) / tol;
                        } else {
                            double tol = gamma_n(K + 8) * refh_abs[i] + 1e-30;
                            e = fabs(yv - refh[i]) / tol;
                            double el = fabs(yv - ref[i]) / (tol + qerr[i]);
                            worst_loose = el > worst_loose || isnan(el) ? el : worst_loose;
                            worst_tight = e > worst_tight || isnan(e) ? e : worst_tight;
                        }
                        if (e > worst || isnan(e)) {
                            worst = e;
                            wb = b;
                            wn = r;
                        }
                    }
                }
                col0 += c->parts[p].n_rows;
                bool ok = guards_ok && threads_same && !(worst > 1.0) && !(worst_loose > 1.0);
                st->n_cases++;
                if (!fast && !(worst <= st->worst_exact))
                    st->worst_exact = worst;
                if (fast) {
                    if (!(worst_tight <= st->worst_fast_tight))
                        st->worst_fast_tight = worst_tight;
                    if (!(worst_loose <= st->worst_fast_loose))
                        st->worst_fast_loose = worst_loose;
                }
                if (!ok) {
                    st->n_fail++;
                    size_t i = (size_t)(wb * N + (col0 - c->parts[p].n_rows) + wn);
                    fprintf(stderr,
                            "  %s %s %s: B=%lld K=%lld part %d (%lld rows)%s%s x=%d rb=%d: "
                            "worst err/tol %.3g at b=%lld n=%lld (y=%.9g ref=%.9g refh=%.9g)%s%s\n",
                            cpu_level_name((cpu_level)level), mode ? "fast" : "exact",
                            hr_dtype_name(dt), (long long)B, (long long)K, p,
                            (long long)c->parts[p].n_rows, c->strided ? " strided" : "",
                            c->parts[p].bias ? " bias" : "", c->x_kind, c->random_bytes, worst,
                            (long long)wb, (long long)wn,
                            (double)ybuf[1][GUARD + wb * ldy + (col0 - c->parts[p].n_rows) + wn],
                            ref[i], refh[i], guards_ok ? "" : " GUARDS CLOBBERED",
                            threads_same ? "" : " THREADS DIFFER");
                }
                CHECK(ok);
            }
        }
    }

    for (int t = 1; t <= 2; t++)
        free(ybuf[t]);
    free(ref);
    free(ref_abs);
    free(refh);
    free(refh_abs);
    free(qerr);
    free(xh);
    free(dblk);
    free(x);
    for (int p = 0; p < c->n_parts; p++)
        free_part(&pd[p]);
}

/* ---------------------------------------------------------------- bit-exact pieces */

/* Each level's to_f32 converters must equal the reference dequantizer bit
 * for bit, and its activation quantizer the reference quantizer. */
static void check_converters(void) {
    const cpu_mm_isa *isas[CPU_LEVEL_COUNT] = {&cpu_mm_isa_ref, &cpu_mm_isa_avx2,
                                               &cpu_mm_isa_avx512};
    const int64_t K = 1024;
    for (int level = 1; level < CPU_LEVEL_COUNT; level++) {
        if (cpu_level_supported() < (cpu_level)level)
            continue;
        const cpu_mm_isa *isa = isas[level];
        for (int di = 0; di < N_DTYPES; di++) {
            hr_dtype t = all_dtypes[di];
            part_spec ps = {.t = t, .n_rows = 2};
            part_data pd;
            make_part(&pd, &ps, K, di % 2 == 1);
            float *got = malloc(sizeof(float) * (size_t)K);
            bool same = true;
            int64_t be = hr_dtype_table[t].block_elems;
            int64_t k0 = be == 1 ? 8 : (K / be > 2 ? be : 0);
            int64_t n = K - 2 * k0;
            cpu_mm_to_f32(isa, t, (const char *)pd.data + cpu_mm_row_bytes(t, K), k0, n, got);
            same = memcmp(got, pd.w + K + k0, sizeof(float) * (size_t)n) == 0;
            CHECK_MSG(same, "%s to_f32 %s differs from quant_dequantize_row", isa->name,
                      hr_dtype_name(t));
            free(got);
            free_part(&pd);
        }
        /* the 16-bit roundings of FAST with F16/BF16 weights, bit for bit:
         * ties, denormals, infinities, NaN of both signs, an odd length */
        {
            enum { NR = 1001 };
            float x[NR], xh_want[NR], xh_got[NR];
            uint16_t h_want[NR], h_got[NR];
            static const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x00000001u, 0x807fffffu,
                                               0x7f800000u, 0xff800000u, 0x7fc00001u, 0xff800001u,
                                               0x7f7fffffu, 0x477ff000u, 0x33000001u, 0x80000000u};
            for (int i = 0; i < NR; i++) {
                if (i < (int)(sizeof(special) / sizeof(special[0])))
                    memcpy(&x[i], &special[i], 4);
                else
                    x[i] = rng_normal() * (i % 7 == 0 ? 1e-30f : i % 5 == 0 ? 1e30f : 1.0f);
            }
            for (int f = 0; f < 2; f++) {
                (f ? cpu_mm_round_bf16_ref : cpu_mm_round_f16_ref)(x, NR, h_want, xh_want);
                (f ? isa->round_bf16 : isa->round_f16)(x, NR, h_got, xh_got);
                CHECK_MSG(memcmp(h_want, h_got, sizeof h_want) == 0 &&
                              memcmp(xh_want, xh_got, sizeof xh_want) == 0,
                          "%s round_%s differs from the reference", isa->name, f ? "bf16" : "f16");
            }
        }
        /* quantizer: all layouts, a K that is not a multiple of the padding */
        const int64_t Kq = 2304;
        float *x = malloc(sizeof(float) * (size_t)Kq);
        for (int64_t k = 0; k < Kq; k++)
            x[k] = k < 64 ? 0.0f : rng_normal() * (k % 97 == 0 ? 100.0f : 1.0f);
        size_t rb = cpu_xq_row_bytes(Kq);
        void *want[CPU_XQ_LAYOUT_COUNT], *got[CPU_XQ_LAYOUT_COUNT];
        for (int l = 0; l < CPU_XQ_LAYOUT_COUNT; l++) {
            want[l] = calloc(1, rb);
            got[l] = calloc(1, rb);
        }
        float *xh_want = malloc(sizeof(float) * (size_t)Kq);
        float *xh_got = malloc(sizeof(float) * (size_t)Kq);
        const int64_t kp = cpu_xq_kp(Kq);
        cpu_mm_quantize_ref(x, Kq, 0, kp, want, xh_want);
        isa->quantize(x, Kq, 0, kp, got, xh_got);
        for (int l = 0; l < CPU_XQ_LAYOUT_COUNT; l++)
            CHECK_MSG(memcmp(want[l], got[l], rb) == 0, "%s quantize layout %d differs",
                      isa->name, l);
        CHECK_MSG(memcmp(xh_want, xh_got, sizeof(float) * (size_t)Kq) == 0,
                  "%s quantize x^ differs", isa->name);
        /* the same row made in two ranges, as two threads do */
        for (int l = 0; l < CPU_XQ_LAYOUT_COUNT; l++)
            memset(got[l], 0x55, rb);
        memset(xh_got, 0x55, sizeof(float) * (size_t)Kq);
        isa->quantize(x, Kq, CPU_XQ_PAD, kp, got, xh_got);
        isa->quantize(x, Kq, 0, CPU_XQ_PAD, got, xh_got);
        for (int l = 0; l < CPU_XQ_LAYOUT_COUNT; l++)
            CHECK_MSG(memcmp(want[l], got[l], rb) == 0, "%s split quantize layout %d differs",
                      isa->name, l);
        CHECK_MSG(memcmp(xh_want, xh_got, sizeof(float) * (size_t)Kq) == 0,
                  "%s split quantize x^ differs", isa->name);
        for (int l = 0; l < CPU_XQ_LAYOUT_COUNT; l++) {
            free(want[l]);
            free(got[l]);
        }
        free(xh_want);
        free(xh_got);
        free(x);
    }
}

/* ---------------------------------------------------------------- pool */

typedef struct {
    atomic_int sum;
    atomic_int ran[64]; /* times each slot ran in this run */
    atomic_int bad;
} pool_ctx;

/* Every slot adds slot + 1 and counts itself; some sleep a little, so that
 * the others go on without them. */
static void pool_task(void *c, int slot, int n_slots) {
    pool_ctx *pc = c;
    if (slot >= n_slots || slot >= 64) {
        atomic_fetch_add(&pc->bad, 1);
        return;
    }
    atomic_fetch_add(&pc->sum, slot + 1);
    atomic_fetch_add(&pc->ran[slot], 1);
    if (slot == n_slots - 1 && atomic_load(&pc->sum) % 7 == 0) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 200000};
        nanosleep(&ts, NULL);
    }
}

/* n_threads threads, n_runs runs: every slot runs exactly once a run, with
 * all threads taking slots, half of them, or the caller alone. With more
 * threads than cores most workers are late, and the caller runs their
 * slots. */
static void check_pool_with(int n_threads, int n_runs) {
    hr_error err;
    cpu_pool *p = NULL;
    CHECK_OK(cpu_pool_create(n_threads, &p, &err), &err);
    if (p == NULL)
        return;
    CHECK_EQ_I64(cpu_pool_size(p), n_threads);
    pool_ctx pc = {0};
    for (int r = 0; r < n_runs; r++) {
        if (r % 500 == 250) { /* longer than the workers' spin: wake them from sleep */
            struct timespec ts = {.tv_sec = 0, .tv_nsec = 3000000};
            nanosleep(&ts, NULL);
        }
        if (r % 100 == 50) /* fewer threads take slots now and then: slots stay n_threads */
            cpu_pool_set_active(p, r % 300 == 50 ? 1 : r % 300 == 150 ? n_threads / 2 : n_threads);
        for (int i = 0; i < n_threads; i++)
            atomic_store(&pc.ran[i], 0);
        cpu_pool_run(p, pool_task, &pc);
        for (int i = 0; i < n_threads; i++)
            if (atomic_load(&pc.ran[i]) != 1)
                atomic_fetch_add(&pc.bad, 1);
    }
    CHECK_EQ_I64(atomic_load(&pc.sum), (int64_t)n_runs * n_threads * (n_threads + 1) / 2);
    CHECK_EQ_I64(atomic_load(&pc.bad), 0);
    cpu_pool_stats st = cpu_pool_get_stats(p);
    CHECK_EQ_I64((int64_t)st.runs, n_runs);
    if (n_threads > 4 * sysconf(_SC_NPROCESSORS_ONLN)) /* most workers late: the caller ran their slots */
        CHECK(st.slots_taken_over > 0);
    cpu_pool_free(p);
}

static void check_pool(void) {
    hr_error err;
    cpu_pool *p = NULL;
    CHECK(cpu_pool_create(0, &p, &err) == HR_ERR_INVALID && p == NULL);
    check_pool_with(1, 100);
    check_pool_with(3, 2000);
    check_pool_with(48, 300);
    cpu_pool_free(NULL);
}

/* ---------------------------------------------------------------- main */

static void add_cases_for(hr_dtype t, int *n_run) {
    const bool legacy = hr_dtype_table[t].block_elems <= 32;
    static const struct {
        int64_t B, K, N;
        int x_kind;
    } shapes[] = {
        {1, 256, 67, X_DENSE},   {2, 512, 3, X_SPARSE},   {3, 2304, 67, X_DENSE},
        {7, 256, 1, X_ZERO_ROW}, {64, 512, 67, X_SPARSE}, {300, 256, 3, X_DENSE},
        {300, 512, 67, X_DENSE}, {64, 2304, 35, X_ZERO_ROW},
    };
    static const struct {
        int64_t B, K, N;
        int x_kind;
    } legacy_shapes[] = {
        {1, 32, 67, X_DENSE}, {7, 32, 3, X_SPARSE}, {300, 32, 67, X_DENSE}, {2, 96, 3, X_DENSE},
        {3, 160, 67, X_SPARSE},
    };
    int i = 0;
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++, i++) {
        mm_case c = {.B = shapes[s].B, .K = shapes[s].K, .n_parts = 1, .x_kind = shapes[s].x_kind,
                     .strided = i % 2 == 0, .random_bytes = i % 3 == 2};
        c.parts[0] = (part_spec){.t = t, .n_rows = shapes[s].N, .bias = i % 2 == 1};
        run_case(&c);
        (*n_run)++;
    }
    if (hr_dtype_table[t].block_elems == 1) {
        /* float rows of any K: tails of pairs, of 32-element steps and of K slices */
        static const struct {
            int64_t B, K, N;
        } float_shapes[] = {{1, 37, 67}, {33, 75, 35}, {300, 1001, 33}, {40, 1030, 3}};
        for (size_t s = 0; s < sizeof(float_shapes) / sizeof(float_shapes[0]); s++, i++) {
            mm_case c = {.B = float_shapes[s].B, .K = float_shapes[s].K, .n_parts = 1,
                         .x_kind = X_DENSE, .strided = i % 2 == 0};
            c.parts[0] = (part_spec){.t = t, .n_rows = float_shapes[s].N, .bias = i % 2 == 1};
            run_case(&c);
            (*n_run)++;
        }
    }
    if (!legacy)
        return;
    for (size_t s = 0; s < sizeof(legacy_shapes) / sizeof(legacy_shapes[0]); s++, i++) {
        mm_case c = {.B = legacy_shapes[s].B, .K = legacy_shapes[s].K, .n_parts = 1,
                     .x_kind = legacy_shapes[s].x_kind, .strided = i % 2 == 0,
                     .random_bytes = i % 3 == 2};
        c.parts[0] = (part_spec){.t = t, .n_rows = legacy_shapes[s].N, .bias = i % 2 == 0};
        run_case(&c);
        (*n_run)++;
    }
}

int main(void) {
    hr_error err;
    for (int t = 1; t <= 2; t++)
        CHECK_OK(cpu_pool_create(t, &pools[t], &err), &err);
    if (test_failed)
        TEST_END();

    printf("cpu supports %s; levels tested:", cpu_level_name(cpu_level_supported()));
    for (int l = 0; l <= (int)cpu_level_supported(); l++)
        printf(" %s", cpu_level_name((cpu_level)l));
    printf("\n");

    check_pool();
    check_converters();

    int n_run = 0;
    for (int di = 0; di < N_DTYPES; di++)
        add_cases_for(all_dtypes[di], &n_run);

    /* Fused parts of different dtypes (q/k/v of a Q4_K_M file; a legacy mix). */
    static const int64_t mixed_B[] = {1, 3, 64, 300};
    for (size_t i = 0; i < sizeof(mixed_B) / sizeof(mixed_B[0]); i++) {
        mm_case c = {.B = mixed_B[i], .K = 512, .n_parts = 4, .x_kind = X_DENSE,
                     .strided = i % 2 == 0};
        c.parts[0] = (part_spec){.t = HR_DTYPE_Q4_K, .n_rows = 67, .bias = true};
        c.parts[1] = (part_spec){.t = HR_DTYPE_Q6_K, .n_rows = 3, .bias = false};
        c.parts[2] = (part_spec){.t = HR_DTYPE_F16, .n_rows = 1, .bias = true};
        c.parts[3] = (part_spec){.t = HR_DTYPE_Q8_0, .n_rows = 5, .bias = true};
        run_case(&c);
        n_run++;
        mm_case l = {.B = mixed_B[i], .K = 96, .n_parts = 4, .x_kind = X_SPARSE,
                     .strided = i % 2 == 1};
        l.parts[0] = (part_spec){.t = HR_DTYPE_Q4_0, .n_rows = 3, .bias = true};
        l.parts[1] = (part_spec){.t = HR_DTYPE_Q8_0, .n_rows = 67, .bias = false};
        l.parts[2] = (part_spec){.t = HR_DTYPE_F32, .n_rows = 1, .bias = true};
        l.parts[3] = (part_spec){.t = HR_DTYPE_Q5_1, .n_rows = 2, .bias = true};
        run_case(&l);
        n_run++;
    }

    printf("%d cases; per level, mode and dtype the worst error / tolerance:\n", n_run);
    for (int level = 0; level <= (int)cpu_level_supported(); level++) {
        for (int di = 0; di < N_DTYPES; di++) {
            hr_dtype t = all_dtypes[di];
            const stats *e = &results[level][0][t], *f = &results[level][1][t];
            printf("  %-6s %-5s exact %3d checks %.3f  fast %3d checks", cpu_level_name(
                   (cpu_level)level), hr_dtype_name(t), e->n_cases, e->worst_exact, f->n_cases);
            if (hr_dtype_table[t].is_quant || t == HR_DTYPE_F16 || t == HR_DTYPE_BF16)
                printf(" tight %.3f loose %.3f", f->worst_fast_tight, f->worst_fast_loose);
            else
                printf(" %.3f", f->worst_exact);
            printf("%s\n", e->n_fail + f->n_fail ? "  FAILED" : "");
        }
    }

    cpu_level_set(cpu_level_supported());
    for (int t = 1; t <= 2; t++)
        cpu_pool_free(pools[t]);
    free(scratch);
    TEST_END();
}
