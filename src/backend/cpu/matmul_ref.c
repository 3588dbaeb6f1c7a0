/*
 * matmul_ref.c — the portable level: plain C, no SIMD intrinsics.
 *
 * It is what runs on CPUs without AVX2 (and on other architectures), and the
 * simplest statement of the arithmetic the SIMD levels must reproduce. Only
 * one kernel is written here, the F32 decode kernel; matmul.c's generic paths
 * build the rest on it: other dtypes are converted to f32 with the reference
 * dequantizers (quant_dequantize_row), FAST mode runs on x^ (the activations
 * rounded to 8 bits), and there is no separate prefill kernel.
 *
 * The dot product keeps 8 partial sums (k mod 8) that are added pairwise at
 * the end: a fixed order, so results are reproducible, with the ILP (and the
 * compiler's SSE2 vectorisation) that a single running sum would forbid.
 */
#include "backend/cpu/matmul.h"

#include <string.h>

static float dot_f32(const float *w, const float *x, int64_t K) {
    float acc[8] = {0};
    int64_t k = 0;
    for (; k + 8 <= K; k += 8)
        for (int i = 0; i < 8; i++)
            acc[i] += w[k + i] * x[k + i];
    for (; k < K; k++)
        acc[k % 8] += w[k] * x[k];
    float s0 = (acc[0] + acc[4]) + (acc[1] + acc[5]);
    float s1 = (acc[2] + acc[6]) + (acc[3] + acc[7]);
    return s0 + s1;
}

static void gemv_f32(const cpu_mm_args *a, const cpu_mat *m, int64_t r0, int64_t r1, float *y,
                     int64_t ldy, void *ts) {
    (void)ts;
    const float *w = m->data;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t b = 0; b < a->B; b++)
            y[b * ldy + (r - r0)] = dot_f32(w + r * a->K, a->x + b * a->ldx, a->K);
}

static size_t tscratch_bytes(int64_t max_K) {
    (void)max_K;
    return 0;
}

const cpu_mm_isa cpu_mm_isa_ref = {
    .name = "ref",
    .gemv_exact = {[HR_DTYPE_F32] = gemv_f32},
    .quantize = cpu_mm_quantize_ref,
    .round_f16 = cpu_mm_round_f16_ref,
    .round_bf16 = cpu_mm_round_bf16_ref,
    .gemm_min_B_exact = INT64_MAX,
    .gemm_min_B_xh = INT64_MAX,
    .gemm_min_B_fast = INT64_MAX,
    .gemm_min_B_bf16 = INT64_MAX,
    .gemm_max_rows = 1,
    .gemm_row_align = 1,
    .tscratch_bytes = tscratch_bytes,
};
