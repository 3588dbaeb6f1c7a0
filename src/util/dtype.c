/* dtype.c — the dtype table (sizes follow ggml's block layouts exactly). */
#include "util/dtype.h"

#include <strings.h>

const hr_dtype_info hr_dtype_table[HR_DTYPE_COUNT] = {
    [HR_DTYPE_F32] = {.name = "f32", .block_elems = 1, .block_bytes = 4, .ggml_type = 0},
    [HR_DTYPE_F16] = {.name = "f16", .block_elems = 1, .block_bytes = 2, .ggml_type = 1},
    [HR_DTYPE_BF16] = {.name = "bf16", .block_elems = 1, .block_bytes = 2, .ggml_type = 30},
    /* f16 scale + 32 int8 */
    [HR_DTYPE_Q8_0] = {.name = "q8_0", .block_elems = 32, .block_bytes = 34, .ggml_type = 8,
                       .is_quant = true},
    /* f16 scale + 32 nibbles */
    [HR_DTYPE_Q4_0] = {.name = "q4_0", .block_elems = 32, .block_bytes = 18, .ggml_type = 2,
                       .is_quant = true},
    /* f16 scale, f16 min + 32 nibbles */
    [HR_DTYPE_Q4_1] = {.name = "q4_1", .block_elems = 32, .block_bytes = 20, .ggml_type = 3,
                       .is_quant = true},
    /* f16 scale, 32 high bits, 32 nibbles */
    [HR_DTYPE_Q5_0] = {.name = "q5_0", .block_elems = 32, .block_bytes = 22, .ggml_type = 6,
                       .is_quant = true},
    [HR_DTYPE_Q5_1] = {.name = "q5_1", .block_elems = 32, .block_bytes = 24, .ggml_type = 7,
                       .is_quant = true},
    /* super-blocks of 256: see src/quant/blocks.h for the layouts */
    [HR_DTYPE_Q2_K] = {.name = "q2_k", .block_elems = 256, .block_bytes = 84, .ggml_type = 10,
                       .is_quant = true},
    [HR_DTYPE_Q3_K] = {.name = "q3_k", .block_elems = 256, .block_bytes = 110, .ggml_type = 11,
                       .is_quant = true},
    [HR_DTYPE_Q4_K] = {.name = "q4_k", .block_elems = 256, .block_bytes = 144, .ggml_type = 12,
                       .is_quant = true},
    [HR_DTYPE_Q5_K] = {.name = "q5_k", .block_elems = 256, .block_bytes = 176, .ggml_type = 13,
                       .is_quant = true},
    [HR_DTYPE_Q6_K] = {.name = "q6_k", .block_elems = 256, .block_bytes = 210, .ggml_type = 14,
                       .is_quant = true},
    [HR_DTYPE_Q8_K] = {.name = "q8_k", .block_elems = 256, .block_bytes = 292, .ggml_type = 15,
                       .is_quant = true},
    [HR_DTYPE_I8] = {.name = "i8", .block_elems = 1, .block_bytes = 1, .ggml_type = 24},
    [HR_DTYPE_U8] = {.name = "u8", .block_elems = 1, .block_bytes = 1, .ggml_type = -1},
    [HR_DTYPE_I16] = {.name = "i16", .block_elems = 1, .block_bytes = 2, .ggml_type = 25},
    [HR_DTYPE_I32] = {.name = "i32", .block_elems = 1, .block_bytes = 4, .ggml_type = 26},
    [HR_DTYPE_F64] = {.name = "f64", .block_elems = 1, .block_bytes = 8, .ggml_type = 28},
    /* bitsandbytes' codebook types: f16 absmax + 64 nibbles (src/quant/blocks.h) */
    [HR_DTYPE_NF4] = {.name = "nf4", .block_elems = 64, .block_bytes = 34, .ggml_type = -1,
                      .is_quant = true},
    [HR_DTYPE_FP4] = {.name = "fp4", .block_elems = 64, .block_bytes = 34, .ggml_type = -1,
                      .is_quant = true},
};

const char *hr_dtype_name(hr_dtype t) {
    if ((unsigned)t >= HR_DTYPE_COUNT)
        return "invalid";
    return hr_dtype_table[t].name;
}

bool hr_dtype_from_name(const char *name, hr_dtype *out) {
    for (int t = 0; t < HR_DTYPE_COUNT; t++) {
        if (strcasecmp(name, hr_dtype_table[t].name) == 0) {
            *out = (hr_dtype)t;
            return true;
        }
    }
    return false;
}

bool hr_dtype_from_ggml(uint32_t ggml_type, hr_dtype *out) {
    for (int t = 0; t < HR_DTYPE_COUNT; t++) {
        if (hr_dtype_table[t].ggml_type >= 0 &&
            (uint32_t)hr_dtype_table[t].ggml_type == ggml_type) {
            *out = (hr_dtype)t;
            return true;
        }
    }
    return false;
}

int64_t hr_dtype_block_elems(hr_dtype t) {
    return (unsigned)t < HR_DTYPE_COUNT ? hr_dtype_table[t].block_elems : 0;
}

bool hr_dtype_bytes_checked(hr_dtype t, int64_t n_elem, uint64_t *out) {
    if ((unsigned)t >= HR_DTYPE_COUNT || n_elem < 0)
        return false;
    const hr_dtype_info *d = &hr_dtype_table[t];
    if (n_elem % d->block_elems != 0)
        return false;
    uint64_t n_block = (uint64_t)(n_elem / d->block_elems);
    if (n_block > UINT64_MAX / (uint64_t)d->block_bytes)
        return false;
    *out = n_block * (uint64_t)d->block_bytes;
    return true;
}

size_t hr_dtype_row_bytes(hr_dtype t, int64_t n_elem) {
    uint64_t b = 0;
    return hr_dtype_bytes_checked(t, n_elem, &b) ? (size_t)b : 0;
}
