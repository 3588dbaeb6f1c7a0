/*
 * cmd_plan.c — `headroom plan`: the memory an engine would hold, by part,
 * before loading any weight; whether it fits; what would fit when not.
 * Exit status 0 when it fits, 2 when it does not, 1 on bad input.
 */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

static void help(FILE *f) {
    fprintf(f, "usage: headroom plan [-m PATH | --synthetic SHAPE] [--device cuda|cpu]\n"
               "                     [--mem SIZE] [--ctx N] [--parallel N] [--dtype bf16|f16]\n"
               "                     [--kv-dtype TYPE] [--json]\n\n"
               "Prints the bytes of each part (weights as stored, KV cache, activations,\n"
               "workspaces, CUDA graphs, the runtime's own overhead), their total, the\n"
               "budget and a verdict, without loading weights. With --mem no GPU is needed.\n"
               "Without --ctx: the largest context that fits, up to the model's.\n"
               "Exit status: 0 fits, 2 does not fit, 1 bad input.\n"
               "  --json             one JSON object instead of the table\n");
    cli_engine_help(f, CLI_PLAN);
}

/* How the device holds the weights: on cuda expanded to the compute type;
 * on the cpu as the file stores them (the matrices' types, largest first). */
static void weights_note(const hr_model *m, const cli_engine_opts *o, hr_device dev,
                         char *buf, size_t cap) {
    if (dev == HR_DEVICE_CUDA) {
        snprintf(buf, cap, "as the GPU stores them (%s)", hr_dtype_name(o->ep.dtype));
        return;
    }
    hr_model_info in;
    hr_model_get_info(m, &in);
    uint64_t by[HR_DTYPE_COUNT] = {0};
    for (int32_t i = 0; i < in.n_tensors; i++) {
        hr_tensor_desc t;
        if (hr_model_tensor(m, i, &t) == HR_OK && t.n_dim >= 2)
            by[t.dtype] += t.n_bytes;
    }
    int n = snprintf(buf, cap, "as stored (");
    for (int k = 0; k < 3; k++) { /* the three largest types are enough to say it */
        int best = -1;
        for (int t = 0; t < HR_DTYPE_COUNT; t++)
            if (by[t] && (best < 0 || by[t] > by[best]))
                best = t;
        if (best < 0)
            break;
        n += snprintf(buf + n, n < (int)cap ? cap - (size_t)n : 0, "%s%s", k ? ", " : "",
                      hr_dtype_name((hr_dtype)best));
        by[best] = 0;
    }
    snprintf(buf + n, n < (int)cap ? cap - (size_t)n : 0, " matrices)");
}

static void row(const char *name, uint64_t n, const char *note) {
    char b[32];
    printf("  %-12s %12s   %s\n", name, cli_bytes(n, b, sizeof b), note);
}

int cmd_plan(int argc, char **argv) {
    cli_engine_opts o;
    cli_engine_opts_init(&o, CLI_PLAN);
    bool json = false;
    for (int i = 1; i < argc; i++) {
        int r = cli_engine_option(argc, argv, &i, &o);
        if (r < 0)
            return 1;
        if (r > 0)
            continue;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            help(stdout);
            return 0;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else {
            cli_error("plan: unknown option '%s'", argv[i]);
            help(stderr);
            return 1;
        }
    }
    if (!cli_budget(&o))
        return 1;
    hr_error err;
    hr_model *m = NULL;
    if (cli_load_model(&o, true, &m, &err) != HR_OK) {
        cli_error("%s", err.msg);
        return 1;
    }
    hr_plan pl;
    int rc = 1;
    if (hr_plan_compute(m, &o.ep, &pl, &err) != HR_OK) {
        cli_error("plan: %s", err.msg);
        goto done;
    }
    hr_model_info in;
    hr_model_get_info(m, &in);
    cli_dtype_note(&o, pl.device);
    const char *dev = pl.device == HR_DEVICE_CUDA ? "cuda" : "cpu";
    char b[6][32];
    if (json) {
        printf("{\"model\": \"%s\", \"device\": \"%s\", \"n_ctx\": %d, \"parallel\": %d, "
               "\"weights_bytes\": %llu, \"weights_mapped_bytes\": %llu, \"kv_bytes\": %llu, "
               "\"kv_bytes_per_token\": %llu, \"kv_bytes_per_seq\": %llu, "
               "\"activation_bytes\": %llu, \"workspace_bytes\": %llu, \"graph_bytes\": %llu, "
               "\"overhead_bytes\": %llu, \"total_bytes\": %llu, \"budget_bytes\": %llu, "
               "\"fits\": %s, \"suggestions\": {\"max_ctx\": %d, \"max_parallel\": %d, "
               "\"kv_dtype\": \"%s\", \"kv_total_bytes\": %llu, \"weights\": \"%s\", "
               "\"weights_total_bytes\": %llu}}\n",
               o.synthetic ? o.synthetic : o.model, dev, pl.n_ctx, pl.n_seq_max,
               (unsigned long long)pl.weights, (unsigned long long)pl.weights_mapped,
               (unsigned long long)pl.kv, (unsigned long long)pl.kv_per_token,
               (unsigned long long)pl.kv_per_seq, (unsigned long long)pl.activations,
               (unsigned long long)(pl.workspace), (unsigned long long)pl.graphs,
               (unsigned long long)(pl.runtime + pl.graphs), (unsigned long long)pl.total,
               (unsigned long long)pl.budget, pl.fits ? "true" : "false", pl.fit_max_ctx,
               pl.fit_max_parallel,
               pl.fit_kv_dtype == HR_DTYPE_COUNT ? "" : hr_dtype_name(pl.fit_kv_dtype),
               (unsigned long long)pl.fit_kv_total,
               pl.fit_weights == HR_DTYPE_COUNT ? "" : hr_dtype_name(pl.fit_weights),
               (unsigned long long)pl.fit_weights_total);
    } else {
        printf("plan: %s on %s, %d sequence%s of %d tokens%s\n", in.name, dev, pl.n_seq_max,
               pl.n_seq_max == 1 ? "" : "s", pl.n_ctx,
               o.ep.n_ctx != 0 ? ""
               : pl.fits       ? " (the most that fits)"
                               : " (the model's own context)");
        if (pl.n_ctx > in.n_ctx_train)
            printf("note: the model was trained for %d tokens; text degrades past that\n",
                   in.n_ctx_train);
        char wnote[96];
        weights_note(m, &o, pl.device, wnote, sizeof wnote);
        if (pl.weights_mapped)
            row("weights", pl.weights_mapped, "as stored, read from the file mapping");
        row(pl.weights_mapped ? "norms, biases" : "weights", pl.weights,
            pl.weights_mapped ? "copied to f32" : wnote);
        snprintf(b[0], 32, "%.1f KiB per token, ", (double)pl.kv_per_token / 1024.0);
        char note[128];
        snprintf(note, sizeof note, "%s%s per sequence", b[0],
                 cli_bytes(pl.kv_per_seq, b[1], 32));
        row("KV cache", pl.kv, note);
        row("activations", pl.activations, "the largest step's tensors");
        row("workspace", pl.workspace, "matmul, attention, sampling, step metadata");
        if (pl.device == HR_DEVICE_CUDA)
            row("CUDA graphs", pl.graphs, "decode graphs (measured on the H200)");
        row("runtime", pl.runtime,
            pl.device == HR_DEVICE_CUDA ? "CUDA context + cuBLASLt (measured on the H200)"
                                        : "threads and the library's tables");
        row("total", pl.total, "");
        row("budget", pl.budget, o.mem ? "--mem" : "free memory less a reserve");
        printf("  %-12s %12s\n", "left",
               pl.fits ? cli_bytes(pl.budget - pl.total, b[2], 32) : "none");
        printf("verdict: %s\n", pl.fits ? "fits" : "does not fit");
        if (!pl.fits) {
            printf("what would fit:\n");
            if (pl.fit_max_ctx > 0)
                printf("  --ctx %d (at --parallel %d)\n", pl.fit_max_ctx, pl.n_seq_max);
            if (pl.fit_max_parallel > 0)
                printf("  --parallel %d (at --ctx %d)\n", pl.fit_max_parallel, pl.n_ctx);
            if (pl.fit_kv_dtype != HR_DTYPE_COUNT)
                printf("  --kv-dtype %s (total %s)\n", hr_dtype_name(pl.fit_kv_dtype),
                       cli_bytes(pl.fit_kv_total, b[3], 32));
            if (pl.fit_weights != HR_DTYPE_COUNT)
                printf("  weights as %s (headroom convert --type %s; total %s)\n",
                       hr_dtype_name(pl.fit_weights), hr_dtype_name(pl.fit_weights),
                       cli_bytes(pl.fit_weights_total, b[4], 32));
            if (pl.fit_max_ctx == 0 && pl.fit_max_parallel == 0 &&
                pl.fit_kv_dtype == HR_DTYPE_COUNT && pl.fit_weights == HR_DTYPE_COUNT)
                printf("  nothing at these settings: the weights alone need %s\n",
                       cli_bytes(pl.weights + pl.weights_mapped, b[5], 32));
        }
    }
    rc = pl.fits ? 0 : 2;
done:
    hr_model_free(m);
    return rc;
}
