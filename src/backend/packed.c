/* packed.c — the planes of a packed matrix (packed.h): their sizes, the
 * split of GGUF blocks into them, and the reference that puts blocks back. */
#include "backend/packed.h"

#include "quant/blocks.h"
#include "quant/quant.h"

#include <stddef.h>
#include <string.h>

/* Where each field of a block lies: offset and bytes within the block, per
 * plane (bytes 0: no such plane). The block's own layout, quant/blocks.h. */
typedef struct {
    hr_dtype dtype;
    int block;        /* elements */
    int block_bytes;  /* bytes of a GGUF block */
    int off[PACKED_PLANES], bytes[PACKED_PLANES];
} packed_fields;

#define OFF(b, f) ((int)offsetof(b, f))

static const packed_fields fields[PACKED_COUNT] = {
    [PACKED_Q8_0] = {HR_DTYPE_Q8_0, QUANT_QK, sizeof(block_q8_0),
                     {OFF(block_q8_0, qs), 0, OFF(block_q8_0, d), 0}, {32, 0, 2, 0}},
    [PACKED_Q4_0] = {HR_DTYPE_Q4_0, QUANT_QK, sizeof(block_q4_0),
                     {OFF(block_q4_0, qs), 0, OFF(block_q4_0, d), 0}, {16, 0, 2, 0}},
    [PACKED_Q4_1] = {HR_DTYPE_Q4_1, QUANT_QK, sizeof(block_q4_1),
                     {OFF(block_q4_1, qs), 0, OFF(block_q4_1, d), 0}, {16, 0, 4, 0}},
    [PACKED_Q5_0] = {HR_DTYPE_Q5_0, QUANT_QK, sizeof(block_q5_0),
                     {OFF(block_q5_0, qs), OFF(block_q5_0, qh), OFF(block_q5_0, d), 0},
                     {16, 4, 2, 0}},
    [PACKED_Q5_1] = {HR_DTYPE_Q5_1, QUANT_QK, sizeof(block_q5_1),
                     {OFF(block_q5_1, qs), OFF(block_q5_1, qh), OFF(block_q5_1, d), 0},
                     {16, 4, 4, 0}},
    [PACKED_Q4_K] = {HR_DTYPE_Q4_K, QUANT_QK_K, sizeof(block_q4_K),
                     {OFF(block_q4_K, qs), 0, OFF(block_q4_K, d), 0}, {128, 0, 16, 0}},
    [PACKED_Q5_K] = {HR_DTYPE_Q5_K, QUANT_QK_K, sizeof(block_q5_K),
                     {OFF(block_q5_K, qs), OFF(block_q5_K, qh), OFF(block_q5_K, d), 0},
                     {128, 32, 16, 0}},
    [PACKED_Q6_K] = {HR_DTYPE_Q6_K, QUANT_QK_K, sizeof(block_q6_K),
                     {OFF(block_q6_K, ql), OFF(block_q6_K, qh), OFF(block_q6_K, scales),
                      OFF(block_q6_K, d)},
                     {128, 64, 16, 2}},
    [PACKED_NF4] = {HR_DTYPE_NF4, QUANT_QK_NF4, sizeof(block_nf4),
                    {OFF(block_nf4, qs), 0, OFF(block_nf4, d), 0}, {32, 0, 2, 0}},
    [PACKED_FP4] = {HR_DTYPE_FP4, QUANT_QK_NF4, sizeof(block_nf4),
                    {OFF(block_nf4, qs), 0, OFF(block_nf4, d), 0}, {32, 0, 2, 0}},
};

/* Q4_1 and Q5_1 keep d then m (4 bytes from d); Q4_K and Q5_K keep d, dmin
 * and the 12 scale bytes (16 bytes from d): adjacent in the block */
_Static_assert(offsetof(block_q4_1, m) == offsetof(block_q4_1, d) + 2, "q4_1: d, m");
_Static_assert(offsetof(block_q5_1, m) == offsetof(block_q5_1, d) + 2, "q5_1: d, m");
_Static_assert(offsetof(block_q4_K, scales) == offsetof(block_q4_K, d) + 4, "q4_K: d..scales");
_Static_assert(offsetof(block_q5_K, scales) == offsetof(block_q5_K, d) + 4, "q5_K: d..scales");

static const char *const names[PACKED_COUNT] = {
    [PACKED_W16] = "16-bit", [PACKED_Q8_0] = "q8_0", [PACKED_Q4_0] = "q4_0",
    [PACKED_Q4_1] = "q4_1",  [PACKED_Q5_0] = "q5_0", [PACKED_Q5_1] = "q5_1",
    [PACKED_Q4_K] = "q4_k",  [PACKED_Q5_K] = "q5_k", [PACKED_Q6_K] = "q6_k",
    [PACKED_NF4] = "nf4",    [PACKED_FP4] = "fp4",
};

const char *packed_type_name(packed_type t) {
    return t >= 0 && t < PACKED_COUNT ? names[t] : "?";
}

packed_type packed_type_of(hr_dtype dtype) {
    for (int t = PACKED_Q8_0; t < PACKED_COUNT; t++)
        if (fields[t].dtype == dtype)
            return (packed_type)t;
    return PACKED_W16;
}

int packed_block(packed_type t) { return t > PACKED_W16 && t < PACKED_COUNT ? fields[t].block : 1; }

int64_t packed_row_bytes(packed_type t, int plane, int64_t K) {
    if (t <= PACKED_W16 || t >= PACKED_COUNT || plane < 0 || plane >= PACKED_PLANES)
        return 0;
    return K / fields[t].block * fields[t].bytes[plane];
}

static uint64_t align_up(uint64_t n) {
    return (n + PACKED_ALIGN - 1) / PACKED_ALIGN * PACKED_ALIGN;
}

uint64_t packed_bytes(packed_type t, int64_t N, int64_t K) {
    uint64_t total = 0;
    for (int i = 0; i < PACKED_PLANES; i++)
        total += align_up((uint64_t)packed_row_bytes(t, i, K) * (uint64_t)N);
    return total;
}

void packed_split_rows(packed_type t, const void *blocks, int64_t n_rows, int64_t K,
                       uint8_t *const dst[PACKED_PLANES]) {
    const packed_fields *f = &fields[t];
    const int64_t per_row = K / f->block;
    const uint8_t *src = blocks;
    for (int64_t b = 0; b < n_rows * per_row; b++, src += f->block_bytes)
        for (int i = 0; i < PACKED_PLANES; i++)
            if (f->bytes[i])
                memcpy(dst[i] + b * f->bytes[i], src + f->off[i], (size_t)f->bytes[i]);
}

void packed_dequantize_row(const packed_matrix *m, int64_t r, float *out) {
    const packed_fields *f = &fields[m->type];
    uint8_t block[sizeof(block_q5_K) > sizeof(block_q6_K) ? sizeof(block_q5_K)
                                                           : sizeof(block_q6_K)];
    const int64_t per_row = m->K / f->block;
    for (int64_t b = 0; b < per_row; b++) {
        memset(block, 0, sizeof block);
        for (int i = 0; i < PACKED_PLANES; i++)
            if (f->bytes[i])
                memcpy(block + f->off[i], m->plane[i] + r * m->row_bytes[i] + b * f->bytes[i],
                       (size_t)f->bytes[i]);
        quant_dequantize_row(f->dtype, block, out + b * f->block, f->block);
    }
}
