/*
 * cuda_upload.c — the weights to the device, once: each matrix through two
 * pinned staging buffers (copy one while the host fills the other), packed
 * as the file holds it (backend/packed.h: the blocks taken apart into
 * planes) or in the 16-bit compute type (expanding other types on the
 * host); biases and norm weights as f32, and in bf16 each norm's weight
 * folded into the columns of the 16-bit matrix after it.
 */
#include "util/clock.h"
#include "backend/cuda/cuda_internal.h"

#include "backend/sizes.h"
#include "quant/quant.h"
#include "util/alloc.h"
#include "util/fp16.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- upload */


void cuda_progress(cuda_backend *c, bool done) {
    if (!c->p.progress || !isatty(2))
        return;
    double t = (hr_now_ms() / 1e3);
    if (!done && t - c->t_progress < 0.25)
        return;
    c->t_progress = t;
    double gb = (double)c->uploaded / 1e9;
    fprintf(stderr, "\rloading weights: %.2f GB, %.2f GB/s%s", gb,
            c->upload_s > 0 ? gb / c->upload_s : 0.0, done ? "\n" : "");
}

/* Copies rows [0, n_rows) of tensor t into dst (ck) through the pinned
 * staging buffers, converting on the host when t is not already ck. */
static hr_status upload(cuda_backend *c, void *dst, const model_tensor *t, hr_error *err) {
    if (c->p.tuning.skip_upload) /* memory and speed measurements only: weights left unset */
        return HR_OK;
    double t0 = (hr_now_ms() / 1e3);
    const int64_t K = t->ne[0], rows = t->n_dims > 1 ? t->ne[1] : 1;
    const hr_dtype ck = c->p.compute;
    const size_t src_row = hr_dtype_row_bytes(t->dtype, K), dst_row = (size_t)K * 2;
    int64_t per_chunk = (int64_t)(STAGE_BYTES / (dst_row > src_row ? dst_row : src_row));
    if (per_chunk < 1)
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "cuda: tensor '%s' rows are too long",
                          t->name);
    float *tmp = NULL;
    if (t->dtype != ck && !(tmp = hr_malloc((size_t)K * sizeof(float))))
        return hr_err_set(err, HR_ERR_NOMEM, "cuda: out of host memory");
    hr_status s = HR_OK;
    for (int64_t r0 = 0; r0 < rows && s == HR_OK; r0 += per_chunk) {
        int64_t n = rows - r0 < per_chunk ? rows - r0 : per_chunk;
        int i = c->stage_next;
        c->stage_next ^= 1;
        cudaError_t e = cudaEventSynchronize(c->stage_done[i]);
        uint8_t *stage = c->stage[i];
        if (t->dtype == ck) {
            memcpy(stage, t->data + (size_t)r0 * src_row, (size_t)n * dst_row);
        } else {
            uint16_t *out = (uint16_t *)stage;
            for (int64_t r = 0; r < n; r++) {
                quant_dequantize_row(t->dtype, t->data + (size_t)(r0 + r) * src_row, tmp, K);
                for (int64_t k = 0; k < K; k++)
                    out[r * K + k] =
                        ck == HR_DTYPE_BF16 ? hr_f32_to_bf16(tmp[k]) : hr_f32_to_f16(tmp[k]);
            }
        }
        if (e == cudaSuccess)
            e = cudaMemcpyAsync((uint8_t *)dst + (size_t)r0 * dst_row, stage, (size_t)n * dst_row,
                                cudaMemcpyHostToDevice, c->stream);
        if (e == cudaSuccess)
            e = cudaEventRecord(c->stage_done[i], c->stream);
        if (e != cudaSuccess)
            s = hr_err_set(err, HR_ERR_DEVICE, "cuda: uploading '%s': %s", t->name,
                           cudaGetErrorString(e));
        c->uploaded += (uint64_t)n * dst_row;
        c->upload_s += (hr_now_ms() / 1e3) - t0;
        t0 = (hr_now_ms() / 1e3);
        cuda_progress(c, false);
    }
    hr_free(tmp);
    return s;
}

/* Copies tensor t's rows into rows [row0, row0 + rows of t) of the packed
 * matrix m (its type is t's), the blocks taken apart on the host. */
static hr_status upload_packed(cuda_backend *c, const packed_matrix *m, int64_t row0,
                               const model_tensor *t, hr_error *err) {
    if (c->p.tuning.skip_upload)
        return HR_OK;
    double t0 = (hr_now_ms() / 1e3);
    const int64_t K = t->ne[0], rows = t->ne[1];
    const size_t src_row = hr_dtype_row_bytes(t->dtype, K);
    const int64_t per_chunk = (int64_t)(STAGE_BYTES / src_row);
    if (per_chunk < 1)
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "cuda: tensor '%s' rows are too long",
                          t->name);
    hr_status s = HR_OK;
    for (int64_t r0 = 0; r0 < rows && s == HR_OK; r0 += per_chunk) {
        const int64_t n = rows - r0 < per_chunk ? rows - r0 : per_chunk;
        const int i = c->stage_next;
        c->stage_next ^= 1;
        cudaError_t e = cudaEventSynchronize(c->stage_done[i]);
        /* the chunk's planes one after another in the staging buffer */
        uint8_t *dst[PACKED_PLANES];
        size_t at = 0;
        for (int p = 0; p < PACKED_PLANES; p++) {
            dst[p] = (uint8_t *)c->stage[i] + at;
            at += (size_t)(m->row_bytes[p] * n);
        }
        packed_split_rows(m->type, t->data + (size_t)r0 * src_row, n, K, dst);
        for (int p = 0; p < PACKED_PLANES && e == cudaSuccess; p++)
            if (m->row_bytes[p] > 0)
                e = cudaMemcpyAsync((uint8_t *)m->plane[p] + (row0 + r0) * m->row_bytes[p],
                                    dst[p], (size_t)(m->row_bytes[p] * n),
                                    cudaMemcpyHostToDevice, c->stream);
        if (e == cudaSuccess)
            e = cudaEventRecord(c->stage_done[i], c->stream);
        if (e != cudaSuccess)
            s = hr_err_set(err, HR_ERR_DEVICE, "cuda: uploading '%s': %s", t->name,
                           cudaGetErrorString(e));
        c->uploaded += (uint64_t)n * src_row;
        c->upload_s += (hr_now_ms() / 1e3) - t0;
        t0 = (hr_now_ms() / 1e3);
        cuda_progress(c, false);
    }
    return s;
}

/* Allocates the packed runs of w and uploads its parts into them. */
static hr_status create_packed(cuda_backend *c, be_weight *w, const model_tensor *const *parts,
                               const sizes_run *runs, int n_runs, hr_error *err) {
    int64_t row0 = 0;
    w->n_runs = n_runs;
    for (int r = 0; r < n_runs; r++) {
        packed_matrix *m = &w->run[r];
        *m = (packed_matrix){.type = runs[r].type, .N = runs[r].rows, .K = w->k};
        uint8_t *base = NULL;
        HR_TRY(cuda_dev_alloc(c, packed_bytes(m->type, m->N, m->K), MEM_WEIGHTS,
                              parts[runs[r].first]->name, (void **)&base, err));
        uint64_t at = 0;
        for (int p = 0; p < PACKED_PLANES; p++) {
            m->row_bytes[p] = packed_row_bytes(m->type, p, m->K);
            m->plane[p] = m->row_bytes[p] > 0 ? base + at : NULL;
            at += sizes_align((uint64_t)(m->row_bytes[p] * m->N), PACKED_ALIGN);
        }
        w->run_row0[r] = row0;
        int64_t at_row = 0;
        for (int i = runs[r].first; i < runs[r].first + runs[r].n_parts; i++) {
            HR_TRY(upload_packed(c, m, at_row, parts[i], err));
            at_row += parts[i]->ne[1];
        }
        row0 += m->N;
    }
    c->n_packed++;
    return HR_OK;
}

/* Folds norm weight v into W's columns. Only for bf16: the products of
 * small weights and small norm weights can fall below f16's normal range
 * (6.1e-5), where it keeps fewer bits than the norm's output would have.
 * Why fold at all: the persistent decode step then loads no norm weights
 * after its barriers (+0.6% decode, docs/journal/decode-step.md). */
static hr_status fold_norm(cuda_backend *c, be_weight *w, be_vector *v, hr_error *err) {
    /* a packed matrix keeps the file's codes: the norm applies its weight */
    if (c->p.tuning.no_norm_fold || c->p.compute != HR_DTYPE_BF16 || w->n_runs > 0)
        return HR_OK;
    if (v->folded || v->n != w->k)
        return hr_err_set(err, HR_ERR_INVALID,
                          "cuda: a norm of %lld elements folded into a matrix of %lld columns%s",
                          (long long)v->n, (long long)w->k,
                          v->folded ? " after it was folded into another" : "");
    ck_fold_norm(c->stream, w->w, w->n_rows, (int)w->k, v->data, !c->p.tuning.skip_upload, c->dt);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return hr_err_set(err, HR_ERR_DEVICE, "cuda: folding a norm weight: %s",
                          cudaGetErrorString(e));
    v->folded = true;
    return HR_OK;
}

hr_status cuda_weight_create(hr_backend *b, const model_tensor *const *parts,
                             const model_tensor *const *biases, int n_parts, be_vector *fold,
                             be_weight **out, hr_error *err) {
    cuda_backend *c = (cuda_backend *)b;
    be_weight *w = hr_calloc(1, sizeof *w);
    if (!w)
        return hr_err_set(err, HR_ERR_NOMEM, "cuda backend: out of host memory");
    w->k = parts[0]->ne[0];
    bool any_bias = false;
    for (int i = 0; i < n_parts; i++) {
        w->n_rows += parts[i]->ne[1];
        any_bias |= biases && biases[i];
    }
    hr_status s = HR_OK;
    if (w->k % 8 != 0)
        s = hr_err_set(err, HR_ERR_UNSUPPORTED,
                       "cuda: tensor '%s' has rows of %lld elements; the GPU kernels need a "
                       "multiple of 8",
                       parts[0]->name, (long long)w->k);
    if (w->k > c->max_k)
        c->max_k = w->k;
    sizes_run runs[3];
    const int n_runs = sizes_cuda_runs(&c->p, parts, n_parts, runs);
    if (s == HR_OK && n_runs > 0)
        s = create_packed(c, w, parts, runs, n_runs, err);
    else if (s == HR_OK)
        s = cuda_dev_alloc(c, (size_t)w->n_rows * (size_t)w->k * 2, MEM_WEIGHTS,
                           parts[0]->name, &w->w, err);
    int64_t at = 0;
    for (int i = 0; i < n_parts && s == HR_OK && n_runs == 0; i++) {
        s = upload(c, (uint8_t *)w->w + (size_t)at * (size_t)w->k * 2, parts[i], err);
        at += parts[i]->ne[1];
    }
    if (s == HR_OK && fold)
        s = fold_norm(c, w, fold, err);
    if (s == HR_OK && any_bias) {
        float *hb = hr_calloc((size_t)w->n_rows, sizeof(float));
        s = hb ? cuda_dev_alloc(c, (size_t)w->n_rows * sizeof(float), MEM_WEIGHTS, "bias",
                                (void **)&w->bias, err)
               : hr_err_set(err, HR_ERR_NOMEM, "cuda backend: out of host memory");
        at = 0;
        for (int i = 0; i < n_parts && s == HR_OK; i++) {
            if (biases[i] && biases[i]->data)
                quant_dequantize_row(biases[i]->dtype, biases[i]->data, hb + at,
                                     biases[i]->ne[0]);
            at += parts[i]->ne[1];
        }
        if (s == HR_OK) {
            cudaError_t e = cudaMemcpy(w->bias, hb, (size_t)w->n_rows * sizeof(float),
                                       cudaMemcpyHostToDevice);
            if (e != cudaSuccess)
                s = hr_err_set(err, HR_ERR_DEVICE, "cuda: bias upload: %s",
                               cudaGetErrorString(e));
        }
        hr_free(hb);
    }
    if (s != HR_OK) {
        hr_free(w);
        return s;
    }
    HR_TRY(cuda_own_host(c, w, err));
    *out = w;
    return HR_OK;
}

hr_status cuda_vector_create(hr_backend *b, const model_tensor *t, be_vector **out,
                             hr_error *err) {
    cuda_backend *c = (cuda_backend *)b;
    be_vector *v = hr_calloc(1, sizeof *v);
    float *h = hr_calloc((size_t)t->ne[0], sizeof(float));
    if (!v || !h) {
        hr_free(v);
        hr_free(h);
        return hr_err_set(err, HR_ERR_NOMEM, "cuda backend: out of host memory");
    }
    v->n = t->ne[0];
    if (t->data)
        quant_dequantize_row(t->dtype, t->data, h, v->n);
    hr_status s = cuda_dev_alloc(c, (size_t)v->n * sizeof(float), MEM_WEIGHTS, t->name,
                                 (void **)&v->data, err);
    if (s == HR_OK) {
        cudaError_t e =
            cudaMemcpy(v->data, h, (size_t)v->n * sizeof(float), cudaMemcpyHostToDevice);
        if (e != cudaSuccess)
            s = hr_err_set(err, HR_ERR_DEVICE, "cuda: uploading '%s': %s", t->name,
                           cudaGetErrorString(e));
    }
    hr_free(h);
    if (s != HR_OK) {
        hr_free(v);
        return s;
    }
    HR_TRY(cuda_own_host(c, v, err));
    *out = v;
    return HR_OK;
}
