/*
 * test_packed.c — the GPU's packed weight layout, on the host: GGUF blocks
 * taken apart into planes (backend/packed.c) put back to the same values
 * bit for bit, the planes take the file's bytes, and the runs a fused
 * weight is stored in (backend/sizes.c).
 */
#include "backend/packed.h"
#include "backend/sizes.h"
#include "quant/quant.h"
#include "util/dtype.h"
#include "test.h"

#include <stdint.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float rand_float(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

static void check_type(hr_dtype dt, int64_t N, int64_t K) {
    const packed_type t = packed_type_of(dt);
    CHECK_MSG(t != PACKED_W16, "%s has no packed type", hr_dtype_name(dt));
    const size_t row_bytes = hr_dtype_row_bytes(dt, K);
    uint8_t *blocks = malloc((size_t)N * row_bytes);
    float *x = malloc((size_t)K * sizeof *x), *want = malloc((size_t)K * sizeof *want),
          *got = malloc((size_t)K * sizeof *got);
    for (int64_t r = 0; r < N; r++) {
        const float scale = r % 3 == 0 ? 1e-3f : r % 3 == 1 ? 1.0f : 40.0f;
        for (int64_t k = 0; k < K; k++)
            x[k] = rand_float() * scale;
        quant_quantize_row(dt, x, blocks + (size_t)r * row_bytes, K);
    }
    uint64_t plane_sum = 0;
    packed_matrix m = {.type = t, .N = N, .K = K};
    uint8_t *planes[PACKED_PLANES];
    for (int p = 0; p < PACKED_PLANES; p++) {
        m.row_bytes[p] = packed_row_bytes(t, p, K);
        plane_sum += (uint64_t)(m.row_bytes[p] * N);
        planes[p] = m.row_bytes[p] ? malloc((size_t)(m.row_bytes[p] * N)) : NULL;
        m.plane[p] = planes[p];
    }
    /* the planes hold the file's bytes exactly; alignment adds < 256 a plane */
    CHECK_EQ_I64(plane_sum, (uint64_t)N * row_bytes);
    const uint64_t dev = packed_bytes(t, N, K);
    CHECK_MSG(dev >= plane_sum && dev < plane_sum + PACKED_PLANES * PACKED_ALIGN,
              "%s: %llu device bytes for %llu", hr_dtype_name(dt), (unsigned long long)dev,
              (unsigned long long)plane_sum);
    /* split in two calls: rows land at their own offsets */
    const int64_t half = N / 2;
    packed_split_rows(t, blocks, half, K, planes);
    uint8_t *rest[PACKED_PLANES];
    for (int p = 0; p < PACKED_PLANES; p++)
        rest[p] = planes[p] ? planes[p] + half * m.row_bytes[p] : NULL;
    packed_split_rows(t, blocks + (size_t)half * row_bytes, N - half, K, rest);
    int bad_rows = 0;
    for (int64_t r = 0; r < N; r++) {
        quant_dequantize_row(dt, blocks + (size_t)r * row_bytes, want, K);
        packed_dequantize_row(&m, r, got);
        bad_rows += memcmp(want, got, (size_t)K * sizeof *got) != 0;
    }
    CHECK_MSG(bad_rows == 0, "%s (%lld x %lld): %d rows differ from the blocks'",
              hr_dtype_name(dt), (long long)N, (long long)K, bad_rows);
    for (int p = 0; p < PACKED_PLANES; p++)
        free(planes[p]);
    free(blocks);
    free(x);
    free(want);
    free(got);
}

static model_tensor tensor(hr_dtype dt, int64_t K, int64_t N) {
    return (model_tensor){.name = "w", .dtype = dt, .n_dims = 2, .ne = {K, N}};
}

static void check_runs(void) {
    be_params p = {0};
    sizes_run runs[3];
    /* a Q4_K_M layer: q and k Q4_K, v Q6_K */
    model_tensor q = tensor(HR_DTYPE_Q4_K, 4096, 4096), k = q, v = tensor(HR_DTYPE_Q6_K, 4096, 4096);
    const model_tensor *qkv[3] = {&q, &k, &v};
    int n = sizes_cuda_runs(&p, qkv, 3, runs);
    CHECK_EQ_I64(n, 2);
    CHECK(runs[0].type == PACKED_Q4_K && runs[0].n_parts == 2 && runs[0].rows == 8192);
    CHECK(runs[1].type == PACKED_Q6_K && runs[1].first == 2 && runs[1].rows == 4096);
    const uint64_t bytes = sizes_weight(SIZES_CUDA, &p, qkv, NULL, 3);
    CHECK_EQ_I64(bytes, packed_bytes(PACKED_Q4_K, 8192, 4096) + packed_bytes(PACKED_Q6_K, 4096, 4096));
    /* --expand, a 16-bit part, a type without kernels: one 16-bit matrix */
    p.expand_weights = true;
    CHECK_EQ_I64(sizes_cuda_runs(&p, qkv, 3, runs), 0);
    CHECK_EQ_I64(sizes_weight(SIZES_CUDA, &p, qkv, NULL, 3), 3ull * 4096 * 4096 * 2);
    p.expand_weights = false;
    model_tensor f = tensor(HR_DTYPE_F16, 4096, 4096), q3 = tensor(HR_DTYPE_Q3_K, 4096, 4096);
    const model_tensor *mixed[2] = {&q, &f}, *q3k[1] = {&q3};
    CHECK_EQ_I64(sizes_cuda_runs(&p, mixed, 2, runs), 0);
    CHECK_EQ_I64(sizes_cuda_runs(&p, q3k, 1, runs), 0);
}

int main(void) {
    static const hr_dtype types[] = {HR_DTYPE_Q8_0, HR_DTYPE_Q4_0, HR_DTYPE_Q4_1,
                                     HR_DTYPE_Q5_0, HR_DTYPE_Q5_1, HR_DTYPE_Q4_K,
                                     HR_DTYPE_Q5_K, HR_DTYPE_Q6_K};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const int64_t block = packed_block(packed_type_of(types[i]));
        check_type(types[i], 1, block);
        check_type(types[i], 7, 3 * block);
        check_type(types[i], 33, 11008 / block * block);
        CHECK(strcmp(packed_type_name(packed_type_of(types[i])), hr_dtype_name(types[i])) == 0);
    }
    CHECK(packed_type_of(HR_DTYPE_F16) == PACKED_W16);
    CHECK(packed_type_of(HR_DTYPE_BF16) == PACKED_W16);
    CHECK(packed_type_of(HR_DTYPE_Q2_K) == PACKED_W16);
    check_runs();
    TEST_END();
}
