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
 */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PPL_DEFAULT_WINDOW 2048

static void help(FILE *f) {
    fprintf(f, "usage: headroom perplexity [-m PATH] -f FILE [--ctx N] [options]\n\n"
               "Scores FILE in consecutive windows of --ctx tokens (default: the\n"
               "model's context, at most 2048) and prints 'perplexity: X' last.\n"
               "  -f FILE          the text\n"
               "  --batch N        rows per step (default 512)\n");
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

int cmd_perplexity(int argc, char **argv) {
    cli_engine_opts o;
    cli_engine_opts_init(&o, CLI_PERPLEXITY);
    const char *file = NULL;
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
    hr_model *m = NULL;
    hr_engine *e = NULL;
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
    hr_model_free(m);
    return rc;
}
