/*
 * cmd_run.c — `headroom run -p PROMPT`: generate text, streamed to stdout as
 * it is produced (UTF-8 safe), timing to stderr at the end.
 */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define RUN_MAX_STOP 16

static void help(FILE *f) {
    fprintf(f, "usage: headroom run [-m PATH] -p PROMPT [options]\n\n"
               "Generates a continuation of PROMPT and streams it to stdout.\n"
               "  -p, --prompt TEXT     the prompt (BOS added as the tokenizer says)\n"
               "  -n N                  new tokens at most (default 256; -1: until the\n"
               "                        context is full)\n"
               "  --stop TEXT           stop when TEXT appears (repeatable)\n"
               "  --ignore-eos          keep going past end-of-sequence tokens\n");
    cli_sampling_help(f);
    cli_engine_help(f, CLI_RUN);
}

static int32_t info_ctx(const hr_model *m) {
    hr_model_info in;
    hr_model_get_info(m, &in);
    return in.n_ctx_train;
}

static bool print_text(const char *text, size_t len, int32_t token, void *user) {
    (void)token;
    (void)user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return true;
}

int cmd_run(int argc, char **argv) {
    cli_engine_opts o;
    cli_engine_opts_init(&o, CLI_RUN);
    hr_sampling_params sp = hr_sampling_params_default();
    sp.seed = (uint64_t)time(NULL); /* run's own: a new draw each time unless --seed */
    const char *prompt = NULL;
    const char *stops[RUN_MAX_STOP];
    int32_t n_stop = 0;
    for (int i = 1; i < argc; i++) {
        int64_t n;
        int r = cli_engine_option(argc, argv, &i, &o);
        if (r == 0)
            r = cli_sampling_option(argc, argv, &i, &sp);
        if (r < 0)
            return 1;
        if (r > 0)
            continue;
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            help(stdout);
            return 0;
        } else if (strcmp(a, "-p") == 0 || strcmp(a, "--prompt") == 0) {
            if (!cli_value(argc, argv, &i, &prompt))
                return 1;
        } else if (strcmp(a, "-n") == 0 || strcmp(a, "--n-predict") == 0) {
            if (!cli_int(argc, argv, &i, -1, 1 << 24, &n))
                return 1;
            sp.max_tokens = (int32_t)n;
        } else if (strcmp(a, "--stop") == 0) {
            if (n_stop == RUN_MAX_STOP) {
                cli_error("run: at most %d --stop strings", RUN_MAX_STOP);
                return 1;
            }
            if (!cli_value(argc, argv, &i, &stops[n_stop]))
                return 1;
            n_stop++;
        } else if (strcmp(a, "--ignore-eos") == 0) {
            sp.ignore_eos = true;
        } else {
            cli_error("run: unknown option '%s'", a);
            help(stderr);
            return 1;
        }
    }
    if (!prompt) {
        cli_error("run: a prompt is needed (-p TEXT)");
        help(stderr);
        return 1;
    }
    if (o.synthetic) {
        cli_error("run: a synthetic model has no tokenizer; use bench");
        return 1;
    }
    sp.stop = stops;
    sp.n_stop = n_stop;

    if (!cli_budget(&o))
        return 1;
    hr_error err;
    hr_model *m = NULL;
    hr_engine *e = NULL;
    int rc = 1;
    if (cli_load_model(&o, false, &m, &err) != HR_OK ||
        hr_engine_create(m, &o.ep, &e, &err) != HR_OK) {
        cli_error("%s", err.msg);
        goto done;
    }
    cli_device_line(e, &o);
    if (o.ep.n_ctx == 0) {
        hr_plan pl;
        hr_engine_plan(e, &pl);
        char b[32];
        fprintf(stderr, "headroom: context %d tokens, the most that fits in %s (the model's "
                        "limit: %d)\n",
                hr_engine_n_ctx(e), cli_bytes(pl.budget, b, sizeof b), info_ctx(m));
    }
    if (o.mem_report)
        cli_memory_report(e, "after load");
    hr_generation_stats st;
    if (hr_generate(e, prompt, strlen(prompt), &sp, print_text, NULL, &st, &err) != HR_OK) {
        printf("\n");
        cli_error("run: %s", err.msg);
        goto done;
    }
    printf("\n");
    fprintf(stderr, "\nprompt: %d token%s in %.1f ms (%.1f tok/s)", st.n_prompt,
            st.n_prompt == 1 ? "" : "s", st.prompt_ms,
            st.prompt_ms > 0 ? st.n_prompt * 1000.0 / st.prompt_ms : 0.0);
    if (st.n_gen > 0)
        fprintf(stderr, "  time to first token %.1f ms", st.first_token_ms);
    /* the decode rate counts the tokens after the first (the first ends the
     * prefill): none to time with fewer than two */
    fprintf(stderr, "\ngeneration: %d token%s", st.n_gen, st.n_gen == 1 ? "" : "s");
    if (st.n_gen > 1)
        fprintf(stderr, ", the last %d in %.1f ms (%.1f tok/s)", st.n_gen - 1, st.gen_ms,
                st.gen_ms > 0 ? (st.n_gen - 1) * 1000.0 / st.gen_ms : 0.0);
    fprintf(stderr, "  [%s, %s]\n", hr_finish_reason_name(st.finish),
            hr_engine_device_name(e));
    if (o.mem_report)
        cli_memory_report(e, "after generation");
    rc = 0;
done:
    hr_engine_free(e);
    hr_model_free(m);
    return rc;
}
