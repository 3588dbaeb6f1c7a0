/*
 * test_plan.c — the memory planner:
 *   - on the cpu, the plan equals, part by part and to the byte, what the
 *     engine then holds, over contexts, sequence counts, step sizes and KV
 *     types (q8_0, q4_0 and K:V mixes included), and a block type's bytes
 *     per token are head_dim / 32 blocks per row, K and V each their own;
 *   - a smaller KV type is suggested when the context does not fit: 16-bit,
 *     else q8_0, else q4_0 (q4_0 on the cpu only: cuda refuses it with a
 *     clear message, as it refuses K and V apart, and suggests q8_0);
 *   - a plan over budget is refused by hr_engine_create before anything is
 *     allocated (the allocation counter does not move);
 *   - the suggestions are tight: the context and sequence count it offers
 *     fit, one step more does not;
 *   - no --ctx: the largest context that fits, capped at the model's;
 *   - a GPU plan needs no GPU when the budget is given;
 *   - sizes parse ("8GiB", "12GB", "90%");
 *   - a prompt longer than the context: refused, or truncated on request;
 *   - admission: a request that finds no free sequence (and its KV blocks)
 *     waits, produces nothing until the one ahead has finished, then runs.
 */
#include "engine/engine.h"
#include "headroom.h"
#include "model/model.h"
#include "test.h"
#include "util/alloc.h"

#define MODEL HR_SOURCE_DIR "/models/tiny-shakespeare"

static hr_engine_params cpu_params(int32_t ctx, int32_t seqs, int32_t batch, hr_dtype kv) {
    hr_engine_params p = hr_engine_params_default();
    p.device = HR_DEVICE_CPU;
    p.n_threads = 2;
    p.n_ctx = ctx;
    p.n_seq_max = seqs;
    p.n_batch = batch;
    p.kv_dtype = kv;
    return p;
}

static void exact_on_cpu(const hr_model *m) {
    static const struct {
        int32_t ctx, seqs, batch;
        hr_dtype kv, kv_v; /* kv_v HR_DTYPE_COUNT: as kv */
    } cases[] = {{512, 1, 512, HR_DTYPE_F32, HR_DTYPE_COUNT},
                 {100, 3, 17, HR_DTYPE_F16, HR_DTYPE_COUNT},
                 {64, 8, 64, HR_DTYPE_BF16, HR_DTYPE_COUNT},
                 {512, 2, 1, HR_DTYPE_F32, HR_DTYPE_COUNT},
                 {33, 1, 333, HR_DTYPE_F32, HR_DTYPE_COUNT},
                 {512, 1, 512, HR_DTYPE_Q8_0, HR_DTYPE_COUNT},
                 {100, 3, 17, HR_DTYPE_Q4_0, HR_DTYPE_COUNT},
                 {77, 2, 64, HR_DTYPE_Q8_0, HR_DTYPE_Q4_0},
                 {64, 5, 32, HR_DTYPE_F16, HR_DTYPE_Q8_0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hr_engine_params p = cpu_params(cases[i].ctx, cases[i].seqs, cases[i].batch, cases[i].kv);
        p.kv_dtype_v = cases[i].kv_v;
        p.use_mmap = i % 2 == 1; /* the matrices read in the mapping, or copied */
        hr_error err;
        hr_plan pl;
        CHECK_OK(hr_plan_compute(m, &p, &pl, &err), &err);
        hr_engine *e = NULL;
        CHECK_OK(hr_engine_create(m, &p, &e, &err), &err);
        if (!e)
            continue;
        hr_memory_report r;
        hr_engine_memory(e, &r);
        CHECK_EQ_I64(r.weights, pl.weights);
        CHECK_EQ_I64(r.kv, pl.kv);
        CHECK_EQ_I64(r.activations, pl.activations);
        CHECK_EQ_I64(r.workspace, pl.workspace);
        CHECK(pl.fits && pl.total <= pl.budget);
        CHECK_EQ_I64(pl.kv, (int64_t)pl.kv_per_seq * cases[i].seqs);
        CHECK(p.use_mmap ? pl.weights_mapped > 0 : pl.weights_mapped == 0);
        hr_engine_free(e);
    }
}

static void refusal_before_allocation(const hr_model *m) {
    hr_engine_params p = cpu_params(512, 64, 512, HR_DTYPE_F32);
    hr_error err;
    hr_plan pl;
    /* 110 MiB: the weights, workspaces and the library's own 64 MiB fit (about
     * 90 MiB), 64 sequences of 1.5 MiB of KV do not */
    p.mem_budget = 110u << 20;
    CHECK_OK(hr_plan_compute(m, &p, &pl, &err), &err);
    CHECK(!pl.fits);
    int64_t before = hr_alloc_count();
    hr_engine *e = NULL;
    CHECK_EQ_I64(hr_engine_create(m, &p, &e, &err), HR_ERR_NO_FIT);
    CHECK(e == NULL);
    CHECK_EQ_I64(hr_alloc_count() - before, 0);
    CHECK_MSG(strstr(err.msg, "planning") && strstr(err.msg, "KV cache"), "message: %s",
              err.msg);

    /* the suggestions are the edge of what fits */
    CHECK(pl.fit_max_ctx > 0 && pl.fit_max_parallel > 0);
    hr_plan t;
    hr_engine_params q = p;
    q.n_ctx = pl.fit_max_ctx;
    CHECK_OK(hr_plan_compute(m, &q, &t, &err), &err);
    CHECK(t.fits);
    q.n_ctx = pl.fit_max_ctx + q.kv_block_size;
    CHECK_OK(hr_plan_compute(m, &q, &t, &err), &err);
    CHECK(!t.fits);
    q = p;
    q.n_seq_max = pl.fit_max_parallel;
    CHECK_OK(hr_plan_compute(m, &q, &t, &err), &err);
    CHECK(t.fits);
    q.n_seq_max = pl.fit_max_parallel + 1;
    CHECK_OK(hr_plan_compute(m, &q, &t, &err), &err);
    CHECK(!t.fits);
    /* f16 KV halves the KV cache: offered when it fits */
    CHECK(pl.fit_kv_dtype == HR_DTYPE_COUNT || pl.fit_kv_total <= p.mem_budget);

    /* the largest context that fits when none is given */
    p.n_ctx = 0;
    p.n_seq_max = 16;
    CHECK_OK(hr_plan_compute(m, &p, &pl, &err), &err);
    CHECK(pl.fits && pl.n_ctx > 0 && pl.n_ctx < 512);
    q = p;
    q.n_ctx = pl.n_ctx + q.kv_block_size;
    CHECK_OK(hr_plan_compute(m, &q, &t, &err), &err);
    CHECK(!t.fits);
    e = NULL;
    CHECK_OK(hr_engine_create(m, &p, &e, &err), &err);
    if (e)
        CHECK_EQ_I64(hr_engine_n_ctx(e), pl.n_ctx);
    hr_engine_free(e);
    p.mem_budget = 0; /* the whole machine: the model's own limit */
    CHECK_OK(hr_plan_compute(m, &p, &pl, &err), &err);
    CHECK_EQ_I64(pl.n_ctx, 512);
}

/* A cached row of Dh = 32 values: f32 128 bytes, 16-bit 64, one q8_0 block
 * 34, one q4_0 block 18. The embedded model has 6 layers of 2 kv heads. */
static int64_t row_bytes_dh32(hr_dtype t) {
    return t == HR_DTYPE_F32 ? 128 : t == HR_DTYPE_Q8_0 ? 34 : t == HR_DTYPE_Q4_0 ? 18 : 64;
}

static void kv_block_types(const hr_model *m) {
    CHECK_EQ_I64(m->info.head_dim, 32);
    static const hr_dtype types[] = {HR_DTYPE_F32, HR_DTYPE_F16, HR_DTYPE_BF16, HR_DTYPE_Q8_0,
                                     HR_DTYPE_Q4_0};
    hr_error err;
    hr_plan pl;
    for (size_t k = 0; k < 5; k++)
        for (size_t v = 0; v < 5; v++) {
            hr_engine_params p = cpu_params(256, 2, 64, types[k]);
            p.kv_dtype_v = types[v];
            CHECK_OK(hr_plan_compute(m, &p, &pl, &err), &err);
            const int64_t per_token =
                6 * 2 * (row_bytes_dh32(types[k]) + row_bytes_dh32(types[v]));
            CHECK_EQ_I64(pl.kv_per_token, per_token);
            CHECK_EQ_I64(pl.kv_per_seq, per_token * 256);
            /* each pool 64-byte aligned: 6 x 32 blocks x 2 heads x 16 rows */
            const int64_t rows = 6 * 32 * 2 * 16;
            CHECK_EQ_I64(pl.kv, (rows * row_bytes_dh32(types[k]) + 63) / 64 * 64 +
                                    (rows * row_bytes_dh32(types[v]) + 63) / 64 * 64);
        }

    /* the suggestion: budgets between what each KV type needs, 64 sequences of
     * 512 tokens (f32 KV: 96 MiB) */
    hr_engine_params p = cpu_params(512, 64, 512, HR_DTYPE_F32);
    uint64_t total[5];
    for (size_t t = 0; t < 5; t++) {
        hr_engine_params q = p;
        q.kv_dtype = q.kv_dtype_v = types[t];
        q.mem_budget = 1ull << 40;
        CHECK_OK(hr_plan_compute(m, &q, &pl, &err), &err);
        total[t] = pl.total;
    }
    CHECK(total[0] > total[1] && total[1] == total[2] && total[2] > total[3] &&
          total[3] > total[4]);
    static const struct {
        int below; /* budget: the total of this type, less a byte */
        hr_dtype want;
    } fit[] = {{0, HR_DTYPE_F16}, {1, HR_DTYPE_Q8_0}, {3, HR_DTYPE_Q4_0}, {4, HR_DTYPE_COUNT}};
    for (size_t i = 0; i < sizeof fit / sizeof fit[0]; i++) {
        p.mem_budget = total[fit[i].below] - 1;
        CHECK_OK(hr_plan_compute(m, &p, &pl, &err), &err);
        CHECK(!pl.fits);
        CHECK_MSG(pl.fit_kv_dtype == fit[i].want, "budget below %s: suggested %s, not %s",
                  hr_dtype_name(types[fit[i].below]),
                  pl.fit_kv_dtype == HR_DTYPE_COUNT ? "none" : hr_dtype_name(pl.fit_kv_dtype),
                  fit[i].want == HR_DTYPE_COUNT ? "none" : hr_dtype_name(fit[i].want));
        if (fit[i].want != HR_DTYPE_COUNT) {
            size_t t = fit[i].want == HR_DTYPE_F16 ? 1 : fit[i].want == HR_DTYPE_Q8_0 ? 3 : 4;
            CHECK_EQ_I64(pl.fit_kv_total, total[t]);
            CHECK(pl.fit_kv_total <= p.mem_budget);
        }
    }
    /* from bf16, f16 saves nothing: the next is q8_0 */
    p.kv_dtype = HR_DTYPE_BF16;
    p.mem_budget = total[2] - 1;
    CHECK_OK(hr_plan_compute(m, &p, &pl, &err), &err);
    CHECK(pl.fit_kv_dtype == HR_DTYPE_Q8_0);
    /* an engine of the suggested type runs in that budget */
    p.kv_dtype = pl.fit_kv_dtype;
    p.n_seq_max = 2;
    p.n_ctx = 128;
    hr_engine *e = NULL;
    CHECK_OK(hr_engine_create(m, &p, &e, &err), &err);
    hr_engine_free(e);
    /* a bad type, a type the cache does not hold */
    p.kv_dtype = HR_DTYPE_Q4_K;
    CHECK_EQ_I64(hr_plan_compute(m, &p, &pl, &err), HR_ERR_INVALID);
    CHECK_MSG(strstr(err.msg, "q4_k") != NULL, "message: %s", err.msg);
    p.kv_dtype = HR_DTYPE_F32;
    p.kv_dtype_v = (hr_dtype)77;
    CHECK_EQ_I64(hr_plan_compute(m, &p, &pl, &err), HR_ERR_INVALID);
}

/* cuda plans a q8_0 cache (the cpu's bytes) and suggests it; it refuses
 * q4_0, and K and V apart, before anything is loaded; a head size that 32
 * does not divide is refused on any device */
static void kv_refusals(void) {
    hr_model_params mp = hr_model_params_default();
    mp.vocab_only = true;
    hr_model *m = NULL;
    hr_error err;
    CHECK_OK(hr_model_synthetic("llama2-7b", HR_DTYPE_BF16, &mp, &m, &err), &err);
    if (!m)
        return;
    hr_engine_params p = hr_engine_params_default();
    p.device = HR_DEVICE_CUDA;
    p.n_ctx = 4096;
    p.mem_budget = 24ull << 30;
    hr_plan pl;
    p.kv_dtype = HR_DTYPE_Q8_0;
    CHECK_OK(hr_plan_compute(m, &p, &pl, &err), &err);
    CHECK_EQ_I64(pl.kv_per_token, 32 * 32 * 2 * 4 * 34);
    const uint64_t q8_total = pl.total;
    p.kv_dtype = HR_DTYPE_Q4_0;
    CHECK_EQ_I64(hr_plan_compute(m, &p, &pl, &err), HR_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "cuda: KV type q4_0 is not implemented on the GPU yet; "
                              "--kv-dtype q8_0 or the compute type") != NULL,
              "message: %s", err.msg);
    p.kv_dtype = HR_DTYPE_BF16;
    p.kv_dtype_v = HR_DTYPE_Q4_0;
    CHECK_EQ_I64(hr_plan_compute(m, &p, &pl, &err), HR_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "q4_0 is not implemented on the GPU") != NULL, "message: %s",
              err.msg);
    p.kv_dtype_v = HR_DTYPE_F16;
    CHECK_EQ_I64(hr_plan_compute(m, &p, &pl, &err), HR_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "K and V in different types") != NULL, "message: %s", err.msg);
    /* a bf16 cache over the budget that a q8_0 one meets: q8_0 suggested */
    p.kv_dtype_v = HR_DTYPE_COUNT;
    p.mem_budget = q8_total;
    CHECK_OK(hr_plan_compute(m, &p, &pl, &err), &err);
    CHECK(!pl.fits && pl.fit_kv_dtype == HR_DTYPE_Q8_0);
    CHECK_EQ_I64(pl.fit_kv_total, q8_total);
    /* the cpu takes q8_0 at this shape (Dh 128), but not at a head size of 48:
     * the shapes are edited after loading (the refusal comes before they are
     * used) */
    p.device = HR_DEVICE_CPU;
    p.kv_dtype = HR_DTYPE_Q8_0;
    p.mem_budget = 1ull << 40;
    CHECK_OK(hr_plan_compute(m, &p, &pl, &err), &err);
    CHECK_EQ_I64(pl.kv_per_token, 32 * 32 * 2 * 4 * 34);
    m->info.head_dim = 48;
    CHECK_EQ_I64(hr_plan_compute(m, &p, &pl, &err), HR_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "not a multiple of 32") != NULL, "message: %s", err.msg);
    p.kv_dtype = HR_DTYPE_F16;
    p.kv_dtype_v = HR_DTYPE_Q4_0;
    CHECK_EQ_I64(hr_plan_compute(m, &p, &pl, &err), HR_ERR_UNSUPPORTED);
    hr_model_free(m);
}

static void gpu_plan_without_gpu(void) {
    hr_model_params mp = hr_model_params_default();
    mp.vocab_only = true;
    hr_model *m = NULL;
    hr_error err;
    CHECK_OK(hr_model_synthetic("llama2-7b", HR_DTYPE_BF16, &mp, &m, &err), &err);
    if (!m)
        return;
    hr_engine_params p = hr_engine_params_default();
    p.device = HR_DEVICE_CUDA;
    p.n_ctx = 4096;
    p.mem_budget = 24ull << 30;
    hr_plan pl;
    CHECK_OK(hr_plan_compute(m, &p, &pl, &err), &err);
    /* 6.74e9 parameters in bf16 plus the f32 norms; 32 layers x 2 x 4096 x 2 B per token */
    CHECK(pl.fits && pl.weights > 13400000000ull && pl.weights < 13600000000ull);
    CHECK_EQ_I64(pl.kv_per_token, 32 * 2 * 4096 * 2);
    CHECK_EQ_I64(pl.kv, 4096ll * 32 * 2 * 4096 * 2);
    p.mem_budget = 12ull << 30;
    CHECK_OK(hr_plan_compute(m, &p, &pl, &err), &err);
    CHECK(!pl.fits); /* a 12 GiB card cannot hold 7B in bf16 */
    hr_model_free(m);
    /* the bandwidth is timed on cuda only; without a GPU it says why */
    hr_bandwidth bw = {-1.0, -1.0};
    CHECK(hr_device_bandwidth(HR_DEVICE_CPU, &bw, &err) == HR_ERR_UNSUPPORTED);
    if (!backend_device(HR_DEVICE_CUDA)->available()) {
        CHECK(hr_device_bandwidth(HR_DEVICE_CUDA, &bw, &err) != HR_OK);
        CHECK(err.msg[0] != '\0' && bw.copy_bytes_per_s == -1.0 && bw.read_bytes_per_s == -1.0);
    }
}

static void sizes(void) {
    uint64_t v;
    hr_error err;
    CHECK_OK(hr_parse_size("8GiB", 0, &v, &err), &err);
    CHECK_EQ_I64(v, 8ll << 30);
    CHECK_OK(hr_parse_size("12GB", 0, &v, &err), &err);
    CHECK_EQ_I64(v, 12000000000ll);
    CHECK_OK(hr_parse_size("512 MiB", 0, &v, &err), &err);
    CHECK_EQ_I64(v, 512ll << 20);
    CHECK_OK(hr_parse_size("90%", 1000, &v, &err), &err);
    CHECK_EQ_I64(v, 900);
    CHECK_OK(hr_parse_size("1e9", 0, &v, &err), &err);
    CHECK_EQ_I64(v, 1000000000ll);
    CHECK_EQ_I64(hr_parse_size("12 bananas", 0, &v, &err), HR_ERR_INVALID);
    CHECK_EQ_I64(hr_parse_size("150%", 1000, &v, &err), HR_ERR_INVALID);
    CHECK_EQ_I64(hr_parse_size("-3GB", 0, &v, &err), HR_ERR_INVALID);
}

static void overflow(const hr_model *m) {
    hr_engine_params p = cpu_params(64, 1, 64, HR_DTYPE_F32);
    hr_error err;
    hr_engine *e = NULL;
    CHECK_OK(hr_engine_create(m, &p, &e, &err), &err);
    int32_t prompt[100];
    for (int i = 0; i < 100; i++)
        prompt[i] = 100 + i;
    hr_sampling_params sp = hr_sampling_params_greedy();
    sp.max_tokens = 4;
    int32_t id;
    if (e)
        CHECK_EQ_I64(hr_engine_add(e, prompt, 100, &sp, &id, &err), HR_ERR_NO_FIT);
    hr_engine_free(e);
    p.truncate_prompt = true;
    e = NULL;
    CHECK_OK(hr_engine_create(m, &p, &e, &err), &err);
    if (e) {
        CHECK_OK(hr_engine_add(e, prompt, 100, &sp, &id, &err), &err);
        hr_event ev[4];
        int32_t n, got = 0;
        while (hr_engine_n_active(e) > 0 && hr_engine_step(e, ev, 4, &n, &err) == HR_OK)
            for (int32_t i = 0; i < n; i++)
                got += ev[i].token >= 0;
        CHECK_EQ_I64(got, 4);
    }
    hr_engine_free(e);
}

static void admission_waits(const hr_model *m) {
    hr_engine_params p = cpu_params(64, 1, 64, HR_DTYPE_F32);
    hr_error err;
    hr_engine *e = NULL;
    CHECK_OK(hr_engine_create(m, &p, &e, &err), &err);
    if (!e)
        return;
    int32_t prompt[8];
    for (int i = 0; i < 8; i++)
        prompt[i] = 50 + i;
    hr_sampling_params sp = hr_sampling_params_greedy();
    sp.max_tokens = 6;
    sp.ignore_eos = true;
    int32_t first, second;
    CHECK_OK(hr_engine_add(e, prompt, 8, &sp, &first, &err), &err);
    CHECK_OK(hr_engine_add(e, prompt, 8, &sp, &second, &err), &err);
    hr_event ev[4];
    int32_t n, got[2] = {0, 0};
    bool first_done = false, early = false;
    for (int step = 0; step < 64 && hr_engine_n_active(e) > 0; step++) {
        if (hr_engine_step(e, ev, 4, &n, &err) != HR_OK)
            break;
        for (int32_t i = 0; i < n; i++) {
            int which = ev[i].id == second;
            early |= which && !first_done;
            got[which] += ev[i].token >= 0;
            if (!which && ev[i].finish != HR_FINISH_NONE)
                first_done = true;
        }
    }
    CHECK_MSG(!early, "the second request ran before the first finished");
    CHECK_EQ_I64(got[0], 6);
    CHECK_EQ_I64(got[1], 6);
    CHECK_EQ_I64(hr_engine_n_active(e), 0);
    hr_engine_free(e);
}

int main(void) {
    hr_error err;
    hr_model *m = NULL;
    CHECK_OK(hr_model_load(MODEL, NULL, &m, &err), &err);
    if (m) {
        exact_on_cpu(m);
        refusal_before_allocation(m);
        overflow(m);
        admission_waits(m);
        kv_block_types(m);
    }
    hr_model_free(m);
    gpu_plan_without_gpu();
    kv_refusals();
    sizes();
    TEST_END();
}
