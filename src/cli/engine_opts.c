/* engine_opts.c — the options shared by run, chat, perplexity, bench, plan and serve. */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

void cli_engine_opts_init(cli_engine_opts *o, unsigned cmd) {
    memset(o, 0, sizeof *o);
    o->cmd = cmd;
    o->model = cli_default_model();
    o->weights = HR_DTYPE_F16;
    o->ep = hr_engine_params_default();
    o->ep.progress = true;
}

void cli_device_line(const hr_engine *e, const cli_engine_opts *o) {
    fprintf(stderr, "headroom: %s on %s, %s path\n", hr_engine_device_name(e),
            hr_engine_device_desc(e), hr_engine_device_path(e));
    hr_plan pl;
    hr_engine_plan(e, &pl);
    cli_dtype_note(o, pl.device);
}

void cli_memory_report(const hr_engine *e, const char *when) {
    hr_memory_report r;
    hr_engine_memory(e, &r);
    hr_plan pl;
    hr_engine_plan(e, &pl);
    char b[8][32];
    fprintf(stderr, "memory planned (%s): weights %s, KV %s, activations %s, workspace %s, "
                    "graphs %s, runtime %s = %s of a %s budget\n",
            hr_engine_device_name(e), cli_bytes(pl.weights + pl.weights_mapped, b[0], 32),
            cli_bytes(pl.kv, b[1], 32), cli_bytes(pl.activations, b[2], 32),
            cli_bytes(pl.workspace, b[3], 32), cli_bytes(pl.graphs, b[4], 32),
            cli_bytes(pl.runtime, b[5], 32), cli_bytes(pl.total, b[6], 32),
            cli_bytes(pl.budget, b[7], 32));
    fprintf(stderr,
            "memory %s (%s): weights %s, KV %s, activations %s, workspace %s, graphs %s, "
            "runtime %s = %s held",
            when, hr_engine_device_name(e), cli_bytes(r.weights, b[0], 32),
            cli_bytes(r.kv, b[1], 32), cli_bytes(r.activations, b[2], 32),
            cli_bytes(r.workspace, b[3], 32), cli_bytes(r.graphs, b[4], 32),
            cli_bytes(r.runtime, b[5], 32), cli_bytes(r.total, b[6], 32));
    if (r.device_total)
        fprintf(stderr, "; device %s used of %s",
                cli_bytes(r.device_total - r.device_free, b[7], 32),
                cli_bytes(r.device_total, b[0], 32));
    fprintf(stderr, "; host RSS %s\n", cli_bytes(r.host_rss, b[1], 32));
}

/* Each engine option once: its names, its help, and the commands it applies
 * to (the others refuse it and leave it out of their --help). */
typedef enum {
    OPT_MODEL, OPT_SYNTHETIC, OPT_WEIGHTS, OPT_DEVICE, OPT_THREADS, OPT_CTX, OPT_KV_DTYPE,
    OPT_DTYPE, OPT_EXPAND, OPT_EXACT, OPT_MMAP, OPT_MEM, OPT_PARALLEL, OPT_OVERFLOW,
    OPT_NO_PREFIX_CACHE, OPT_MEM_REPORT,
} opt_key;

enum { ALL = CLI_RUN | CLI_PERPLEXITY | CLI_BENCH | CLI_PLAN | CLI_CHAT | CLI_SERVE };

static const struct {
    opt_key key;
    const char *name, *alias; /* alias may be NULL */
    unsigned cmds;
    const char *help; /* "  OPTION ARG   text" lines, as --help prints them */
} engine_opts[] = {
    {OPT_MODEL, "-m", "--model", ALL,
     "  -m PATH            model folder or .gguf (default: the embedded model)\n"},
    {OPT_SYNTHETIC, "--synthetic", NULL, CLI_BENCH | CLI_PLAN,
     "  --synthetic SHAPE  random weights of a named shape (tinyllama-1.1b,\n"
     "                     llama2-7b, llama2-13b, llama3-8b, llama2-70b,\n"
     "                     smollm2-135m) instead of -m\n"},
    {OPT_WEIGHTS, "--weights", NULL, ALL,
     "  --weights TYPE     -m: quantize the layers' matrices at load to TYPE (q8_0\n"
     "                     q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k nf4 fp4,\n"
     "                     int8 = LLM.int8 rows); --synthetic: its weight type\n"
     "                     (default f16; also bf16 f32)\n"},
    {OPT_DEVICE, "--device", NULL, ALL,
     "  --device cpu|cuda  where to run (default: cuda when available)\n"},
    {OPT_THREADS, "--threads", "-t", ALL,
     "  --threads N        cpu threads (default: every core the process may run\n"
     "                     on, decode using as many as run fastest beside other\n"
     "                     busy processes; N: exactly N, more than the cores are\n"
     "                     clamped to them, with a warning)\n"},
    {OPT_CTX, "--ctx", "-c", ALL,
     "  --ctx N            tokens per sequence (default: the model's, or the most\n"
     "                     that fits)\n"},
    {OPT_KV_DTYPE, "--kv-dtype", NULL, ALL,
     "  --kv-dtype TYPE    KV cache element type: f32, f16, bf16, q8_0, and on the\n"
     "                     cpu q4_0 (blocks of 32); K:V sets the two apart on\n"
     "                     the cpu, e.g. q8_0:q4_0 (default: f32 on the cpu, the\n"
     "                     compute type on cuda)\n"},
    {OPT_DTYPE, "--dtype", NULL, CLI_RUN | CLI_PERPLEXITY | CLI_PLAN | CLI_CHAT | CLI_SERVE,
     "  --dtype bf16|f16   cuda: compute type, and storage type of 16-bit weights\n"
     "                     (bf16); the cpu computes in f32 with the weights as stored\n"},
    {OPT_EXPAND, "--expand", NULL, ALL,
     "  --expand           cuda: expand quantized weights to the compute type at\n"
     "                     load instead of keeping them packed (2-4x the memory)\n"},
    {OPT_EXACT, "--exact", NULL, CLI_RUN | CLI_PERPLEXITY | CLI_BENCH | CLI_CHAT | CLI_SERVE,
     "  --exact            cpu: f32 activations for quantized, f16 and bf16 weights\n"
     "                     (not rounded to 8 or 16 bits): slower, matches the\n"
     "                     reference closely\n"},
    {OPT_MMAP, "--mmap", NULL, ALL,
     "  --mmap             cpu: read the weights from the file mapping instead of\n"
     "                     copying them into huge-page memory: faster start,\n"
     "                     slower decode\n"},
    {OPT_MEM, "--mem", NULL, ALL,
     "  --mem SIZE         memory budget: 8GiB, 12GB, 90% (default: the device's\n"
     "                     free memory less a reserve)\n"},
    {OPT_PARALLEL, "--parallel", NULL, CLI_PLAN | CLI_SERVE,
     "  --parallel N       sequences served together (default: plan 1, serve 4)\n"},
    {OPT_OVERFLOW, "--context-overflow", NULL, CLI_RUN,
     "  --context-overflow error|truncate  a prompt longer than the context:\n"
     "                     refuse it (default) or keep its most recent tokens\n"},
    {OPT_NO_PREFIX_CACHE, "--no-prefix-cache", NULL,
     CLI_RUN | CLI_BENCH | CLI_CHAT | CLI_SERVE,
     "  --no-prefix-cache  prefill every prompt whole, even where another request\n"
     "                     computed the same first KV blocks\n"},
    {OPT_MEM_REPORT, "--mem-report", NULL,
     CLI_RUN | CLI_PERPLEXITY | CLI_BENCH | CLI_CHAT | CLI_SERVE,
     "  --mem-report       print the memory planned and held, by part, after\n"
     "                     loading and at the end\n"},
};
#define N_ENGINE_OPTS (sizeof engine_opts / sizeof engine_opts[0])

void cli_engine_help(FILE *f, unsigned cmd) {
    fprintf(f, "model and device:\n");
    for (size_t i = 0; i < N_ENGINE_OPTS; i++)
        if (engine_opts[i].cmds & cmd)
            fputs(engine_opts[i].help, f);
}

int cli_engine_option(int argc, char **argv, int *i, cli_engine_opts *o) {
    const char *a = argv[*i], *v;
    int64_t n;
    size_t k = 0;
    while (k < N_ENGINE_OPTS && strcmp(a, engine_opts[k].name) != 0 &&
           !(engine_opts[k].alias && strcmp(a, engine_opts[k].alias) == 0))
        k++;
    if (k == N_ENGINE_OPTS || (engine_opts[k].key == OPT_DTYPE && o->cmd == CLI_BENCH))
        return 0; /* not an engine option (bench reads --dtype as a list itself) */
    if (!(engine_opts[k].cmds & o->cmd)) {
        cli_error("%s does not apply to this command (see its --help)", a);
        return -1;
    }
    switch (engine_opts[k].key) {
    case OPT_MODEL:
        if (!cli_value(argc, argv, i, &o->model))
            return -1;
        o->synthetic = NULL;
        break;
    case OPT_SYNTHETIC:
        if (!cli_value(argc, argv, i, &o->synthetic))
            return -1;
        o->model = NULL;
        break;
    case OPT_WEIGHTS:
        if (!cli_value(argc, argv, i, &v))
            return -1;
        /* checked here for --synthetic; for a model file, when it loads */
        if (!hr_dtype_from_name(v, &o->weights) && strcmp(v, "int8") != 0) {
            cli_error("--weights: unknown type '%s'", v);
            return -1;
        }
        o->weights_given = true;
        o->weights_name = v;
        break;
    case OPT_DEVICE:
        if (!cli_value(argc, argv, i, &v))
            return -1;
        if (strcmp(v, "cpu") == 0)
            o->ep.device = HR_DEVICE_CPU;
        else if (strcmp(v, "cuda") == 0)
            o->ep.device = HR_DEVICE_CUDA;
        else if (strcmp(v, "auto") == 0)
            o->ep.device = HR_DEVICE_AUTO;
        else {
            cli_error("--device: '%s' is not cpu, cuda or auto", v);
            return -1;
        }
        break;
    case OPT_THREADS:
        if (!cli_int(argc, argv, i, 1, 1024, &n))
            return -1;
        o->ep.n_threads = (int32_t)n;
        break;
    case OPT_CTX:
        if (!cli_int(argc, argv, i, 2, 1 << 24, &n))
            return -1;
        o->ep.n_ctx = (int32_t)n;
        break;
    case OPT_KV_DTYPE:
        if (!cli_value(argc, argv, i, &v))
            return -1;
    {
        /* TYPE or K:V; the engine refuses a type its device lacks */
        char kn[16] = "", vv[16] = "";
        const char *colon = strchr(v, ':');
        const size_t nk = colon ? (size_t)(colon - v) : strlen(v);
        bool ok = nk < sizeof kn && (!colon || strlen(colon + 1) < sizeof vv);
        if (ok) {
            memcpy(kn, v, nk);
            if (colon)
                strcpy(vv, colon + 1);
        }
        hr_dtype kt = HR_DTYPE_COUNT, vt = HR_DTYPE_COUNT;
        ok = ok && hr_dtype_from_name(kn, &kt) && (!colon || hr_dtype_from_name(vv, &vt));
        for (int j = 0; ok && j < 2; j++) {
            const hr_dtype t = j == 0 ? kt : vt;
            ok = t == HR_DTYPE_COUNT || t == HR_DTYPE_F32 || t == HR_DTYPE_F16 ||
                 t == HR_DTYPE_BF16 || t == HR_DTYPE_Q8_0 || t == HR_DTYPE_Q4_0;
        }
        if (!ok) {
            cli_error("--kv-dtype: '%s' is not a type (f32, f16, bf16, q8_0, q4_0) or K:V", v);
            return -1;
        }
        o->ep.kv_dtype = kt;
        o->ep.kv_dtype_v = vt;
        break;
    }
    case OPT_DTYPE:
        if (!cli_value(argc, argv, i, &v))
            return -1;
        if (!hr_dtype_from_name(v, &o->ep.dtype) ||
            (o->ep.dtype != HR_DTYPE_BF16 && o->ep.dtype != HR_DTYPE_F16)) {
            cli_error("--dtype: '%s' is not bf16 or f16", v);
            return -1;
        }
        o->dtype_given = true;
        break;
    case OPT_EXPAND:
        o->ep.expand_weights = true;
        break;
    case OPT_EXACT:
        o->ep.exact_matmul = true;
        break;
    case OPT_MMAP:
        o->ep.use_mmap = true;
        break;
    case OPT_MEM:
        if (!cli_value(argc, argv, i, &o->mem))
            return -1;
        break;
    case OPT_PARALLEL:
        if (!cli_int(argc, argv, i, 1, 4096, &n))
            return -1;
        o->ep.n_seq_max = (int32_t)n;
        break;
    case OPT_OVERFLOW:
        if (!cli_value(argc, argv, i, &v))
            return -1;
        if (strcmp(v, "truncate") == 0)
            o->ep.truncate_prompt = true;
        else if (strcmp(v, "error") == 0)
            o->ep.truncate_prompt = false;
        else {
            cli_error("--context-overflow: '%s' is not error or truncate", v);
            return -1;
        }
        break;
    case OPT_NO_PREFIX_CACHE:
        o->ep.prefix_cache = false;
        break;
    case OPT_MEM_REPORT:
        o->mem_report = true;
        break;
    }
    return 1;
}

void cli_dtype_note(const cli_engine_opts *o, hr_device device) {
    if (o->dtype_given && device == HR_DEVICE_CPU)
        cli_error("note: --dtype sets the GPU's compute type; the cpu computes in f32 with "
                  "the weights as stored, so it has no effect here");
}

hr_status cli_load_model(const cli_engine_opts *o, bool shapes_only, hr_model **m,
                         hr_error *err) {
    hr_model_params mp = hr_model_params_default();
    mp.vocab_only = shapes_only && o->synthetic;
    if (o->synthetic) {
        if (o->weights_given && strcmp(o->weights_name, "int8") == 0) {
            err->code = HR_ERR_INVALID;
            snprintf(err->msg, sizeof err->msg,
                     "--weights int8 quantizes a model file; --synthetic takes q8_0");
            return err->code;
        }
        return hr_model_synthetic(o->synthetic, o->weights, &mp, m, err);
    }
    if (o->weights_given)
        mp.quantize = o->weights_name;
    return hr_model_load(o->model, &mp, m, err);
}

bool cli_budget(cli_engine_opts *o) {
    if (!o->mem)
        return true;
    hr_error err;
    uint64_t free_b = 0, total_b = 0;
    size_t n = strlen(o->mem);
    if (n > 0 && o->mem[n - 1] == '%') { /* a share of the device: its size is needed */
        hr_device d = o->ep.device;
        if (d == HR_DEVICE_AUTO)
            d = HR_DEVICE_CUDA;
        if (hr_device_memory(d, &free_b, &total_b, &err) != HR_OK &&
            (d != HR_DEVICE_CUDA ||
             hr_device_memory(HR_DEVICE_CPU, &free_b, &total_b, &err) != HR_OK)) {
            cli_error("--mem %s: %s", o->mem, err.msg);
            return false;
        }
    }
    if (hr_parse_size(o->mem, total_b, &o->ep.mem_budget, &err) != HR_OK) {
        cli_error("--mem: %s", err.msg);
        return false;
    }
    if (o->ep.mem_budget == 0) {
        cli_error("--mem: the budget must be more than 0 bytes");
        return false;
    }
    return true;
}
