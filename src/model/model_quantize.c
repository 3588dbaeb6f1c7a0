/*
 * model_quantize.c — quantize on load: the layers' matrices of a 16-bit (or
 * any) model re-stored in another weight type before anything runs
 * (hr_model_params.quantize, `--weights` on a real model).
 *
 * Only the seven matrices of each layer change (attn q/k/v/output, ffn
 * gate/up/down): the token embedding and the output head stay as the file
 * stores them, as bitsandbytes leaves them (llm_int8_skip_modules) and as
 * they matter most for quality. Each row is dequantized to f32 and
 * quantized by the reference quantizer of the type (quant/), so the result
 * equals what `headroom convert --type` writes for those tensors.
 * A K-quant needs rows of a multiple of 256; a matrix whose rows are not
 * (SmolLM2's 576) takes llama.cpp's fallback type instead (Q4_K -> Q5_0,
 * Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K and Q3_K -> Q4_0), with a warning that
 * says how many and the resulting bits a weight.
 * "int8" is LLM.int8's weight quantization (bitsandbytes'
 * int8_vectorwise_quant): per row, scale = max |w| / 127 and
 * code = rint(w / scale), stored as Q8_0 blocks that all carry the row's
 * scale (in f16), so every Q8_0 kernel runs it.
 */
#include "model/model_load.h"

#include "quant/blocks.h"
#include "quant/quant.h"
#include "util/alloc.h"
#include "util/dtype.h"
#include "util/fp16.h"
#include "util/log.h"

#include <math.h>
#include <string.h>

static bool is_layer_matrix(const model_tensor *t) {
    static const char *const suffixes[] = {".attn_q.weight",      ".attn_k.weight",
                                           ".attn_v.weight",      ".attn_output.weight",
                                           ".ffn_gate.weight",    ".ffn_up.weight",
                                           ".ffn_down.weight"};
    if (strncmp(t->name, "blk.", 4) != 0 || t->n_dims != 2)
        return false;
    size_t n = strlen(t->name);
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        size_t l = strlen(suffixes[i]);
        if (n > l && strcmp(t->name + n - l, suffixes[i]) == 0)
            return true;
    }
    return false;
}

/* LLM.int8 rows: one scale per row, Q8_0 blocks. */
static void quantize_int8_row(const float *w, int64_t K, block_q8_0 *out) {
    float amax = 0.0f;
    for (int64_t k = 0; k < K; k++)
        amax = fmaxf(amax, fabsf(w[k]));
    const float scale = amax / 127.0f;
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    const uint16_t d = hr_f32_to_f16(scale);
    for (int64_t b = 0; b < K / QUANT_QK; b++) {
        out[b].d = d;
        for (int j = 0; j < QUANT_QK; j++)
            out[b].qs[j] = (int8_t)lrintf(w[b * QUANT_QK + j] * inv);
    }
}

/* The type a matrix with rows of K takes when `to` is asked for. */
static hr_dtype type_for_rows(hr_dtype to, int64_t K) {
    if (K % hr_dtype_block_elems(to) == 0)
        return to;
    switch (to) {
    case HR_DTYPE_Q4_K: return HR_DTYPE_Q5_0;
    case HR_DTYPE_Q5_K: return HR_DTYPE_Q5_1;
    case HR_DTYPE_Q6_K: return HR_DTYPE_Q8_0;
    case HR_DTYPE_Q2_K:
    case HR_DTYPE_Q3_K: return HR_DTYPE_Q4_0;
    default: return to;
    }
}

hr_status model_quantize_matrices(hr_model *m, const char *type, hr_error *err) {
    const bool int8 = strcmp(type, "int8") == 0;
    hr_dtype to = HR_DTYPE_Q8_0;
    if (!int8 && (!hr_dtype_from_name(type, &to) || !hr_dtype_table[to].is_quant ||
                  !quant_can_quantize(to) || to == HR_DTYPE_Q8_K))
        return hr_err_set(err, HR_ERR_INVALID,
                          "--weights %s: not a type to quantize to (q8_0, q4_0, q4_1, q5_0, "
                          "q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, nf4, fp4, int8)",
                          type);
    size_t total = 0;
    int64_t max_k = 0, n_weights = 0, n_fallback = 0, n_matrices = 0, fallback_k = 0;
    for (int32_t i = 0; i < m->n_tensors; i++) {
        const model_tensor *t = &m->tensors[i];
        if (!is_layer_matrix(t))
            continue;
        const hr_dtype tt = type_for_rows(to, t->ne[0]);
        if (t->ne[0] % hr_dtype_block_elems(tt) != 0)
            return hr_err_set(err, HR_ERR_UNSUPPORTED,
                              "--weights %s: tensor '%s' has rows of %lld, not a multiple of "
                              "the %lld of a %s block",
                              type, t->name, (long long)t->ne[0],
                              (long long)hr_dtype_block_elems(tt), hr_dtype_name(tt));
        n_matrices++;
        n_weights += t->ne[0] * t->ne[1];
        if (tt != to) {
            n_fallback++;
            fallback_k = t->ne[0];
        }
        if (!quant_can_dequantize(t->dtype))
            return hr_err_set(err, HR_ERR_UNSUPPORTED, "--weights %s: tensor '%s' is %s",
                              type, t->name, hr_dtype_name(t->dtype));
        total += hr_dtype_row_bytes(tt, t->ne[0]) * (size_t)t->ne[1];
        max_k = t->ne[0] > max_k ? t->ne[0] : max_k;
    }
    if (n_fallback)
        HR_LOG_W("--weights %s: %lld of %lld matrices have rows of %lld (not a multiple of "
                 "%lld): stored as %s instead, as llama.cpp does; the layers' matrices "
                 "average %.3f bits a weight",
                 type, (long long)n_fallback, (long long)n_matrices, (long long)fallback_k,
                 (long long)hr_dtype_block_elems(to), hr_dtype_name(type_for_rows(to, fallback_k)),
                 8.0 * (double)total / (double)n_weights);
    if (total == 0)
        return HR_OK;
    uint8_t *buf = hr_alloc_pages(total);
    float *row = hr_malloc((size_t)max_k * sizeof(float));
    if (!buf || !row) {
        hr_free_pages(buf, total);
        hr_free(row);
        return hr_err_set(err, HR_ERR_NOMEM, "--weights %s: out of memory for %zu bytes", type,
                          total);
    }
    size_t at = 0;
    for (int32_t i = 0; i < m->n_tensors; i++) {
        model_tensor *t = &m->tensors[i];
        if (!is_layer_matrix(t))
            continue;
        const int64_t K = t->ne[0], N = t->ne[1];
        const hr_dtype tt = type_for_rows(to, K);
        const size_t src_rb = hr_dtype_row_bytes(t->dtype, K), dst_rb = hr_dtype_row_bytes(tt, K);
        for (int64_t r = 0; r < N; r++) {
            quant_dequantize_row(t->dtype, t->data + (size_t)r * src_rb, row, K);
            if (int8)
                quantize_int8_row(row, K, (block_q8_0 *)(void *)(buf + at + (size_t)r * dst_rb));
            else
                quant_quantize_row(tt, row, buf + at + (size_t)r * dst_rb, K);
        }
        t->dtype = tt;
        t->data = buf + at;
        t->n_bytes = dst_rb * (uint64_t)N;
        at += t->n_bytes;
    }
    hr_free(row);
    /* the old repacked weights (a bitsandbytes file) are read no more */
    hr_free_pages(m->converted_data, m->converted_bytes);
    m->converted_data = buf;
    m->converted_bytes = total;
    HR_LOG_I("quantized the layers' matrices to %s on load (%.1f MiB)", type,
             (double)total / (1 << 20));
    return HR_OK;
}
