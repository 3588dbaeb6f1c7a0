/*
 * cmd_inspect.c — `headroom inspect -m PATH`: architecture, hyper-parameters,
 * tensor count, bytes by type, the weight memory in each supported dtype,
 * and the chat template when the model has one.
 */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

static void help(FILE *f) {
    fprintf(f, "usage: headroom inspect [-m PATH] [--tensors]\n\n"
               "Prints a model's architecture, hyper-parameters, tensors by type and the\n"
               "weight memory it needs in each supported dtype. Loads no weights.\n"
               "  -m PATH     model folder or .gguf file (default: the embedded model)\n"
               "  --tensors   also list every tensor\n");
}

static const char *rope_scaling_name(hr_rope_scaling s) {
    switch (s) {
    case HR_ROPE_SCALING_LINEAR: return "linear";
    case HR_ROPE_SCALING_LLAMA3: return "llama3";
    default: return "none";
    }
}

int cmd_inspect(int argc, char **argv) {
    const char *path = cli_default_model();
    bool list = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            help(stdout);
            return 0;
        } else if (strcmp(argv[i], "-m") == 0 || strcmp(argv[i], "--model") == 0) {
            if (!cli_value(argc, argv, &i, &path))
                return 1;
        } else if (strcmp(argv[i], "--tensors") == 0) {
            list = true;
        } else {
            cli_error("inspect: unknown option '%s'", argv[i]);
            help(stderr);
            return 1;
        }
    }
    hr_error err;
    hr_model *m;
    hr_model_params mp = hr_model_params_default();
    if (hr_model_load(path, &mp, &m, &err) != HR_OK) {
        cli_error("%s", err.msg);
        return 1;
    }
    hr_model_info in;
    hr_model_get_info(m, &in);
    char b1[32], b2[32];
    printf("model          %s\n", path);
    printf("name           %s\n", in.name);
    printf("format         %s\n", in.format);
    printf("architecture   %s\n", in.arch);
    printf("parameters     %lld (%.3f B)\n", (long long)in.n_params, (double)in.n_params / 1e9);
    printf("vocabulary     %d\n", in.n_vocab);
    printf("hidden size    %d\n", in.n_embd);
    printf("layers         %d\n", in.n_layer);
    printf("heads          %d (kv heads %d, head_dim %d)\n", in.n_head, in.n_head_kv,
           in.head_dim);
    printf("ffn size       %d\n", in.n_ff);
    printf("context        %d\n", in.n_ctx_train);
    printf("rms eps        %g\n", (double)in.rms_eps);
    printf("rope theta     %g, scaling %s", (double)in.rope_theta,
           rope_scaling_name(in.rope_scaling));
    if (in.rope_scaling == HR_ROPE_SCALING_LINEAR)
        printf(" (factor %g)", (double)in.rope_factor);
    else if (in.rope_scaling == HR_ROPE_SCALING_LLAMA3 && in.rope_factor > 0)
        printf(" (factor %g, low %g, high %g, original context %d)", (double)in.rope_factor,
               (double)in.rope_low_freq_factor, (double)in.rope_high_freq_factor,
               in.rope_orig_ctx);
    printf("\n");
    printf("tied embedding %s\n", in.tie_embeddings ? "yes" : "no");
    printf("q/k/v bias     %s\n", in.qkv_bias ? "yes" : "no");
    printf("bos            %d\n", in.bos_id);
    printf("eos            ");
    for (int i = 0; i < in.n_eos; i++)
        printf(i ? ", %d" : "%d", in.eos_ids[i]);
    printf("%s\n", in.n_eos ? "" : "none");

    /* bytes and counts by stored type */
    uint64_t by_type[HR_DTYPE_COUNT] = {0};
    int n_by_type[HR_DTYPE_COUNT] = {0};
    for (int32_t i = 0; i < in.n_tensors; i++) {
        hr_tensor_desc t;
        hr_model_tensor(m, i, &t);
        by_type[t.dtype] += t.n_bytes;
        n_by_type[t.dtype]++;
    }
    printf("tensors        %d, %s as stored\n", in.n_tensors,
           cli_bytes(in.weight_bytes, b1, sizeof b1));
    for (int t = 0; t < HR_DTYPE_COUNT; t++)
        if (n_by_type[t])
            printf("  %-6s %5d tensors  %s\n", hr_dtype_name((hr_dtype)t), n_by_type[t],
                   cli_bytes(by_type[t], b1, sizeof b1));
    printf("weight memory by dtype (matrices in the dtype, norms f32):\n");
    static const hr_dtype as[] = {HR_DTYPE_F32, HR_DTYPE_BF16, HR_DTYPE_F16, HR_DTYPE_Q8_0,
                                  HR_DTYPE_Q6_K, HR_DTYPE_Q4_K, HR_DTYPE_Q4_1, HR_DTYPE_Q4_0};
    for (size_t i = 0; i < sizeof as / sizeof as[0]; i++) {
        uint64_t b;
        if (hr_model_weight_bytes_as(m, as[i], &b))
            printf("  %-6s %s\n", hr_dtype_name(as[i]), cli_bytes(b, b2, sizeof b2));
        else
            printf("  %-6s n/a (rows not a multiple of %lld)\n", hr_dtype_name(as[i]),
                   (long long)hr_dtype_block_elems(as[i]));
    }
    const char *tmpl = hr_model_chat_template(m);
    if (tmpl)
        printf("chat template:\n%s\n", tmpl);
    if (list) {
        printf("tensors:\n");
        for (int32_t i = 0; i < in.n_tensors; i++) {
            hr_tensor_desc t;
            hr_model_tensor(m, i, &t);
            printf("  %-32s %-5s [", t.name, hr_dtype_name(t.dtype));
            for (int d = 0; d < t.n_dim; d++)
                printf(d ? ", %lld" : "%lld", (long long)t.ne[d]);
            printf("]  %s\n", cli_bytes(t.n_bytes, b1, sizeof b1));
        }
    }
    hr_model_free(m);
    return 0;
}
