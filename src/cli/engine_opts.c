/* engine_opts.c — the options shared by run, perplexity and bench. */
#include "cli/cli.h"

#include <string.h>

void cli_engine_opts_init(cli_engine_opts *o) {
    memset(o, 0, sizeof *o);
    o->model = cli_default_model();
    o->weights = HR_DTYPE_F16;
    o->ep = hr_engine_params_default();
}

void cli_engine_help(FILE *f) {
    fprintf(f, "model and device:\n"
               "  -m PATH            model folder or .gguf (default: the embedded model)\n"
               "  --synthetic SHAPE  random weights of a named shape (tinyllama-1.1b,\n"
               "                     llama2-7b, llama2-13b, llama3-8b, llama2-70b,\n"
               "                     smollm2-135m) instead of -m\n"
               "  --weights TYPE     weight type of --synthetic (f16; bf16 f32 q8_0 q4_0\n"
               "                     q4_1 q4_k q6_k ...)\n"
               "  --device cpu|cuda  where to run (default: cuda when available)\n"
               "  --threads N        cpu threads (default: every core)\n"
               "  --ctx N            tokens per sequence (default: the model's)\n"
               "  --kv-dtype TYPE    KV cache element type: f32, f16, bf16\n"
               "  --exact            cpu: f32 arithmetic for quantized weights (no 8-bit\n"
               "                     activations): slower, matches the reference closely\n");
}

int cli_engine_option(int argc, char **argv, int *i, cli_engine_opts *o) {
    const char *a = argv[*i], *v;
    int64_t n;
    if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
        if (!cli_value(argc, argv, i, &o->model))
            return -1;
        o->synthetic = NULL;
    } else if (strcmp(a, "--synthetic") == 0) {
        if (!cli_value(argc, argv, i, &o->synthetic))
            return -1;
        o->model = NULL;
    } else if (strcmp(a, "--weights") == 0) {
        if (!cli_value(argc, argv, i, &v))
            return -1;
        if (!hr_dtype_from_name(v, &o->weights)) {
            cli_error("--weights: unknown type '%s'", v);
            return -1;
        }
    } else if (strcmp(a, "--device") == 0) {
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
    } else if (strcmp(a, "--threads") == 0 || strcmp(a, "-t") == 0) {
        if (!cli_int(argc, argv, i, 1, 1024, &n))
            return -1;
        o->ep.n_threads = (int32_t)n;
    } else if (strcmp(a, "--ctx") == 0 || strcmp(a, "-c") == 0) {
        if (!cli_int(argc, argv, i, 2, 1 << 24, &n))
            return -1;
        o->ep.n_ctx = (int32_t)n;
    } else if (strcmp(a, "--kv-dtype") == 0) {
        if (!cli_value(argc, argv, i, &v))
            return -1;
        if (!hr_dtype_from_name(v, &o->ep.kv_dtype) ||
            (o->ep.kv_dtype != HR_DTYPE_F32 && o->ep.kv_dtype != HR_DTYPE_F16 &&
             o->ep.kv_dtype != HR_DTYPE_BF16)) {
            cli_error("--kv-dtype: '%s' is not f32, f16 or bf16", v);
            return -1;
        }
    } else if (strcmp(a, "--exact") == 0) {
        o->ep.exact_matmul = true;
    } else {
        return 0;
    }
    return 1;
}

hr_status cli_load_model(const cli_engine_opts *o, hr_model **m, hr_error *err) {
    hr_model_params mp = hr_model_params_default();
    if (o->synthetic)
        return hr_model_synthetic(o->synthetic, o->weights, &mp, m, err);
    return hr_model_load(o->model, &mp, m, err);
}
