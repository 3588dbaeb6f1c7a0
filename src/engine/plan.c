/*
 * plan.c — the memory planner: what an engine would hold, part by part,
 * before anything is loaded or allocated; whether it fits the budget; and
 * when it does not, what would (the largest context, the most parallel
 * sequences, a smaller KV type (16-bit, then q8_0 and q4_0 where the device
 * holds them), quantized weights on the cpu).
 *
 * Exactness comes from not computing anything twice: the engine's own
 * configuration function (engine_config), the forward pass's own list of
 * weights and tensors (llama_plan) and the backends' own size functions
 * (backend/sizes.h) give the bytes. Only the runtime's overhead (the CUDA
 * context, cuBLASLt) and the captured graphs are figures measured on the
 * device and documented in sizes.h. Every part grows with the context and
 * with the number of sequences, so the searches are bisections.
 */
#include "backend/sizes.h"
#include "engine/engine.h"
#include "model/llama.h"
#include "util/alloc.h"
#include "util/dtype.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The plan of fully resolved parameters (n_ctx > 0). */
static void plan_at(const hr_model *m, const hr_engine_params *p, hr_plan *out) {
    be_config cfg;
    be_params bp;
    engine_config(m, p, &cfg, &bp);
    const sizes_device d = p->device == HR_DEVICE_CUDA ? SIZES_CUDA : SIZES_CPU;
    be_memory mem;
    llama_plan(m, d, &bp, &cfg, &mem);
    uint64_t budget = out->budget;
    memset(out, 0, sizeof *out);
    out->budget = budget;
    out->device = p->device;
    out->n_ctx = p->n_ctx;
    out->n_seq_max = p->n_seq_max;
    out->weights = mem.weights;
    out->weights_mapped = d == SIZES_CPU && bp.weight_copy_bytes == 0 ? m->info.weight_bytes : 0;
    out->kv = mem.kv;
    out->kv_per_token = sizes_kv_per_token(d, &m->info, p->kv_dtype, p->kv_dtype_v);
    out->kv_dtype = p->kv_dtype;
    out->kv_dtype_v = p->kv_dtype_v;
    out->kv_per_seq = out->kv_per_token * (uint64_t)cfg.max_blocks_per_seq *
                      (uint64_t)cfg.block_size;
    out->activations = mem.activations;
    out->workspace = mem.workspace;
    out->graphs =
        d == SIZES_CUDA && !bp.tuning.no_graphs ? SIZES_CUDA_MAX_GRAPHS * SIZES_CUDA_GRAPH : 0;
    out->runtime = d == SIZES_CUDA ? SIZES_CUDA_RUNTIME : SIZES_CPU_RUNTIME;
    out->total = out->weights + out->weights_mapped + out->kv + out->activations +
                 out->workspace + out->graphs + out->runtime;
    out->fits = out->total <= out->budget;
    out->fit_kv_dtype = out->fit_weights = HR_DTYPE_COUNT;
}

static bool fits_with(const hr_model *m, hr_engine_params p, uint64_t budget, int32_t n_ctx,
                      int32_t n_seq) {
    hr_plan t = {.budget = budget};
    p.n_ctx = n_ctx;
    p.n_seq_max = n_seq;
    plan_at(m, &p, &t);
    return t.fits;
}

/* The largest value in [lo, hi] (step apart) for which ok(v) holds, ok
 * being monotonic (true then false); 0 when none. */
static int32_t largest(const hr_model *m, const hr_engine_params *p, uint64_t budget, bool ctx,
                       int32_t lo, int32_t hi, int32_t step) {
    int32_t other = ctx ? p->n_seq_max : p->n_ctx;
#define OK(v) (ctx ? fits_with(m, *p, budget, (v), other) : fits_with(m, *p, budget, other, (v)))
    if (hi < lo || !OK(lo))
        return 0;
    int32_t a = lo / step, b = hi / step; /* in steps: ok(a) holds */
    while (a < b) {
        int32_t mid = a + (b - a + 1) / 2;
        if (OK(mid * step))
            a = mid;
        else
            b = mid - 1;
    }
#undef OK
    return a * step;
}

hr_status hr_device_memory(hr_device device, uint64_t *free_bytes, uint64_t *total_bytes,
                           hr_error *err) {
    const be_device *d = backend_device(device);
    if (!d)
        return hr_err_set(err, HR_ERR_INVALID, "device %d is not cpu or cuda", (int)device);
    return d->memory(free_bytes, total_bytes, err);
}

hr_status hr_device_bandwidth(hr_device device, hr_bandwidth *out, hr_error *err) {
    const be_device *d = backend_device(device);
    if (!d)
        return hr_err_set(err, HR_ERR_INVALID, "device %d is not cpu or cuda", (int)device);
    return d->bandwidth(&out->copy_bytes_per_s, &out->read_bytes_per_s, err);
}

hr_status hr_parse_size(const char *text, uint64_t total, uint64_t *out, hr_error *err) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || !(v >= 0))
        return hr_err_set(err, HR_ERR_INVALID, "'%s' is not a size (8GiB, 12GB, 90%%)", text);
    while (*end == ' ')
        end++;
    static const struct {
        const char *unit;
        double mult;
    } units[] = {{"", 1},        {"b", 1},         {"k", 1e3},   {"kb", 1e3},
                 {"kib", 1024.}, {"m", 1e6},       {"mb", 1e6},  {"mib", 1048576.},
                 {"g", 1e9},     {"gb", 1e9},      {"gib", 1073741824.},
                 {"t", 1e12},    {"tb", 1e12},     {"tib", 1099511627776.}};
    if (*end == '%') {
        if (end[1] != '\0' || v > 100)
            return hr_err_set(err, HR_ERR_INVALID, "'%s': a share is 0%% to 100%%", text);
        if (!total)
            return hr_err_set(err, HR_ERR_INVALID, "'%s': a share needs the device's size",
                              text);
        *out = (uint64_t)((double)total * v / 100.0);
        return HR_OK;
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcasecmp(end, units[i].unit) == 0) {
            double bytes = v * units[i].mult;
            if (bytes > 1.8e19)
                break;
            *out = (uint64_t)bytes;
            return HR_OK;
        }
    return hr_err_set(err, HR_ERR_INVALID, "'%s': unknown unit (B, KB, MB, GB, KiB, MiB, GiB)",
                      text);
}

hr_status hr_plan_compute(const hr_model *m, const hr_engine_params *params, hr_plan *out,
                          hr_error *err) {
    hr_engine_params p;
    /* a plan with a given budget needs no device: people plan for a card
     * they are about to buy */
    bool given = params && params->mem_budget > 0;
    HR_TRY(engine_resolve(m, params, !given, &p, err));
    uint64_t budget = p.mem_budget;
    if (budget == 0) {
        uint64_t free_b = 0, total_b = 0;
        HR_TRY(hr_device_memory(p.device, &free_b, &total_b, err));
        uint64_t reserve = total_b / 50 > (256ull << 20) ? total_b / 50 : 256ull << 20;
        budget = free_b > reserve ? free_b - reserve : 0;
    }
    const int32_t model_ctx = m->info.n_ctx_train, BS = p.kv_block_size;
    bool chosen = p.n_ctx == 0;
    if (chosen) {
        /* the largest context that fits, up to the model's own limit */
        int32_t c = largest(m, &p, budget, true, BS, model_ctx / BS * BS, BS);
        if (model_ctx % BS != 0 && c == model_ctx / BS * BS &&
            fits_with(m, p, budget, model_ctx, p.n_seq_max))
            c = model_ctx;
        p.n_ctx = c > 0 ? c : model_ctx;
    }
    hr_plan plan = {.budget = budget};
    plan_at(m, &p, &plan);
    if (!plan.fits) {
        int32_t hi_ctx = (p.n_ctx > model_ctx ? p.n_ctx : model_ctx) / BS * BS;
        plan.fit_max_ctx = largest(m, &p, budget, true, BS, hi_ctx < p.n_ctx ? hi_ctx : p.n_ctx, BS);
        plan.fit_max_parallel = largest(m, &p, budget, false, 1, p.n_seq_max - 1, 1);
        /* a smaller KV type for K and V, largest first: 16 bits halve f32
         * (the cpu's default), q8_0 takes 34 bytes per 32 values and q4_0 18,
         * where the device stores them and the head size is a multiple of 32 */
        static const hr_dtype smaller[] = {HR_DTYPE_F16, HR_DTYPE_Q8_0, HR_DTYPE_Q4_0};
        const sizes_device d = p.device == HR_DEVICE_CUDA ? SIZES_CUDA : SIZES_CPU;
        for (size_t i = 0; i < sizeof smaller / sizeof smaller[0]; i++) {
            const hr_dtype t = smaller[i];
            if (!sizes_kv_type_ok(d, t) || m->info.head_dim % hr_dtype_table[t].block_elems ||
                sizes_kv_per_token(d, &m->info, t, t) >= plan.kv_per_token)
                continue;
            hr_engine_params q = p;
            q.kv_dtype = q.kv_dtype_v = t;
            hr_plan tp = {.budget = budget};
            plan_at(m, &q, &tp);
            if (tp.fits) {
                plan.fit_kv_dtype = t;
                plan.fit_kv_total = tp.total;
                break;
            }
        }
        /* quantized weights: the cpu runs them as stored, the gpu keeps them
         * packed (the file's bytes, each plane of a matrix 256-byte aligned,
         * and the packed GEMV's workspace when the model had none) */
        if (!p.expand_weights) {
            static const hr_dtype quant[] = {HR_DTYPE_Q8_0, HR_DTYPE_Q4_K, HR_DTYPE_Q4_0};
            uint64_t now = plan.weights, extra = 0;
            if (p.device == HR_DEVICE_CPU) { /* the matrices: mapped, or copied */
                now = plan.weights_mapped ? plan.weights_mapped : llama_weight_copy_bytes(m);
            } else {
                be_config cfg;
                be_params bp;
                engine_config(m, &p, &cfg, &bp);
                extra = (uint64_t)m->info.n_tensors * PACKED_PLANES * SIZES_CUDA_ALIGN;
                if (!bp.packed)
                    extra += sizes_cuda_xq_bytes(cfg.max_rows < SIZES_CUDA_PACKED_GEMV_ROWS
                                                     ? cfg.max_rows
                                                     : SIZES_CUDA_PACKED_GEMV_ROWS,
                                                 m->info.n_ff > m->info.n_embd ? m->info.n_ff
                                                                               : m->info.n_embd) +
                             SIZES_CUDA_DEQUANT_SCRATCH;
            }
            for (size_t i = 0; i < sizeof quant / sizeof quant[0]; i++) {
                uint64_t wb;
                if (!hr_model_weight_bytes_as(m, quant[i], &wb))
                    continue;
                uint64_t total = plan.total - now + wb + extra;
                if (total <= budget) {
                    plan.fit_weights = quant[i];
                    plan.fit_weights_total = total;
                    break;
                }
            }
        }
    }
    *out = plan; /* nothing fits: the parts are those of the model's own context */
    return HR_OK;
}
