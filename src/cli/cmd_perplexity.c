/*
 * cmd_perplexity.c — `headroom perplexity -f FILE`: exp of the mean negative
 * log-likelihood of the file's tokens.
 *
 * The file is tokenized with BOS and cut into consecutive windows of --ctx
 * tokens (the last may be shorter); each window is scored from its second
 * token, given the tokens before it in the same window. Default window: the
 * model's context capped at PPL_DEFAULT_WINDOW and at the text: a window is
 * one progress line, and a whole 8k window on a small CPU is a minute of
 * silence (attention is quadratic in it).
 *
 * --kl-base MODEL scores the same windows with a second model (normally the
 * 16-bit original of a quantized one) and compares the two next-token
 * distributions at every scored position: the mean KL divergence
 * KL(base || model) = sum_v p_base(v) (log p_base(v) - log p(v)), in nats,
 * and the share of positions whose most likely token is the same; both
 * perplexities are printed. Log-softmax in double.
 */
#include "cli/cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PPL_DEFAULT_WINDOW 2048

static void help(FILE *f) {
    fprintf(f, "usage: headroom perplexity [-m PATH] -f FILE [--ctx N] [options]\n\n"
               "Scores FILE in consecutive windows of --ctx tokens (default: the\n"
               "model's context, at most 2048) and prints 'perplexity: X' last.\n"
               "  -f FILE          the text\n"
               "  --batch N        rows per step (default 512)\n"
               "  --kl-base MODEL  also score with MODEL (e.g. the 16-bit original of a\n"
               "                   quantized -m) and print the mean KL divergence from\n"
               "                   it and the top-1 agreement\n");
    cli_engine_help(f, CLI_PERPLEXITY);
}

static char *read_file(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 65536 + 1 > cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(fp);
                return NULL;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, fp);
        n += got;
        if (got == 0)
            break;
    }
    fclose(fp);
    buf[n] = '\0';
    *len = n;
    return buf;
}

static void progress(int64_t done, int64_t total, double ppl, void *user) {
    (void)user;
    fprintf(stderr, "[%lld/%lld tokens] %.6f\n", (long long)done, (long long)total, ppl);
}

/* log-softmax of a row of n logits into out (double) */
static void log_softmax(const float *x, int32_t n, double *out) {
    double mx = -INFINITY, sum = 0.0;
    for (int32_t i = 0; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    for (int32_t i = 0; i < n; i++)
        sum += exp((double)x[i] - mx);
    const double lse = mx + log(sum);
    for (int32_t i = 0; i < n; i++)
        out[i] = (double)x[i] - lse;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        best = x[i] > x[best] ? i : best;
    return best;
}

/* Scores the windows with both engines and prints perplexities, mean KL
 * and top-1 agreement. Returns 0 on success. */
static int compare(hr_engine *e, hr_engine *base, const int32_t *ids, int64_t n, int32_t ctx,
                   int32_t n_vocab) {
    hr_error err;
    double *nll = malloc(sizeof(double) * (size_t)ctx), *nll_b = malloc(sizeof(double) * (size_t)ctx);
    float *lg = malloc(sizeof(float) * (size_t)ctx * (size_t)n_vocab);
    float *lg_b = malloc(sizeof(float) * (size_t)ctx * (size_t)n_vocab);
    double *lp = malloc(sizeof(double) * (size_t)n_vocab), *lp_b = malloc(sizeof(double) * (size_t)n_vocab);
    int rc = 1;
    if (!nll || !nll_b || !lg || !lg_b || !lp || !lp_b) {
        cli_error("perplexity: out of memory for two windows of logits");
        goto done;
    }
    double sum = 0, sum_b = 0, kl = 0, kl_max = 0;
    int64_t count = 0, same_top = 0;
    for (int64_t start = 0; start + 1 < n; start += ctx) {
        const int32_t len = (int32_t)(n - start < ctx ? n - start : ctx);
        if (len < 2)
            break;
        if (hr_engine_score(e, ids + start, len, nll, lg, &err) != HR_OK ||
            hr_engine_score(base, ids + start, len, nll_b, lg_b, &err) != HR_OK) {
            cli_error("perplexity: the window from token %lld: %s", (long long)start, err.msg);
            goto done;
        }
        for (int32_t i = 0; i < len - 1; i++) {
            const float *a = lg + (size_t)i * (size_t)n_vocab, *b = lg_b + (size_t)i * (size_t)n_vocab;
            log_softmax(a, n_vocab, lp);
            log_softmax(b, n_vocab, lp_b);
            double k = 0;
            for (int32_t v = 0; v < n_vocab; v++)
                k += exp(lp_b[v]) * (lp_b[v] - lp[v]);
            kl += k;
            kl_max = k > kl_max ? k : kl_max;
            same_top += argmax(a, n_vocab) == argmax(b, n_vocab);
            sum += nll[i];
            sum_b += nll_b[i];
        }
        count += len - 1;
        const double c = (double)count;
        fprintf(stderr, "[%lld/%lld tokens] %.6f (base %.6f), mean KL %.6f\n",
                (long long)(start + len), (long long)n, exp(sum / c), exp(sum_b / c), kl / c);
    }
    const double c = (double)count;
    const double ppl = exp(sum / c), ppl_b = exp(sum_b / c);
    printf("base perplexity: %.10g\n", ppl_b);
    printf("perplexity delta: %+.4f%%\n", 100.0 * (ppl - ppl_b) / ppl_b);
    printf("mean KL divergence: %.6g nats (largest %.6g)\n", kl / c, kl_max);
    printf("top-1 agreement: %.4f%% of %lld positions\n", 100.0 * (double)same_top / c,
           (long long)count);
    printf("perplexity: %.10g\n", ppl);
    rc = 0;
done:
    free(nll);
    free(nll_b);
    free(lg);
    free(lg_b);
    free(lp);
    free(lp_b);
    return rc;
}

int cmd_perplexity(int argc, char **argv) {
    cli_engine_opts o;
    cli_engine_opts_init(&o, CLI_PERPLEXITY);
    const char *file = NULL, *kl_base = NULL;
    for (int i = 1; i < argc; i++) {
        int64_t n;
        int r = cli_engine_option(argc, argv, &i, &o);
        if (r < 0)
            return 1;
        if (r > 0)
            continue;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            help(stdout);
            return 0;
        } else if (strcmp(argv[i], "-f") == 0 || strcmp(argv[i], "--file") == 0) {
            if (!cli_value(argc, argv, &i, &file))
                return 1;
        } else if (strcmp(argv[i], "--kl-base") == 0) {
            if (!cli_value(argc, argv, &i, &kl_base))
                return 1;
        } else if (strcmp(argv[i], "--batch") == 0) {
            if (!cli_int(argc, argv, &i, 1, 1 << 16, &n))
                return 1;
            o.ep.n_batch = (int32_t)n;
        } else {
            cli_error("perplexity: unknown option '%s'", argv[i]);
            help(stderr);
            return 1;
        }
    }
    if (!file) {
        cli_error("perplexity: a text file is needed (-f FILE)");
        return 1;
    }
    if (o.synthetic) {
        cli_error("perplexity: a synthetic model has no tokenizer");
        return 1;
    }
    if (!cli_budget(&o))
        return 1;
    hr_error err;
    hr_model *m = NULL, *mb = NULL;
    hr_engine *e = NULL, *eb = NULL;
    int32_t *ids = NULL;
    size_t len = 0;
    int rc = 1;
    char *text = read_file(file, &len);
    if (!text) {
        cli_error("perplexity: cannot read %s", file);
        return 1;
    }
    if (cli_load_model(&o, false, &m, &err) != HR_OK) {
        cli_error("%s", err.msg);
        goto done;
    }
    const hr_tokenizer *tok = hr_model_tokenizer(m);
    if (!tok) {
        cli_error("perplexity: the model has no tokenizer");
        goto done;
    }
    hr_tokenize_params tp = hr_tokenize_params_default();
    tp.add_bos = 1;
    tp.parse_special = false; /* the file is plain text */
    size_t n_ids = 0;
    if (cli_tokenize(tok, text, len, &tp, &ids, &n_ids, &err) != HR_OK) {
        cli_error("perplexity: %s", err.msg);
        goto done;
    }
    if (n_ids < 2 || n_ids > INT32_MAX) {
        cli_error("perplexity: %s gives %zu tokens; at least 2 are needed", file, n_ids);
        goto done;
    }
    hr_model_info in;
    hr_model_get_info(m, &in);
    int32_t ctx = o.ep.n_ctx > 0                      ? o.ep.n_ctx
                  : in.n_ctx_train > PPL_DEFAULT_WINDOW ? PPL_DEFAULT_WINDOW
                                                        : in.n_ctx_train;
    if ((size_t)ctx > n_ids)
        ctx = (int32_t)n_ids;
    o.ep.n_ctx = ctx;
    o.ep.logits_all = true;
    if (hr_engine_create(m, &o.ep, &e, &err) != HR_OK) {
        cli_error("%s", err.msg);
        goto done;
    }
    cli_device_line(e, &o);
    if (kl_base) {
        hr_model_params mp = hr_model_params_default();
        hr_model_info ib;
        if (hr_model_load(kl_base, &mp, &mb, &err) != HR_OK ||
            hr_engine_create(mb, &o.ep, &eb, &err) != HR_OK) {
            cli_error("perplexity: --kl-base: %s", err.msg);
            goto done;
        }
        hr_model_get_info(mb, &ib);
        if (ib.n_vocab != in.n_vocab) {
            cli_error("perplexity: --kl-base %s has %d vocabulary entries, the model %d",
                      kl_base, ib.n_vocab, in.n_vocab);
            goto done;
        }
        fprintf(stderr, "perplexity: %zu tokens, windows of %d, against %s\n", n_ids, ctx,
                kl_base);
        rc = compare(e, eb, ids, (int64_t)n_ids, ctx, in.n_vocab);
        goto done;
    }
    double ppl;
    fprintf(stderr, "perplexity: %zu tokens, %zu windows of %d\n", n_ids,
            (n_ids - 1 + (size_t)ctx - 2) / (size_t)ctx, ctx);
    if (hr_engine_perplexity(e, ids, (int64_t)n_ids, ctx, &ppl, progress, NULL, &err) != HR_OK) {
        cli_error("perplexity: %s", err.msg);
        goto done;
    }
    printf("perplexity: %.10g\n", ppl);
    rc = 0;
done:
    free(ids);
    free(text);
    hr_engine_free(e);
    hr_engine_free(eb);
    hr_model_free(m);
    hr_model_free(mb);
    return rc;
}
