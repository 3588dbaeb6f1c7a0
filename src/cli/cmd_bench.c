/*
 * cmd_bench.c — `headroom bench`: time to first token, prefill and decode
 * speed, and peak memory, for a model file or a synthetic shape.
 *
 * Method: a warm-up of the same batch and prompt length first (page faults,
 * thread start-up, kernel loading, cuBLASLt's choices, graph capture), then
 * `--batch` requests of `--prompt` random tokens each, generating
 * `--gen` tokens (end-of-sequence ignored); with --shared-prefix N the
 * first N tokens of every prompt are the same, and the warm-up leaves them
 * in the prefix cache, so TTFT measures a prompt whose start is cached.
 * TTFT is from submission to the
 * first new token of the first request; prefill rate is prompt tokens over
 * the time until every request has its first token; decode rate is the
 * tokens generated after that over the time they took. With --repeat N the
 * measured batch runs N times (new random prompts each time) and each
 * figure is the median of its N values, with the slowest and fastest
 * rates beside it in the JSON. --json prints the same as one JSON object
 * on the last line (the bench/results/ format).
 *
 * On cuda each row also says how near decode is to its bound on this very
 * GPU: the bandwidth, timed before the first engine, over the bytes a step
 * reads at the mean context (prompt + gen / 2): every weight but the
 * embedding table (of which a step reads one row), and each sequence's K/V.
 * "of bw" takes the copy bandwidth, "of rd" the read bandwidth (a step
 * only reads): GPUs of the same model differ in the two apart
 * (docs/journal/machines.md), so each machine is judged by its own.
 */
#include "util/clock.h"
#include "cli/cli.h"
#include "util/env.h"
#include "util/error.h"

#include "build_commit.h" /* HR_BUILD_COMMIT: generated at every build (cmake/) */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static void help(FILE *f) {
    fprintf(f, "usage: headroom bench [-m PATH | --synthetic SHAPE] [options]\n\n"
               "  --prompt N     prompt tokens per request (default 128)\n"
               "  --gen N        new tokens per request (default 128)\n"
               "  --batch N      requests decoded together (default 1)\n"
               "  --repeat N     measure N times, report the medians (default 1)\n"
               "  --shared-prefix N  the first N prompt tokens the same in every request\n"
               "                 and cached by the warm-up (time to first token on a\n"
               "                 prefix cache hit)\n"
               "  --json         also print one JSON object per configuration\n"
               "  --dtype LIST   cuda: bf16, f16 or bf16,f16 (one row each)\n"
               "  --attn LIST    cuda: flash, naive or flash,naive\n"
               "  --graphs LIST  cuda: on, off or on,off\n"
               "  --overlap LIST cuda: on, off or on,off (a lone sequence's next step\n"
               "                 queued before the host has the token of the one before)\n"
               "  --norm-fold LIST cuda: on, off or on,off (each norm's weight folded into\n"
               "                 the bf16 matrix after it; f16 rows are always off)\n");
    cli_engine_help(f, CLI_BENCH);
}


/* The weight type holding most bytes: what people call the model's type. */
static hr_dtype main_weight_type(const hr_model *m) {
    hr_model_info in;
    hr_model_get_info(m, &in);
    uint64_t by[HR_DTYPE_COUNT] = {0};
    for (int32_t i = 0; i < in.n_tensors; i++) {
        hr_tensor_desc t;
        hr_model_tensor(m, i, &t);
        by[t.dtype] += t.n_bytes;
    }
    int best = 0;
    for (int t = 1; t < HR_DTYPE_COUNT; t++)
        if (by[t] > by[best])
            best = t;
    return (hr_dtype)best;
}

typedef struct {
    double ttft_ms, prefill_ms, decode_ms;
    int64_t n_prompt, n_decode;
} bench_result;

static hr_status run_batch(hr_engine *e, int32_t n_vocab, int32_t batch, int32_t prompt,
                           int32_t shared, int32_t gen, uint64_t seed, bench_result *res,
                           hr_error *err) {
    int32_t *ids = malloc((size_t)prompt * sizeof *ids);
    hr_event *ev = malloc((size_t)(batch + 4) * sizeof *ev);
    bool *started = calloc((size_t)batch + 1, sizeof *started);
    hr_status s = HR_OK;
    if (!ids || !ev || !started) {
        s = hr_err_set(err, HR_ERR_NOMEM, "bench: out of memory");
        goto done;
    }
    hr_sampling_params sp = hr_sampling_params_greedy();
    sp.max_tokens = gen;
    sp.ignore_eos = true;
    double t0 = hr_now_ms();
    int32_t base = -1;
    for (int32_t b = 0; b < batch; b++) {
        uint64_t fixed = 12345;
        for (int32_t i = 0; i < prompt; i++) {
            uint64_t *x = i < shared ? &fixed : &seed;
            *x = *x * 6364136223846793005ull + 1442695040888963407ull;
            ids[i] = (int32_t)((*x >> 33) % (uint64_t)n_vocab);
        }
        int32_t id;
        if ((s = hr_engine_add(e, ids, prompt, &sp, &id, err)) != HR_OK)
            goto done;
        if (b == 0)
            base = id;
    }
    int32_t n_started = 0;
    double t_all_started = 0.0;
    memset(res, 0, sizeof *res);
    while (hr_engine_n_active(e) > 0) {
        int32_t n_ev;
        if ((s = hr_engine_step(e, ev, batch + 4, &n_ev, err)) != HR_OK)
            goto done;
        double t = hr_now_ms();
        for (int32_t i = 0; i < n_ev; i++) {
            if (ev[i].finish == HR_FINISH_ERROR && s == HR_OK) /* the figures would be void */
                s = hr_err_set(err, HR_ERR_NUMERIC, "%s",
                               ev[i].error ? ev[i].error : "a request failed");
            int32_t k = ev[i].id - base;
            if (ev[i].token < 0 || k < 0 || k >= batch)
                continue;
            if (!started[k]) {
                started[k] = true;
                if (n_started++ == 0)
                    res->ttft_ms = t - t0;
                if (n_started == batch)
                    t_all_started = t;
            } else {
                res->n_decode++;
            }
        }
    }
    if (s != HR_OK)
        goto done;
    res->prefill_ms = t_all_started - t0;
    res->decode_ms = hr_now_ms() - t_all_started;
    res->n_prompt = (int64_t)prompt * batch;
done:
    free(ids);
    free(ev);
    free(started);
    return s;
}

#define BENCH_MAX_REPEAT 100 /* --repeat's bound: the figures' arrays */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median, minimum and maximum of v[0..n-1] (n >= 1); sorts v. */
typedef struct {
    double median, min, max;
} spread;

static spread spread_of(double *v, int64_t n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return (spread){med, v[0], v[n - 1]};
}

/* Parses "a,b" into up to 2 choices, each one of names[]; values[] gets the
 * index of each. */
static int parse_list(const char *opt, const char *v, const char *const *names, int n_names,
                      int *values) {
    int n = 0;
    char buf[64];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int k = -1;
        for (int i = 0; i < n_names; i++)
            if (strcmp(tok, names[i]) == 0)
                k = i;
        if (k < 0 || n == 2) {
            cli_error("%s: '%s' is not a list of %s%s%s", opt, v, names[0],
                      n_names > 1 ? " / " : "", n_names > 1 ? names[1] : "");
            return -1;
        }
        values[n++] = k;
    }
    return n;
}

int cmd_bench(int argc, char **argv) {
    cli_engine_opts o;
    cli_engine_opts_init(&o, CLI_BENCH);
    int64_t prompt = 128, gen = 128, batch = 1, repeat = 1, shared = 0;
    bool json = false;
    static const char *const dtypes[] = {"bf16", "f16"}, *const attns[] = {"flash", "naive"},
                             *const onoff[] = {"on", "off"};
    int dt_v[2] = {0}, attn_v[2] = {0}, graph_v[2] = {0}, over_v[2] = {0}, fold_v[2] = {0};
    int n_dt = 1, n_attn = 1, n_graph = 1, n_over = 1, n_fold = 1;
    for (int i = 1; i < argc; i++) {
        int r = cli_engine_option(argc, argv, &i, &o);
        if (r < 0)
            return 1;
        if (r > 0)
            continue;
        const char *v;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            help(stdout);
            return 0;
        } else if (strcmp(argv[i], "--prompt") == 0 || strcmp(argv[i], "-p") == 0) {
            if (!cli_int(argc, argv, &i, 1, 1 << 20, &prompt))
                return 1;
        } else if (strcmp(argv[i], "--gen") == 0 || strcmp(argv[i], "-n") == 0) {
            if (!cli_int(argc, argv, &i, 2, 1 << 20, &gen))
                return 1;
        } else if (strcmp(argv[i], "--batch") == 0) {
            if (!cli_int(argc, argv, &i, 1, 4096, &batch))
                return 1;
        } else if (strcmp(argv[i], "--shared-prefix") == 0) {
            if (!cli_int(argc, argv, &i, 0, 1 << 20, &shared))
                return 1;
        } else if (strcmp(argv[i], "--repeat") == 0) {
            if (!cli_int(argc, argv, &i, 1, BENCH_MAX_REPEAT, &repeat))
                return 1;
        } else if (strcmp(argv[i], "--dtype") == 0) {
            if (!cli_value(argc, argv, &i, &v) || (n_dt = parse_list("--dtype", v, dtypes, 2,
                                                                     dt_v)) < 0)
                return 1;
        } else if (strcmp(argv[i], "--attn") == 0) {
            if (!cli_value(argc, argv, &i, &v) ||
                (n_attn = parse_list("--attn", v, attns, 2, attn_v)) < 0)
                return 1;
        } else if (strcmp(argv[i], "--graphs") == 0) {
            if (!cli_value(argc, argv, &i, &v) ||
                (n_graph = parse_list("--graphs", v, onoff, 2, graph_v)) < 0)
                return 1;
        } else if (strcmp(argv[i], "--overlap") == 0) {
            if (!cli_value(argc, argv, &i, &v) ||
                (n_over = parse_list("--overlap", v, onoff, 2, over_v)) < 0)
                return 1;
        } else if (strcmp(argv[i], "--norm-fold") == 0) {
            if (!cli_value(argc, argv, &i, &v) ||
                (n_fold = parse_list("--norm-fold", v, onoff, 2, fold_v)) < 0)
                return 1;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else {
            cli_error("bench: unknown option '%s'", argv[i]);
            help(stderr);
            return 1;
        }
    }
    if (!cli_budget(&o))
        return 1;
    hr_error err;
    hr_model *m = NULL;
    int rc = 1;
    if (cli_load_model(&o, false, &m, &err) != HR_OK) {
        cli_error("%s", err.msg);
        return 1;
    }
    hr_model_info in;
    hr_model_get_info(m, &in);
    if (o.ep.n_ctx <= 0)
        o.ep.n_ctx = (int32_t)(prompt + gen);
    if (shared > prompt) {
        cli_error("bench: --shared-prefix %lld is longer than --prompt %lld", (long long)shared,
                  (long long)prompt);
        goto done;
    }
    if (shared > 0 && !o.ep.prefix_cache) {
        cli_error("bench: --shared-prefix measures the prefix cache; drop --no-prefix-cache");
        goto done;
    }
    if (o.ep.n_ctx < prompt + gen) {
        cli_error("bench: --ctx %d is smaller than --prompt + --gen", o.ep.n_ctx);
        goto done;
    }
    o.ep.n_seq_max = (int32_t)batch;
    /* a prompt goes in one step up to 4096 tokens, in chunks of 4096 beyond */
    o.ep.n_batch = prompt > 512 ? (int32_t)(prompt < 4096 ? prompt : 4096) : 512;
    char date[64], b1[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    const char *shape = o.synthetic ? o.synthetic : o.model;
    hr_dtype wt = main_weight_type(m);
    printf("model %s (%s, %s weights), batch %lld, prompt %lld, gen %lld\n", shape, in.name,
           hr_dtype_name(wt), (long long)batch, (long long)prompt, (long long)gen);
    /* the bandwidth bounds decode: a step reads every weight (but the
     * embedding table's other rows) and each sequence's K/V once */
    hr_bandwidth bw = {0.0, 0.0};
    if (o.ep.device != HR_DEVICE_CPU) {
        hr_error bw_err;
        if (hr_device_bandwidth(HR_DEVICE_CUDA, &bw, &bw_err) == HR_OK)
            printf("bandwidth: copy %.3f TB/s (device to device), read %.3f TB/s\n",
                   bw.copy_bytes_per_s / 1e12, bw.read_bytes_per_s / 1e12);
        else if (o.ep.device == HR_DEVICE_CUDA)
            printf("bandwidth not measured: %s\n", bw_err.msg);
    }
    printf("%-6s %-5s %-6s %-6s %-7s %-4s | %9s %12s %12s %7s %7s %10s\n", "device", "dtype",
           "attn", "graphs", "overlap", "fold", "ttft ms", "prefill t/s", "decode t/s", "of bw",
           "of rd", "peak");
    for (int a = 0; a < n_dt; a++) {
        hr_dtype want = dt_v[a] == 0 ? HR_DTYPE_BF16 : HR_DTYPE_F16;
        /* a synthetic model on the GPU is made in the compute type itself,
         * so each dtype's weights go up without a host conversion */
        if (o.synthetic && !o.weights_given && o.ep.device != HR_DEVICE_CPU &&
            o.weights != want) {
            hr_model_free(m);
            m = NULL;
            o.weights = want;
            if (cli_load_model(&o, false, &m, &err) != HR_OK) {
                cli_error("%s", err.msg);
                goto done;
            }
        }
        for (int b = 0; b < n_attn; b++)
            for (int gv = 0; gv < n_graph * n_over * n_fold; gv++) {
                const int g = gv / (n_over * n_fold), ov = gv / n_fold % n_over,
                          f = gv % n_fold;
                hr_engine *e = NULL;
                hr_engine_params ep = o.ep;
                ep.dtype = want;
                hr_tuning tune = hr_tuning_default();
                tune.attn_naive = attn_v[b] == 1;
                tune.no_graphs = graph_v[g] == 1;
                tune.no_overlap = over_v[ov] == 1;
                tune.no_norm_fold = fold_v[f] == 1;
                ep.tuning = &tune;
                if (hr_engine_create(m, &ep, &e, &err) != HR_OK) {
                    cli_error("%s", err.msg);
                    goto done;
                }
                bool cuda = strcmp(hr_engine_device_name(e), "cuda") == 0;
                if (a == 0 && b == 0 && gv == 0)
                    cli_device_line(e, &o);
                if (o.mem_report)
                    cli_memory_report(e, "after load");
                /* warm-up at the measured shapes: kernels load, cuBLASLt picks its
                 * algorithms and graphs are captured before the clock runs */
                bench_result warm;
                if (run_batch(e, in.n_vocab, (int32_t)batch, (int32_t)prompt, (int32_t)shared,
                              4, 7, &warm, &err) != HR_OK) {
                    cli_error("bench: %s", err.msg);
                    hr_engine_free(e);
                    goto done;
                }
                double ttft_v[BENCH_MAX_REPEAT], prefill_v[BENCH_MAX_REPEAT],
                    decode_v[BENCH_MAX_REPEAT];
                hr_engine_stats st0, st1;
                hr_engine_get_stats(e, &st0);
                for (int64_t r = 0; r < repeat; r++) {
                    bench_result res;
                    if (run_batch(e, in.n_vocab, (int32_t)batch, (int32_t)prompt,
                                  (int32_t)shared, (int32_t)gen, 42 + (uint64_t)r, &res,
                                  &err) != HR_OK) {
                        cli_error("bench: %s", err.msg);
                        hr_engine_free(e);
                        goto done;
                    }
                    ttft_v[r] = res.ttft_ms;
                    prefill_v[r] = res.prefill_ms > 0
                                       ? (double)res.n_prompt * 1e3 / res.prefill_ms
                                       : 0;
                    decode_v[r] = res.decode_ms > 0 ? (double)res.n_decode * 1e3 / res.decode_ms
                                                    : 0;
                }
                hr_engine_get_stats(e, &st1);
                const uint64_t hit_tokens = st1.prefix_hit_tokens - st0.prefix_hit_tokens;
                const spread ttft = spread_of(ttft_v, repeat);
                const spread prefill = spread_of(prefill_v, repeat);
                const spread decode = spread_of(decode_v, repeat);
                hr_memory_report mr;
                hr_engine_memory(e, &mr);
                uint64_t peak;
                if (cuda) {
                    peak = mr.total; /* everything is taken at start: held = peak */
                } else {
                    struct rusage ru;
                    getrusage(RUSAGE_SELF, &ru);
                    peak = (uint64_t)ru.ru_maxrss * 1024u;
                }
                /* decode's bound on this machine: the mean step (context prompt +
                 * gen / 2) at the copy and the read bandwidth; cuda stores every
                 * matrix, the embedding table too, packed as the file has it or in
                 * the compute type */
                double step_bytes = 0.0, limit = 0.0, read_limit = 0.0;
                if (cuda && bw.copy_bytes_per_s > 0) {
                    hr_plan pl;
                    hr_engine_plan(e, &pl);
                    const bool packed =
                        !o.ep.expand_weights && hr_dtype_row_bytes(wt, in.n_embd) <
                                                    hr_dtype_row_bytes(want, in.n_embd);
                    const uint64_t row = hr_dtype_row_bytes(packed ? wt : want, in.n_embd);
                    const uint64_t table = in.tie_embeddings ? 0 : (uint64_t)in.n_vocab * row;
                    step_bytes = (double)(mr.weights - table) +
                                 (double)batch * (double)pl.kv_per_token *
                                     ((double)prompt + (double)gen / 2);
                    limit = (double)batch * bw.copy_bytes_per_s / step_bytes;
                    read_limit = (double)batch * bw.read_bytes_per_s / step_bytes;
                }
                char of_bw[16] = "-", of_rd[16] = "-";
                if (limit > 0) {
                    snprintf(of_bw, sizeof of_bw, "%.1f%%", 100.0 * decode.median / limit);
                    snprintf(of_rd, sizeof of_rd, "%.1f%%", 100.0 * decode.median / read_limit);
                }
                const char *dname = cuda ? dtypes[dt_v[a]] : "f32";
                const char *aname = cuda ? attns[attn_v[b]] : "-";
                /* the cache's types as the engine resolved them (K:V when apart) */
                hr_plan kvp;
                hr_engine_plan(e, &kvp);
                char kv_name[32];
                if (kvp.kv_dtype == kvp.kv_dtype_v)
                    snprintf(kv_name, sizeof kv_name, "%s", hr_dtype_name(kvp.kv_dtype));
                else
                    snprintf(kv_name, sizeof kv_name, "%s:%s", hr_dtype_name(kvp.kv_dtype),
                             hr_dtype_name(kvp.kv_dtype_v));
                const char *gname = cuda ? onoff[graph_v[g]] : "-";
                const char *oname = cuda ? onoff[over_v[ov]] : "-";
                const char *fname = !cuda ? "-" : want == HR_DTYPE_BF16 ? onoff[fold_v[f]] : "off";
                printf("%-6s %-5s %-6s %-6s %-7s %-4s | %9.2f %12.1f %12.2f %7s %7s %10s\n",
                       hr_engine_device_name(e), dname, aname, gname, oname, fname, ttft.median,
                       prefill.median, decode.median, of_bw, of_rd,
                       cli_bytes(peak, b1, sizeof b1));
                if (o.mem_report)
                    cli_memory_report(e, "after generation");
                if (json)
                    printf("{\"commit\": \"%s\", \"date\": \"%s\", \"machine\": \"%s\", "
                           "\"device\": \"%s\", \"path\": \"%s\", \"shape\": \"%s\", "
                           "\"weights\": \"%s\", "
                           "\"dtype\": \"%s\", \"kv_dtype\": \"%s\", \"attn\": \"%s\", "
                           "\"graphs\": \"%s\", "
                           "\"overlap\": \"%s\", \"norm_fold\": \"%s\", "
                           "\"expand\": %s, \"prefix_cache\": %s, \"shared_prefix\": %lld, "
                           "\"prefix_hit_tokens\": %llu, "
                           "\"batch\": %lld, \"prompt\": %lld, \"gen\": %lld, \"threads\": %d, "
                           "\"ttft_ms\": %.3f, \"prefill_tok_s\": %.2f, \"decode_tok_s\": %.3f, "
                           "\"repeat\": %lld, \"prefill_tok_s_range\": [%.2f, %.2f], "
                           "\"decode_tok_s_range\": [%.3f, %.3f], "
                           "\"peak_bytes\": %llu, \"load_gb_s\": %.3f, \"copy_gb_s\": %.1f, "
                           "\"read_gb_s\": %.1f, \"decode_step_bytes\": %.0f, "
                           "\"decode_limit_tok_s\": %.2f, \"decode_read_limit_tok_s\": %.2f}\n",
                           HR_BUILD_COMMIT[0] ? HR_BUILD_COMMIT : "unknown", date,
                           hr_engine_device_desc(e),
                           hr_engine_device_name(e), hr_engine_device_path(e), shape,
                           o.weights_given && !o.synthetic ? o.weights_name : hr_dtype_name(wt),
                           dname, kv_name, aname,
                           gname, oname, fname, o.ep.expand_weights ? "true" : "false",
                           o.ep.prefix_cache ? "true" : "false", (long long)shared,
                           (unsigned long long)hit_tokens, (long long)batch, (long long)prompt,
                           (long long)gen,
                           o.ep.n_threads, ttft.median, prefill.median, decode.median,
                           (long long)repeat, prefill.min, prefill.max, decode.min, decode.max,
                           (unsigned long long)peak,
                           mr.upload_seconds > 0 ? (double)mr.upload_bytes / 1e9 /
                                                       mr.upload_seconds
                                                 : 0.0,
                           bw.copy_bytes_per_s / 1e9, bw.read_bytes_per_s / 1e9, step_bytes,
                           limit, read_limit);
                fflush(stdout);
                hr_engine_free(e);
                if (!cuda)
                    goto finished; /* the cpu has no dtype / attention / graph variants */
            }
    }
finished:
    rc = 0;
done:
    hr_model_free(m);
    return rc;
}
