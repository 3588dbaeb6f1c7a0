/*
 * bench_kv_quality.c — what a KV cache type costs in quality and gives in
 * speed, on the cpu, through the public API (issue 42).
 *
 * Quality: the text (BOS + its tokens) is cut into windows of W tokens, each
 * a BOS then W - 1 tokens of text, consecutive. Every window is scored
 * (hr_engine_score, logits_all) once with an f32 KV cache, the reference,
 * and once per KV configuration (a type, or K:V types). Over the second half
 * of each window (positions W/2 .. W-2 predicting the next token, as
 * llama.cpp's perplexity scores, so every scored token has at least W/2 of
 * context in the cache) it reports perplexity, the mean KL divergence
 * KL(p_f32 || p_kv) of the next-token distributions, and top-1 agreement
 * (the argmax of the logits the same as the f32 cache's). Everything but the
 * KV type is the same: the weights, the matmul mode, the threads.
 *
 * Speed: per KV type, a prompt of --decode-ctx tokens (the text's) then
 * --gen greedy tokens; decode tok/s is timed from the first generated token
 * to the last, the median of --repeat rounds that take the types in turn
 * (after the first request the prompt is a prefix-cache hit, so the rounds
 * repeat the decode, not the prefill), on the wall clock and per second of
 * the process's CPU time: with --threads 1 the latter is the figure a busy
 * machine does not distort.
 *
 * Results: a table on stdout and, with --out, one JSON line per (context,
 * KV configuration) and per decode type, appended.
 *
 * Usage:
 *   bench_kv_quality MODEL TEXT [--ctx W [--windows N]]... [--kv LIST]
 *       [--decode-ctx N] [--decode-kv LIST] [--gen N] [--repeat N]
 *       [--threads N] [--exact] [--out FILE] [--machine TEXT] [--commit TEXT]
 *   LIST: comma-separated TYPE or K:V (f32, f16, bf16, q8_0, q4_0). --windows
 *   after a --ctx is that context's, before any the default of all.
 *   Defaults: --ctx 512, --windows 4, --kv f32,f16,bf16,q8_0,q4_0,q8_0:q4_0,
 *   q4_0:q8_0,f16:q8_0,f16:q4_0, --decode-kv f32,f16,bf16,q8_0,q4_0,q8_0:q4_0,
 *   --gen 64, --repeat 3; --commit: `git rev-parse --short HEAD` + "-dirty".
 */
#include "backend/registry.h"
#include "headroom.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_CFG = 16, MAX_CTX_LIST = 8 };

typedef struct {
    hr_dtype k, v;
    char name[24]; /* "q8_0" or "q8_0:q4_0" */
} kv_cfg;

typedef struct {
    const char *model, *text, *out, *machine;
    char commit[64];
    int32_t ctx[MAX_CTX_LIST], windows[MAX_CTX_LIST], n_ctx_list;
    int32_t decode_ctx, gen, repeat, threads;
    bool exact;
    kv_cfg kv[MAX_CFG], dec[MAX_CFG];
    int n_kv, n_dec;
} options;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU seconds of the whole process: with --threads 1 the work of a step,
 * whatever else the machine runs (a busy machine stretches wall time, and a
 * descheduled worker stalls a step of the spinning pool) */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool parse_type(const char *s, size_t n, hr_dtype *out) {
    char buf[16];
    if (n == 0 || n >= sizeof buf)
        return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    return hr_dtype_from_name(buf, out);
}

/* "f32,q8_0:q4_0" -> configurations */
static bool parse_list(const char *list, kv_cfg *cfg, int *n) {
    *n = 0;
    while (*list) {
        const char *end = strchr(list, ',');
        size_t len = end ? (size_t)(end - list) : strlen(list);
        const char *colon = memchr(list, ':', len);
        kv_cfg c;
        size_t kl = colon ? (size_t)(colon - list) : len;
        if (*n == MAX_CFG || !parse_type(list, kl, &c.k) ||
            !parse_type(colon ? colon + 1 : list, colon ? len - kl - 1 : len, &c.v))
            return false;
        if (c.k == c.v)
            snprintf(c.name, sizeof c.name, "%s", hr_dtype_name(c.k));
        else
            snprintf(c.name, sizeof c.name, "%s:%s", hr_dtype_name(c.k), hr_dtype_name(c.v));
        cfg[(*n)++] = c;
        list += len + (end ? 1 : 0);
    }
    return *n > 0;
}

static void usage(void) {
    fprintf(stderr,
            "usage: bench_kv_quality MODEL TEXT [--ctx W [--windows N]]... [--kv LIST]\n"
            "       [--decode-ctx N] [--decode-kv LIST] [--gen N] [--repeat N] [--threads N]\n"
            "       [--exact] [--out FILE] [--machine TEXT] [--commit TEXT]\n"
            "  LIST: comma-separated TYPE or K:V (f32, f16, bf16, q8_0, q4_0)\n");
}

static bool parse_args(int argc, char **argv, options *o) {
    if (argc < 3)
        return false;
    memset(o, 0, sizeof *o);
    o->model = argv[1];
    o->text = argv[2];
    int32_t windows = 4; /* before any --ctx: the default of every context */
    o->gen = 64;
    o->repeat = 3;
    o->machine = "cpu";
    const char *kv = "f32,f16,bf16,q8_0,q4_0,q8_0:q4_0,q4_0:q8_0,f16:q8_0,f16:q4_0";
    const char *dec = "f32,f16,bf16,q8_0,q4_0,q8_0:q4_0";
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--exact") == 0) {
            o->exact = true;
            continue;
        }
        if (!v)
            return false;
        i++;
        if (strcmp(a, "--ctx") == 0 && o->n_ctx_list < MAX_CTX_LIST) {
            o->windows[o->n_ctx_list] = windows;
            o->ctx[o->n_ctx_list++] = atoi(v);
        } else if (strcmp(a, "--windows") == 0) { /* after a --ctx: that context's */
            if (o->n_ctx_list > 0)
                o->windows[o->n_ctx_list - 1] = atoi(v);
            else
                windows = atoi(v);
        }
        else if (strcmp(a, "--kv") == 0)
            kv = v;
        else if (strcmp(a, "--decode-ctx") == 0)
            o->decode_ctx = atoi(v);
        else if (strcmp(a, "--decode-kv") == 0)
            dec = v;
        else if (strcmp(a, "--gen") == 0)
            o->gen = atoi(v);
        else if (strcmp(a, "--repeat") == 0)
            o->repeat = atoi(v);
        else if (strcmp(a, "--threads") == 0)
            o->threads = atoi(v);
        else if (strcmp(a, "--out") == 0)
            o->out = v;
        else if (strcmp(a, "--machine") == 0)
            o->machine = v;
        else if (strcmp(a, "--commit") == 0)
            snprintf(o->commit, sizeof o->commit, "%s", v);
        else
            return false;
    }
    if (o->n_ctx_list == 0) {
        o->windows[0] = windows;
        o->ctx[o->n_ctx_list++] = 512;
    }
    for (int i = 0; i < o->n_ctx_list; i++)
        if (o->ctx[i] < 4 || o->windows[i] < 1)
            return false;
    if (o->gen < 2 || o->repeat < 1 || !parse_list(kv, o->kv, &o->n_kv) ||
        !parse_list(dec, o->dec, &o->n_dec))
        return false;
    if (!o->commit[0]) { /* the tree measured: HEAD, and whether it has changes */
        FILE *p = popen("git rev-parse --short HEAD 2>/dev/null", "r");
        char head[48] = "";
        if (p) {
            if (!fgets(head, sizeof head, p))
                head[0] = '\0';
            pclose(p);
        }
        head[strcspn(head, "\n")] = '\0';
        snprintf(o->commit, sizeof o->commit, "%s-dirty", head[0] ? head : "unknown");
    }
    return true;
}

static hr_engine *make_engine(const hr_model *m, const options *o, const kv_cfg *c,
                              int32_t n_ctx, bool logits_all) {
    hr_engine_params ep = hr_engine_params_default();
    ep.device = HR_DEVICE_CPU;
    ep.n_threads = o->threads;
    ep.n_ctx = n_ctx;
    ep.n_batch = 512;
    ep.exact_matmul = o->exact;
    ep.logits_all = logits_all;
    ep.kv_dtype = c->k;
    ep.kv_dtype_v = c->v;
    hr_engine *e = NULL;
    hr_error err;
    if (hr_engine_create(m, &ep, &e, &err) != HR_OK) {
        fprintf(stderr, "kv %s: %s\n", c->name, err.msg);
        return NULL;
    }
    return e;
}

/* log-softmax of V logits into lp (double); the argmax */
static int32_t log_softmax(const float *x, int32_t V, double *lp) {
    int32_t best = 0;
    for (int32_t i = 1; i < V; i++)
        best = x[i] > x[best] ? i : best;
    double mx = x[best], sum = 0.0;
    for (int32_t i = 0; i < V; i++)
        sum += exp((double)x[i] - mx);
    const double lse = mx + log(sum);
    for (int32_t i = 0; i < V; i++)
        lp[i] = (double)x[i] - lse;
    return best;
}

typedef struct {
    double nll, kl, kl_max;
    int64_t n, top1;
    double seconds;
} quality;

static void iso_date(char *buf, size_t cap) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* A JSON number, or null where there is none (no f16 run to compare with) */
static const char *json_num(double v, char *buf, size_t cap) {
    if (isfinite(v))
        snprintf(buf, cap, "%.6g", v);
    else
        snprintf(buf, cap, "null");
    return buf;
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s && s[1] ? s + 1 : path;
}

/* The quality of every configuration at one window size. */
static int run_quality(const hr_model *m, const options *o, const int32_t *text_ids,
                       int64_t n_text, int32_t bos, int32_t W, int32_t windows, FILE *out) {
    hr_model_info info;
    hr_model_get_info(m, &info);
    const int32_t V = info.n_vocab, body = bos >= 0 ? W - 1 : W;
    if ((int64_t)windows * body > n_text) {
        windows = (int32_t)(n_text / body);
        fprintf(stderr, "the text holds %d windows of %d tokens\n", windows, W);
        if (windows < 1)
            return 1;
    }
    hr_engine *ref = make_engine(m, o, &(kv_cfg){HR_DTYPE_F32, HR_DTYPE_F32, "f32"}, W, true);
    hr_engine *eng[MAX_CFG] = {0};
    for (int c = 0; c < o->n_kv; c++)
        if (!(eng[c] = make_engine(m, o, &o->kv[c], W, true)))
            return 1;
    if (!ref)
        return 1;
    float *ref_logits = malloc((size_t)(W - 1) * (size_t)V * sizeof(float));
    float *logits = malloc((size_t)(W - 1) * (size_t)V * sizeof(float));
    double *nll = malloc((size_t)W * sizeof(double)), *ref_nll = malloc((size_t)W * sizeof(double));
    double *lp_ref = malloc((size_t)V * sizeof(double)), *lp = malloc((size_t)V * sizeof(double));
    int32_t *win = malloc((size_t)W * sizeof(int32_t));
    quality q[MAX_CFG], q_ref = {0};
    memset(q, 0, sizeof q);
    hr_error err;
    const int32_t first = W / 2; /* scored: the predictions at positions first .. W-2 */
    for (int32_t w = 0; w < windows; w++) {
        int32_t n = 0;
        if (bos >= 0)
            win[n++] = bos;
        memcpy(win + n, text_ids + (int64_t)w * body, (size_t)body * sizeof(int32_t));
        double t0 = now_s();
        if (hr_engine_score(ref, win, W, ref_nll, ref_logits, &err) != HR_OK) {
            fprintf(stderr, "f32 window %d: %s\n", w, err.msg);
            return 1;
        }
        q_ref.seconds += now_s() - t0;
        for (int32_t p = first; p < W - 1; p++)
            q_ref.nll += ref_nll[p], q_ref.n++;
        for (int c = 0; c < o->n_kv; c++) {
            t0 = now_s();
            if (hr_engine_score(eng[c], win, W, nll, logits, &err) != HR_OK) {
                fprintf(stderr, "kv %s window %d: %s\n", o->kv[c].name, w, err.msg);
                return 1;
            }
            q[c].seconds += now_s() - t0;
            for (int32_t p = first; p < W - 1; p++) {
                int32_t a = log_softmax(ref_logits + (int64_t)p * V, V, lp_ref);
                int32_t b = log_softmax(logits + (int64_t)p * V, V, lp);
                double kl = 0.0;
                for (int32_t i = 0; i < V; i++)
                    kl += exp(lp_ref[i]) * (lp_ref[i] - lp[i]);
                kl = kl > 0.0 ? kl : 0.0; /* rounding of an exact 0 */
                q[c].nll += nll[p];
                q[c].kl += kl;
                q[c].kl_max = kl > q[c].kl_max ? kl : q[c].kl_max;
                q[c].top1 += a == b;
                q[c].n++;
            }
        }
        fprintf(stderr, "  ctx %d: window %d/%d scored\n", W, w + 1, windows);
    }

    const double ppl_ref = exp(q_ref.nll / (double)q_ref.n);
    double ppl16 = NAN, ppl_bf16 = NAN;
    for (int c = 0; c < o->n_kv; c++) {
        if (o->kv[c].k == HR_DTYPE_F16 && o->kv[c].v == HR_DTYPE_F16)
            ppl16 = exp(q[c].nll / (double)q[c].n);
        if (o->kv[c].k == HR_DTYPE_BF16 && o->kv[c].v == HR_DTYPE_BF16)
            ppl_bf16 = exp(q[c].nll / (double)q[c].n);
    }
    char date[32];
    iso_date(date, sizeof date);
    printf("\n%s, text %s, context %d: %d windows, %lld tokens scored (the second half of "
           "each window)\n",
           base_name(o->model), base_name(o->text), W, windows, (long long)q_ref.n);
    printf("%-10s %9s %11s %9s %9s %11s %11s %8s %9s\n", "kv (K:V)", "bytes/tok", "perplexity",
           "vs f32", "vs f16", "mean KL", "max KL", "top-1", "s/window");
    printf("%-10s %9s %11.4f %9s %9s %11s %11s %8s %9.2f\n", "f32 (ref)", "", ppl_ref, "", "",
           "", "", "", q_ref.seconds / windows);
    for (int c = 0; c < o->n_kv; c++) {
        const double ppl = exp(q[c].nll / (double)q[c].n);
        const double kl = q[c].kl / (double)q[c].n, top1 = (double)q[c].top1 / (double)q[c].n;
        hr_plan pl;
        hr_engine_plan(eng[c], &pl);
        char vs16[16] = "-", n1[32], n2[32];
        if (isfinite(ppl16))
            snprintf(vs16, sizeof vs16, "%+.3f%%", 100.0 * (ppl / ppl16 - 1.0));
        printf("%-10s %9llu %11.4f %+8.3f%% %9s %11.3e %11.3e %7.2f%% %9.2f\n", o->kv[c].name,
               (unsigned long long)pl.kv_per_token, ppl, 100.0 * (ppl / ppl_ref - 1.0), vs16,
               kl, q[c].kl_max, 100.0 * top1, q[c].seconds / windows);
        if (out)
            fprintf(out,
                    "{\"commit\": \"%s\", \"date\": \"%s\", \"machine\": \"%s\", \"device\": "
                    "\"cpu\", \"path\": \"%s\", \"bench\": \"kv_quality\", \"model\": \"%s\", "
                    "\"text\": \"%s\", \"ctx\": %d, \"windows\": %d, \"scored\": \"second half "
                    "of each window\", \"scored_tokens\": %lld, \"matmul\": \"%s\", "
                    "\"threads\": %d, \"kv\": \"%s\", \"kv_k\": \"%s\", \"kv_v\": \"%s\", "
                    "\"kv_bytes_per_token\": %llu, \"ppl\": %.6f, \"ppl_f32\": %.6f, "
                    "\"ppl_rel_f32\": %.6g, \"ppl_rel_f16\": %s, \"ppl_rel_bf16\": %s, "
                    "\"kl_mean\": %.6g, \"kl_max\": %.6g, \"top1_agree\": %.6f, "
                    "\"s_per_window\": %.3f}\n",
                    o->commit, date, o->machine, backend_device(HR_DEVICE_CPU)->path(),
                    base_name(o->model), base_name(o->text), W, windows, (long long)q[c].n,
                    o->exact ? "exact" : "fast", o->threads, o->kv[c].name,
                    hr_dtype_name(o->kv[c].k), hr_dtype_name(o->kv[c].v),
                    (unsigned long long)pl.kv_per_token, ppl, ppl_ref, ppl / ppl_ref - 1.0,
                    json_num(ppl / ppl16 - 1.0, n1, sizeof n1),
                    json_num(ppl / ppl_bf16 - 1.0, n2, sizeof n2), kl, q[c].kl_max, top1,
                    q[c].seconds / windows);
    }
    for (int c = 0; c < o->n_kv; c++)
        hr_engine_free(eng[c]);
    hr_engine_free(ref);
    free(ref_logits);
    free(logits);
    free(nll);
    free(ref_nll);
    free(lp_ref);
    free(lp);
    free(win);
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One request of the prompt and gen greedy tokens: decode tok/s on the wall
 * clock and per CPU second, from the first generated token to the last. */
static bool decode_once(hr_engine *e, const options *o, const int32_t *ids, const char *name,
                        double *rate, double *rate_cpu) {
    hr_sampling_params sp = hr_sampling_params_greedy();
    sp.max_tokens = o->gen;
    sp.ignore_eos = true;
    int32_t id, got = 0;
    hr_error err;
    if (hr_engine_add(e, ids, o->decode_ctx, &sp, &id, &err) != HR_OK) {
        fprintf(stderr, "kv %s: %s\n", name, err.msg);
        return false;
    }
    double t_first = 0.0, t_last = 0.0, c_first = 0.0, c_last = 0.0;
    hr_event ev[4];
    while (hr_engine_n_active(e) > 0) {
        int32_t n_ev;
        if (hr_engine_step(e, ev, 4, &n_ev, &err) != HR_OK) {
            fprintf(stderr, "kv %s: %s\n", name, err.msg);
            return false;
        }
        for (int32_t i = 0; i < n_ev; i++)
            if (ev[i].token >= 0) {
                t_last = now_s();
                c_last = cpu_s();
                if (got++ == 0)
                    t_first = t_last, c_first = c_last;
            }
    }
    *rate = (double)(got - 1) / (t_last - t_first);
    *rate_cpu = (double)(got - 1) / (c_last - c_first);
    return true;
}

/* Decode tok/s of each type after a prompt of decode_ctx tokens: every
 * engine prefilled once, then rounds that run each type in turn, so a
 * change in the machine's load falls on all types alike. */
static int run_decode(const hr_model *m, const options *o, const int32_t *ids, int64_t n_ids,
                      FILE *out) {
    const int32_t P = o->decode_ctx;
    if (P > n_ids) {
        fprintf(stderr, "the text has %lld tokens, fewer than --decode-ctx %d\n",
                (long long)n_ids, P);
        return 1;
    }
    enum { MAX_RUNS = 32 };
    const int runs = o->repeat < MAX_RUNS ? o->repeat : MAX_RUNS;
    hr_engine *e[MAX_CFG] = {0};
    double rate[MAX_CFG][MAX_RUNS], rate_cpu[MAX_CFG][MAX_RUNS], unused, unused_cpu;
    int rc = 0;
    for (int c = 0; c < o->n_dec && rc == 0; c++) /* the prefill; its prompt stays cached */
        if (!(e[c] = make_engine(m, o, &o->dec[c], P + o->gen, false)) ||
            !decode_once(e[c], o, ids, o->dec[c].name, &unused, &unused_cpu))
            rc = 1;
    for (int r = 0; r < runs && rc == 0; r++)
        for (int c = 0; c < o->n_dec && rc == 0; c++)
            if (!decode_once(e[c], o, ids, o->dec[c].name, &rate[c][r], &rate_cpu[c][r]))
                rc = 1;
    if (rc == 0) {
        printf("\n%s: decode after a %d-token prompt, %d tokens, %d threads, median of %d "
               "rounds\n",
               base_name(o->model), P, o->gen, o->threads, runs);
        printf("%-10s %9s %10s %20s %10s %20s\n", "kv (K:V)", "bytes/tok", "tok/s", "range",
               "tok/cpu-s", "range");
    }
    char date[32];
    iso_date(date, sizeof date);
    for (int c = 0; c < o->n_dec && rc == 0; c++) {
        double w[MAX_RUNS], u[MAX_RUNS];
        memcpy(w, rate[c], sizeof(double) * (size_t)runs);
        memcpy(u, rate_cpu[c], sizeof(double) * (size_t)runs);
        qsort(w, (size_t)runs, sizeof(double), cmp_double);
        qsort(u, (size_t)runs, sizeof(double), cmp_double);
        hr_plan pl;
        hr_engine_plan(e[c], &pl);
        char rw[48], ru[48];
        snprintf(rw, sizeof rw, "[%.2f, %.2f]", w[0], w[runs - 1]);
        snprintf(ru, sizeof ru, "[%.2f, %.2f]", u[0], u[runs - 1]);
        printf("%-10s %9llu %10.2f %20s %10.2f %20s\n", o->dec[c].name,
               (unsigned long long)pl.kv_per_token, w[runs / 2], rw, u[runs / 2], ru);
        if (out)
            fprintf(out,
                    "{\"commit\": \"%s\", \"date\": \"%s\", \"machine\": \"%s\", \"device\": "
                    "\"cpu\", \"path\": \"%s\", \"bench\": \"kv_decode\", \"model\": \"%s\", "
                    "\"prompt\": %d, \"gen\": %d, \"repeat\": %d, \"matmul\": \"%s\", "
                    "\"threads\": %d, \"kv\": \"%s\", \"kv_k\": \"%s\", \"kv_v\": \"%s\", "
                    "\"kv_bytes_per_token\": %llu, \"decode_tok_s\": %.3f, "
                    "\"decode_tok_s_range\": [%.3f, %.3f], \"decode_tok_per_cpu_s\": %.3f, "
                    "\"decode_tok_per_cpu_s_range\": [%.3f, %.3f]}\n",
                    o->commit, date, o->machine, backend_device(HR_DEVICE_CPU)->path(),
                    base_name(o->model), P, o->gen, runs, o->exact ? "exact" : "fast",
                    o->threads, o->dec[c].name, hr_dtype_name(o->dec[c].k),
                    hr_dtype_name(o->dec[c].v), (unsigned long long)pl.kv_per_token, w[runs / 2],
                    w[0], w[runs - 1], u[runs / 2], u[0], u[runs - 1]);
    }
    for (int c = 0; c < o->n_dec; c++)
        hr_engine_free(e[c]);
    return rc;
}

int main(int argc, char **argv) {
    options o;
    if (!parse_args(argc, argv, &o)) {
        usage();
        return 2;
    }
    hr_error err;
    hr_model *m = NULL;
    if (hr_model_load(o.model, NULL, &m, &err) != HR_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    FILE *f = fopen(o.text, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot read\n", o.text);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)len + 1);
    size_t got = fread(text, 1, (size_t)len, f);
    fclose(f);
    text[got] = '\0';
    size_t cap = got + 16, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    hr_tokenize_params tp = hr_tokenize_params_default();
    tp.add_bos = 0;
    tp.parse_special = false;
    if (hr_tokenize(hr_model_tokenizer(m), text, got, &tp, ids, cap, &n, &err) != HR_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const int32_t bos = hr_tokenizer_bos(hr_model_tokenizer(m));
    fprintf(stderr, "%s: %zu tokens of text, BOS %d\n", o.text, n, bos);
    FILE *out = o.out ? fopen(o.out, "a") : NULL;
    if (o.out && !out) {
        fprintf(stderr, "%s: cannot append\n", o.out);
        return 1;
    }
    int rc = 0;
    for (int i = 0; i < o.n_ctx_list && rc == 0; i++)
        rc = run_quality(m, &o, ids, (int64_t)n, bos, o.ctx[i], o.windows[i], out);
    if (rc == 0 && o.decode_ctx > 0)
        rc = run_decode(m, &o, ids, (int64_t)n, out);
    if (out)
        fclose(out);
    free(ids);
    free(text);
    hr_model_free(m);
    return rc;
}
