/*
 * sizes.c — the size of every backend allocation (see sizes.h). The
 * attention and sampling workspace formulas are the kernels' own contract
 * (attention.cu, sample.cu); they live here so that a machine without CUDA
 * can still plan for a GPU.
 */
#include "backend/sizes.h"

#include "backend/cpu/matmul.h"
#include "util/dtype.h"

/* ---- the CUDA kernels' workspace contracts (declared in kernels.h) */

/* Flash-decoding partials (n_dec, H, n_splits, Dh + 2) or the naive
 * kernel's scores (n_rows, H, max_ctx), whichever is larger. */
int64_t ck_attention_work_floats(int max_rows, int H, int Dh, int n_splits, int max_ctx);
int64_t ck_attention_work_floats(int max_rows, int H, int Dh, int n_splits, int max_ctx) {
    int64_t partials = (int64_t)max_rows * H * n_splits * (Dh + 2);
    int64_t scores = (int64_t)max_rows * H * max_ctx;
    return partials > scores ? partials : scores;
}

/* The sampler keeps everything in shared memory. */
size_t ck_sample_work_bytes(int n, int V);
size_t ck_sample_work_bytes(int n, int V) {
    (void)n;
    (void)V;
    return 0;
}

/* ---- common */

static uint64_t align_of(sizes_device d) {
    return d == SIZES_CUDA ? SIZES_CUDA_ALIGN : SIZES_CPU_ALIGN;
}

int64_t sizes_ld(sizes_device d, int64_t cols) {
    int64_t pad = d == SIZES_CUDA ? 64 : 16;
    return (cols + pad - 1) / pad * pad;
}

uint64_t sizes_tensor(sizes_device d, int64_t rows, int64_t cols, bool narrow) {
    uint64_t elem = d == SIZES_CUDA && narrow ? 2 : 4;
    return sizes_align((uint64_t)rows * (uint64_t)sizes_ld(d, cols) * elem, align_of(d));
}

int sizes_cuda_runs(const be_params *p, const model_tensor *const *parts, int n_parts,
                    sizes_run runs[3]) {
    if (p->expand_weights)
        return 0;
    for (int i = 0; i < n_parts; i++)
        if (packed_type_of(parts[i]->dtype) == PACKED_W16 ||
            parts[i]->ne[0] % packed_block(packed_type_of(parts[i]->dtype)) != 0)
            return 0;
    int n = 0;
    for (int i = 0; i < n_parts; i++) {
        const packed_type t = packed_type_of(parts[i]->dtype);
        if (n > 0 && runs[n - 1].type == t) {
            runs[n - 1].n_parts++;
            runs[n - 1].rows += parts[i]->ne[1];
        } else {
            runs[n++] = (sizes_run){.type = t, .first = i, .n_parts = 1, .rows = parts[i]->ne[1]};
        }
    }
    return n;
}

uint64_t sizes_weight(sizes_device d, const be_params *p, const model_tensor *const *parts,
                      const model_tensor *const *biases, int n_parts) {
    uint64_t rows = 0;
    bool bias = false;
    for (int i = 0; i < n_parts; i++) {
        rows += (uint64_t)parts[i]->ne[1];
        bias |= biases && biases[i];
    }
    uint64_t b = bias ? sizes_align(rows * 4, align_of(d)) : 0;
    if (d == SIZES_CPU) /* the matrices: sizes_weight_copy or the mapping */
        return b + sizes_align(256, SIZES_CPU_ALIGN);
    const int64_t K = parts[0]->ne[0];
    sizes_run runs[3];
    const int n_runs = sizes_cuda_runs(p, parts, n_parts, runs);
    if (n_runs == 0)
        return b + sizes_align(rows * (uint64_t)K * 2, SIZES_CUDA_ALIGN);
    for (int i = 0; i < n_runs; i++)
        b += sizes_align(packed_bytes(runs[i].type, runs[i].rows, K), SIZES_CUDA_ALIGN);
    return b;
}

uint64_t sizes_cuda_xq_bytes(int64_t rows, int64_t K) {
    const uint64_t A = SIZES_CUDA_ALIGN;
    return sizes_align((uint64_t)(rows * K), A) + 2 * sizes_align((uint64_t)(rows * K / 32) * 4, A);
}

uint64_t sizes_weight_copy(const model_tensor *const *parts, int n_parts) {
    uint64_t n = 0;
    for (int i = 0; i < n_parts; i++)
        n += sizes_align(parts[i]->n_bytes, SIZES_CPU_ALIGN);
    return n;
}

uint64_t sizes_vector(sizes_device d, const model_tensor *t) {
    uint64_t b = sizes_align((uint64_t)t->ne[0] * 4, align_of(d));
    return d == SIZES_CPU ? b + sizes_align(64, SIZES_CPU_ALIGN) : b;
}

bool sizes_kv_type_ok(sizes_device d, hr_dtype t) {
    if (t == HR_DTYPE_F32 || t == HR_DTYPE_F16 || t == HR_DTYPE_BF16)
        return true;
    return t == HR_DTYPE_Q8_0 || (d == SIZES_CPU && t == HR_DTYPE_Q4_0);
}

uint64_t sizes_kv_row_bytes(const hr_model_info *in, hr_dtype t) {
    const hr_dtype_info *ti = &hr_dtype_table[t];
    return (uint64_t)in->head_dim / (uint64_t)ti->block_elems * (uint64_t)ti->block_bytes;
}

uint64_t sizes_kv_per_token(sizes_device d, const hr_model_info *in, hr_dtype k_dtype,
                            hr_dtype v_dtype) {
    (void)d;
    return (uint64_t)in->n_layer * (uint64_t)in->n_head_kv *
           (sizes_kv_row_bytes(in, k_dtype) + sizes_kv_row_bytes(in, v_dtype));
}

uint64_t sizes_kv(sizes_device d, const hr_model_info *in, const be_config *cfg) {
    const uint64_t rows = (uint64_t)in->n_layer * (uint64_t)cfg->n_block *
                          (uint64_t)in->n_head_kv * (uint64_t)cfg->block_size;
    return sizes_align(rows * sizes_kv_row_bytes(in, cfg->kv_dtype), align_of(d)) +
           sizes_align(rows * sizes_kv_row_bytes(in, cfg->kv_dtype_v), align_of(d));
}

/* ---- cuda */

bool sizes_cuda_flash_dh(int head_dim) {
    return head_dim == 64 || head_dim == 80 || head_dim == 96 || head_dim == 128;
}

int sizes_cuda_splits(const hr_model_info *in, const be_config *cfg) {
    /* enough blocks to fill the 132 SMs twice even with few kv heads, and no
     * split longer than 256 positions at the longest context */
    int64_t max_ctx = (int64_t)cfg->max_blocks_per_seq * cfg->block_size;
    int splits = (int)((max_ctx + 255) / 256);
    int fill = (2 * 132 + in->n_head_kv - 1) / in->n_head_kv;
    splits = splits > fill ? splits : fill;
    return splits > 128 ? 128 : splits;
}

/* embed, first norm, per layer 5 row ops and 4 GEMVs, gather, lm head; a
 * GEMV of N rows is at most ceil(N / SIZES_CUDA_PSTEP_ROWS) ops (one block) */
uint64_t sizes_cuda_pstep_ops(const hr_model_info *in) {
    return sizes_cuda_pstep_ops_cut(in, SIZES_CUDA_PSTEP_ROWS);
}

uint64_t sizes_cuda_pstep_ops_cut(const hr_model_info *in, int64_t R) {
    const int64_t qkv = (int64_t)(in->n_head + 2 * in->n_head_kv) * in->head_dim;
    const int64_t per_layer = 5 + (qkv + R - 1) / R + (in->n_embd + R - 1) / R +
                              (2 * in->n_ff + R - 1) / R + (in->n_embd + R - 1) / R;
    return (uint64_t)(3 + in->n_layer * per_layer + (in->n_vocab + R - 1) / R);
}

uint64_t sizes_cuda_pstep_parts_bytes(const hr_model_info *in, int splits) {
    return (uint64_t)in->n_head * (uint64_t)splits * (uint64_t)(in->head_dim + 1) * 8;
}

uint64_t sizes_cuda_meta_ints(const be_config *cfg) {
    return 7u * (uint64_t)cfg->max_rows + (uint64_t)cfg->max_out +
           (uint64_t)cfg->n_seq_max * (uint64_t)cfg->max_blocks_per_seq + 1;
}

uint64_t sizes_workspace(sizes_device d, const be_params *p, const hr_model_info *in,
                         const be_config *cfg, int64_t max_k) {
    const int64_t max_ctx = (int64_t)cfg->max_blocks_per_seq * cfg->block_size;
    if (d == SIZES_CUDA) {
        const uint64_t A = SIZES_CUDA_ALIGN;
        int64_t att = ck_attention_work_floats(cfg->n_seq_max, in->n_head, in->head_dim,
                                               sizes_cuda_splits(in, cfg), 0);
        if (p->tuning.attn_naive || !sizes_cuda_flash_dh(in->head_dim)) {
            int64_t naive = ck_attention_work_floats(cfg->max_rows, in->n_head, in->head_dim, 0,
                                                     (int)max_ctx);
            att = naive > att ? naive : att;
        }
        const int64_t xq_rows = cfg->max_rows < SIZES_CUDA_PACKED_GEMV_ROWS
                                    ? cfg->max_rows
                                    : SIZES_CUDA_PACKED_GEMV_ROWS;
        const uint64_t packed =
            p->packed ? sizes_cuda_xq_bytes(xq_rows, max_k) + SIZES_CUDA_DEQUANT_SCRATCH : 0;
        return packed + SIZES_CUDA_GEMM_WORKSPACE + sizes_align((uint64_t)att * 4, A) +
               sizes_align((uint64_t)(in->head_dim / 2) * 4, A) +
               sizes_align(sizes_cuda_meta_ints(cfg) * 4, A) +
               sizes_align(ck_sample_work_bytes(cfg->max_out, in->n_vocab), A) +
               sizes_align(sizes_cuda_pstep_ops(in) * SIZES_CUDA_PSTEP_OP, A) +
               sizes_align((uint64_t)SIZES_CUDA_PSTEP_SYNC * 4, A) +
               sizes_align(sizes_cuda_pstep_parts_bytes(in, sizes_cuda_splits(in, cfg)), A);
    }
    /* cpu: attention scores per thread, rope tables, row map, matmul scratch */
    int nth = p->n_threads > 0 ? p->n_threads : 1;
    int64_t per_thread =
        ((int64_t)(in->n_head / in->n_head_kv) * max_ctx + in->head_dim + 15) / 16 * 16;
    uint64_t rope = (uint64_t)cfg->max_rows * (uint64_t)(in->head_dim / 2) * 4;
    int64_t mm_rows = cfg->max_rows > cfg->max_out ? cfg->max_rows : cfg->max_out;
    const uint64_t A = SIZES_CPU_ALIGN;
    return sizes_align((uint64_t)nth * (uint64_t)per_thread * 4, A) + 2 * sizes_align(rope, A) +
           sizes_align((uint64_t)cfg->max_rows * 4, A) +
           sizes_align(cpu_matmul_scratch_bytes(mm_rows, max_k, nth), A);
}
