/*
 * cmd_plan.c — `headroom plan`: the memory an engine would hold, by part,
 * before loading any weight; whether it fits; what would fit when not.
 * Exit status 0 when it fits (every value of a list), 2 when not, 1 on bad input.
 *
 * --ctx, --parallel and --mem also take a comma-separated list (a sweep):
 * each value is handed to the shared engine-option parser on its own and
 * planned separately, one line or JSON object per value. --svg FILE draws the plan
 * (and, when it does not fit, the plan of each suggested setting, each
 * computed by hr_plan_compute, not guessed) or the sweep's plans as stacked
 * bars against the budget (plan_svg.c).
 */
#include "cli/cli.h"
#include "cli/plan_svg.h"
#include "backend/packed.h" /* packed_type_of: what the GPU keeps packed */

#include <stdio.h>
#include <string.h>

/* A sweep of --ctx, --parallel or --mem: at most this many values, as many
 * bars as a picture holds legibly. Each value is kept as text and applied
 * through the shared option parser, so ranges and messages are the
 * single-value ones. */
enum { MAX_SWEEP = 16 };
typedef struct {
    char flag[16]; /* "--ctx", "--parallel" or "--mem"; "": no sweep */
    char text[MAX_SWEEP][32];
    int n;
} plan_sweep;

static void help(FILE *f) {
    fprintf(f, "usage: headroom plan [-m PATH | --synthetic SHAPE] [--device cuda|cpu]\n"
               "                     [--mem SIZE] [--ctx N] [--parallel N] [--dtype bf16|f16]\n"
               "                     [--kv-dtype TYPE] [--json] [--svg FILE]\n\n"
               "Prints the bytes of each part (weights as stored, KV cache, activations,\n"
               "workspaces, CUDA graphs, the runtime's own overhead), their total, the\n"
               "budget and a verdict, without loading weights. With --mem no GPU is needed.\n"
               "Without --ctx: the largest context that fits, up to the model's.\n"
               "Exit status: 0 fits (every value of a list), 2 does not fit, 1 bad input.\n"
               "--ctx, --parallel and --mem take a list (--ctx 2048,4096,8192): one plan\n"
               "for each value (one of the three at a time).\n"
               "  --json             one JSON object instead of the table (one a line in a\n"
               "                     sweep)\n"
               "  --svg FILE         also draw the plan as stacked bars against the budget\n"
               "                     (with the suggested settings' plans, or one bar per\n"
               "                     value of a sweep); open it in a browser\n");
    cli_engine_help(f, CLI_PLAN);
}

/* How the device holds the weights (the matrices' types, largest first): on
 * the cpu as the file stores them; on cuda packed where the GPU has kernels
 * for the type (backend/packed.h), else expanded to the compute type. */
static void weights_note(const hr_model *m, const cli_engine_opts *o, hr_device dev,
                         char *buf, size_t cap) {
    hr_model_info in;
    hr_model_get_info(m, &in);
    uint64_t by[HR_DTYPE_COUNT] = {0};
    for (int32_t i = 0; i < in.n_tensors; i++) {
        hr_tensor_desc t;
        if (hr_model_tensor(m, i, &t) != HR_OK || t.n_dim < 2)
            continue;
        hr_dtype as = t.dtype;
        if (dev == HR_DEVICE_CUDA &&
            (o->ep.expand_weights || packed_type_of(t.dtype) == PACKED_W16))
            as = o->ep.dtype;
        by[as] += t.n_bytes;
    }
    int n = snprintf(buf, cap, dev == HR_DEVICE_CUDA ? "as the GPU stores them (" : "as stored (");
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

static void print_json(const cli_engine_opts *o, const hr_plan *pl) {
    printf("{\"model\": \"%s\", \"device\": \"%s\", \"n_ctx\": %d, \"parallel\": %d, "
           "\"weights_bytes\": %llu, \"weights_mapped_bytes\": %llu, \"kv_bytes\": %llu, "
           "\"kv_bytes_per_token\": %llu, \"kv_bytes_per_seq\": %llu, "
           "\"activation_bytes\": %llu, \"workspace_bytes\": %llu, \"graph_bytes\": %llu, "
           "\"overhead_bytes\": %llu, \"total_bytes\": %llu, \"budget_bytes\": %llu, "
           "\"fits\": %s, \"suggestions\": {\"max_ctx\": %d, \"max_parallel\": %d, "
           "\"kv_dtype\": \"%s\", \"kv_total_bytes\": %llu, \"weights\": \"%s\", "
           "\"weights_total_bytes\": %llu}}\n",
           o->synthetic ? o->synthetic : o->model,
           pl->device == HR_DEVICE_CUDA ? "cuda" : "cpu", pl->n_ctx, pl->n_seq_max,
           (unsigned long long)pl->weights, (unsigned long long)pl->weights_mapped,
           (unsigned long long)pl->kv, (unsigned long long)pl->kv_per_token,
           (unsigned long long)pl->kv_per_seq, (unsigned long long)pl->activations,
           (unsigned long long)(pl->workspace), (unsigned long long)pl->graphs,
           (unsigned long long)(pl->runtime + pl->graphs), (unsigned long long)pl->total,
           (unsigned long long)pl->budget, pl->fits ? "true" : "false", pl->fit_max_ctx,
           pl->fit_max_parallel,
           pl->fit_kv_dtype == HR_DTYPE_COUNT ? "" : hr_dtype_name(pl->fit_kv_dtype),
           (unsigned long long)pl->fit_kv_total,
           pl->fit_weights == HR_DTYPE_COUNT ? "" : hr_dtype_name(pl->fit_weights),
           (unsigned long long)pl->fit_weights_total);
}

static void print_table(const hr_model *m, const cli_engine_opts *o, const hr_plan *pl) {
    hr_model_info in;
    hr_model_get_info(m, &in);
    char b[6][32];
    printf("plan: %s on %s, %d sequence%s of %d tokens%s\n", in.name,
           pl->device == HR_DEVICE_CUDA ? "cuda" : "cpu", pl->n_seq_max,
           pl->n_seq_max == 1 ? "" : "s", pl->n_ctx,
           o->ep.n_ctx != 0 ? ""
           : pl->fits       ? " (the most that fits)"
                            : " (the model's own context)");
    if (pl->n_ctx > in.n_ctx_train)
        printf("note: the model was trained for %d tokens; text degrades past that\n",
               in.n_ctx_train);
    char wnote[96];
    weights_note(m, o, pl->device, wnote, sizeof wnote);
    if (pl->weights_mapped)
        row("weights", pl->weights_mapped, "as stored, read from the file mapping");
    row(pl->weights_mapped ? "norms, biases" : "weights", pl->weights,
        pl->weights_mapped ? "copied to f32" : wnote);
    snprintf(b[0], 32, "%.1f KiB per token, ", (double)pl->kv_per_token / 1024.0);
    char note[128];
    snprintf(note, sizeof note, "%s%s per sequence", b[0], cli_bytes(pl->kv_per_seq, b[1], 32));
    row("KV cache", pl->kv, note);
    row("activations", pl->activations, "the largest step's tensors");
    row("workspace", pl->workspace, "matmul, attention, sampling, step metadata");
    if (pl->device == HR_DEVICE_CUDA)
        row("CUDA graphs", pl->graphs, "decode graphs (measured on the H200)");
    row("runtime", pl->runtime,
        pl->device == HR_DEVICE_CUDA ? "CUDA context + cuBLASLt (measured on the H200)"
                                     : "threads and the library's tables");
    row("total", pl->total, "");
    row("budget", pl->budget, o->mem ? "--mem" : "free memory less a reserve");
    printf("  %-12s %12s\n", "left",
           pl->fits ? cli_bytes(pl->budget - pl->total, b[2], 32) : "none");
    printf("verdict: %s\n", pl->fits ? "fits" : "does not fit");
    if (pl->fits)
        return;
    printf("what would fit:\n");
    if (pl->fit_max_ctx > 0)
        printf("  --ctx %d (at --parallel %d)\n", pl->fit_max_ctx, pl->n_seq_max);
    if (pl->fit_max_parallel > 0)
        printf("  --parallel %d (at --ctx %d)\n", pl->fit_max_parallel, pl->n_ctx);
    if (pl->fit_kv_dtype != HR_DTYPE_COUNT)
        printf("  --kv-dtype %s (total %s)\n", hr_dtype_name(pl->fit_kv_dtype),
               cli_bytes(pl->fit_kv_total, b[3], 32));
    if (pl->fit_weights != HR_DTYPE_COUNT)
        printf("  weights as %s (headroom convert --type %s; total %s)\n",
               hr_dtype_name(pl->fit_weights), hr_dtype_name(pl->fit_weights),
               cli_bytes(pl->fit_weights_total, b[4], 32));
    if (pl->fit_max_ctx == 0 && pl->fit_max_parallel == 0 &&
        pl->fit_kv_dtype == HR_DTYPE_COUNT && pl->fit_weights == HR_DTYPE_COUNT)
        printf("  nothing at these settings: the weights alone need %s\n",
               cli_bytes(pl->weights + pl->weights_mapped, b[5], 32));
}

/* Sets value k of the sweep in o, as if given alone on the command line
 * (for --mem, o->mem points into sw, which outlives o). */
static bool sweep_apply(plan_sweep *sw, int k, cli_engine_opts *o) {
    char *av[2] = {sw->flag, sw->text[k]};
    int j = 0;
    return cli_engine_option(2, av, &j, o) == 1 && cli_budget(o);
}

/* Reads "--ctx 2048,4096,..." (argv[*i] the flag, argv[*i + 1] the list)
 * and checks each value on a copy of o. Returns false with a message. */
static bool parse_sweep(char **argv, int *i, const cli_engine_opts *o, plan_sweep *sw) {
    if (sw->flag[0]) {
        cli_error("plan: one list at a time (%s was one already)", sw->flag);
        return false;
    }
    snprintf(sw->flag, sizeof sw->flag, "%s", strcmp(argv[*i], "-c") == 0 ? "--ctx" : argv[*i]);
    const char *list = argv[++*i];
    while (*list) {
        const char *end = strchr(list, ',');
        size_t len = end ? (size_t)(end - list) : strlen(list);
        if (len == 0 || len >= sizeof sw->text[0] || sw->n == MAX_SWEEP) {
            cli_error("plan: %s: '%s' is not a list of at most %d values", sw->flag, argv[*i],
                      MAX_SWEEP);
            return false;
        }
        memcpy(sw->text[sw->n], list, len);
        sw->text[sw->n][len] = '\0';
        cli_engine_opts check = *o;
        if (!sweep_apply(sw, sw->n++, &check))
            return false;
        list += len + (end ? 1 : 0);
    }
    return true;
}

/* The plan with one setting changed; the caller's params stay as they are. */
static hr_status plan_with(const hr_model *m, const hr_engine_params *ep, int32_t n_ctx,
                           int32_t n_seq, hr_dtype kv, hr_plan *out, hr_error *err) {
    hr_engine_params p = *ep;
    p.n_ctx = n_ctx;
    p.n_seq_max = n_seq;
    p.kv_dtype = kv;
    return hr_plan_compute(m, &p, out, err);
}

static const char *fit_note(const hr_plan *p) {
    return p->fits ? "fits" : "does not fit";
}

/* bars: the plan asked for, then each suggested setting's own plan. */
static int suggestion_bars(const hr_model *m, const hr_engine_params *ep, const hr_plan *pl,
                           plan_svg_bar *bars, hr_error *err) {
    int n = 0;
    bars[n].plan = *pl;
    snprintf(bars[n].label, sizeof bars[n].label, "asked");
    snprintf(bars[n++].note, sizeof bars[0].note, "%s", fit_note(pl));
    if (pl->fits)
        return n;
    if (pl->fit_max_ctx > 0) {
        if (plan_with(m, ep, pl->fit_max_ctx, pl->n_seq_max, ep->kv_dtype, &bars[n].plan,
                      err) != HR_OK)
            return -1;
        snprintf(bars[n].label, sizeof bars[n].label, "--ctx %d", pl->fit_max_ctx);
        snprintf(bars[n].note, sizeof bars[n].note, "%s", fit_note(&bars[n].plan));
        n++;
    }
    if (pl->fit_max_parallel > 0) {
        if (plan_with(m, ep, pl->n_ctx, pl->fit_max_parallel, ep->kv_dtype, &bars[n].plan,
                      err) != HR_OK)
            return -1;
        snprintf(bars[n].label, sizeof bars[n].label, "--parallel %d", pl->fit_max_parallel);
        snprintf(bars[n].note, sizeof bars[n].note, "%s", fit_note(&bars[n].plan));
        n++;
    }
    if (pl->fit_kv_dtype != HR_DTYPE_COUNT) {
        if (plan_with(m, ep, pl->n_ctx, pl->n_seq_max, pl->fit_kv_dtype, &bars[n].plan, err) !=
            HR_OK)
            return -1;
        snprintf(bars[n].label, sizeof bars[n].label, "--kv-dtype %s",
                 hr_dtype_name(pl->fit_kv_dtype));
        snprintf(bars[n].note, sizeof bars[n].note, "%s", fit_note(&bars[n].plan));
        n++;
    }
    return n;
}

int cmd_plan(int argc, char **argv) {
    cli_engine_opts o;
    cli_engine_opts_init(&o, CLI_PLAN);
    bool json = false;
    const char *svg = NULL;
    plan_sweep sw = {.n = 0};
    for (int i = 1; i < argc; i++) {
        bool list_flag = strcmp(argv[i], "--ctx") == 0 || strcmp(argv[i], "-c") == 0 ||
                         strcmp(argv[i], "--parallel") == 0 || strcmp(argv[i], "--mem") == 0;
        if (list_flag && i + 1 < argc && strchr(argv[i + 1], ',')) {
            if (!parse_sweep(argv, &i, &o, &sw))
                return 1;
            continue;
        }
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
        } else if (strcmp(argv[i], "--svg") == 0) {
            if (!cli_value(argc, argv, &i, &svg))
                return 1;
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
    hr_model_info in;
    hr_model_get_info(m, &in);
    plan_svg_bar bars[MAX_SWEEP]; /* the plans drawn, one a bar */
    int n_bars = 0, rc = 1;
    bool all_fit = true;
    char title[256];
    if (sw.flag[0]) {
        /* a sweep: one plan per value, the other settings as given */
        for (int k = 0; k < sw.n; k++) {
            hr_plan *p = &bars[k].plan;
            cli_engine_opts ok = o;
            if (!sweep_apply(&sw, k, &ok))
                goto done;
            if (hr_plan_compute(m, &ok.ep, p, &err) != HR_OK) {
                cli_error("plan: %s", err.msg);
                goto done;
            }
            snprintf(bars[k].label, sizeof bars[k].label, "%s %s", sw.flag, sw.text[k]);
            snprintf(bars[k].note, sizeof bars[k].note, "%s", fit_note(p));
            all_fit = all_fit && p->fits;
            if (json) {
                print_json(&ok, p);
            } else {
                char b[2][32];
                printf("%s %-8s %d x %d tokens  total %12s  budget %12s  %s\n", sw.flag,
                       sw.text[k], p->n_seq_max, p->n_ctx, cli_bytes(p->total, b[0], 32),
                       cli_bytes(p->budget, b[1], 32), fit_note(p));
            }
        }
        n_bars = sw.n;
        const hr_plan *p0 = &bars[0].plan;
        const char *dev = p0->device == HR_DEVICE_CUDA ? "cuda" : "cpu";
        if (strcmp(sw.flag, "--ctx") == 0)
            snprintf(title, sizeof title, "%s on %s, %d sequence%s, by context", in.name, dev,
                     p0->n_seq_max, p0->n_seq_max == 1 ? "" : "s");
        else if (strcmp(sw.flag, "--parallel") == 0)
            snprintf(title, sizeof title, "%s on %s, %d tokens each, by sequences", in.name,
                     dev, p0->n_ctx);
        else
            snprintf(title, sizeof title, "%s on %s, %d sequence%s of %d tokens, by budget",
                     in.name, dev, p0->n_seq_max, p0->n_seq_max == 1 ? "" : "s", p0->n_ctx);
    } else {
        hr_plan pl;
        if (hr_plan_compute(m, &o.ep, &pl, &err) != HR_OK) {
            cli_error("plan: %s", err.msg);
            goto done;
        }
        all_fit = pl.fits;
        if (json)
            print_json(&o, &pl);
        else
            print_table(m, &o, &pl);
        if (svg && (n_bars = suggestion_bars(m, &o.ep, &pl, bars, &err)) < 0) {
            cli_error("plan: %s", err.msg);
            goto done;
        }
        snprintf(title, sizeof title, "%s on %s: %d sequence%s of %d tokens", in.name,
                 pl.device == HR_DEVICE_CUDA ? "cuda" : "cpu", pl.n_seq_max,
                 pl.n_seq_max == 1 ? "" : "s", pl.n_ctx);
    }
    cli_dtype_note(&o, bars[0].plan.device);
    if (svg) {
        char msg[512];
        if (!plan_svg_write(svg, title, bars, n_bars, msg, sizeof msg)) {
            cli_error("plan: %s", msg);
            goto done;
        }
    }
    rc = all_fit ? 0 : 2;
done:
    hr_model_free(m);
    return rc;
}
