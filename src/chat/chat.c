/*
 * chat.c — a conversation (headroom.h's hr_chat): the model's template
 * renders it, the context policy fits it, the engine replies.
 *
 * Each message re-renders the whole conversation, as apply_chat_template
 * would, and sends it as one request. What makes that cheap is the engine's
 * prefix cache: the blocks of the earlier turns (prompt and reply) are still
 * in the KV pool, so only the new turn is prefilled. For the cache to hit,
 * the ids must repeat too: when the new rendering begins with the text of
 * the last prompt and its reply, the ids sent are the last ones (prompt and
 * generated) followed by the rest tokenized alone, not a fresh tokenization
 * of everything (which may split the reply's text into other ids than the
 * model generated).
 *
 * The context policy works on whole turns (a user message and what follows
 * it up to the next one). Turns left out stay out (first only grows), so the
 * conversation's beginning, and its cached blocks, stay the same from one
 * message to the next. Summaries go into the system prompt: templates that
 * insist on alternating user and assistant turns accept that.
 */
#include "chat/template.h"
#include "engine/engine.h"
#include "util/alloc.h"
#include "util/file.h"
#include "util/json.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    char *role, *content;
} chat_msg;

struct hr_chat {
    hr_engine *e;
    chat_template *tmpl;
    char *bos, *eos;     /* the tokens' text, for templates that print them */
    char *system;        /* as given */
    char *summary;       /* of the turns summarised, or NULL */
    char *system_full;   /* system and summary, as the template gets it */
    chat_msg *msgs;
    int32_t n_msgs, cap_msgs;
    int32_t first;       /* the first message sent: those before are left out */
    hr_context_policy policy;
    int32_t max_turns;
    int64_t now_unix;
    /* the last request: its ids (prompt, then the reply's) and their text */
    int32_t *hist;
    int32_t n_hist;
    char *hist_text;
    size_t hist_len;
};

hr_chat_params hr_chat_params_default(void) {
    return (hr_chat_params){.policy = HR_CONTEXT_WINDOW};
}

static char *dup_or_null(const char *s) { return s ? hr_strdup(s) : NULL; }

/* The text of special token id, or NULL. */
static char *token_text(const hr_tokenizer *tok, int32_t id) {
    if (id < 0)
        return NULL;
    char buf[256];
    int32_t n = hr_token_to_piece(tok, id, true, buf, (int32_t)sizeof buf);
    return n >= 0 ? hr_strndup(buf, (size_t)n) : NULL;
}

static hr_status update_system(hr_chat *c, hr_error *err) {
    hr_free(c->system_full);
    c->system_full = NULL;
    if (!c->summary) {
        c->system_full = dup_or_null(c->system);
        return !c->system || c->system_full ? HR_OK
                                            : hr_err_set(err, HR_ERR_NOMEM, "chat: out of memory");
    }
    static const char lead[] = "Summary of the conversation so far: ";
    const size_t ns = c->system ? strlen(c->system) : 0, nm = strlen(c->summary);
    c->system_full = hr_malloc(ns + 2 + sizeof lead + nm);
    if (!c->system_full)
        return hr_err_set(err, HR_ERR_NOMEM, "chat: out of memory");
    snprintf(c->system_full, ns + 2 + sizeof lead + nm, "%s%s%s%s", c->system ? c->system : "",
             c->system ? "\n\n" : "", lead, c->summary);
    return HR_OK;
}

static void forget_history(hr_chat *c) {
    hr_free(c->hist);
    hr_free(c->hist_text);
    c->hist = NULL;
    c->hist_text = NULL;
    c->n_hist = 0;
    c->hist_len = 0;
}

hr_status hr_chat_create(hr_engine *e, const hr_chat_params *params, hr_chat **out,
                         hr_error *err) {
    hr_chat_params p = params ? *params : hr_chat_params_default();
    const hr_tokenizer *tok = hr_model_tokenizer(e->model);
    const char *src = p.chat_template ? p.chat_template : hr_model_chat_template(e->model);
    if (!tok)
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "chat: the model has no tokenizer");
    if (!src)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "chat: the model has no chat template (tokenizer_config.json's "
                          "chat_template, GGUF tokenizer.chat_template); give one with "
                          "--chat-template FILE");
    if (p.policy < HR_CONTEXT_WINDOW || p.policy > HR_CONTEXT_ERROR || p.max_turns < 0)
        return hr_err_set(err, HR_ERR_INVALID, "chat: policy %d, max_turns %d", (int)p.policy,
                          p.max_turns);
    hr_chat *c = hr_calloc(1, sizeof *c);
    if (!c)
        return hr_err_set(err, HR_ERR_NOMEM, "chat: out of memory");
    c->e = e;
    c->policy = p.policy;
    c->max_turns = p.max_turns;
    c->now_unix = p.now_unix;
    hr_status s = chat_template_parse(src, &c->tmpl, err);
    if (s != HR_OK) {
        hr_err_prefix(err, "chat template: ");
        hr_chat_free(c);
        return s;
    }
    c->bos = token_text(tok, hr_tokenizer_bos(tok));
    c->eos = token_text(tok, hr_tokenizer_eos(tok));
    c->system = dup_or_null(p.system);
    if ((p.system && !c->system) || (s = update_system(c, err)) != HR_OK) {
        hr_chat_free(c);
        return s != HR_OK ? s : hr_err_set(err, HR_ERR_NOMEM, "chat: out of memory");
    }
    *out = c;
    return HR_OK;
}

static void free_msgs(hr_chat *c) {
    for (int32_t i = 0; i < c->n_msgs; i++) {
        hr_free(c->msgs[i].role);
        hr_free(c->msgs[i].content);
    }
    c->n_msgs = 0;
    c->first = 0;
}

void hr_chat_free(hr_chat *c) {
    if (!c)
        return;
    free_msgs(c);
    hr_free(c->msgs);
    chat_template_free(c->tmpl);
    hr_free(c->bos);
    hr_free(c->eos);
    hr_free(c->system);
    hr_free(c->summary);
    hr_free(c->system_full);
    forget_history(c);
    hr_free(c);
}

static hr_status push_msg(hr_chat *c, const char *role, const char *content, size_t len,
                          hr_error *err) {
    if (c->n_msgs == c->cap_msgs) {
        int32_t cap = c->cap_msgs ? 2 * c->cap_msgs : 16;
        chat_msg *m = hr_realloc(c->msgs, (size_t)cap * sizeof *m);
        if (!m)
            return hr_err_set(err, HR_ERR_NOMEM, "chat: out of memory");
        c->msgs = m;
        c->cap_msgs = cap;
    }
    chat_msg *m = &c->msgs[c->n_msgs];
    m->role = hr_strdup(role);
    m->content = hr_strndup(content, len);
    if (!m->role || !m->content) {
        hr_free(m->role);
        hr_free(m->content);
        return hr_err_set(err, HR_ERR_NOMEM, "chat: out of memory");
    }
    c->n_msgs++;
    return HR_OK;
}

static void pop_msg(hr_chat *c) {
    c->n_msgs--;
    hr_free(c->msgs[c->n_msgs].role);
    hr_free(c->msgs[c->n_msgs].content);
}

static bool is_user(const chat_msg *m) { return strcmp(m->role, "user") == 0; }

/* The message after turn i's (the next user message), or n_msgs. */
static int32_t next_turn(const hr_chat *c, int32_t i) {
    for (i++; i < c->n_msgs && !is_user(&c->msgs[i]); i++)
        ;
    return i;
}

static int32_t count_turns(const hr_chat *c, int32_t from, int32_t to) {
    int32_t n = 0;
    for (int32_t i = from; i < to; i++)
        n += is_user(&c->msgs[i]);
    return n;
}

/* Renders system + msgs[from, to) with extra (a last user message, may be
 * NULL) and the generation prompt. */
static hr_status render(const hr_chat *c, const char *system, const chat_msg *msgs, int32_t n,
                        const char *extra, char **text, size_t *len, hr_error *err) {
    chat_message *list = hr_calloc((size_t)n + 2, sizeof *list);
    if (!list)
        return hr_err_set(err, HR_ERR_NOMEM, "chat: out of memory");
    int32_t k = 0;
    if (system)
        list[k++] = (chat_message){"system", system};
    for (int32_t i = 0; i < n; i++)
        list[k++] = (chat_message){msgs[i].role, msgs[i].content};
    if (extra)
        list[k++] = (chat_message){"user", extra};
    const chat_render_opts o = {.add_generation_prompt = true,
                                .bos_token = c->bos,
                                .eos_token = c->eos,
                                .now_unix = c->now_unix};
    hr_status s = chat_template_render(c->tmpl, list, k, &o, text, len, err);
    hr_free(list);
    return s;
}

/* Appends the ids of text (no BOS: the template writes it) to *ids. */
static hr_status tokenize_append(const hr_tokenizer *tok, const char *text, size_t len,
                                 int32_t **ids, int32_t *n, hr_error *err) {
    hr_tokenize_params tp = hr_tokenize_params_default();
    tp.add_bos = 0;
    size_t cap = len + 8, got = 0;
    for (int attempt = 0;; attempt++) {
        int32_t *grown = hr_realloc(*ids, ((size_t)*n + cap) * sizeof(int32_t));
        if (!grown)
            return hr_err_set(err, HR_ERR_NOMEM, "chat: out of memory for %zu ids", cap);
        *ids = grown;
        hr_status s = hr_tokenize(tok, text, len, &tp, *ids + *n, cap, &got, err);
        if (s == HR_OK)
            break;
        if (s != HR_ERR_INVALID || got <= cap || attempt > 0)
            return s;
        cap = got;
    }
    if (got > (size_t)(INT32_MAX - *n))
        return hr_err_set(err, HR_ERR_NO_FIT, "chat: the conversation is too long");
    *n += (int32_t)got;
    return HR_OK;
}

/* The ids of a rendering: the last request's ids when the text begins with
 * theirs, then the rest alone. */
static hr_status ids_of(const hr_chat *c, const char *text, size_t len, int32_t **ids,
                        int32_t *n, hr_error *err) {
    const hr_tokenizer *tok = hr_model_tokenizer(c->e->model);
    *ids = NULL;
    *n = 0;
    size_t from = 0;
    if (c->hist_text && c->hist_len <= len && memcmp(c->hist_text, text, c->hist_len) == 0) {
        if (!(*ids = hr_malloc((size_t)c->n_hist * sizeof(int32_t) + 1)))
            return hr_err_set(err, HR_ERR_NOMEM, "chat: out of memory");
        memcpy(*ids, c->hist, (size_t)c->n_hist * sizeof(int32_t));
        *n = c->n_hist;
        from = c->hist_len;
    }
    hr_status s = tokenize_append(tok, text + from, len - from, ids, n, err);
    if (s != HR_OK) {
        hr_free(*ids);
        *ids = NULL;
    }
    return s;
}

/* ---- summaries */

typedef struct {
    char *buf;
    size_t len, cap;
    bool nomem;
    hr_text_fn user_fn;
    void *user;
} text_sink;

static bool sink_text(const char *text, size_t len, int32_t token, void *ud) {
    text_sink *t = ud;
    if (t->len + len + 1 > t->cap) {
        size_t cap = (t->len + len + 1) * 2;
        char *b = hr_realloc(t->buf, cap);
        if (!b) {
            t->nomem = true;
            return false;
        }
        t->buf = b;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, text, len);
    t->len += len;
    t->buf[t->len] = '\0';
    return t->user_fn ? t->user_fn(text, len, token, t->user) : true;
}

/* The request that asks the model to fold msgs[from, to) (and the summary
 * before them) into one summary. */
static char *summary_request(const hr_chat *c, int32_t from, int32_t to) {
    static const char ask[] = "Summarize the conversation below in a few sentences. Keep "
                              "names, numbers, facts and decisions; write only the summary.\n\n";
    size_t n = sizeof ask + (c->summary ? strlen(c->summary) + 32 : 0);
    for (int32_t i = from; i < to; i++)
        n += strlen(c->msgs[i].role) + strlen(c->msgs[i].content) + 4;
    char *r = hr_malloc(n);
    if (!r)
        return NULL;
    size_t at = (size_t)snprintf(r, n, "%s", ask);
    if (c->summary)
        at += (size_t)snprintf(r + at, n - at, "Earlier: %s\n", c->summary);
    for (int32_t i = from; i < to; i++)
        at += (size_t)snprintf(r + at, n - at, "%c%s: %s\n", (char)(c->msgs[i].role[0] & ~0x20),
                               c->msgs[i].role + 1, c->msgs[i].content);
    return r;
}

/* Replaces the summary by one of itself and msgs[from, to), written by the
 * model (greedy). HR_ERR_NO_FIT when the request does not fit. */
static hr_status summarize(hr_chat *c, int32_t from, int32_t to, hr_error *err) {
    char *ask = summary_request(c, from, to), *text = NULL;
    if (!ask)
        return hr_err_set(err, HR_ERR_NOMEM, "chat: out of memory");
    size_t len = 0;
    const int32_t n_ctx = hr_engine_n_ctx(c->e);
    int32_t *ids = NULL, n = 0;
    hr_status s = render(c, NULL, NULL, 0, ask, &text, &len, err);
    hr_free(ask);
    const hr_tokenizer *tok = hr_model_tokenizer(c->e->model);
    if (s == HR_OK)
        s = tokenize_append(tok, text, len, &ids, &n, err);
    hr_free(text);
    hr_sampling_params sp = hr_sampling_params_greedy();
    sp.max_tokens = n_ctx / 4 < 256 ? n_ctx / 4 : 256;
    if (s == HR_OK && n + sp.max_tokens > n_ctx)
        s = hr_err_set(err, HR_ERR_NO_FIT, "chat: the turns to summarise need %d tokens", n);
    text_sink sink = {0};
    if (s == HR_OK)
        s = engine_generate_ids(c->e, ids, n, &sp, sink_text, &sink, NULL, 0, NULL, NULL, err);
    hr_free(ids);
    if (s == HR_OK && sink.nomem)
        s = hr_err_set(err, HR_ERR_NOMEM, "chat: out of memory");
    if (s == HR_OK) {
        /* the model's words, without the whitespace around them */
        char *b = sink.buf ? sink.buf : "";
        size_t a = 0, z = sink.len;
        while (a < z && (b[a] == ' ' || b[a] == '\n'))
            a++;
        while (z > a && (b[z - 1] == ' ' || b[z - 1] == '\n'))
            z--;
        char *sum = hr_strndup(b + a, z - a);
        if (!sum) {
            s = hr_err_set(err, HR_ERR_NOMEM, "chat: out of memory");
        } else {
            hr_free(c->summary);
            c->summary = sum;
            s = update_system(c, err);
        }
    }
    hr_free(sink.buf);
    return s;
}

/* ---- a message */

hr_status hr_chat_send(hr_chat *c, const char *text, const hr_sampling_params *params,
                       hr_text_fn on_text, void *user_data, hr_chat_stats *stats,
                       hr_error *err) {
    hr_chat_stats st = {0};
    hr_sampling_params sp = params ? *params : hr_sampling_params_default();
    const int32_t n_ctx = hr_engine_n_ctx(c->e);
    /* room for the reply: what max_tokens asks, at most half the context */
    int32_t reserve = sp.max_tokens > 0 ? sp.max_tokens : n_ctx / 4;
    reserve = reserve > n_ctx / 2 ? n_ctx / 2 : reserve < 1 ? 1 : reserve;
    HR_TRY(push_msg(c, "user", text, strlen(text), err));
    const int32_t user = c->n_msgs - 1;
    /* --max-turns: the turns before this message beyond the cap go */
    while (c->max_turns > 0 && count_turns(c, c->first, user) > c->max_turns) {
        c->first = next_turn(c, c->first);
        st.turns_dropped++;
    }
    char *prompt = NULL;
    size_t len = 0;
    int32_t *ids = NULL, n = 0;
    hr_status s;
    for (;;) {
        hr_free(prompt);
        hr_free(ids);
        prompt = NULL;
        ids = NULL;
        s = render(c, c->system_full, c->msgs + c->first, c->n_msgs - c->first, NULL, &prompt,
                   &len, err);
        if (s == HR_OK)
            s = ids_of(c, prompt, len, &ids, &n, err);
        if (s != HR_OK || n + reserve <= n_ctx)
            break;
        const int32_t turns = count_turns(c, c->first, user);
        if (c->policy == HR_CONTEXT_ERROR || turns == 0) {
            s = hr_err_set(err, HR_ERR_NO_FIT,
                           "chat: the conversation needs %d tokens and %d for the reply, the "
                           "context holds %d%s",
                           n, reserve, n_ctx,
                           turns == 0 ? " (the message alone is too long)"
                                      : " (--context-policy window or summarize make room)");
            break;
        }
        if (c->policy == HR_CONTEXT_SUMMARIZE) {
            /* the older half of the turns, at least one */
            int32_t k = turns / 2 > 0 ? turns / 2 : 1, to = c->first;
            for (int32_t i = 0; i < k; i++)
                to = next_turn(c, to);
            s = summarize(c, c->first, to, err);
            if (s == HR_ERR_NO_FIT) { /* too long to summarise: left out instead */
                st.turns_dropped += k;
            } else if (s != HR_OK) {
                break;
            } else {
                st.turns_summarized += k;
            }
            c->first = to;
            continue;
        }
        c->first = next_turn(c, c->first);
        st.turns_dropped++;
    }
    if (s != HR_OK) {
        hr_free(prompt);
        hr_free(ids);
        pop_msg(c);
        if (c->first > c->n_msgs)
            c->first = c->n_msgs;
        return s;
    }
    st.turns_kept = count_turns(c, c->first, user);
    st.n_prompt = n;
    hr_engine_stats before, after;
    hr_engine_get_stats(c->e, &before);
    int32_t *gen = hr_malloc((size_t)n_ctx * sizeof(int32_t)), n_gen = 0;
    text_sink sink = {.user_fn = on_text, .user = user_data};
    hr_generation_stats gs = {0};
    s = gen ? engine_generate_ids(c->e, ids, n, &sp, sink_text, &sink, gen, n_ctx, &n_gen, &gs,
                                  err)
            : hr_err_set(err, HR_ERR_NOMEM, "chat: out of memory");
    if (s == HR_OK && sink.nomem)
        s = hr_err_set(err, HR_ERR_NOMEM, "chat: out of memory");
    hr_engine_get_stats(c->e, &after);
    if (s == HR_OK)
        s = push_msg(c, "assistant", sink.buf ? sink.buf : "", sink.len, err);
    if (s == HR_OK) {
        /* the next rendering may begin with this prompt and reply: keep their
         * ids (a reply that ended cleanly; otherwise the prompt's alone) */
        const hr_tokenizer *tok = hr_model_tokenizer(c->e->model);
        const bool clean = gs.finish == HR_FINISH_EOS;
        if (clean && n_gen > 0 && hr_tokenizer_is_eog(tok, gen[n_gen - 1]))
            n_gen--;
        const int32_t keep = clean ? n_gen : 0;
        const size_t keep_len = clean ? sink.len : 0;
        int32_t *h = hr_realloc(ids, ((size_t)n + (size_t)keep) * sizeof(int32_t) + 1);
        char *ht = hr_malloc(len + keep_len + 1);
        if (!h || !ht) {
            hr_free(ht);
            hr_free(h ? h : ids);
            ids = NULL;
            forget_history(c);
        } else {
            memcpy(h + n, gen, (size_t)keep * sizeof(int32_t));
            memcpy(ht, prompt, len);
            if (keep_len)
                memcpy(ht + len, sink.buf, keep_len);
            ht[len + keep_len] = '\0';
            forget_history(c);
            c->hist = h;
            c->n_hist = n + keep;
            c->hist_text = ht;
            c->hist_len = len + keep_len;
            ids = NULL;
        }
    } else {
        pop_msg(c);
    }
    st.n_prefilled = n - (int32_t)(after.prefix_hit_tokens - before.prefix_hit_tokens);
    st.n_gen = gs.n_gen;
    st.prompt_ms = gs.prompt_ms;
    st.gen_ms = gs.gen_ms;
    st.first_token_ms = gs.first_token_ms;
    st.finish = gs.finish;
    if (stats)
        *stats = st;
    hr_free(gen);
    hr_free(sink.buf);
    hr_free(prompt);
    hr_free(ids);
    return s;
}

void hr_chat_reset(hr_chat *c) {
    free_msgs(c);
    hr_free(c->summary);
    c->summary = NULL;
    hr_error err;
    if (update_system(c, &err) != HR_OK) { /* out of memory: no system prompt rather than a stale one */
        hr_free(c->system);
        c->system = NULL;
    }
    forget_history(c);
}

hr_status hr_chat_set_system(hr_chat *c, const char *system, hr_error *err) {
    char *s = dup_or_null(system);
    if (system && !s)
        return hr_err_set(err, HR_ERR_NOMEM, "chat: out of memory");
    hr_free(c->system);
    c->system = s;
    return update_system(c, err);
}

int32_t hr_chat_n_messages(const hr_chat *c) { return c->n_msgs; }

void hr_chat_message(const hr_chat *c, int32_t i, const char **role, const char **content) {
    const bool ok = i >= 0 && i < c->n_msgs;
    *role = ok ? c->msgs[i].role : NULL;
    *content = ok ? c->msgs[i].content : NULL;
}

const char *hr_chat_system(const hr_chat *c) { return c->system_full; }

/* ---- files */

hr_status hr_chat_save(const hr_chat *c, const char *path, hr_error *err) {
    hr_json_init();
    cJSON *root = cJSON_CreateObject(), *msgs = cJSON_CreateArray();
    bool ok = root && msgs && cJSON_AddItemToObject(root, "messages", msgs);
    if (!ok)
        cJSON_Delete(msgs);
    ok = ok && (c->system ? cJSON_AddStringToObject(root, "system", c->system)
                          : cJSON_AddNullToObject(root, "system"));
    ok = ok && (c->summary ? cJSON_AddStringToObject(root, "summary", c->summary)
                           : cJSON_AddNullToObject(root, "summary"));
    ok = ok && cJSON_AddNumberToObject(root, "first_kept", c->first);
    for (int32_t i = 0; ok && i < c->n_msgs; i++) {
        cJSON *m = cJSON_CreateObject();
        ok = m && cJSON_AddItemToArray(msgs, m) &&
             cJSON_AddStringToObject(m, "role", c->msgs[i].role) &&
             cJSON_AddStringToObject(m, "content", c->msgs[i].content);
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text)
        return hr_err_set(err, HR_ERR_NOMEM, "chat: out of memory saving the conversation");
    FILE *f = fopen(path, "wb");
    bool written = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    written = (f && fclose(f) == 0) && written;
    hr_free(text);
    return written ? HR_OK : hr_err_set(err, HR_ERR_IO, "chat: cannot write %s", path);
}

hr_status hr_chat_load(hr_chat *c, const char *path, hr_error *err) {
    char *text = NULL;
    size_t len = 0;
    HR_TRY(hr_file_read_all(path, 64u << 20, &text, &len, err));
    hr_json_init();
    bool nomem = false;
    cJSON *root = hr_json_parse(text, len, NULL, &nomem);
    hr_free(text);
    if (!root)
        return nomem ? hr_err_set(err, HR_ERR_NOMEM, "chat: out of memory reading %s", path)
                     : hr_err_set(err, HR_ERR_FORMAT, "chat: %s is not JSON", path);
    const cJSON *sys = cJSON_GetObjectItemCaseSensitive(root, "system"),
                *sum = cJSON_GetObjectItemCaseSensitive(root, "summary"),
                *first = cJSON_GetObjectItemCaseSensitive(root, "first_kept"),
                *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages"), *m;
    hr_status s = HR_OK;
    if (!cJSON_IsArray(msgs) || (sys && !cJSON_IsNull(sys) && !cJSON_IsString(sys)) ||
        (sum && !cJSON_IsNull(sum) && !cJSON_IsString(sum)) || (first && !cJSON_IsNumber(first)))
        s = hr_err_set(err, HR_ERR_FORMAT,
                       "chat: %s is not a saved conversation ({\"system\", \"summary\", "
                       "\"first_kept\", \"messages\": [{\"role\", \"content\"}...]})",
                       path);
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role"),
                    *t = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (s == HR_OK && (!cJSON_IsString(r) || !cJSON_IsString(t)))
            s = hr_err_set(err, HR_ERR_FORMAT, "chat: %s: a message without a role or content",
                           path);
    }
    if (s == HR_OK) {
        hr_chat_reset(c);
        if (cJSON_IsString(sys))
            s = hr_chat_set_system(c, sys->valuestring, err);
        cJSON_ArrayForEach(m, msgs) {
            if (s != HR_OK)
                break;
            const char *t = cJSON_GetObjectItemCaseSensitive(m, "content")->valuestring;
            s = push_msg(c, cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring, t,
                         strlen(t), err);
        }
        if (s == HR_OK && cJSON_IsString(sum)) {
            c->summary = hr_strdup(sum->valuestring);
            s = c->summary ? update_system(c, err)
                           : hr_err_set(err, HR_ERR_NOMEM, "chat: out of memory");
        }
        if (s == HR_OK && first) {
            const double f = first->valuedouble;
            c->first = f >= 0 && f <= c->n_msgs ? (int32_t)f : 0;
        }
        if (s != HR_OK)
            hr_chat_reset(c);
    }
    cJSON_Delete(root);
    return s;
}
