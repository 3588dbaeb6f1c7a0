/*
 * packed.h — quantized weights as the GPU stores them: the blocks of a GGUF
 * type taken apart into planes, so every kernel reads aligned 16-byte words.
 *
 * A GGUF block mixes scales and codes in 18, 20, 22, 34 or 210 bytes, which
 * no 16-byte load can follow along a row. At upload (packed.c, run by the CUDA backend) each matrix
 * (N rows of K elements) becomes up to four planes, each N rows of a fixed
 * number of bytes, the rows of one plane contiguous:
 *
 *   type  | q: codes              | h: high bits          | s: scales          | d
 *   Q8_0  | K bytes (int8)        |                       | K/32 f16 d         |
 *   Q4_0  | K/2 (the block's qs)  |                       | K/32 f16 d         |
 *   Q4_1  | K/2                   |                       | K/32 x (f16 d, f16 m) |
 *   Q5_0  | K/2                   | K/32 u32 (the qh)     | K/32 f16 d         |
 *   Q5_1  | K/2                   | K/32 u32              | K/32 x (f16 d, f16 m) |
 *   Q4_K  | K/2 (qs)              |                       | K/256 x 16 bytes: f16 d, f16 dmin, scales[12] |
 *   Q5_K  | K/2 (qs)              | K/256 x 32 (qh)       | K/256 x 16 bytes, as Q4_K |
 *   Q6_K  | K/2 (ql)              | K/4 (qh)              | K/256 x 16 int8 scales | K/256 f16 d
 *   NF4   | K/2 (the block's qs)  |                       | K/64 f16 absmax    |
 *   FP4   | K/2                   |                       | K/64 f16 absmax    |
 *
 * Within a block nothing moves: the bytes of each field are the block's own,
 * in its order (quant/blocks.h gives the decoding of element i), so a plane
 * row is the concatenation of that field over the row's blocks. The bytes
 * are those of the file, less nothing and plus nothing: a packed matrix
 * takes exactly hr_dtype_row_bytes(type, K) * N bytes (rounded up to 256 a
 * plane).
 */
#ifndef HR_BACKEND_PACKED_H
#define HR_BACKEND_PACKED_H

#include "headroom.h" /* hr_dtype */

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PACKED_W16 = 0, /* not packed: the 16-bit compute type */
    PACKED_Q8_0,
    PACKED_Q4_0,
    PACKED_Q4_1,
    PACKED_Q5_0,
    PACKED_Q5_1,
    PACKED_Q4_K,
    PACKED_Q5_K,
    PACKED_Q6_K,
    PACKED_NF4, /* bitsandbytes' codebooks (quant/blocks.h's block_nf4) */
    PACKED_FP4,
    PACKED_COUNT
} packed_type;

#define PACKED_PLANES 4
#define PACKED_ALIGN 256 /* each plane starts at a multiple of this */

/* A packed matrix on the device. plane[i] is NULL where the type has no
 * such plane; row r of plane i starts at plane[i] + r * row_bytes[i]. */
typedef struct {
    packed_type type;
    int64_t N, K;
    const uint8_t *plane[PACKED_PLANES]; /* q, h, s, d */
    int64_t row_bytes[PACKED_PLANES];
} packed_matrix;

enum { PACKED_PLANE_Q = 0, PACKED_PLANE_H = 1, PACKED_PLANE_S = 2, PACKED_PLANE_D = 3 };

/* elements a block of the type holds (32, 64 for NF4/FP4, 256 for K-quants) */
int packed_block(packed_type t);
/* bytes of row r of plane i for K elements (0: no such plane) */
int64_t packed_row_bytes(packed_type t, int plane, int64_t K);
/* device bytes of a packed (N, K) matrix, planes aligned */
uint64_t packed_bytes(packed_type t, int64_t N, int64_t K);
const char *packed_type_name(packed_type t);

/* The packed type that stores dtype on the GPU; PACKED_W16 for a type that
 * is not packed (F32, F16, BF16 and the types without a GPU kernel). */
packed_type packed_type_of(hr_dtype dtype);

/* Host side of the upload: rows of GGUF blocks (n_rows rows of K elements
 * of the type's dtype, contiguous) taken apart into plane rows: row r of
 * plane i goes to dst[i] + r * packed_row_bytes(t, i, K). */
void packed_split_rows(packed_type t, const void *blocks, int64_t n_rows, int64_t K,
                       uint8_t *const dst[PACKED_PLANES]);

/* The reference: element values of row r of a packed matrix whose planes
 * are in host memory, equal (bit for bit) to quant_dequantize_row of the
 * blocks the planes came from. The oracle of the GPU kernels. */
void packed_dequantize_row(const packed_matrix *m, int64_t r, float *out);

#ifdef __cplusplus
}
#endif

#endif
