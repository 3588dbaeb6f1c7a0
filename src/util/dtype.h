/*
 * dtype.h — one designated-initializer table describing every hr_dtype.
 *
 * Block types store block_elems elements in block_bytes bytes; plain types
 * have block_elems 1. ggml_type is the GGUF on-disk id (-1: no GGUF id).
 */
#ifndef HR_UTIL_DTYPE_H
#define HR_UTIL_DTYPE_H

#include "headroom.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    const char *name;
    int32_t block_elems;
    int32_t block_bytes;
    int32_t ggml_type;
    bool is_quant;
} hr_dtype_info;

extern const hr_dtype_info hr_dtype_table[HR_DTYPE_COUNT];

/* GGUF type id -> hr_dtype; false for ids headroom does not know. */
bool hr_dtype_from_ggml(uint32_t ggml_type, hr_dtype *out);

/* Bytes for n_elem elements, or false when n_elem is not a multiple of the
 * block size or the result overflows. */
bool hr_dtype_bytes_checked(hr_dtype t, int64_t n_elem, uint64_t *out);

#endif
