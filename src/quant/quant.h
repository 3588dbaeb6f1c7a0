/*
 * quant.h — reference (scalar) conversion between float and every stored
 * weight type: the oracle that SIMD and CUDA kernels are tested against.
 *
 * Block layouts are ggml's, byte for byte (see blocks.h), so GGUF files are
 * read as they are and files headroom writes load in llama.cpp.
 */
#ifndef HR_QUANT_QUANT_H
#define HR_QUANT_QUANT_H

#include "headroom.h"

#include <stdbool.h>
#include <stdint.h>

/* n elements (a multiple of the block size) from src into dst. */
bool quant_can_dequantize(hr_dtype t);
void quant_dequantize_row(hr_dtype t, const void *src, float *dst, int64_t n);

/* Float -> stored type, round-to-nearest as ggml's reference quantizers do. */
bool quant_can_quantize(hr_dtype t);
void quant_quantize_row(hr_dtype t, const float *src, void *dst, int64_t n);

#endif
