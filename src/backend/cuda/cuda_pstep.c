/*
 * cuda_pstep.c — the persistent decode step's host side: whether a model's
 * decode steps of one row can run as one kernel, its buffers, and the
 * recording of the step's ops as a program (ck_pstep_op) for persistent.cu:
 * each norm goes into the GEMV that reads it, each residual add into the
 * GEMV that made the addend, SwiGLU into the gate/up GEMV. The program is
 * uploaded when it differs from the last one and run; HEADROOM_CUDA_PSTEP_TRACE
 * sums the kernel's per-op timestamps.
 */
#include "backend/cuda/cuda_internal.h"

#include "backend/sizes.h"
#include "util/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(CK_PSTEP_SYNC == SIZES_CUDA_PSTEP_SYNC, "backend/sizes.h");
_Static_assert(sizeof(ck_pstep_op) <= SIZES_CUDA_PSTEP_OP && CK_PSTEP_ROWS == SIZES_CUDA_PSTEP_ROWS,
               "backend/sizes.h must know the persistent step's op size and rows");

/* Adds a finished step's trace to the sums by op kind: an op lasts from
 * block 0 leaving the barrier before it to the last block's arrival after
 * it; the barrier from that arrival to block 0 leaving. */
void cuda_pstep_trace_collect(cuda_backend *c) {
    const int32_t n = c->n_uploaded;
    if (!c->d_trace || n < 2 ||
        cudaMemcpy(c->h_trace, c->d_trace, (size_t)n * 3 * sizeof(uint64_t),
                   cudaMemcpyDeviceToHost) != cudaSuccess)
        return;
    for (int32_t i = 1; i + 1 < n; i++) {
        const uint64_t *t = c->h_trace + 3 * i, *prev = t - 3;
        const int k = c->prog_uploaded[i].kind;
        /* signed: two SMs' reads of the global timer can come out of
         * order by its granularity when a barrier is shorter */
        c->trace_op_us[k] += (double)(int64_t)(t[1] - prev[2]) / 1e3;
        c->trace_bar_us[k] += (double)(int64_t)(t[2] - t[1]) / 1e3;
        c->trace_n[k]++;
    }
}

void cuda_pstep_trace_report(const cuda_backend *c) {
    static const char *const names[] = {"embed", "norm", "gemv", "attn", "swiglu", "gather"};
    for (int k = 0; c->d_trace && k <= CKP_GATHER; k++)
        if (c->trace_n[k] > 0)
            fprintf(stderr, "pstep trace: %-8s %8lld ops  %8.2f us an op  %6.2f us its barrier\n",
                    names[k], (long long)c->trace_n[k], c->trace_op_us[k] / (double)c->trace_n[k],
                    c->trace_bar_us[k] / (double)c->trace_n[k]);
}

/* ---------------------------------------------------------------- persistent step */

/* The widest K of a decode step's GEMVs (the persistent kernel's x) */
static int64_t pstep_widest_k(const hr_model_info *in) {
    const int64_t qo = (int64_t)in->n_head * in->head_dim;
    const int64_t k = in->n_ff > in->n_embd ? in->n_ff : in->n_embd;
    return qo > k ? qo : k;
}

/* Whether this model's decode steps of one row can run as one kernel (the
 * Hopper path, caps.cu; persistent.cu's limits); HEADROOM_CUDA_PSTEP=0
 * keeps them op by op. */
static bool pstep_eligible(const cuda_backend *c, const hr_model_info *in) {
    /* packed weights: the step's producer streams 16-bit rows only (yet);
     * its attention reads a ck cache only (yet) */
    if (c->p.tuning.no_pstep || !ck_device_caps()->hopper || c->p.tuning.attn_naive ||
        c->n_packed > 0 || c->kv_q8 ||
        in->n_head % in->n_head_kv != 0)
        return false;
    const int64_t widths[] = {in->n_embd, (int64_t)in->n_head * in->head_dim, in->n_ff};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
        if (widths[i] % 256 != 0 || widths[i] > CK_PSTEP_MAX_K)
            return false;
    const int blocks = ck_pstep_blocks();
    if (blocks <= 0 ||
        sizes_cuda_pstep_ops_cut(in, (int64_t)CK_PSTEP_ROWS * blocks) > CK_PSTEP_MAX_OPS)
        return false;
    return ck_pstep_supported(c->dt, in->head_dim, (int)pstep_widest_k(in));
}

/* The program buffers (backend/sizes.c counts them whether used or not) and
 * the kernel's counters and its attention splits' partials, zeroed (the
 * kernel leaves them zero). */
hr_status cuda_pstep_alloc(cuda_backend *c, hr_error *err) {
    const hr_model_info *in = c->base.info;
    c->cap_prog = (int32_t)sizes_cuda_pstep_ops(in);
    const size_t counters = (size_t)CK_PSTEP_SYNC * sizeof(unsigned);
    const size_t parts = sizes_cuda_pstep_parts_bytes(in, c->n_splits);
    HR_TRY(cuda_dev_alloc(c, (size_t)c->cap_prog * SIZES_CUDA_PSTEP_OP, MEM_WORK,
                          "persistent step", (void **)&c->d_prog, err));
    HR_TRY(cuda_dev_alloc(c, counters, MEM_WORK, "persistent step", (void **)&c->d_psync, err));
    HR_CUDA_TRY(cudaMemset(c->d_psync, 0, counters));
    HR_TRY(cuda_dev_alloc(c, parts, MEM_WORK, "persistent step", (void **)&c->d_parts, err));
    HR_CUDA_TRY(cudaMemset(c->d_parts, 0, parts));
    c->prog = hr_calloc((size_t)c->cap_prog, sizeof *c->prog);
    HR_TRY(cuda_own_host(c, c->prog, err));
    c->prog_uploaded = hr_calloc((size_t)c->cap_prog, sizeof *c->prog_uploaded);
    HR_TRY(cuda_own_host(c, c->prog_uploaded, err));
    c->pstep_ok = pstep_eligible(c, in);
    c->pstep_max_k = (int)pstep_widest_k(in);
    if (c->pstep_ok && hr_env_get()->cuda_pstep_trace) {
        const size_t n = (size_t)c->cap_prog * 3 * sizeof(uint64_t);
        HR_CUDA_TRY(cudaMalloc((void **)&c->d_trace, n));
        HR_CUDA_TRY(cudaMemset(c->d_trace, 0, n)); /* [1] is a running max */
        c->h_trace = hr_calloc(1, n);
        HR_TRY(cuda_own_host(c, c->h_trace, err));
    }
    return HR_OK;
}

/* ---------------------------------------------------------------- persistent step ops */

/* The next op of the program, zeroed (programs are compared bytewise). */
static ck_pstep_op *pstep_push(cuda_backend *c, ckp_kind kind) {
    if (c->n_prog >= c->cap_prog) {
        if (c->step_status == HR_OK)
            c->step_status = hr_err_set(&c->step_err, HR_ERR_INVALID,
                                        "cuda: persistent step of more than the planned %d ops",
                                        c->cap_prog);
        return NULL;
    }
    ck_pstep_op *op = &c->prog[c->n_prog++];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    return op;
}

/* A pending norm no GEMV took becomes an op of its own (block 0). */
static void pstep_flush_norm(cuda_backend *c) {
    if (!c->pending_norm.on)
        return;
    c->pending_norm.on = false;
    ck_pstep_op *op = pstep_push(c, CKP_NORM);
    if (!op)
        return;
    op->norm.x = c->pending_norm.x;
    op->norm.w = c->pending_norm.w;
    op->norm.y = c->pending_norm.y;
    op->norm.eps = c->pending_norm.eps;
    op->norm.D = c->pending_norm.D;
    if (c->pending_norm.gather_y) {
        ck_pstep_op *g = pstep_push(c, CKP_GATHER);
        if (!g)
            return;
        g->gather.x = c->pending_norm.y;
        g->gather.row = cuda_meta(c, c->o_out);
        g->gather.y = c->pending_norm.gather_y;
        g->gather.D = c->pending_norm.D;
        g->gather.ldx = c->pending_norm.D;
    }
}

/* The next op, after any pending norm (the ops that are not GEMVs). */
ck_pstep_op *cuda_pstep_add(cuda_backend *c, ckp_kind kind) {
    pstep_flush_norm(c);
    return pstep_push(c, kind);
}

/* Uploads the recorded program if it is not what the device holds (only
 * outside a capture: the eager run before it uploads; on the stream, after
 * the steps queued before), then runs it. greedy: the step's argmax folded
 * in (ck_pstep_run). */
void cuda_pstep_run(cuda_backend *c, const ck_chain *greedy) {
    pstep_flush_norm(c);
    const size_t bytes = (size_t)c->n_prog * sizeof *c->prog;
    if (c->n_prog != c->n_uploaded || memcmp(c->prog, c->prog_uploaded, bytes) != 0) {
        if (c->capturing) {
            c->step_status = hr_err_set(&c->step_err, HR_ERR_INVALID,
                                        "cuda: the persistent step changed after its eager run");
            return;
        }
        /* from pageable memory: staged before the call returns */
        cudaError_t e = cudaMemcpyAsync(c->d_prog, c->prog, bytes, cudaMemcpyHostToDevice,
                                        c->stream);
        if (e != cudaSuccess) {
            c->step_status = hr_err_set(&c->step_err, HR_ERR_DEVICE, "cuda: persistent step: %s",
                                        cudaGetErrorString(e));
            return;
        }
        memcpy(c->prog_uploaded, c->prog, bytes);
        c->n_uploaded = c->n_prog;
    }
    cuda_mark(c, "persistent step", 0, 0);
    /* the kernel that loads no norm weights, when no norm needs one (a tied
     * lm head keeps the final norm's weight: weight_create) */
    ck_pstep_run(c->stream, c->d_prog, c->n_prog, c->pstep_max_k, c->d_psync, c->dt,
                 c->base.info->head_dim, !c->pstep_norm_weights, c->d_trace, c->d_tok, greedy);
    cuda_op_error(c, "persistent step");
}

/* if dx: x += dx; y = rmsnorm(x) * w. The add goes into the GEMVs that
 * just wrote dx (each adds its rows to x instead of writing them; the
 * forward pass always makes dx just before), and the norm waits for the
 * next GEMV: if it reads y, every block normalises x itself and y is never
 * written. */
void cuda_pstep_norm(cuda_backend *c, const be_tensor *x, const be_tensor *dx, be_tensor *y,
                     const be_vector *w, float eps) {
    pstep_flush_norm(c);
    if (dx) {
        const size_t elem = dx->narrow ? 2 : 4;
        const uint8_t *lo = (const uint8_t *)dx->data, *hi = lo + (size_t)dx->cols * elem;
        int32_t first = c->n_prog;
        int64_t rows = 0;
        while (first > 0 && c->prog[first - 1].kind == CKP_GEMV &&
               !c->prog[first - 1].gemv.resid && (const uint8_t *)c->prog[first - 1].gemv.y >= lo &&
               (const uint8_t *)c->prog[first - 1].gemv.y < hi)
            rows += c->prog[--first].gemv.N;
        if (rows == dx->cols) {
            for (int32_t i = first; i < c->n_prog; i++) {
                ck_pstep_gemv *g = &c->prog[i].gemv;
                g->resid = (float *)x->data + ((const uint8_t *)g->y - lo) / (ptrdiff_t)elem;
                g->y = NULL;
            }
        } else {
            if (c->step_status == HR_OK)
                c->step_status = hr_err_set(&c->step_err, HR_ERR_INVALID,
                                            "cuda: persistent step: a residual add whose "
                                            "addend the GEMV before did not make");
            return;
        }
    }
    c->pending_norm.on = true;
    c->pending_norm.x = x->data;
    c->pending_norm.w = w->data;
    c->pstep_norm_weights |= !w->folded;
    c->pending_norm.y = y->data;
    c->pending_norm.eps = eps;
    c->pending_norm.D = (int32_t)x->cols;
    c->pending_norm.gather_y = NULL;
}

/* y = x . W^T, in pieces of at most CK_PSTEP_ROWS rows a block */
void cuda_pstep_gemv(cuda_backend *c, be_tensor *y, const be_tensor *x, const be_weight *w) {
    const int64_t piece = (int64_t)CK_PSTEP_ROWS * ck_pstep_blocks();
    const size_t y_elem = y->narrow ? 2 : 4;
    /* the norm's output, or the gather of its one row (the lm head's x) */
    const bool via_gather = c->pending_norm.on && c->pending_norm.gather_y == x->data;
    const bool take_norm = c->pending_norm.on && (c->pending_norm.y == x->data || via_gather);
    if (!take_norm)
        pstep_flush_norm(c);
    c->pending_norm.on = false;
    for (int64_t r0 = 0; r0 < w->n_rows; r0 += piece) {
        ck_pstep_op *op = pstep_push(c, CKP_GEMV);
        if (!op)
            return;
        if (take_norm) {
            op->gemv.norm_x = c->pending_norm.x;
            op->gemv.norm_w = c->pending_norm.w;
            op->gemv.eps = c->pending_norm.eps;
            if (via_gather && r0 == 0)
                op->gemv.norm_y = c->pending_norm.y; /* block 0 stores the norm's row */
        }
        op->gemv.x = x->data;
        op->gemv.W = (const uint8_t *)w->w + (size_t)r0 * (size_t)w->k * 2;
        op->gemv.bias = w->bias ? w->bias + r0 : NULL;
        op->gemv.y = (uint8_t *)y->data + (size_t)r0 * y_elem;
        op->gemv.y_ck = y->narrow;
        op->gemv.N = (int32_t)(w->n_rows - r0 < piece ? w->n_rows - r0 : piece);
        op->gemv.K = (int32_t)w->k;
        /* the lm head (f32 rows, no bias): a greedy step ranks them */
        if (!y->narrow && !w->bias && w->n_rows == c->base.info->n_vocab &&
            y->cols == w->n_rows) {
            op->gemv.logits = (int32_t)(r0 + 1);
            c->pstep_logit_rows += op->gemv.N;
        }
    }
}

int64_t cuda_pstep_steps(const hr_backend *b) {
    return ((const cuda_backend *)b)->n_pstep_steps;
}
