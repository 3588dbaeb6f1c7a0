/*
 * cpu_backend.c — the CPU backend: setup (weights, vectors, activations,
 * KV pool, workspaces) and the ops table. The ops live one per file.
 *
 * Everything is allocated at setup through hr_malloc (counted, so tests can
 * prove a step allocates nothing) and freed with the backend; the weight
 * matrices, unless the engine says to read them in the file mapping, are
 * copied into one huge-page block (hr_alloc_pages): TinyLlama Q4_0 decode
 * 5-12% faster than from the mapping's 4 KiB pages (2-core Zen 4 VM).
 */
#include "util/clock.h"
#include "backend/cpu/cpu_backend.h"

#include "backend/sizes.h"
#include "quant/quant.h"
#include "util/alloc.h"
#include "util/dtype.h"
#include "util/file.h"
#include "util/fp16.h"
#include "util/log.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

#define CPU_ALIGN 64 /* a cache line, and a full AVX-512 vector */


/* Every allocation of the backend: counted against the planned cap (host
 * memory is the budget on the cpu), kept for the backend's free. */
static void *own(cpu_backend *c, size_t n_bytes) {
    if (c->host_cap && c->owned_bytes + n_bytes > c->host_cap)
        return NULL;
    if (c->n_owned == c->cap_owned) {
        int32_t cap = c->cap_owned ? c->cap_owned * 2 : 64;
        void **p = hr_realloc(c->owned, (size_t)cap * sizeof *p);
        if (!p)
            return NULL;
        c->owned = p;
        c->cap_owned = cap;
    }
    void *p = hr_malloc_aligned(n_bytes, CPU_ALIGN);
    if (p) {
        c->owned[c->n_owned++] = p;
        c->owned_bytes += n_bytes;
    }
    return p;
}

static void cpu_free(hr_backend *b) {
    cpu_backend *c = (cpu_backend *)b;
    if (!c)
        return;
    for (int32_t i = 0; i < c->n_owned; i++)
        hr_free(c->owned[i]);
    hr_free(c->owned);
    hr_free_pages(c->weight_copy, c->weight_copy_cap);
    cpu_pool_free(c->pool);
    hr_free(c);
}

static hr_status nomem(hr_error *err, const char *what, size_t n) {
    return hr_err_set(err, HR_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes for %s", n,
                      what);
}

/* One matrix into the weight copy, 64-byte aligned; the file pages it came
 * from leave the process (the page cache keeps them), so resident memory
 * holds the weights once, not twice. */
static hr_status copy_part(cpu_backend *c, const model_tensor *t, const uint8_t **out,
                           hr_error *err) {
    const size_t at = c->weight_copy_used, n = (size_t)sizes_weight_copy(&t, 1);
    if (n > c->weight_copy_cap - at)
        return hr_err_set(err, HR_ERR_NOMEM,
                          "cpu backend: %s does not fit the planned weight copy (%zu of %zu "
                          "bytes used)",
                          t->name, at, c->weight_copy_cap);
    memcpy(c->weight_copy + at, t->data, t->n_bytes);
    hr_file_drop_pages(t->data, t->n_bytes);
    c->weight_copy_used = at + n;
    *out = c->weight_copy + at;
    return HR_OK;
}

/* A vector (norm weight or bias) of any float type into f32. */
static void to_f32(const model_tensor *t, float *dst, int64_t n) {
    quant_dequantize_row(t->dtype, t->data, dst, n);
}

/* fold is never taken: the CPU keeps quantized matrices packed as the file
 * has them, and the reference applies each norm's weight as transformers do */
static hr_status cpu_weight_create(hr_backend *b, const model_tensor *const *parts,
                                   const model_tensor *const *biases, int n_parts,
                                   be_vector *fold, be_weight **out, hr_error *err) {
    (void)fold;
    cpu_backend *c = (cpu_backend *)b;
    HR_ASSERT(n_parts >= 1 && n_parts <= 3);
    be_weight *w = own(c, sizeof *w);
    if (!w)
        return nomem(err, "a weight", sizeof *w);
    memset(w, 0, sizeof *w);
    w->n_parts = n_parts;
    w->k = parts[0]->ne[0];
    bool any_bias = false;
    for (int i = 0; i < n_parts; i++) {
        HR_ASSERT(parts[i]->ne[0] == w->k);
        const uint8_t *data = parts[i]->data;
        if (c->weight_copy)
            HR_TRY(copy_part(c, parts[i], &data, err));
        w->parts[i] = (cpu_mat){.dtype = parts[i]->dtype, .data = data,
                                .n_rows = parts[i]->ne[1],
                                .huge_pages = c->weights_huge};
        w->n_rows += parts[i]->ne[1];
        any_bias |= biases && biases[i];
    }
    if (any_bias) {
        w->bias = own(c, (size_t)w->n_rows * sizeof(float));
        if (!w->bias)
            return nomem(err, "a bias", (size_t)w->n_rows * sizeof(float));

        int64_t at = 0;
        for (int i = 0; i < n_parts; i++) {
            if (biases[i])
                to_f32(biases[i], w->bias + at, w->parts[i].n_rows);
            else
                memset(w->bias + at, 0, (size_t)w->parts[i].n_rows * sizeof(float));
            w->parts[i].bias = w->bias + at;
            at += w->parts[i].n_rows;
        }
    }
    if (w->k > c->matmul_max_k)
        c->matmul_max_k = w->k;
    c->vector_bytes += sizes_weight(SIZES_CPU, &(be_params){0}, parts, biases, n_parts);
    *out = w;
    return HR_OK;
}

static hr_status cpu_vector_create(hr_backend *b, const model_tensor *t, be_vector **out,
                                   hr_error *err) {
    cpu_backend *c = (cpu_backend *)b;
    be_vector *v = own(c, sizeof *v);
    if (!v)
        return nomem(err, "a vector", sizeof *v);
    v->n = t->ne[0];
    v->data = own(c, (size_t)v->n * sizeof(float));
    if (!v->data)
        return nomem(err, t->name, (size_t)v->n * sizeof(float));
    c->vector_bytes += sizes_vector(SIZES_CPU, t);
    to_f32(t, v->data, v->n);
    *out = v;
    return HR_OK;
}

static hr_status cpu_tensor_alloc(hr_backend *b, int64_t rows, int64_t cols, bool narrow,
                                  be_tensor *out, hr_error *err) {
    cpu_backend *c = (cpu_backend *)b;
    /* every activation is f32; rows padded to a cache line so neighbouring
     * rows never share one */
    int64_t ld = sizes_ld(SIZES_CPU, cols);
    size_t n = (size_t)rows * (size_t)ld * sizeof(float);
    out->data = own(c, n);
    if (!out->data)
        return nomem(err, "activations", n);
    c->activation_bytes += sizes_tensor(SIZES_CPU, rows, cols, narrow);
    out->cols = cols;
    out->ld = ld;
    out->narrow = false;
    return HR_OK;
}

static hr_status cpu_kv_alloc(hr_backend *b, const be_config *cfg, hr_error *err) {
    cpu_backend *c = (cpu_backend *)b;
    const hr_model_info *in = b->info;
    const hr_dtype kv[2] = {cfg->kv_dtype, cfg->kv_dtype_v};
    for (int i = 0; i < 2; i++)
        if (!sizes_kv_type_ok(SIZES_CPU, kv[i]) ||
            in->head_dim % hr_dtype_table[kv[i]].block_elems != 0)
            return hr_err_set(err, HR_ERR_UNSUPPORTED,
                              "cpu backend: %s cache type %s with head size %d (f32, f16, "
                              "bf16; q8_0 and q4_0 when the head size is a multiple of 32)",
                              i == 0 ? "K" : "V", hr_dtype_name(kv[i]), in->head_dim);
    c->kv = *cfg;
    c->k_row_bytes = (size_t)sizes_kv_row_bytes(in, cfg->kv_dtype);
    c->v_row_bytes = (size_t)sizes_kv_row_bytes(in, cfg->kv_dtype_v);
    const size_t rows = (size_t)in->n_layer * (size_t)cfg->n_block * (size_t)in->n_head_kv *
                        (size_t)cfg->block_size;
    c->k_pool = own(c, rows * c->k_row_bytes);
    c->v_pool = c->k_pool ? own(c, rows * c->v_row_bytes) : NULL;
    if (!c->v_pool)
        return nomem(err, "the KV cache", rows * (c->k_row_bytes + c->v_row_bytes));
    c->kv_bytes = sizes_kv(SIZES_CPU, in, cfg);

    int nth = cpu_pool_size(c->pool);
    int64_t max_ctx = (int64_t)cfg->max_blocks_per_seq * cfg->block_size;
    c->att_scratch_per_thread =
        ((int64_t)(in->n_head / in->n_head_kv) * max_ctx + in->head_dim + 15) / 16 * 16;
    size_t att = (size_t)nth * (size_t)c->att_scratch_per_thread * sizeof(float);
    size_t rope = (size_t)cfg->max_rows * (size_t)(in->head_dim / 2) * sizeof(float);
    c->att_scratch = own(c, att);
    c->rope_cos = own(c, rope);
    c->rope_sin = own(c, rope);
    c->row_seq = own(c, (size_t)cfg->max_rows * sizeof(int32_t));
    if (!c->att_scratch || !c->rope_cos || !c->rope_sin || !c->row_seq)
        return nomem(err, "attention workspace", att + 2 * rope);


    /* the matmul workspace, sized for the largest K of any weight created */
    c->matmul_max_rows = cfg->max_rows > cfg->max_out ? cfg->max_rows : cfg->max_out;
    c->matmul_scratch_bytes = cpu_matmul_scratch_bytes(c->matmul_max_rows, c->matmul_max_k, nth);
    c->matmul_scratch = own(c, c->matmul_scratch_bytes);
    if (!c->matmul_scratch)
        return nomem(err, "matmul workspace", c->matmul_scratch_bytes);
    be_params bp = {.n_threads = nth};
    c->workspace_bytes = sizes_workspace(SIZES_CPU, &bp, in, cfg, c->matmul_max_k);
    return HR_OK;
}

static hr_status cpu_begin_step(hr_backend *b, const hr_step *s, hr_error *err) {
    cpu_backend *c = (cpu_backend *)b;
    if (s->n_rows > c->kv.max_rows || s->n_out > c->kv.max_out)
        return hr_err_set(err, HR_ERR_INVALID, "cpu backend: step of %d rows (%d outputs) over "
                                               "the planned %d (%d)",
                          s->n_rows, s->n_out, c->kv.max_rows, c->kv.max_out);
    c->step = s;
    c->rope_ready = false;
    const int before = cpu_pool_active(c->pool);
    const int n = cpu_tuner_before(&c->tuner, s->n_rows == s->n_seg ? s->n_rows : -1);
    if (n != before) {
        HR_LOG_D("cpu: %d of %d threads from this step on", n, cpu_pool_size(c->pool));
        cpu_pool_set_active(c->pool, n);
    }
    c->step_start_ns = hr_now_ns();
    for (int32_t i = 0; i < s->n_seg; i++)
        for (int32_t r = 0; r < s->segs[i].n; r++)
            c->row_seq[s->segs[i].row0 + r] = s->segs[i].seq;
    return HR_OK;
}

static void cpu_matmul_op(hr_backend *b, be_tensor *y, const be_tensor *x, const be_weight *w,
                          int64_t n) {
    cpu_backend *c = (cpu_backend *)b;
    cpu_matmul(c->pool, c->matmul_scratch, c->mode, y->data, y->ld, x->data, x->ld, n, w->k,
               w->parts, w->n_parts);
}

static void cpu_gather_rows(hr_backend *b, be_tensor *y, const be_tensor *x) {
    cpu_backend *c = (cpu_backend *)b;
    for (int32_t i = 0; i < c->step->n_out; i++)
        memcpy((float *)y->data + (int64_t)i * y->ld,
               (const float *)x->data + (int64_t)c->step->out_rows[i] * x->ld,
               (size_t)x->cols * sizeof(float));
}

static hr_status cpu_end_step(hr_backend *b, const be_tensor *logits, float *host,
                              const be_sample *samples, int32_t *host_tokens, hr_error *err) {
    (void)err;
    (void)samples; /* the cpu never samples here: the engine samples the logits */
    (void)host_tokens;
    cpu_backend *c = (cpu_backend *)b;
    if (host)
        for (int32_t i = 0; i < c->step->n_out; i++)
            memcpy(host + (int64_t)i * logits->cols, (const float *)logits->data + i * logits->ld,
                   (size_t)logits->cols * sizeof(float));
    c->step = NULL;
    cpu_tuner_after(&c->tuner, (double)(hr_now_ns() - c->step_start_ns));
    return HR_OK;
}

/* What the backend holds: the weight copy (none with --mmap or a synthetic
 * model: then the matrices stay where the model keeps them and the plan
 * counts them as mapped), norms, biases, activations, KV and workspaces. */
static void cpu_memory(const hr_backend *b, be_memory *out) {
    const cpu_backend *c = (const cpu_backend *)b;
    *out = (be_memory){.weights = c->vector_bytes + c->weight_copy_used, .kv = c->kv_bytes,
                       .activations = c->activation_bytes, .workspace = c->workspace_bytes};
}

static hr_status cpu_write_tensor(hr_backend *b, be_tensor *t, int64_t rows, const float *host,
                                  hr_error *err) {
    (void)b, (void)err;
    for (int64_t r = 0; r < rows; r++)
        memcpy((float *)t->data + r * t->ld, host + r * t->cols, (size_t)t->cols * sizeof(float));
    return HR_OK;
}

static hr_status cpu_read_tensor(hr_backend *b, const be_tensor *t, int64_t rows, float *host,
                                 hr_error *err) {
    (void)b, (void)err;
    for (int64_t r = 0; r < rows; r++)
        memcpy(host + r * t->cols, (const float *)t->data + r * t->ld,
               (size_t)t->cols * sizeof(float));
    return HR_OK;
}

static const hr_backend_ops cpu_ops = {
    .name = "cpu",
    .free = cpu_free,
    .weight_create = cpu_weight_create,
    .vector_create = cpu_vector_create,
    .tensor_alloc = cpu_tensor_alloc,
    .kv_alloc = cpu_kv_alloc,
    .begin_step = cpu_begin_step,
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .add_rmsnorm = cpu_add_rmsnorm,
    .matmul = cpu_matmul_op,
    .rope_kv_store = cpu_rope_kv_store,
    .attention = cpu_attention,
    .swiglu = cpu_swiglu,
    .gather_rows = cpu_gather_rows,
    .end_step = cpu_end_step,
    .can_sample = false,
    .memory = cpu_memory,
    .write_tensor = cpu_write_tensor,
    .read_tensor = cpu_read_tensor,
};

hr_status backend_cpu_create(const hr_model_info *info, const be_params *p, hr_backend **out,
                             hr_error *err) {
    cpu_backend *c = hr_calloc(1, sizeof *c);
    if (!c)
        return nomem(err, "the backend", sizeof *c);
    c->base.ops = &cpu_ops;
    c->base.info = info;
    c->mode = p->exact_matmul ? CPU_MATMUL_EXACT : CPU_MATMUL_FAST;
    c->host_cap = p->host_cap;
    c->weights_huge = p->weights_in_huge_pages || p->weight_copy_bytes > 0;
    int n = p->n_threads;
    if (n <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        n = cores > 0 ? (int)cores : 1;
    }
    if (p->weight_copy_bytes > 0) {
        const size_t cap = (size_t)p->weight_copy_bytes;
        c->weight_copy = hr_alloc_pages(cap);
        if (!c->weight_copy) {
            hr_free(c);
            return hr_err_set(err, HR_ERR_NOMEM,
                              "cpu backend: cannot allocate %zu bytes for the weights (--mmap "
                              "reads them from the file instead)",
                              cap);
        }
        c->weight_copy_cap = cap;
    }
    hr_status s = cpu_pool_create(n, &c->pool, err);
    if (s != HR_OK) {
        hr_free_pages(c->weight_copy, c->weight_copy_cap);
        hr_free(c);
        return s;
    }
    cpu_tuner_init(&c->tuner, n, p->adapt_threads);
    *out = &c->base;
    return HR_OK;
}
