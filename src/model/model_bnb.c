/*
 * model_bnb.c — Hugging Face checkpoints saved by bitsandbytes (through
 * transformers' BitsAndBytesConfig), read as they are and repacked at load.
 *
 * 4-bit (load_in_4bit): each quantized linear layer's "<w>" is a uint8 tensor
 * (any storage dtype: only its bytes count) of the flattened (N, K) matrix's
 * 4-bit codes, two a byte, element 2i in the high nibble of byte i, in blocks
 * of `blocksize` along the flattened matrix, with companions
 *   <w>.absmax        one scale a block: f32, or uint8 codes when nested
 *   <w>.quant_map     the 16 f32 table values (NF4's or FP4's)
 *   <w>.nested_absmax, <w>.nested_quant_map (256 f32): the double
 *                     quantization of absmax, blockwise by nested_blocksize:
 *                     absmax[i] = nested_quant_map[code_i] *
 *                                 nested_absmax[i / nested_blocksize]
 *                                 + nested_offset               (in f32)
 *   <w>.quant_state.bitsandbytes__nf4 (or __fp4): UTF-8 JSON bytes with
 *                     quant_type, blocksize, dtype, shape [N, K],
 *                     nested_blocksize, nested_dtype, nested_offset.
 * (bitsandbytes 0.50: QuantState.as_dict/from_dict, functional.dequantize_4bit.)
 * Each is repacked into headroom's NF4/FP4 blocks of 64 (quant/blocks.h):
 * the codes as they are, the absmax rounded once to f16, so the weights are
 * bitsandbytes' own within one f16 rounding of each absmax.
 *
 * 8-bit (load_in_8bit, LLM.int8): "<w>" int8 (N, K) codes and "<layer>.SCB"
 * f32 (N) row maxima, w = code * SCB / 127 (bitsandbytes'
 * int8_vectorwise_dequant). Repacked into Q8_0 blocks with d = f16(SCB/127)
 * for every block of a row: the codes unchanged, 8.5 bits a weight (6% more
 * than the file) so that every Q8_0 kernel (CPU and GPU) runs it as it is.
 *
 * Anything that does not fit (a missing companion, a shape that disagrees
 * with the quant_state, a table that is not bitsandbytes', blocks that
 * straddle rows) is an error naming the tensor; nothing is guessed.
 */
#include "model/model_load.h"

#include "quant/blocks.h"
#include "util/alloc.h"
#include "util/dtype.h"
#include "util/fp16.h"
#include "util/json.h"
#include "util/log.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef enum { BNB_NONE = 0, BNB_4BIT, BNB_8BIT } bnb_kind;

/* One quantized tensor's companions and parameters, checked. */
typedef struct {
    hr_dtype type; /* NF4, FP4 or Q8_0 */
    int64_t N, K, blocksize, nested_blocksize;
    float nested_offset;
    const st_tensor *codes, *absmax, *nested_absmax, *nested_map, *scb;
} bnb_tensor;

static const st_tensor *companion(const st_set *st, const char *base, const char *suffix) {
    char name[512];
    int n = snprintf(name, sizeof name, "%s%s", base, suffix);
    return n > 0 && (size_t)n < sizeof name ? st_find(st, name) : NULL;
}

static hr_status need_f32(const char *path, const char *w, const char *what,
                          const st_tensor *t, int64_t count, hr_error *err) {
    if (!t)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: bitsandbytes tensor '%s' has no '%s%s'",
                          path, w, w, what);
    if (t->dtype != HR_DTYPE_F32 || t->n_bytes != (uint64_t)count * 4)
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: '%s%s' should hold %lld f32 values (it is %s, %llu bytes)", path,
                          w, what, (long long)count, hr_dtype_name(t->dtype),
                          (unsigned long long)t->n_bytes);
    return HR_OK;
}

static float rd_f32(const uint8_t *p, int64_t i) {
    float v;
    memcpy(&v, p + 4 * i, 4);
    return v;
}

static bool json_int(const cJSON *o, const char *key, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 ||
        v->valuedouble > 1e15)
        return false;
    *out = (int64_t)v->valuedouble;
    return true;
}

/* The quant_state JSON of a 4-bit tensor into b (type, N, K, blocksizes). */
static hr_status read_quant_state(const char *path, const char *w, const st_tensor *qs,
                                  bnb_tensor *b, hr_error *err) {
    bool nomem;
    cJSON *root = hr_json_parse((const char *)qs->data, (size_t)qs->n_bytes, NULL, &nomem);
    if (!root)
        return nomem ? hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", path)
                     : hr_err_set(err, HR_ERR_FORMAT, "%s: '%s' is not valid JSON", path,
                                  qs->name);
    hr_status s = HR_OK;
    const cJSON *qt = cJSON_GetObjectItemCaseSensitive(root, "quant_type");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(root, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(root, "nested_offset");
    if (!cJSON_IsString(qt) ||
        (strcmp(qt->valuestring, "nf4") != 0 && strcmp(qt->valuestring, "fp4") != 0)) {
        s = hr_err_set(err, HR_ERR_UNSUPPORTED,
                       "%s: tensor '%s': quant_type %s%.16s%s is not one bitsandbytes writes "
                       "(nf4, fp4)",
                       path, w, cJSON_IsString(qt) ? "'" : "",
                       cJSON_IsString(qt) ? qt->valuestring : "missing",
                       cJSON_IsString(qt) ? "'" : "");
        goto done;
    }
    b->type = strcmp(qt->valuestring, "nf4") == 0 ? HR_DTYPE_NF4 : HR_DTYPE_FP4;
    if (!json_int(root, "blocksize", &b->blocksize) || !cJSON_IsArray(shape) ||
        cJSON_GetArraySize(shape) != 2) {
        s = hr_err_set(err, HR_ERR_FORMAT,
                       "%s: tensor '%s': quant_state needs a blocksize and a 2-d shape", path, w);
        goto done;
    }
    const cJSON *d0 = cJSON_GetArrayItem(shape, 0), *d1 = cJSON_GetArrayItem(shape, 1);
    if (!cJSON_IsNumber(d0) || !cJSON_IsNumber(d1) || d0->valuedouble < 1 ||
        d1->valuedouble < 1 || d0->valuedouble > 1e9 || d1->valuedouble > 1e9 ||
        d0->valuedouble != floor(d0->valuedouble) || d1->valuedouble != floor(d1->valuedouble)) {
        s = hr_err_set(err, HR_ERR_FORMAT, "%s: tensor '%s': quant_state shape is not two sizes",
                       path, w);
        goto done;
    }
    b->N = (int64_t)d0->valuedouble;
    b->K = (int64_t)d1->valuedouble;
    b->nested_blocksize = 0;
    b->nested_offset = 0.0f;
    if (cJSON_GetObjectItemCaseSensitive(root, "nested_blocksize")) {
        if (!json_int(root, "nested_blocksize", &b->nested_blocksize) || !cJSON_IsNumber(off)) {
            s = hr_err_set(err, HR_ERR_FORMAT,
                           "%s: tensor '%s': nested quant_state needs nested_blocksize and "
                           "nested_offset",
                           path, w);
            goto done;
        }
        b->nested_offset = (float)off->valuedouble; /* written from an f32 */
    }
done:
    cJSON_Delete(root);
    return s;
}

/* Finds and checks everything a 4-bit tensor needs. */
static hr_status check_4bit(const st_set *st, const char *path, const st_tensor *w,
                            const st_tensor *qs, bnb_tensor *b, hr_error *err) {
    const char *n = w->name;
    HR_TRY(read_quant_state(path, n, qs, b, err));
    if (b->K % QUANT_QK_NF4 != 0 || b->blocksize % QUANT_QK_NF4 != 0 ||
        b->K % b->blocksize != 0)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "%s: tensor '%s': rows of %lld in blocks of %lld; headroom needs "
                          "blocks of a multiple of 64 that divide the rows",
                          path, n, (long long)b->K, (long long)b->blocksize);
    if (w->n_bytes != (uint64_t)(b->N * b->K / 2))
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: tensor '%s' holds %llu bytes, but its quant_state shape "
                          "[%lld, %lld] needs %lld",
                          path, n, (unsigned long long)w->n_bytes, (long long)b->N,
                          (long long)b->K, (long long)(b->N * b->K / 2));
    const int64_t n_blocks = b->N * b->K / b->blocksize;
    const st_tensor *map = companion(st, n, ".quant_map");
    HR_TRY(need_f32(path, n, ".quant_map", map, 16, err));
    const float *table = b->type == HR_DTYPE_NF4 ? quant_nf4_values : quant_fp4_values;
    for (int i = 0; i < 16; i++)
        if (rd_f32(map->data, i) != table[i])
            return hr_err_set(err, HR_ERR_UNSUPPORTED,
                              "%s: '%s.quant_map' entry %d is %.9g, not bitsandbytes' %s "
                              "value %.9g",
                              path, n, i, (double)rd_f32(map->data, i),
                              hr_dtype_name(b->type), (double)table[i]);
    b->absmax = companion(st, n, ".absmax");
    if (!b->absmax)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: bitsandbytes tensor '%s' has no '%s.absmax'",
                          path, n, n);
    if (b->nested_blocksize) {
        const int64_t n_nested = (n_blocks + b->nested_blocksize - 1) / b->nested_blocksize;
        if (b->absmax->dtype != HR_DTYPE_U8 || b->absmax->n_bytes != (uint64_t)n_blocks)
            return hr_err_set(err, HR_ERR_FORMAT,
                              "%s: '%s.absmax' should hold %lld uint8 codes (double "
                              "quantization), it is %s, %llu bytes",
                              path, n, (long long)n_blocks, hr_dtype_name(b->absmax->dtype),
                              (unsigned long long)b->absmax->n_bytes);
        b->nested_absmax = companion(st, n, ".nested_absmax");
        HR_TRY(need_f32(path, n, ".nested_absmax", b->nested_absmax, n_nested, err));
        b->nested_map = companion(st, n, ".nested_quant_map");
        HR_TRY(need_f32(path, n, ".nested_quant_map", b->nested_map, 256, err));
    } else {
        HR_TRY(need_f32(path, n, ".absmax", b->absmax, n_blocks, err));
    }
    b->codes = w;
    return HR_OK;
}

/* bitsandbytes' f32 absmax of block i (its dequantize_blockwise + offset). */
static float absmax_of(const bnb_tensor *b, int64_t i) {
    if (!b->nested_blocksize)
        return rd_f32(b->absmax->data, i);
    const float v = rd_f32(b->nested_map->data, b->absmax->data[i]) *
                    rd_f32(b->nested_absmax->data, i / b->nested_blocksize);
    return v + b->nested_offset;
}

static hr_status repack_4bit(const char *path, const bnb_tensor *b, uint8_t *out,
                             hr_error *err) {
    const int64_t n_ours = b->N * b->K / QUANT_QK_NF4, per = b->blocksize / QUANT_QK_NF4;
    block_nf4 *dst = (block_nf4 *)(void *)out;
    for (int64_t i = 0; i < n_ours; i++) {
        const float a = absmax_of(b, i / per);
        if (!isfinite(a) || fabsf(a) > 65504.0f)
            return hr_err_set(err, HR_ERR_FORMAT,
                              "%s: tensor '%s': block %lld has absmax %g, outside f16's range",
                              path, b->codes->name, (long long)(i / per), (double)a);
        dst[i].d = hr_f32_to_f16(a);
        const uint8_t *src = b->codes->data + 32 * i; /* 64 codes, two a byte */
        for (int j = 0; j < 32; j++) {
            /* element e: byte e/2, high nibble when e is even */
            const int e0 = j, e1 = 32 + j;
            const uint8_t c0 = (uint8_t)(e0 % 2 ? src[e0 / 2] & 15 : src[e0 / 2] >> 4);
            const uint8_t c1 = (uint8_t)(e1 % 2 ? src[e1 / 2] & 15 : src[e1 / 2] >> 4);
            dst[i].qs[j] = (uint8_t)(c0 | c1 << 4);
        }
    }
    return HR_OK;
}

static hr_status check_8bit(const st_set *st, const char *path, const st_tensor *w,
                            bnb_tensor *b, hr_error *err) {
    if (w->n_dims != 2)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: int8 tensor '%s' is not a matrix", path,
                          w->name);
    b->type = HR_DTYPE_Q8_0;
    b->N = w->shape[0];
    b->K = w->shape[1];
    if (b->K % QUANT_QK != 0)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "%s: int8 tensor '%s' has rows of %lld, not a multiple of 32", path,
                          w->name, (long long)b->K);
    /* "model.layers.0.mlp.down_proj.weight" -> "model.layers.0.mlp.down_proj.SCB" */
    char base[512];
    size_t nl = strlen(w->name);
    if (nl < 7 || nl - 7 >= sizeof base || strcmp(w->name + nl - 7, ".weight") != 0)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: int8 tensor '%s' is not a '.weight'", path,
                          w->name);
    memcpy(base, w->name, nl - 7);
    base[nl - 7] = '\0';
    b->scb = companion(st, base, ".SCB");
    if (!b->scb)
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: int8 tensor '%s' has no row scales '%s.SCB'", path, w->name, base);
    HR_TRY(need_f32(path, base, ".SCB", b->scb, b->N, err));
    b->codes = w;
    return HR_OK;
}

static hr_status repack_8bit(const char *path, const bnb_tensor *b, uint8_t *out,
                             hr_error *err) {
    block_q8_0 *dst = (block_q8_0 *)(void *)out;
    for (int64_t r = 0; r < b->N; r++) {
        const float scb = rd_f32(b->scb->data, r);
        if (!isfinite(scb) || fabsf(scb) / 127.0f > 65504.0f)
            return hr_err_set(err, HR_ERR_FORMAT, "%s: '%s' row %lld has scale %g", path,
                              b->scb->name, (long long)r, (double)scb);
        const uint16_t d = hr_f32_to_f16(scb / 127.0f);
        for (int64_t k = 0; k < b->K; k += QUANT_QK, dst++) {
            dst->d = d;
            memcpy(dst->qs, b->codes->data + r * b->K + k, QUANT_QK);
        }
    }
    return HR_OK;
}

/* Which bitsandbytes mode config.json's quantization_config names. */
static hr_status read_kind(const char *config, size_t len, const char *path, bnb_kind *out,
                           hr_error *err) {
    *out = BNB_NONE;
    bool nomem;
    cJSON *root = hr_json_parse(config, len, NULL, &nomem);
    if (!root)
        return nomem ? hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", path)
                     : hr_err_set(err, HR_ERR_FORMAT, "%s: not valid JSON", path);
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    const cJSON *m = q ? cJSON_GetObjectItemCaseSensitive(q, "quant_method") : NULL;
    hr_status s = HR_OK;
    if (cJSON_IsString(m) && strcmp(m->valuestring, "bitsandbytes") == 0) {
        bool b4 = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(q, "load_in_4bit"));
        bool b8 = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(q, "load_in_8bit"));
        if (b4 == b8)
            s = hr_err_set(err, HR_ERR_FORMAT,
                           "%s: quantization_config (bitsandbytes) sets %s of load_in_4bit and "
                           "load_in_8bit",
                           path, b4 ? "both" : "neither");
        else
            *out = b4 ? BNB_4BIT : BNB_8BIT;
    }
    cJSON_Delete(root);
    return s;
}

hr_status model_bnb_repack(hr_model *m, const char *config, size_t len, const char *path,
                           hr_error *err) {
    bnb_kind kind;
    HR_TRY(read_kind(config, len, path, &kind, err));
    if (kind == BNB_NONE)
        return HR_OK;
    bnb_tensor *bt = hr_calloc((size_t)m->n_tensors + 1, sizeof *bt);
    if (!bt)
        return hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", path);
    hr_status s = HR_OK;
    size_t total = 0;
    int32_t n_quant = 0;
    for (int32_t i = 0; i < m->n_tensors && s == HR_OK; i++) {
        const model_tensor *t = &m->tensors[i];
        const st_tensor *w = st_find(m->st, t->src_name);
        const st_tensor *qs4 = companion(m->st, t->src_name, ".quant_state.bitsandbytes__nf4");
        if (!qs4)
            qs4 = companion(m->st, t->src_name, ".quant_state.bitsandbytes__fp4");
        const size_t nl = strlen(t->src_name);
        if (!w || nl < 7 || strcmp(t->src_name + nl - 7, ".weight") != 0)
            continue; /* companions and other tensors */
        if (kind == BNB_4BIT && qs4)
            s = check_4bit(m->st, path, w, qs4, &bt[i], err);
        else if (kind == BNB_8BIT && w->dtype == HR_DTYPE_I8)
            s = check_8bit(m->st, path, w, &bt[i], err);
        else if (kind == BNB_4BIT &&
                 (w->dtype == HR_DTYPE_U8 || companion(m->st, t->src_name, ".absmax")))
            s = hr_err_set(err, HR_ERR_FORMAT,
                           "%s: tensor '%s' looks 4-bit quantized but has no "
                           "'%s.quant_state.bitsandbytes__nf4' (or __fp4)",
                           path, t->src_name, t->src_name);
        if (s == HR_OK && bt[i].codes) {
            total += hr_dtype_row_bytes(bt[i].type, bt[i].K) * (size_t)bt[i].N;
            n_quant++;
        }
    }
    if (s == HR_OK && n_quant == 0)
        s = hr_err_set(err, HR_ERR_FORMAT,
                       "%s: quantization_config says bitsandbytes %d-bit, but no tensor is "
                       "quantized that way",
                       path, kind == BNB_4BIT ? 4 : 8);
    if (s == HR_OK) {
        m->converted_data = hr_alloc_pages(total);
        m->converted_bytes = total;
        if (!m->converted_data)
            s = hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory for %zu bytes of repacked "
                                              "weights",
                           path, total);
    }
    size_t at = 0;
    for (int32_t i = 0; i < m->n_tensors && s == HR_OK; i++) {
        const bnb_tensor *b = &bt[i];
        if (!b->codes)
            continue;
        uint8_t *out = m->converted_data + at;
        s = b->type == HR_DTYPE_Q8_0 ? repack_8bit(path, b, out, err)
                                     : repack_4bit(path, b, out, err);
        model_tensor *t = &m->tensors[i];
        t->dtype = b->type;
        t->n_dims = 2;
        t->ne[0] = b->K;
        t->ne[1] = b->N;
        t->ne[2] = t->ne[3] = 1;
        t->n_bytes = hr_dtype_row_bytes(b->type, b->K) * (uint64_t)b->N;
        t->data = out;
        at += t->n_bytes;
    }
    if (s == HR_OK)
        HR_LOG_I("%s: bitsandbytes %d-bit: %d matrices repacked as %s (%.1f MiB)", path,
                 kind == BNB_4BIT ? 4 : 8, n_quant,
                 kind == BNB_8BIT ? "q8_0" : "nf4/fp4", (double)total / (1 << 20));
    hr_free(bt);
    return s;
}
