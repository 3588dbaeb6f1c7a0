/*
 * q_kquants.c — reference Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K (super-blocks of
 * 256; layouts and decoding formulas in blocks.h).
 *
 * The quantizers reproduce ggml's quantize_row_*_K_ref (llama-quantize without
 * an importance matrix) bit for bit; test_quant checks bytes made by ggml
 * itself. Two passes per super-block:
 *   1. per sub-block, search a scale (and min) minimising a weighted error:
 *      fit_scale_min (Q2_K/Q4_K/Q5_K, ggml's make_qkx2_quants: candidate
 *      scales around range/nmax, each refit by weighted least squares),
 *      fit_scale_q3 (Q3_K, make_q3_quants: greedy single-code moves),
 *      fit_scale_sym (Q6_K, make_qx_quants: 19 candidate scales);
 *   2. quantize sub-block scales against the largest (4, 6 or 8 bits), store
 *      the super-scale as f16, recompute every code from what the decoder sees.
 * Every float operation is in ggml's order, one multiply per statement so no
 * FMA contraction can occur: built with -ffp-contract=fast on an FMA machine,
 * Q2_K/Q4_K/Q5_K/Q6_K differ from ggml in most 64-block test chunks. Where
 * ggml is undefined (subnormal-only blocks overflow 1/range into its
 * nearest_int assert) ours saturates and decodes to ~0. Rejected: a cheaper
 * closed-form scale (amax/nmax) — it would not match llama.cpp's files.
 */
#include "quant/blocks.h"

#include "util/fp16.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

/* Below this a sub-block counts as all zero (ggml's GROUP_MAX_EPS). */
#define KQ_GROUP_MAX_EPS 1e-15f

static int imin(int a, int b) {
    return a < b ? a : b;
}

static int imax(int a, int b) {
    return a > b ? a : b;
}

/* Round to nearest, ties to even (ggml's nearest_int): adding 1.5 * 2^23
 * leaves the rounded integer in the low mantissa bits. ggml asserts
 * |v| <= 4194303; we saturate there (and map NaN to 0) instead. */
static int nearest_int(float v) {
    if (!(fabsf(v) <= 4194303.0f))
        return v > 0.0f ? 4194303 : v < 0.0f ? -4194303 : 0;
    const float biased = v + 12582912.0f;
    int32_t bits;
    memcpy(&bits, &biased, sizeof bits);
    return (bits & 0x007fffff) - 0x00400000;
}

/* ---------------------------------------------------------- scale search */

/* Symmetric codes l in [-nmax, nmax-1] minimising sum x^2 (x - scale*l)^2.
 * Starts from scale = max / -nmax (max: first largest-magnitude value) and
 * tries -(nmax + 0.1 is) for is = -9..9, keeping the best least-squares fit.
 * L gets l + nmax. Returns the scale (0 for an all-zero group). */
static float fit_scale_sym(int n, int nmax, const float *x, int8_t *L) {
    float max = 0.0f, amax = 0.0f;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < KQ_GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        const float lx = w * x[i] * (float)l;
        const float l2 = w * (float)l * (float)l;
        sumlx += lx;
        suml2 += l2;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        const float step = 0.1f * (float)is;
        iscale = -((float)nmax + step) / max;
        sumlx = suml2 = 0.0f;
        for (int i = 0; i < n; i++) {
            const int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
            const float w = x[i] * x[i];
            const float lx = w * x[i] * (float)l;
            const float l2 = w * (float)l * (float)l;
            sumlx += lx;
            suml2 += l2;
        }
        /* sumlx^2 / suml2 is the error reduction of the fit: keep the best */
        const float gain = sumlx * sumlx;
        const float best_gain = best * suml2;
        if (suml2 > 0.0f && gain > best_gain) {
            for (int i = 0; i < n; i++) {
                const int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
                L[i] = (int8_t)(l + nmax);
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Q3_K's search: symmetric codes in [-nmax, nmax-1], weights x^2; starts
 * from max / -nmax, then up to 5 sweeps that move single codes to the value
 * the other codes' least-squares scale asks for, when that helps. L gets
 * l + nmax. Returns the least-squares scale (0 for an all-zero group). */
static float fit_scale_q3(int n, int nmax, const float *x, int8_t *L) {
    float max = 0.0f, amax = 0.0f;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < KQ_GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    const float iscale = (float)-nmax / max;
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        const float lx = w * x[i] * (float)l;
        const float l2 = w * (float)l * (float)l;
        sumlx += lx;
        suml2 += l2;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            const float old_lx = w * x[i] * (float)L[i];
            float slx = sumlx - old_lx;
            if (slx > 0.0f) {
                const float old_l2 = w * (float)L[i] * (float)L[i];
                float sl2 = suml2 - old_l2;
                const float target = x[i] * sl2 / slx;
                const int new_l = imax(-nmax, imin(nmax - 1, nearest_int(target)));
                if (new_l != L[i]) {
                    const float new_lx = w * x[i] * (float)new_l;
                    const float new_l2 = w * (float)new_l * (float)new_l;
                    slx += new_lx;
                    sl2 += new_l2;
                    const float lhs = slx * slx * suml2;
                    const float rhs = sumlx * sumlx * sl2;
                    if (sl2 > 0.0f && lhs > rhs) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (n_changed == 0)
            break;
    }
    for (int i = 0; i < n; i++)
        L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Weighted error term: |d| or d^2. */
static float err_term(float diff, bool use_mad) {
    return use_mad ? fabsf(diff) : diff * diff;
}

/* Affine codes l in [0, nmax] with x ~ scale * l - min_out (min_out >= 0).
 * The range always includes 0. Starts from scale = range / nmax, then for
 * is = 0..nstep tries iscale = (nmax + rmin + rdelta * is) / range followed
 * by a weighted least-squares refit of scale and offset, keeping the lowest
 * weighted error (squared, or absolute when use_mad). Laux: n scratch codes.
 * Returns the scale; an all-equal group gives 0 and L = 0. */
static float fit_scale_min(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                           float *min_out, uint8_t *Laux, float rmin, float rdelta, int nstep,
                           bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        const float w = weights[i];
        const float wx = w * x[i];
        sum_w += w;
        sum_x += wx;
    }
    if (min > 0.0f)
        min = 0.0f;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *min_out = -min;
        return 0.0f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1.0f / iscale;
    float best_error = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)imax(0, imin(nmax, l));
        const float y = scale * (float)L[i];
        const float diff = y + min - x[i];
        const float e = weights[i] * err_term(diff, use_mad);
        best_error += e;
    }
    for (int is = 0; is <= nstep; is++) {
        const float step = rdelta * (float)is;
        iscale = (rmin + step + (float)nmax) / (max - min);
        float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
        for (int i = 0; i < n; i++) {
            const int l = imax(0, imin(nmax, nearest_int(iscale * (x[i] - min))));
            Laux[i] = (uint8_t)l;
            const float w = weights[i];
            const float wl = w * (float)l;
            const float wl2 = wl * (float)l;
            const float wlx = wl * x[i];
            sum_l += wl;
            sum_l2 += wl2;
            sum_xl += wlx;
        }
        /* normal equations of min over (scale, offset) of sum w (scale l + offset - x)^2 */
        const float det_a = sum_w * sum_l2;
        const float det_b = sum_l * sum_l;
        const float det = det_a - det_b;
        if (det > 0.0f) {
            const float sa = sum_w * sum_xl;
            const float sb = sum_x * sum_l;
            const float ma = sum_l2 * sum_x;
            const float mb = sum_l * sum_xl;
            float this_scale = (sa - sb) / det;
            float this_min = (ma - mb) / det;
            if (this_min > 0.0f) { /* offset must stay <= 0: refit scale alone */
                this_min = 0.0f;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0.0f;
            for (int i = 0; i < n; i++) {
                const float y = this_scale * (float)Laux[i];
                const float diff = y + this_min - x[i];
                const float e = weights[i] * err_term(diff, use_mad);
                cur_error += e;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *min_out = -min;
    return scale;
}

/* 2-bit codes of 256 elements: byte 32*h + l holds elements 128h + l + 32k
 * in bits 2k..2k+1 (Q2_K and Q3_K low bits). */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int h = 0; h < QUANT_QK_K; h += 128) {
        for (int l = 0; l < 32; l++) {
            qs[h / 4 + l] = (uint8_t)(L[h + l] | L[h + l + 32] << 2 | L[h + l + 64] << 4 |
                                      L[h + l + 96] << 6);
        }
    }
}

/* ------------------------------------------------------------------ Q2_K */

void quant_dequantize_q2_K(const void *src, float *dst, int64_t n) {
    const block_q2_K *b = src;
    for (int64_t ib = 0; ib < n / QUANT_QK_K; ib++, b++, dst += QUANT_QK_K) {
        const float d = hr_f16_to_f32(b->d);
        const float dmin = hr_f16_to_f32(b->dmin);
        for (int i = 0; i < QUANT_QK_K; i++) {
            const int r = i % 128;
            const int q = (b->qs[32 * (i / 128) + r % 32] >> (2 * (r / 32))) & 3;
            const int s = b->scales[i / 16];
            const float dl = d * (float)(s & 15);
            const float ml = dmin * (float)(s >> 4);
            const float y = dl * (float)q;
            dst[i] = y - ml;
        }
    }
}

void quant_quantize_q2_K(const float *src, void *dst, int64_t n) {
    block_q2_K *b = dst;
    uint8_t L[QUANT_QK_K], Laux[16];
    float weights[16], mins[QUANT_QK_K / 16], scales[QUANT_QK_K / 16];
    const float q4scale = 15.0f; /* sub-block scales and mins are 4-bit */
    for (int64_t ib = 0; ib < n / QUANT_QK_K; ib++, b++, src += QUANT_QK_K) {
        /* pass 1: per sub-block (scale, min), absolute-error fit weighted by |x| */
        float max_scale = 0.0f, max_min = 0.0f;
        for (int j = 0; j < QUANT_QK_K / 16; j++) {
            for (int l = 0; l < 16; l++)
                weights[l] = fabsf(src[16 * j + l]);
            scales[j] = fit_scale_min(16, 3, src + 16 * j, weights, L + 16 * j, &mins[j], Laux,
                                      -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale)
                max_scale = scales[j];
            if (mins[j] > max_min)
                max_min = mins[j];
        }
        /* pass 2: 4-bit sub-block scales and mins against the largest */
        if (max_scale > 0.0f) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < QUANT_QK_K / 16; j++)
                b->scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            b->d = hr_f32_to_f16(max_scale / q4scale);
        } else {
            memset(b->scales, 0, sizeof b->scales);
            b->d = hr_f32_to_f16(0.0f);
        }
        if (max_min > 0.0f) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < QUANT_QK_K / 16; j++) {
                const int l = nearest_int(iscale * mins[j]);
                b->scales[j] = (uint8_t)(b->scales[j] | (unsigned)l << 4);
            }
            b->dmin = hr_f32_to_f16(max_min / q4scale);
        } else {
            b->dmin = hr_f32_to_f16(0.0f);
        }
        /* codes from the scales the decoder sees; a zero scale keeps pass 1's */
        for (int j = 0; j < QUANT_QK_K / 16; j++) {
            const float d = hr_f16_to_f32(b->d) * (float)(b->scales[j] & 15);
            if (d == 0.0f)
                continue;
            const float dm = hr_f16_to_f32(b->dmin) * (float)(b->scales[j] >> 4);
            for (int l = 0; l < 16; l++) {
                const int q = nearest_int((src[16 * j + l] + dm) / d);
                L[16 * j + l] = (uint8_t)imax(0, imin(3, q));
            }
        }
        pack_2bit(L, b->qs);
    }
}

/* ------------------------------------------------------------------ Q3_K */

/* 6-bit scale j (biased by 32) from Q3_K's 12 packed bytes. */
static int q3_scale(const uint8_t *scales, int j) {
    const int lo = j < 8 ? scales[j] & 15 : scales[j - 8] >> 4;
    const int hi = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    return lo | hi << 4;
}

void quant_dequantize_q3_K(const void *src, float *dst, int64_t n) {
    const block_q3_K *b = src;
    for (int64_t ib = 0; ib < n / QUANT_QK_K; ib++, b++, dst += QUANT_QK_K) {
        const float d = hr_f16_to_f32(b->d);
        for (int i = 0; i < QUANT_QK_K; i++) {
            const int r = i % 128;
            const int low = (b->qs[32 * (i / 128) + r % 32] >> (2 * (r / 32))) & 3;
            const bool high = (b->hmask[i % 32] >> (i / 32)) & 1;
            const int q = low - (high ? 0 : 4);
            const float dl = d * (float)(q3_scale(b->scales, i / 16) - 32);
            dst[i] = dl * (float)q;
        }
    }
}

void quant_quantize_q3_K(const float *src, void *dst, int64_t n) {
    block_q3_K *b = dst;
    int8_t L[QUANT_QK_K];
    float scales[QUANT_QK_K / 16];
    for (int64_t ib = 0; ib < n / QUANT_QK_K; ib++, b++, src += QUANT_QK_K) {
        /* pass 1: per sub-block symmetric scale; keep the largest-magnitude one */
        float max_scale = 0.0f, amax = 0.0f;
        for (int j = 0; j < QUANT_QK_K / 16; j++) {
            scales[j] = fit_scale_q3(16, 4, src + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        /* pass 2: 6-bit signed sub-block scales, max_scale maps to -32 */
        memset(b->scales, 0, sizeof b->scales);
        if (max_scale != 0.0f) {
            const float iscale = -32.0f / max_scale;
            for (int j = 0; j < QUANT_QK_K / 16; j++) {
                const int l = imax(-32, imin(31, nearest_int(iscale * scales[j]))) + 32;
                if (j < 8)
                    b->scales[j] = (uint8_t)(l & 15);
                else
                    b->scales[j - 8] = (uint8_t)(b->scales[j - 8] | (l & 15) << 4);
                b->scales[8 + j % 4] = (uint8_t)(b->scales[8 + j % 4] | (l >> 4) << (2 * (j / 4)));
            }
            b->d = hr_f32_to_f16(1.0f / iscale);
        } else {
            b->d = hr_f32_to_f16(0.0f);
        }
        for (int j = 0; j < QUANT_QK_K / 16; j++) {
            const float d = hr_f16_to_f32(b->d) * (float)(q3_scale(b->scales, j) - 32);
            if (d == 0.0f)
                continue;
            for (int l = 0; l < 16; l++) {
                const int q = imax(-4, imin(3, nearest_int(src[16 * j + l] / d)));
                L[16 * j + l] = (int8_t)(q + 4);
            }
        }
        /* bit 2 of code i goes to hmask[i % 32] bit i / 32, bits 0-1 to qs */
        uint8_t low[QUANT_QK_K];
        memset(b->hmask, 0, sizeof b->hmask);
        for (int i = 0; i < QUANT_QK_K; i++) {
            int q = L[i];
            if (q > 3) {
                b->hmask[i % 32] = (uint8_t)(b->hmask[i % 32] | 1u << (i / 32));
                q -= 4;
            }
            low[i] = (uint8_t)q;
        }
        pack_2bit(low, b->qs);
    }
}

/* ------------------------------------------------------------ Q4_K, Q5_K */

/* 6-bit scale and min of sub-block j from the 12 packed bytes: j < 4 in the
 * low 6 bits of bytes j and j+4; j >= 4 as nibbles of byte j+4 plus the top
 * 2 bits of bytes j-4 (scale) and j (min). */
static void k4_scale_min(const uint8_t *q, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 15) | (q[j - 4] >> 6) << 4;
        *mn = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
    }
}

static void k4_pack_scales(const uint8_t ls[8], const uint8_t lm[8], uint8_t *q) {
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            q[j] = ls[j];
            q[j + 4] = lm[j];
        } else {
            q[j + 4] = (uint8_t)((ls[j] & 15) | (lm[j] & 15) << 4);
            q[j - 4] = (uint8_t)(q[j - 4] | (ls[j] >> 4) << 6);
            q[j] = (uint8_t)(q[j] | (lm[j] >> 4) << 6);
        }
    }
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): 8 sub-blocks of 32 fitted
 * with weights rms(x) + |x|, 6-bit scales and mins, then codes L[256]. */
static void k45_quantize_superblock(const float *x, int nmax, float rmin, int nstep, uint16_t *d_out,
                                    uint16_t *dmin_out, uint8_t *scales_out, uint8_t *L) {
    uint8_t Laux[32];
    float weights[32], mins[8], scales[8];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0.0f;
        for (int l = 0; l < 32; l++) {
            const float sq = x[32 * j + l] * x[32 * j + l];
            sum_x2 += sq;
        }
        const float av_x = sqrtf(sum_x2 / 32.0f);
        for (int l = 0; l < 32; l++)
            weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = fit_scale_min(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin,
                                  0.1f, nstep, false);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        /* ggml stores the int in a uint8_t before clamping: keep the wrap */
        ls[j] = (uint8_t)nearest_int(inv_scale * scales[j]);
        lm[j] = (uint8_t)nearest_int(inv_min * mins[j]);
        ls[j] = ls[j] < 63 ? ls[j] : 63;
        lm[j] = lm[j] < 63 ? lm[j] : 63;
    }
    k4_pack_scales(ls, lm, scales_out);
    *d_out = hr_f32_to_f16(max_scale / 63.0f);
    *dmin_out = hr_f32_to_f16(max_min / 63.0f);

    for (int j = 0; j < 8; j++) {
        int sc, mn;
        k4_scale_min(scales_out, j, &sc, &mn);
        const float d = hr_f16_to_f32(*d_out) * (float)sc;
        if (d == 0.0f)
            continue;
        const float dm = hr_f16_to_f32(*dmin_out) * (float)mn;
        for (int l = 0; l < 32; l++) {
            const int q = nearest_int((x[32 * j + l] + dm) / d);
            L[32 * j + l] = (uint8_t)imax(0, imin(nmax, q));
        }
    }
}

void quant_dequantize_q4_K(const void *src, float *dst, int64_t n) {
    const block_q4_K *b = src;
    for (int64_t ib = 0; ib < n / QUANT_QK_K; ib++, b++, dst += QUANT_QK_K) {
        const float d = hr_f16_to_f32(b->d);
        const float dmin = hr_f16_to_f32(b->dmin);
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            k4_scale_min(b->scales, j, &sc, &mn);
            const float d1 = d * (float)sc;
            const float m1 = dmin * (float)mn;
            const uint8_t *q = b->qs + 32 * (j / 2);
            const int shift = 4 * (j & 1);
            for (int l = 0; l < 32; l++) {
                const float y = d1 * (float)((q[l] >> shift) & 15);
                dst[32 * j + l] = y - m1;
            }
        }
    }
}

void quant_quantize_q4_K(const float *src, void *dst, int64_t n) {
    block_q4_K *b = dst;
    uint8_t L[QUANT_QK_K];
    for (int64_t ib = 0; ib < n / QUANT_QK_K; ib++, b++, src += QUANT_QK_K) {
        k45_quantize_superblock(src, 15, -1.0f, 20, &b->d, &b->dmin, b->scales, L);
        for (int j = 0; j < QUANT_QK_K; j += 64) {
            for (int l = 0; l < 32; l++)
                b->qs[j / 2 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
        }
    }
}

void quant_dequantize_q5_K(const void *src, float *dst, int64_t n) {
    const block_q5_K *b = src;
    for (int64_t ib = 0; ib < n / QUANT_QK_K; ib++, b++, dst += QUANT_QK_K) {
        const float d = hr_f16_to_f32(b->d);
        const float dmin = hr_f16_to_f32(b->dmin);
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            k4_scale_min(b->scales, j, &sc, &mn);
            const float d1 = d * (float)sc;
            const float m1 = dmin * (float)mn;
            const uint8_t *q = b->qs + 32 * (j / 2);
            const int shift = 4 * (j & 1);
            for (int l = 0; l < 32; l++) {
                const int code = ((q[l] >> shift) & 15) + ((b->qh[l] >> j) & 1 ? 16 : 0);
                const float y = d1 * (float)code;
                dst[32 * j + l] = y - m1;
            }
        }
    }
}

void quant_quantize_q5_K(const float *src, void *dst, int64_t n) {
    block_q5_K *b = dst;
    uint8_t L[QUANT_QK_K];
    for (int64_t ib = 0; ib < n / QUANT_QK_K; ib++, b++, src += QUANT_QK_K) {
        k45_quantize_superblock(src, 31, -0.5f, 15, &b->d, &b->dmin, b->scales, L);
        /* bit 4 of the code of element i goes to qh[i % 32] bit i / 32 */
        memset(b->qh, 0, sizeof b->qh);
        for (int j = 0; j < QUANT_QK_K; j += 64) {
            for (int l = 0; l < 32; l++) {
                const int q1 = L[j + l], q2 = L[j + l + 32];
                b->qh[l] = (uint8_t)(b->qh[l] | (q1 >> 4) << (j / 32) | (q2 >> 4) << (j / 32 + 1));
                b->qs[j / 2 + l] = (uint8_t)((q1 & 15) | (q2 & 15) << 4);
            }
        }
    }
}

/* ------------------------------------------------------------------ Q6_K */

void quant_dequantize_q6_K(const void *src, float *dst, int64_t n) {
    const block_q6_K *b = src;
    for (int64_t ib = 0; ib < n / QUANT_QK_K; ib++, b++, dst += QUANT_QK_K) {
        const float d = hr_f16_to_f32(b->d);
        for (int i = 0; i < QUANT_QK_K; i++) {
            const int half = i / 128, quarter = (i % 128) / 32, l = i % 32;
            const int low = (b->ql[64 * half + 32 * (quarter & 1) + l] >> (4 * (quarter >> 1))) & 15;
            const int high = (b->qh[32 * half + l] >> (2 * quarter)) & 3;
            const float ds = d * (float)b->scales[i / 16];
            dst[i] = ds * (float)((low | high << 4) - 32);
        }
    }
}

void quant_quantize_q6_K(const float *src, void *dst, int64_t n) {
    block_q6_K *b = dst;
    int8_t L[QUANT_QK_K];
    float scales[QUANT_QK_K / 16];
    for (int64_t ib = 0; ib < n / QUANT_QK_K; ib++, b++, src += QUANT_QK_K) {
        /* pass 1: per sub-block symmetric scale; keep the largest-magnitude one */
        float max_scale = 0.0f, max_abs_scale = 0.0f;
        for (int j = 0; j < QUANT_QK_K / 16; j++) {
            scales[j] = fit_scale_sym(16, 32, src + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        if (max_abs_scale < KQ_GROUP_MAX_EPS) {
            memset(b, 0, sizeof *b);
            continue;
        }
        /* pass 2: int8 sub-block scales, max_scale maps to -128 */
        const float iscale = -128.0f / max_scale;
        b->d = hr_f32_to_f16(1.0f / iscale);
        for (int j = 0; j < QUANT_QK_K / 16; j++)
            b->scales[j] = (int8_t)imin(127, nearest_int(iscale * scales[j]));
        for (int j = 0; j < QUANT_QK_K / 16; j++) {
            const float d = hr_f16_to_f32(b->d) * (float)b->scales[j];
            if (d == 0.0f)
                continue;
            for (int l = 0; l < 16; l++) {
                const int q = imax(-32, imin(31, nearest_int(src[16 * j + l] / d)));
                L[16 * j + l] = (int8_t)(q + 32);
            }
        }
        /* element 128h + 32k + l: low nibble in ql[64h + 32(k & 1) + l] at
         * bit 4(k >> 1), high 2 bits in qh[32h + l] at bit 2k */
        for (int h = 0; h < 2; h++) {
            const int8_t *Lh = L + 128 * h;
            for (int l = 0; l < 32; l++) {
                b->ql[64 * h + l] = (uint8_t)((Lh[l] & 15) | (Lh[l + 64] & 15) << 4);
                b->ql[64 * h + 32 + l] = (uint8_t)((Lh[l + 32] & 15) | (Lh[l + 96] & 15) << 4);
                b->qh[32 * h + l] = (uint8_t)(Lh[l] >> 4 | (Lh[l + 32] >> 4) << 2 |
                                              (Lh[l + 64] >> 4) << 4 | (Lh[l + 96] >> 4) << 6);
            }
        }
    }
}

/* ------------------------------------------------------------------ Q8_K */

void quant_dequantize_q8_K(const void *src, float *dst, int64_t n) {
    const block_q8_K *b = src;
    for (int64_t ib = 0; ib < n / QUANT_QK_K; ib++, b++, dst += QUANT_QK_K) {
        for (int i = 0; i < QUANT_QK_K; i++)
            dst[i] = b->d * (float)b->qs[i];
    }
}

void quant_quantize_q8_K(const float *src, void *dst, int64_t n) {
    block_q8_K *b = dst;
    for (int64_t ib = 0; ib < n / QUANT_QK_K; ib++, b++, src += QUANT_QK_K) {
        float max = 0.0f, amax = 0.0f;
        for (int i = 0; i < QUANT_QK_K; i++) {
            if (fabsf(src[i]) > amax) {
                amax = fabsf(src[i]);
                max = src[i];
            }
        }
        if (amax == 0.0f) {
            /* ggml leaves bsums unwritten here; zero is their true value */
            memset(b, 0, sizeof *b);
            continue;
        }
        /* -127, not -128: ggml's choice, so codes stay symmetric for IQ dot products */
        const float iscale = -127.0f / max;
        for (int i = 0; i < QUANT_QK_K; i++)
            b->qs[i] = (int8_t)imin(127, nearest_int(iscale * src[i]));
        for (int j = 0; j < QUANT_QK_K / 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++)
                sum += b->qs[16 * j + l];
            b->bsums[j] = (int16_t)sum;
        }
        b->d = 1.0f / iscale;
    }
}
