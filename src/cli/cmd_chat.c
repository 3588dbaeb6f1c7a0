/*
 * cmd_chat.c — `headroom chat`: an interactive conversation with an
 * instruction model, rendered with its own chat template (hr_chat), replies
 * streamed as they come.
 *
 * On a terminal lines are read with libedit (editing, history); otherwise
 * each line of stdin is one message, and only the replies go to stdout (one
 * a line), so scripts can drive it. Ctrl-C stops the reply being written
 * (the part written stays in the conversation) and the program goes on;
 * at the prompt it clears the line; Ctrl-D or /quit leaves.
 */
#include "cli/cli.h"

#include <editline/readline.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

static void help(FILE *f) {
    fprintf(f, "usage: headroom chat [-m PATH] [--system TEXT] [options]\n\n"
               "Talks with an instruction model through its chat template. Each line is a\n"
               "message; replies stream as they are written. Earlier turns stay in the KV\n"
               "cache (the prefix cache), so a message prefills only itself.\n"
               "  --system TEXT         the system prompt, kept whatever else is left out\n"
               "  --context-policy window|summarize|error\n"
               "                        when the conversation outgrows the context: leave out\n"
               "                        the oldest turns (default), have the model summarise\n"
               "                        them into the system prompt, or refuse the message\n"
               "  --max-turns N         earlier turns sent with a message at most (default:\n"
               "                        all that fit)\n"
               "  --chat-template FILE  a Jinja chat template instead of the model's\n"
               "  -n N                  reply tokens at most (default 1024; -1: until the\n"
               "                        context is full)\n");
    cli_sampling_help(f);
    cli_engine_help(f, CLI_CHAT);
    fprintf(f, "\nin the chat:\n"
               "  /reset        forget the conversation (the system prompt stays)\n"
               "  /system TEXT  replace the system prompt (no TEXT: none)\n"
               "  /save FILE    write the conversation as JSON\n"
               "  /load FILE    continue a saved conversation\n"
               "  /stats        the last reply's figures and the KV cache\n"
               "  /help         this list\n"
               "  /quit         leave (or Ctrl-D)\n");
}

typedef struct {
    bool tty;
    bool any; /* some text was written */
} reply_out;

static bool print_reply(const char *text, size_t len, int32_t token, void *user) {
    (void)token;
    reply_out *o = user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    o->any = true;
    return !interrupted;
}

static void print_stats(hr_engine *e, const hr_chat_stats *st, bool have) {
    if (have) {
        fprintf(stderr,
                "last reply: %d prompt tokens, %d prefilled (the rest from the KV cache) in "
                "%.1f ms; %d tokens written",
                st->n_prompt, st->n_prefilled, st->prompt_ms, st->n_gen);
        if (st->n_gen > 1 && st->gen_ms > 0)
            fprintf(stderr, ", %.1f tok/s after the first", (st->n_gen - 1) * 1000.0 / st->gen_ms);
        fprintf(stderr, " [%s]\n", hr_finish_reason_name(st->finish));
        fprintf(stderr, "turns: %d earlier sent, %d left out, %d summarised\n", st->turns_kept,
                st->turns_dropped, st->turns_summarized);
    }
    hr_engine_stats es;
    hr_engine_get_stats(e, &es);
    fprintf(stderr,
            "context %d tokens; KV cache: %d blocks of %d tokens, %d free, %d cached for "
            "reuse; prompt tokens so far %llu, %llu of them from the cache\n",
            hr_engine_n_ctx(e), es.kv_blocks, es.kv_block_size, es.kv_blocks_free,
            es.kv_blocks_cached, (unsigned long long)es.prompt_tokens,
            (unsigned long long)es.prefix_hit_tokens);
}

/* A line of input without its newline, or NULL at the end (caller frees). */
static char *read_message(bool tty) {
    if (tty) {
        for (;;) {
            interrupted = 0;
            errno = 0;
            char *line = readline("> ");
            if (line || !interrupted)
                return line;
            /* Ctrl-C at the prompt: a fresh line, not the end */
            fputc('\n', stdout);
        }
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
        free(line);
        return NULL;
    }
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    return line;
}

/* Runs a slash command; false when it asks to leave. */
static bool slash(hr_chat *c, hr_engine *e, const char *line, const hr_chat_stats *last,
                  bool have_last) {
    hr_error err;
    const char *arg = strchr(line, ' ');
    size_t name_len = arg ? (size_t)(arg - line) : strlen(line);
    while (arg && *arg == ' ')
        arg++;
#define IS(s) (name_len == strlen(s) && strncmp(line, s, name_len) == 0)
    if (IS("/quit") || IS("/exit")) {
        return false;
    } else if (IS("/reset")) {
        hr_chat_reset(c);
        fprintf(stderr, "conversation forgotten\n");
    } else if (IS("/system")) {
        if (hr_chat_set_system(c, arg && *arg ? arg : NULL, &err) != HR_OK)
            cli_error("%s", err.msg);
        else
            fprintf(stderr, arg && *arg ? "system prompt set\n" : "no system prompt\n");
    } else if (IS("/save") || IS("/load")) {
        if (!arg || !*arg)
            cli_error("%.*s needs a file name", (int)name_len, line);
        else if ((IS("/save") ? hr_chat_save(c, arg, &err) : hr_chat_load(c, arg, &err)) != HR_OK)
            cli_error("%s", err.msg);
        else
            fprintf(stderr, "%s %s (%d messages)\n", IS("/save") ? "saved to" : "loaded", arg,
                    hr_chat_n_messages(c));
    } else if (IS("/stats")) {
        print_stats(e, last, have_last);
    } else if (IS("/help")) {
        help(stderr);
    } else {
        cli_error("unknown command %.*s (/help lists them)", (int)name_len, line);
    }
#undef IS
    return true;
}

int cmd_chat(int argc, char **argv) {
    cli_engine_opts o;
    cli_engine_opts_init(&o, CLI_CHAT);
    hr_sampling_params sp = hr_sampling_params_default();
    sp.seed = (uint64_t)time(NULL);
    sp.max_tokens = 1024;
    hr_chat_params cp = hr_chat_params_default();
    const char *template_file = NULL;
    for (int i = 1; i < argc; i++) {
        int64_t n;
        const char *v;
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
        } else if (strcmp(a, "--system") == 0) {
            if (!cli_value(argc, argv, &i, &cp.system))
                return 1;
        } else if (strcmp(a, "--context-policy") == 0) {
            if (!cli_value(argc, argv, &i, &v))
                return 1;
            if (strcmp(v, "window") == 0)
                cp.policy = HR_CONTEXT_WINDOW;
            else if (strcmp(v, "summarize") == 0 || strcmp(v, "summarise") == 0)
                cp.policy = HR_CONTEXT_SUMMARIZE;
            else if (strcmp(v, "error") == 0)
                cp.policy = HR_CONTEXT_ERROR;
            else {
                cli_error("--context-policy: '%s' is not window, summarize or error", v);
                return 1;
            }
        } else if (strcmp(a, "--max-turns") == 0) {
            if (!cli_int(argc, argv, &i, 0, 1 << 20, &n))
                return 1;
            cp.max_turns = (int32_t)n;
        } else if (strcmp(a, "--chat-template") == 0) {
            if (!cli_value(argc, argv, &i, &template_file))
                return 1;
        } else if (strcmp(a, "-n") == 0) {
            if (!cli_int(argc, argv, &i, -1, 1 << 24, &n))
                return 1;
            sp.max_tokens = (int32_t)n;
        } else {
            cli_error("chat: unknown option '%s'", a);
            help(stderr);
            return 1;
        }
    }
    if (!cli_budget(&o))
        return 1;
    const bool tty = isatty(0) && isatty(1);
    hr_error err;
    hr_model *m = NULL;
    hr_engine *e = NULL;
    hr_chat *c = NULL;
    char *tmpl = NULL;
    int rc = 1;
    if (template_file) {
        size_t len;
        FILE *f = fopen(template_file, "rb");
        if (!f) {
            cli_error("chat: cannot open %s", template_file);
            return 1;
        }
        tmpl = malloc(1 << 20);
        len = tmpl ? fread(tmpl, 1, (1 << 20) - 1, f) : 0;
        fclose(f);
        if (!tmpl) {
            cli_error("chat: out of memory");
            return 1;
        }
        tmpl[len] = '\0';
        cp.chat_template = tmpl;
    }
    if (cli_load_model(&o, false, &m, &err) != HR_OK ||
        hr_engine_create(m, &o.ep, &e, &err) != HR_OK || hr_chat_create(e, &cp, &c, &err) != HR_OK) {
        cli_error("chat: %s", err.msg);
        goto done;
    }
    if (tty) {
        cli_device_line(e, &o);
        fprintf(stderr, "headroom chat: %d tokens of context; /help for the commands, Ctrl-C "
                        "stops a reply, Ctrl-D leaves\n",
                hr_engine_n_ctx(e));
    }
    if (o.mem_report)
        cli_memory_report(e, "after load");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    hr_chat_stats last = {0};
    bool have_last = false;
    rc = 0;
    for (;;) {
        char *line = read_message(tty);
        if (!line)
            break;
        if (line[0] == '\0') {
            free(line);
            continue;
        }
        if (tty)
            add_history(line);
        if (line[0] == '/') {
            bool go_on = slash(c, e, line, &last, have_last);
            free(line);
            if (!go_on)
                break;
            continue;
        }
        interrupted = 0;
        reply_out out = {.tty = tty};
        hr_chat_stats st;
        hr_status s = hr_chat_send(c, line, &sp, print_reply, &out, &st, &err);
        free(line);
        if (s != HR_OK) {
            if (out.any)
                fputc('\n', stdout);
            cli_error("chat: %s", err.msg);
            if (!tty) { /* a script learns from the exit status */
                rc = 1;
                break;
            }
            continue;
        }
        fputc('\n', stdout);
        fflush(stdout);
        last = st;
        have_last = true;
        if (st.finish == HR_FINISH_CANCELLED)
            fprintf(stderr, "[stopped]\n");
        else if (st.finish == HR_FINISH_CONTEXT || st.finish == HR_FINISH_LENGTH)
            fprintf(stderr, "[the reply reached %s]\n",
                    st.finish == HR_FINISH_CONTEXT ? "the end of the context" : "-n tokens");
        if (st.turns_dropped > 0)
            fprintf(stderr, "[%d earlier turn%s left out to fit the context]\n",
                    st.turns_dropped, st.turns_dropped == 1 ? "" : "s");
        if (st.turns_summarized > 0)
            fprintf(stderr, "[%d earlier turn%s summarised to fit the context]\n",
                    st.turns_summarized, st.turns_summarized == 1 ? "" : "s");
    }
    if (o.mem_report)
        cli_memory_report(e, "at the end");
done:
    hr_chat_free(c);
    hr_engine_free(e);
    hr_model_free(m);
    free(tmpl);
    return rc;
}
