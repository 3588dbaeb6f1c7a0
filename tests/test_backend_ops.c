// ctest-label: cuda
// ctest-timeout: 600
/*
 * test_backend_ops.c — every CUDA op against the CPU op (the reference), on
 * fresh random inputs, at shapes that include odd sizes and the GQA ratios of
 * real models, in one step that mixes a prefill from position 0, a decode
 * row deep into a cached sequence and a prefill continuing a cached one.
 * Attention runs three times per shape: flash, flash with every decode step
 * in one split, and naive; and where the head size allows, flash and naive
 * over a q8_0 cache on both sides (each quantizes its own k and v: the
 * GPU's k is rounded to the compute type first, so a code may differ by
 * one step, ~1/127 of its block's largest value, within the tolerance). Then a whole layer as a decode step of one row,
 * which the GPU runs as one persistent kernel at the shapes it takes.
 * One line per (op, shape): NMSE and the worst |a - b| / (atol + rtol |ref|).
 * Without a CUDA device (CI) it prints "SKIP: no CUDA device" and exits 77.
 *
 * Tolerances, from the arithmetic. Inputs are rounded to the compute type
 * (bf16: 8 significant bits, f16: 11) on the host before both backends see
 * them, and the CPU keeps its KV cache in the same type, so both compute on
 * identical values:
 *   - f32 results of f32 math (embed, residual add, rope, matmul outputs):
 *     only summation order differs: rtol 1e-4, atol 1e-4 * scale;
 *   - results the GPU stores in the compute type (norm, SwiGLU, attention
 *     outputs): one rounding, rtol 2^-8 (bf16) / 2^-11 (f16), plus the f32
 *     differences before it;
 *   - attention: the flash kernels feed q (f32) to the tensor cores rounded
 *     to the compute type, and softmax weights likewise: errors of a few
 *     2^-8 of the output scale; rtol 3e-2, atol 1e-2, and NMSE < 1e-4.
 */
#include "backend/backend.h"
#include "engine/engine.h"
#include "test.h"
#include "util/fp16.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    int D, H, Hkv, Dh, F, V;
    hr_dtype ck;
    bool bias;
} shape;

/* V >= 77: the steps' tokens are drawn below 77 (add_segment) */
static const shape shapes[] = {
    {"llama2-like 8:8 Dh64", 512, 8, 8, 64, 1376, 1000, HR_DTYPE_BF16, false},
    {"llama3-like 32:8 Dh128", 1024, 32, 8, 128, 2816, 2048, HR_DTYPE_BF16, false},
    {"smollm2-like 9:3 Dh64", 576, 9, 3, 64, 1536, 1031, HR_DTYPE_BF16, false},
    {"qwen2-like 14:2 bias f16", 896, 14, 2, 64, 4864, 999, HR_DTYPE_F16, true},
    {"odd 5:1 Dh40", 200, 5, 1, 40, 264, 77, HR_DTYPE_BF16, false},
    /* head sizes whose rope takes 2 and 1 pairs a thread (Dh / 2 = 18, 17);
     * rows of q, k, v and o stay multiples of 8, as the GPU backend needs */
    {"odd 2:2 Dh36", 72, 2, 2, 36, 200, 97, HR_DTYPE_F16, false},
    {"odd 4:4 Dh34", 136, 4, 4, 34, 264, 97, HR_DTYPE_BF16, false},
    /* shapes the persistent decode step takes (widths % 256, Dh 64 / 128) */
    {"pstep 4:2 Dh64", 256, 4, 2, 64, 768, 1000, HR_DTYPE_BF16, false},
    {"pstep 8:2 Dh128 bias f16", 1024, 8, 2, 128, 2560, 999, HR_DTYPE_F16, true},
    /* D > 4096: the norm a GEMV folds in takes its two-pass path */
    {"pstep wide 4:2 Dh128", 4608, 4, 2, 128, 768, 1000, HR_DTYPE_BF16, false},
};

static uint64_t rng = 0x243F6A8885A308D3ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

static float round_ck(hr_dtype ck, float v) {
    return ck == HR_DTYPE_BF16 ? hr_bf16_to_f32(hr_f32_to_bf16(v))
                               : hr_f16_to_f32(hr_f32_to_f16(v));
}

static float *rand_vec(int64_t n, float scale, hr_dtype round_to) {
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) {
        v[i] = frand() * scale;
        if (round_to != HR_DTYPE_F32)
            v[i] = round_ck(round_to, v[i]);
    }
    return v;
}

/* A model tensor of rows x cols in the compute type, random, owned by the caller. */
static model_tensor make_tensor(const char *name, int64_t cols, int64_t rows, hr_dtype t,
                                float scale) {
    model_tensor m = {.name = (char *)name, .dtype = t, .n_dims = rows > 1 ? 2 : 1,
                      .ne = {cols, rows, 1, 1}};
    size_t n = (size_t)(cols * rows);
    if (t == HR_DTYPE_F32) {
        m.n_bytes = n * 4;
        float *d = malloc(m.n_bytes);
        for (size_t i = 0; i < n; i++)
            d[i] = 1.0f + 0.2f * frand();
        m.data = (const uint8_t *)d;
    } else {
        m.n_bytes = n * 2;
        uint16_t *d = malloc(m.n_bytes);
        for (size_t i = 0; i < n; i++)
            d[i] = t == HR_DTYPE_BF16 ? hr_f32_to_bf16(frand() * scale)
                                      : hr_f32_to_f16(frand() * scale);
        m.data = (const uint8_t *)d;
    }
    return m;
}

typedef struct {
    hr_backend *b;
    be_weight *wqkv, *wo, *wgu, *wdown, *emb;
    be_vector *norm;
    /* the same qkv, gate/up and (untied) head again, each with its own copy
     * of the norm passed to weight_create as the one that feeds it: the GPU
     * folds its weight in (bf16), the CPU never */
    be_weight *wqkv_f, *wgu_f, *head_f;
    be_vector *norm_f, *norm_gu_f, *norm_head_f;
    be_tensor x, xb, xp, qkv, att, gu, h, xo, logits;
} side;

static bool setup_side(side *s, hr_backend *b, model_tensor *const *qkv_parts,
                       model_tensor *const *qkv_bias, const model_tensor *wo,
                       model_tensor *const *gu_parts, const model_tensor *wdown,
                       const model_tensor *emb, const model_tensor *norm, const be_config *cfg,
                       const shape *sh) {
    hr_error err;
    const hr_backend_ops *o = b->ops;
    s->b = b;
    const int64_t B = cfg->max_rows, qkv_cols = (int64_t)(sh->H + 2 * sh->Hkv) * sh->Dh;
    const model_tensor *const *bias = sh->bias ? (const model_tensor *const *)qkv_bias : NULL;
    bool ok = o->weight_create(b, (const model_tensor *const *)qkv_parts, bias, 3, NULL,
                               &s->wqkv, &err) == HR_OK &&
              o->vector_create(b, norm, &s->norm_f, &err) == HR_OK &&
              o->weight_create(b, (const model_tensor *const *)qkv_parts, bias, 3, s->norm_f,
                               &s->wqkv_f, &err) == HR_OK &&
              o->vector_create(b, norm, &s->norm_gu_f, &err) == HR_OK &&
              o->weight_create(b, (const model_tensor *const *)gu_parts, NULL, 2, s->norm_gu_f,
                               &s->wgu_f, &err) == HR_OK &&
              o->vector_create(b, norm, &s->norm_head_f, &err) == HR_OK &&
              o->weight_create(b, &emb, NULL, 1, s->norm_head_f, &s->head_f, &err) == HR_OK &&
              o->weight_create(b, &wo, NULL, 1, NULL, &s->wo, &err) == HR_OK &&
              o->weight_create(b, (const model_tensor *const *)gu_parts, NULL, 2, NULL,
                               &s->wgu, &err) == HR_OK &&
              o->weight_create(b, &wdown, NULL, 1, NULL, &s->wdown, &err) == HR_OK &&
              o->weight_create(b, &emb, NULL, 1, NULL, &s->emb, &err) == HR_OK &&
              o->vector_create(b, norm, &s->norm, &err) == HR_OK &&
              o->tensor_alloc(b, B, sh->D, false, &s->x, &err) == HR_OK &&
              o->tensor_alloc(b, B, sh->D, true, &s->xb, &err) == HR_OK &&
              o->tensor_alloc(b, B, sh->D, true, &s->xp, &err) == HR_OK &&
              o->tensor_alloc(b, B, qkv_cols, true, &s->qkv, &err) == HR_OK &&
              o->tensor_alloc(b, B, (int64_t)sh->H * sh->Dh, true, &s->att, &err) == HR_OK &&
              o->tensor_alloc(b, B, 2 * (int64_t)sh->F, true, &s->gu, &err) == HR_OK &&
              o->tensor_alloc(b, B, sh->F, true, &s->h, &err) == HR_OK &&
              o->tensor_alloc(b, cfg->max_out, sh->D, true, &s->xo, &err) == HR_OK &&
              o->tensor_alloc(b, cfg->max_out, sh->V, false, &s->logits, &err) == HR_OK &&
              o->kv_alloc(b, cfg, &err) == HR_OK;
    CHECK_MSG(ok, "%s: %s setup: %s", sh->name, o->name, err.msg);
    return ok;
}

/* Compares tensor t (rows) of both sides; prints a line. */
static void compare(const char *op, const shape *sh, side *cpu, side *gpu, be_tensor *tc,
                    be_tensor *tg, int64_t rows, double rtol, double atol_scale,
                    double max_nmse) {
    hr_error err;
    int64_t n = rows * tc->cols;
    float *a = malloc((size_t)n * sizeof *a), *g = malloc((size_t)n * sizeof *g);
    bool ok = cpu->b->ops->read_tensor(cpu->b, tc, rows, a, &err) == HR_OK &&
              gpu->b->ops->read_tensor(gpu->b, tg, rows, g, &err) == HR_OK;
    CHECK_MSG(ok, "%s: read: %s", op, err.msg);
    double scale = 0, se = 0, sr = 0, worst = 0;
    for (int64_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(a[i]));
    double atol = atol_scale * (scale > 0 ? scale : 1);
    bool finite = true;
    for (int64_t i = 0; i < n; i++) {
        finite &= isfinite(g[i]);
        double d = (double)g[i] - a[i];
        se += d * d;
        sr += (double)a[i] * a[i];
        worst = fmax(worst, fabs(d) / (atol + rtol * fabs(a[i])));
    }
    double nmse = sr > 0 ? se / sr : se;
    bool pass = ok && finite && worst <= 1.0 && nmse <= max_nmse;
    printf("%-12s %-26s rows %-4lld cols %-5lld nmse %.2e  err/tol %.3f  %s\n", op, sh->name,
           (long long)rows, (long long)tc->cols, nmse, worst, pass ? "OK" : "FAIL");
    CHECK_MSG(pass, "%s %s: nmse %.3g, worst %.3g x tolerance%s", op, sh->name, nmse, worst,
              finite ? "" : ", non-finite values");
    free(a);
    free(g);
}

static void write_both(side *c, side *g, be_tensor *tc, be_tensor *tg, int64_t rows,
                       const float *v) {
    hr_error err;
    CHECK_OK(c->b->ops->write_tensor(c->b, tc, rows, v, &err), &err);
    CHECK_OK(g->b->ops->write_tensor(g->b, tg, rows, v, &err), &err);
}

/* Positions [p0, p0 + n) of sequence seq as one segment at row row0. */
typedef struct {
    hr_step step;
    int32_t tokens[256], pos[256], slot[256], out[16];
    step_segment segs[8];
} step_buf;

static void add_segment(step_buf *s, const int32_t *bt, int max_blocks, int BS, int seq, int p0,
                        int n, bool out_last) {
    int row0 = s->step.n_rows;
    for (int i = 0; i < n; i++) {
        int p = p0 + i;
        s->pos[row0 + i] = p;
        s->slot[row0 + i] = bt[seq * max_blocks + p / BS] * BS + p % BS;
        s->tokens[row0 + i] = (int32_t)(rng % 77);
        frand();
    }
    s->segs[s->step.n_seg++] = (step_segment){.seq = seq, .pos0 = p0, .n = n, .row0 = row0};
    s->step.n_rows += n;
    if (out_last)
        s->out[s->step.n_out++] = row0 + n - 1;
}

/* the attention path of a run: flash kernels with the backend's choice of
 * flash-decoding splits, flash with every decode step in one split (the
 * decode kernel then writes the output: hr_tuning.dec_fill 1), or the naive
 * kernel */
typedef enum { ATTN_FLASH, ATTN_FLASH_ONE_SPLIT, ATTN_NAIVE, ATTN_FLASH_Q8, ATTN_NAIVE_Q8 } attn_mode;

/* A whole layer as a decode step of one row (sequence 1 at position 201:
 * 7 flash-decoding splits a head, merged in two rounds of split_merge):
 * on the GPU one persistent kernel when the shape allows it (persistent.cu:
 * norms folded into the GEMVs, rotations into the attention, ...), else op
 * by op. Twice: with the first norm's weight folded into qkv (bf16 shapes)
 * and the others' not (so the kernel runs its form that loads norm weights,
 * the folded one's all ones), then with all three folded (qkv, gate/up and
 * an untied head: the form that loads none; f16 shapes fold nothing). The
 * tensors the persistent step writes are compared with the CPU's: the GPU
 * rounds its intermediate activations to the compute type where the CPU
 * keeps f32, a few roundings along the chain, so the bounds are the
 * end-to-end ones test_cuda_model holds against transformers. */
static void check_decode_step(const shape *sh, side *C, side *G, const int32_t *bt,
                              int max_blocks, int BS, const float *inv_freq, bool all_folded) {
    hr_error err;
    step_buf dec = {.step = {.block_tables = bt}};
    add_segment(&dec, bt, max_blocks, BS, 1, 201, 1, true);
    dec.step.tokens = dec.tokens, dec.step.pos = dec.pos, dec.step.slot = dec.slot;
    dec.step.segs = dec.segs, dec.step.out_rows = dec.out;
    const int64_t before = backend_device(HR_DEVICE_CUDA)->fused_steps(G->b);
    side *sides[2] = {C, G};
    for (int i = 0; i < 2; i++) {
        side *s = sides[i];
        hr_backend *b = s->b;
        const hr_backend_ops *op = b->ops;
        CHECK_OK(op->begin_step(b, &dec.step, &err), &err);
        op->embed(b, &s->x, s->emb);
        op->rmsnorm(b, &s->xb, &s->x, s->norm_f, 1e-5f, 1); /* folded on the GPU (bf16) */
        op->matmul(b, &s->qkv, &s->xb, s->wqkv_f, 1);
        op->rope_kv_store(b, 0, &s->qkv, inv_freq, ROPE_STYLE_NEOX, sh->H, sh->Hkv, sh->Dh);
        op->attention(b, 0, &s->att, &s->qkv);
        op->matmul(b, &s->xp, &s->att, s->wo, 1);
        op->add_rmsnorm(b, &s->x, &s->xp, &s->xb, all_folded ? s->norm_gu_f : s->norm, 1e-5f);
        op->matmul(b, &s->gu, &s->xb, all_folded ? s->wgu_f : s->wgu, 1);
        op->swiglu(b, &s->h, &s->gu);
        op->matmul(b, &s->xp, &s->h, s->wdown, 1);
        op->add_rmsnorm(b, &s->x, &s->xp, &s->xb, all_folded ? s->norm_head_f : s->norm, 1e-5f);
        op->gather_rows(b, &s->xo, &s->xb);
        op->matmul(b, &s->logits, &s->xo, all_folded ? s->head_f : s->emb, 1);
    }
    float *host = malloc((size_t)sh->V * sizeof *host);
    CHECK_MSG(host != NULL, "out of memory");
    CHECK_OK(C->b->ops->end_step(C->b, &C->logits, host, NULL, NULL, &err), &err);
    free(host);
    CHECK_OK(G->b->ops->end_step(G->b, &G->logits, NULL, NULL, NULL, &err), &err);
    const char *const names[2][6] = {{"step x", "step att", "step h", "step xb", "step logits",
                                      "step"},
                                     {"folded x", "folded att", "folded h", "folded xb",
                                      "folded lgts", "folded step"}};
    const char *const *nm = names[all_folded];
    compare(nm[0], sh, C, G, &C->x, &G->x, 1, 3e-2, 3e-2, 1e-3);
    compare(nm[1], sh, C, G, &C->att, &G->att, 1, 3e-2, 3e-2, 1e-3);
    compare(nm[2], sh, C, G, &C->h, &G->h, 1, 3e-2, 3e-2, 1e-3);
    /* folded, the GPU's last norm leaves x / rms(x) in xb: its weight is in the head */
    if (!all_folded || sh->ck != HR_DTYPE_BF16)
        compare(nm[3], sh, C, G, &C->xb, &G->xb, 1, 3e-2, 3e-2, 1e-3);
    compare(nm[4], sh, C, G, &C->logits, &G->logits, 1, 3e-2, 3e-2, 1e-3);
    const bool takes = sh->D % 256 == 0 && (sh->H * sh->Dh) % 256 == 0 && sh->F % 256 == 0 &&
                       (sh->Dh == 64 || sh->Dh == 128) &&
                       strcmp(backend_device(HR_DEVICE_CUDA)->path(), "hopper") == 0;
    const int64_t ran = backend_device(HR_DEVICE_CUDA)->fused_steps(G->b) - before;
    printf("%-12s %-26s %s\n", nm[5], sh->name, ran ? "one persistent kernel" : "op by op");
    CHECK_MSG(ran == (takes ? 1 : 0), "%s: %lld persistent steps, %d expected", sh->name,
              (long long)ran, takes ? 1 : 0);
}

static void run_shape(const shape *sh, attn_mode mode) {
    const bool naive = mode == ATTN_NAIVE || mode == ATTN_NAIVE_Q8, all_ops = mode == ATTN_FLASH;
    const bool q8 = mode == ATTN_FLASH_Q8 || mode == ATTN_NAIVE_Q8; /* a q8_0 cache */
    const int32_t dec_fill = mode == ATTN_FLASH_ONE_SPLIT ? 1 : 0; /* a target of 1 block */
    hr_error err;
    const hr_dtype ck = sh->ck;
    const int BS = 16, max_blocks = 16, n_seq = 3;
    hr_model_info in = {.n_embd = sh->D, .n_layer = 1, .n_head = sh->H, .n_head_kv = sh->Hkv,
                        .head_dim = sh->Dh, .n_ff = sh->F, .n_vocab = sh->V, .rms_eps = 1e-5f,
                        .rope_theta = 10000.0f};
    float inv_freq[128];
    for (int i = 0; i < sh->Dh / 2; i++)
        inv_freq[i] = 1.0f / powf(10000.0f, (float)(2 * i) / (float)sh->Dh);
    /* a shuffled block table: pages of a sequence are not contiguous */
    int32_t bt[3 * 16];
    for (int i = 0; i < n_seq * max_blocks; i++)
        bt[i] = i;
    for (int i = n_seq * max_blocks - 1; i > 0; i--) {
        int j = (int)(rng % (uint64_t)(i + 1));
        frand();
        int32_t t = bt[i];
        bt[i] = bt[j];
        bt[j] = t;
    }
    be_config cfg = {.max_rows = 256, .max_out = 16, .n_seq_max = n_seq,
                     .max_blocks_per_seq = max_blocks, .n_block = n_seq * max_blocks,
                     .block_size = BS, .kv_dtype = q8 ? HR_DTYPE_Q8_0 : ck,
                     .kv_dtype_v = q8 ? HR_DTYPE_Q8_0 : ck, .rope_inv_freq = inv_freq};
    const float wscale = 1.0f / sqrtf((float)sh->D);
    model_tensor q = make_tensor("q", sh->D, (int64_t)sh->H * sh->Dh, ck, wscale),
                 k = make_tensor("k", sh->D, (int64_t)sh->Hkv * sh->Dh, ck, wscale),
                 v = make_tensor("v", sh->D, (int64_t)sh->Hkv * sh->Dh, ck, wscale),
                 bq = make_tensor("bq", (int64_t)sh->H * sh->Dh, 1, ck, 0.5f),
                 bk = make_tensor("bk", (int64_t)sh->Hkv * sh->Dh, 1, ck, 0.5f),
                 bv = make_tensor("bv", (int64_t)sh->Hkv * sh->Dh, 1, ck, 0.5f),
                 o = make_tensor("o", (int64_t)sh->H * sh->Dh, sh->D, ck, wscale),
                 gt = make_tensor("gate", sh->D, sh->F, ck, wscale),
                 up = make_tensor("up", sh->D, sh->F, ck, wscale),
                 down = make_tensor("down", sh->F, sh->D, ck, 1.0f / sqrtf((float)sh->F)),
                 emb = make_tensor("emb", sh->D, sh->V, ck, 1.0f),
                 norm = make_tensor("norm", sh->D, 1, HR_DTYPE_F32, 0);
    model_tensor *qkv_parts[3] = {&q, &k, &v}, *qkv_bias[3] = {&bq, &bk, &bv};
    model_tensor *gu_parts[2] = {&gt, &up};

    be_params cp = {.n_threads = 2, .exact_matmul = true};
    be_params gp = {.compute = ck,
                    .tuning = {.attn_naive = naive, .no_graphs = true, .dec_fill = dec_fill}};
    hr_backend *cb = NULL, *gb = NULL;
    CHECK_OK(backend_cpu_create(&in, &cp, &cb, &err), &err);
    CHECK_OK(backend_device(HR_DEVICE_CUDA)->create(&in, &gp, &gb, &err), &err);
    side C = {0}, G = {0};
    if (!cb || !gb ||
        !setup_side(&C, cb, qkv_parts, qkv_bias, &o, gu_parts, &down, &emb, &norm, &cfg, sh) ||
        !setup_side(&G, gb, qkv_parts, qkv_bias, &o, gu_parts, &down, &emb, &norm, &cfg, sh))
        goto done;
    const hr_backend_ops *co = cb->ops, *go = gb->ops;
    const int64_t qkv_cols = (int64_t)(sh->H + 2 * sh->Hkv) * sh->Dh;
    char label[64];
    snprintf(label, sizeof label, "%s%s",
             naive ? "attn naive" : mode == ATTN_FLASH_ONE_SPLIT ? "attn flash 1 split"
                                                                 : "attn flash",
             q8 ? " q8_0 kv" : "");

    /* history: 200 cached positions of sequence 1 and 40 of sequence 2 */
    step_buf hist = {.step = {.block_tables = bt}};
    add_segment(&hist, bt, max_blocks, BS, 1, 0, 200, false);
    add_segment(&hist, bt, max_blocks, BS, 2, 0, 40, false);
    hist.step.tokens = hist.tokens, hist.step.pos = hist.pos, hist.step.slot = hist.slot;
    hist.step.segs = hist.segs, hist.step.out_rows = hist.out;
    float *hq = rand_vec(hist.step.n_rows * qkv_cols, 1.0f, ck);
    CHECK_OK(co->begin_step(cb, &hist.step, &err), &err);
    CHECK_OK(go->begin_step(gb, &hist.step, &err), &err);
    write_both(&C, &G, &C.qkv, &G.qkv, hist.step.n_rows, hq);
    co->rope_kv_store(cb, 0, &C.qkv, inv_freq, ROPE_STYLE_NEOX, sh->H, sh->Hkv, sh->Dh);
    go->rope_kv_store(gb, 0, &G.qkv, inv_freq, ROPE_STYLE_NEOX, sh->H, sh->Hkv, sh->Dh);
    CHECK_OK(co->end_step(cb, &C.logits, NULL, NULL, NULL, &err), &err);
    CHECK_OK(go->end_step(gb, &G.logits, NULL, NULL, NULL, &err), &err);
    free(hq);

    /* the mixed step: prefill from 0, a decode at 200, a prefill from 40 */
    step_buf st = {.step = {.block_tables = bt}};
    add_segment(&st, bt, max_blocks, BS, 0, 0, 37, true);
    add_segment(&st, bt, max_blocks, BS, 1, 200, 1, true);
    add_segment(&st, bt, max_blocks, BS, 2, 40, 70, true);
    st.step.tokens = st.tokens, st.step.pos = st.pos, st.step.slot = st.slot;
    st.step.segs = st.segs, st.step.out_rows = st.out;
    const int64_t R = st.step.n_rows;
    CHECK_OK(co->begin_step(cb, &st.step, &err), &err);
    CHECK_OK(go->begin_step(gb, &st.step, &err), &err);
    const double r16 = ck == HR_DTYPE_BF16 ? 1.0 / 256 : 1.0 / 2048;

    if (all_ops) { /* these do not depend on the attention kernel: test them once */
        co->embed(cb, &C.x, C.emb);
        go->embed(gb, &G.x, G.emb);
        compare("embed", sh, &C, &G, &C.x, &G.x, R, 0, 0, 0);

        float *x = rand_vec(R * sh->D, 2.0f, HR_DTYPE_F32);
        write_both(&C, &G, &C.x, &G.x, R, x);
        co->rmsnorm(cb, &C.xb, &C.x, C.norm, 1e-5f, R);
        go->rmsnorm(gb, &G.xb, &G.x, G.norm, 1e-5f, R);
        compare("rmsnorm", sh, &C, &G, &C.xb, &G.xb, R, r16, 1e-5, 1e-4);
        float *dx = rand_vec(R * sh->D, 1.0f, ck); /* exact in the narrow xp */
        write_both(&C, &G, &C.xp, &G.xp, R, dx);
        co->add_rmsnorm(cb, &C.x, &C.xp, &C.xb, C.norm, 1e-5f);
        go->add_rmsnorm(gb, &G.x, &G.xp, &G.xb, G.norm, 1e-5f);
        compare("add_resid", sh, &C, &G, &C.x, &G.x, R, 1e-6, 1e-7, 1e-10);
        compare("add_rmsnorm", sh, &C, &G, &C.xb, &G.xb, R, r16, 1e-5, 1e-4);
        free(x);
        free(dx);

        /* matmul: the GEMV path (few rows) and the GEMM path (many) */
        float *xin = rand_vec(R * sh->D, 1.0f, ck);
        write_both(&C, &G, &C.xb, &G.xb, R, xin);
        co->matmul(cb, &C.qkv, &C.xb, C.wqkv, 3);
        go->matmul(gb, &G.qkv, &G.xb, G.wqkv, 3);
        /* qkv is narrow on the GPU: the f32 sum (plus bias) rounded once by
         * the GEMV; the GEMM rounds y, then the bias add rounds y + b again:
         * |error| <= u |y| + u |y + b| <= u (2 |y + b| + |b|), u = r16 / 2,
         * so with a bias the bound is 2 r16 relative plus r16 max |b| / 2
         * absolute (the biases here are at most about max |y + b|) */
        compare("matmul gemv", sh, &C, &G, &C.qkv, &G.qkv, 3, r16, 1e-4, 1e-4);
        co->matmul(cb, &C.qkv, &C.xb, C.wqkv, R);
        go->matmul(gb, &G.qkv, &G.xb, G.wqkv, R);
        compare("matmul gemm", sh, &C, &G, &C.qkv, &G.qkv, R, sh->bias ? 2 * r16 : r16,
                sh->bias ? r16 / 2 : 1e-4, 1e-4);
        co->matmul(cb, &C.gu, &C.xb, C.wgu, 8);
        go->matmul(gb, &G.gu, &G.xb, G.wgu, 8);
        /* gate/up is kept narrow on the GPU: one rounding of the f32 sum */
        compare("matmul gu", sh, &C, &G, &C.gu, &G.gu, 8, r16, 1e-4, 1e-4);
        free(xin);

        /* a norm and the matrix it feeds, the norm's weight folded into the
         * matrix on the GPU (bf16 shapes; f16 keeps it apart). Against the
         * CPU's f32 x / rms and unfolded W, each product t_k = W_k w_k x_k /
         * rms gets two roundings (x / rms, and W_k w_k), each within 2^-9
         * relative (bf16), of random sign: an output's error has a standard
         * deviation of ~0.8 2^-9 |t|, |t| ~ max |y| / 3 over these rows, so
         * r16 max |y| is ~8 of them. A weight left out or applied twice is
         * off by w (1 +- 0.2): NMSE ~1e-2. */
        float *xf = rand_vec(R * sh->D, 2.0f, HR_DTYPE_F32);
        write_both(&C, &G, &C.x, &G.x, R, xf);
        const int64_t fold_rows[2] = {3, R}; /* the GEMV path, then the GEMM path */
        for (int i = 0; i < 2; i++) {
            co->rmsnorm(cb, &C.xb, &C.x, C.norm_f, 1e-5f, fold_rows[i]);
            go->rmsnorm(gb, &G.xb, &G.x, G.norm_f, 1e-5f, fold_rows[i]);
            co->matmul(cb, &C.qkv, &C.xb, C.wqkv_f, fold_rows[i]);
            go->matmul(gb, &G.qkv, &G.xb, G.wqkv_f, fold_rows[i]);
            compare(i ? "fold gemm" : "fold gemv", sh, &C, &G, &C.qkv, &G.qkv, fold_rows[i],
                    sh->bias ? 2 * r16 : r16, r16, 1e-4);
        }
        free(xf);
        /* a step of max_rows */
        const int64_t T = cfg.max_rows;
        xin = rand_vec(T * sh->D, 1.0f, ck);
        write_both(&C, &G, &C.xb, &G.xb, T, xin);
        co->matmul(cb, &C.gu, &C.xb, C.wgu, T);
        go->matmul(gb, &G.gu, &G.xb, G.wgu, T);
        compare("matmul tall", sh, &C, &G, &C.gu, &G.gu, T, r16, 1e-4, 1e-4);
        free(xin);

        /* both pair layouts (the pools they also fill are checked through
         * attention below, which stores the step again) */
        float *qkv = rand_vec(R * qkv_cols, 1.0f, ck);
        for (int style = 0; style < 2; style++) {
            rope_style rs = style ? ROPE_STYLE_NORM : ROPE_STYLE_NEOX;
            write_both(&C, &G, &C.qkv, &G.qkv, R, qkv);
            co->rope_kv_store(cb, 0, &C.qkv, inv_freq, rs, sh->H, sh->Hkv, sh->Dh);
            go->rope_kv_store(gb, 0, &G.qkv, inv_freq, rs, sh->H, sh->Hkv, sh->Dh);
            /* the GPU rounds the rotated q and k back into the narrow qkv */
            compare(style ? "rope norm" : "rope neox", sh, &C, &G, &C.qkv, &G.qkv, R,
                    r16, 1e-6, 1e-4);
        }
        free(qkv);

        float *gu = rand_vec(R * 2 * sh->F, 3.0f, ck); /* exact in the narrow gu */
        write_both(&C, &G, &C.gu, &G.gu, R, gu);
        co->swiglu(cb, &C.h, &C.gu);
        go->swiglu(gb, &G.h, &G.gu);
        compare("swiglu", sh, &C, &G, &C.h, &G.h, R, r16, 1e-5, 1e-4);
        free(gu);

        float *xb = rand_vec(R * sh->D, 1.0f, ck);
        write_both(&C, &G, &C.xb, &G.xb, R, xb);
        co->gather_rows(cb, &C.xo, &C.xb);
        go->gather_rows(gb, &G.xo, &G.xb);
        compare("gather_rows", sh, &C, &G, &C.xo, &G.xo, st.step.n_out, 0, 0, 0);
        free(xb);
    }

    /* rope + kv store, then attention over the mixed step (history pages
     * included) */
    float *qkv = rand_vec(R * qkv_cols, 1.0f, ck);
    write_both(&C, &G, &C.qkv, &G.qkv, R, qkv);
    co->rope_kv_store(cb, 0, &C.qkv, inv_freq, ROPE_STYLE_NEOX, sh->H, sh->Hkv, sh->Dh);
    go->rope_kv_store(gb, 0, &G.qkv, inv_freq, ROPE_STYLE_NEOX, sh->H, sh->Hkv, sh->Dh);
    co->attention(cb, 0, &C.att, &C.qkv);
    go->attention(gb, 0, &G.att, &G.qkv);
    compare(label, sh, &C, &G, &C.att, &G.att, R, 3e-2, 1e-2, 1e-4);
    free(qkv);

    /* the logits of the outputs, then device sampling (greedy) */
    float *lg = rand_vec(st.step.n_out * sh->V, 5.0f, HR_DTYPE_F32);
    write_both(&C, &G, &C.logits, &G.logits, st.step.n_out, lg);
    float host[16 * 2048];
    int32_t tok[16];
    be_sample samples[16] = {{0}};
    CHECK_OK(co->end_step(cb, &C.logits, host, NULL, NULL, &err), &err);
    CHECK_OK(go->end_step(gb, &G.logits, NULL, samples, tok, &err), &err);
    if (all_ops)
        for (int i = 0; i < st.step.n_out; i++) {
            int32_t best = 0;
            for (int32_t t = 1; t < sh->V; t++)
                if (lg[i * sh->V + t] > lg[i * sh->V + best])
                    best = t;
            CHECK_MSG(tok[i] == best, "%s: device greedy token %d, argmax %d", sh->name, tok[i],
                      best);
        }
    free(lg);
    if (all_ops) {
        check_decode_step(sh, &C, &G, bt, max_blocks, BS, inv_freq, false);
        check_decode_step(sh, &C, &G, bt, max_blocks, BS, inv_freq, true);
    }
done:
    if (cb)
        cb->ops->free(cb);
    if (gb)
        gb->ops->free(gb);
    model_tensor *all[] = {&q, &k, &v, &bq, &bk, &bv, &o, &gt, &up, &down, &emb, &norm};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free((void *)all[i]->data);
}

int main(void) {
    if (!backend_device(HR_DEVICE_CUDA)->available())
        TEST_SKIP("no CUDA device (%s)", backend_device(HR_DEVICE_CUDA)->why_not());
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        run_shape(&shapes[i], ATTN_FLASH);
        run_shape(&shapes[i], ATTN_FLASH_ONE_SPLIT);
        run_shape(&shapes[i], ATTN_NAIVE);
        if (shapes[i].Dh % 32 == 0) { /* a q8_0 cache: blocks of 32 values */
            run_shape(&shapes[i], ATTN_FLASH_Q8);
            run_shape(&shapes[i], ATTN_NAIVE_Q8);
        }
    }
    TEST_END();
}
