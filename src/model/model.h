/*
 * model.h — the one internal description of a model, whatever the file.
 *
 * A Hugging Face folder (config.json + safetensors) and a GGUF file both
 * become: hyper-parameters (hr_model_info), a table of tensors under
 * canonical GGUF-style names ("blk.3.attn_q.weight"), each with dtype, shape
 * (ne[0] innermost), bytes and a pointer into a memory mapping, and per-layer
 * pointers into that table for the forward pass. Shapes are validated against
 * the hyper-parameters at load, so the forward pass never checks them again.
 *
 * RoPE layout differs by source: HF checkpoints rotate the two halves of each
 * head (rotate_half, "neox"), while llama.cpp's converter permutes the rows
 * of Q and K in GGUF llama files so that adjacent pairs rotate ("norm").
 * The description records which one the weights expect.
 */
#ifndef HR_MODEL_MODEL_H
#define HR_MODEL_MODEL_H

#include "format/gguf.h"
#include "format/safetensors.h"
#include "headroom.h"
#include "model/tensor.h" /* model_tensor, rope_style */

typedef struct {
    const model_tensor *attn_norm;               /* (D) */
    const model_tensor *wq, *wk, *wv;            /* (D -> H*Dh), (D -> Hkv*Dh) x2 */
    const model_tensor *bq, *bk, *bv;            /* optional biases (qwen2) */
    const model_tensor *wo;                      /* (H*Dh -> D) */
    const model_tensor *ffn_norm;                /* (D) */
    const model_tensor *w_gate, *w_up, *w_down;  /* (D -> F), (D -> F), (F -> D) */
} model_layer;

struct hr_model {
    hr_model_info info;
    rope_style rope;
    float *rope_inv_freq;            /* (Dh/2) owned: theta^(-2i/Dh) after linear/llama3
                                        scaling or GGUF rope_freqs factors */
    int32_t n_tensors;
    model_tensor *tensors;
    const model_tensor *tok_embd;    /* (D, V) */
    const model_tensor *output_norm; /* (D) */
    const model_tensor *output;      /* (D, V); == tok_embd when tied */
    model_layer *layers;             /* n_layer */
    gguf_file *gguf;                 /* owned source, one of the two */
    st_set *st;
    hr_tokenizer *tok;
    char *chat_template;
    char *path;
    uint8_t *synthetic_data;         /* owned weight bytes of a synthetic model */
    size_t synthetic_bytes;          /* its size (hr_alloc_pages) */
    uint8_t *converted_data;         /* owned: weights repacked or quantized at load
                                        (bitsandbytes, --weights), hr_alloc_pages */
    size_t converted_bytes;
};

const model_tensor *model_find_tensor(const hr_model *m, const char *name);

/* Builds per-layer pointers and checks every tensor's shape and dtype against
 * info; fills n_params and weight_bytes. */
hr_status model_bind_tensors(hr_model *m, hr_error *err);


#endif
