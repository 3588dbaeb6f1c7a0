/*
 * tensor.h — what the model description and the backends share: one weight
 * tensor as a file holds it (model_tensor) and the RoPE pair layout the
 * weights expect (rope_style). A leaf: it includes only the public header,
 * so the backends see a tensor without the loaders behind model.h.
 */
#ifndef HR_MODEL_TENSOR_H
#define HR_MODEL_TENSOR_H

#include "headroom.h"

#include <stdint.h>

typedef enum {
    ROPE_STYLE_NEOX = 0, /* pairs (i, i + head_dim/2): HF layout, GGUF qwen2 */
    ROPE_STYLE_NORM = 1, /* pairs (2i, 2i+1): GGUF llama layout */
} rope_style;

typedef struct {
    char *name;           /* canonical, owned */
    const char *src_name; /* name in the file (borrowed from the parser) */
    hr_dtype dtype;
    int32_t n_dims;
    int64_t ne[4];        /* ne[0] innermost; unused dims 1 */
    uint64_t n_bytes;
    const uint8_t *data;  /* into a mapping; NULL for synthetic models until filled */
} model_tensor;

#endif
