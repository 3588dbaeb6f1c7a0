/*
 * vocab.c — token table, string arena, the two hash maps, and the
 * end-of-generation rules.
 *
 * The text map stores ids only and compares against tokens[id].text, so it
 * costs 4 bytes a slot; the hash folds 8 bytes at a time (tokens are short,
 * and the SentencePiece merge loop looks up every candidate pair). The merge
 * map keys on the two ids, which is how Hugging Face's BPE model stores
 * merges, and holds the rank and the merged id so a merge step never touches
 * strings. Both are linear-probing tables at most half full.
 *
 * End-of-generation detection by token text mirrors llama.cpp's vocabulary
 * loader (its lists of "<|eot_id|>", "<|im_end|>", ... and the FIM tokens it
 * also treats as ending generation), so a GGUF, a tokenizer.json and a
 * tokenizer.model of the same model stop on the same ids.
 */
#include "tokenizer/vocab.h"

#include "util/alloc.h"
#include "util/log.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- arena */

struct tok_arena {
    struct tok_arena *next;
    size_t used, cap;
    char data[];
};

/* 256 KiB blocks: a 128k-token vocabulary with its merges needs a few MB, so
 * blocks stay few while a tiny vocabulary does not waste much. */
#define ARENA_BLOCK_BYTES ((size_t)256 * 1024)

/* len + 1 bytes from the arena, NUL-terminated at len. */
static char *arena_alloc(tok_vocab *v, size_t len) {
    tok_arena *a = v->arena;
    if (!a || a->cap - a->used < len + 1) {
        size_t cap = len + 1 > ARENA_BLOCK_BYTES ? len + 1 : ARENA_BLOCK_BYTES;
        tok_arena *b = hr_malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->next = v->arena;
        b->used = 0;
        b->cap = cap;
        v->arena = b;
        a = b;
    }
    char *p = a->data + a->used;
    p[len] = '\0';
    a->used += len + 1;
    return p;
}

char *vocab_strdup(tok_vocab *v, const char *s, size_t len) {
    char *p = arena_alloc(v, len);
    if (p && len)
        memcpy(p, s, len);
    return p;
}

/* ---------------------------------------------------------------- tokens */

hr_status vocab_alloc(tok_vocab *v, int32_t n_tokens, hr_error *err) {
    memset(v, 0, sizeof *v);
    v->bos_id = v->eos_id = v->unk_id = v->pad_id = v->sep_id = v->eot_id = v->eom_id = -1;
    strcpy(v->pre, "default");
    if (n_tokens <= 0)
        return hr_err_set(err, HR_ERR_FORMAT, "vocabulary has no tokens");
    v->tokens = hr_calloc((size_t)n_tokens, sizeof *v->tokens);
    if (!v->tokens)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for %d tokens", n_tokens);
    v->n_tokens = n_tokens;
    for (int32_t i = 0; i < n_tokens; i++)
        v->tokens[i].text = "";
    return HR_OK;
}

void vocab_free(tok_vocab *v) {
    if (!v)
        return;
    tok_arena *a = v->arena;
    while (a) {
        tok_arena *next = a->next;
        hr_free(a);
        a = next;
    }
    hr_free(v->tokens);
    hr_free(v->merges);
    hr_free(v->merge_ids);
    hr_free(v->eog_ids);
    hr_free(v->map);
    hr_free(v->merge_map);
    memset(v, 0, sizeof *v);
}

hr_status vocab_set(tok_vocab *v, int32_t id, const char *text, size_t len, float score,
                    tok_type type, hr_error *err) {
    HR_ASSERT(id >= 0 && id < v->n_tokens);
    if (len > UINT32_MAX / 2)
        return hr_err_set(err, HR_ERR_FORMAT, "token %d is %zu bytes long", id, len);
    char *p = vocab_strdup(v, text, len);
    if (!p)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for token text");
    tok_token *t = &v->tokens[id];
    t->text = p;
    t->len = (uint32_t)len;
    t->score = score;
    t->type = (uint8_t)type;
    if (t->len > v->max_token_len)
        v->max_token_len = t->len;
    return HR_OK;
}

/* ---------------------------------------------------------------- text map */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    return h;
}

static uint32_t table_size(uint64_t n_entries) {
    uint32_t cap = 16;
    while (cap < n_entries * 2)
        cap <<= 1;
    return cap;
}

hr_status vocab_index(tok_vocab *v, const char *name, hr_error *err) {
    uint32_t cap = table_size((uint64_t)v->n_tokens);
    hr_free(v->map);
    v->map = hr_malloc((size_t)cap * sizeof *v->map);
    if (!v->map)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for the vocabulary index");
    memset(v->map, 0xFF, (size_t)cap * sizeof *v->map);
    v->map_mask = cap - 1;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        const tok_token *t = &v->tokens[id];
        if (t->len == 0)
            continue;
        uint32_t i = (uint32_t)hash_bytes(t->text, t->len) & v->map_mask;
        for (;;) {
            int32_t o = v->map[i];
            if (o < 0) {
                v->map[i] = id;
                break;
            }
            const tok_token *u = &v->tokens[o];
            if (u->len == t->len && memcmp(u->text, t->text, t->len) == 0)
                return hr_err_set(err, HR_ERR_FORMAT,
                                  "%s: duplicate token in vocabulary: '%.64s' has ids %d and %d",
                                  name, t->text, o, id);
            i = (i + 1) & v->map_mask;
        }
    }
    return HR_OK;
}

int32_t vocab_find(const tok_vocab *v, const char *s, size_t n) {
    if (!v->map || n == 0 || n > v->max_token_len)
        return -1;
    uint32_t i = (uint32_t)hash_bytes(s, n) & v->map_mask;
    for (;;) {
        int32_t id = v->map[i];
        if (id < 0)
            return -1;
        const tok_token *t = &v->tokens[id];
        if (t->len == n && memcmp(t->text, s, n) == 0)
            return id;
        i = (i + 1) & v->map_mask;
    }
}

/* ---------------------------------------------------------------- merges */

hr_status vocab_add_merge(tok_vocab *v, const char *a, size_t na, const char *b, size_t nb,
                          bool strict, const char *name, hr_error *err) {
    int32_t ia = vocab_find(v, a, na), ib = vocab_find(v, b, nb);
    int32_t ir = -1;
    if (ia >= 0 && ib >= 0 && na + nb <= v->max_token_len) {
        char small[256];
        char *joined = na + nb <= sizeof small ? small : hr_malloc(na + nb);
        if (!joined)
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory for a merge");
        memcpy(joined, a, na);
        memcpy(joined + na, b, nb);
        ir = vocab_find(v, joined, na + nb);
        if (joined != small)
            hr_free(joined);
    }
    if (ia < 0 || ib < 0 || ir < 0) {
        if (strict)
            return hr_err_set(err, HR_ERR_FORMAT,
                              "%s: merge %d ('%.*s' '%.*s') uses a token that is not in the "
                              "vocabulary",
                              name, v->n_merges, (int)(na > 64 ? 64 : na), a,
                              (int)(nb > 64 ? 64 : nb), b);
        return HR_OK;
    }
    if (v->n_merges == v->merges_cap) {
        int32_t cap = v->merges_cap ? v->merges_cap * 2 : 1024;
        const char **m = hr_realloc(v->merges, (size_t)cap * sizeof *m);
        if (!m)
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory for merges");
        v->merges = m;
        int32_t(*ids)[3] = hr_realloc(v->merge_ids, (size_t)cap * sizeof *ids);
        if (!ids)
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory for merges");
        v->merge_ids = ids;
        v->merges_cap = cap;
    }
    char *s = arena_alloc(v, na + 1 + nb);
    if (!s)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for merges");
    memcpy(s, a, na);
    s[na] = ' ';
    memcpy(s + na + 1, b, nb);
    v->merges[v->n_merges] = s;
    v->merge_ids[v->n_merges][0] = ia;
    v->merge_ids[v->n_merges][1] = ib;
    v->merge_ids[v->n_merges][2] = ir;
    v->n_merges++;
    return HR_OK;
}

hr_status vocab_index_merges(tok_vocab *v, hr_error *err) {
    hr_free(v->merge_map);
    v->merge_map = NULL;
    if (v->n_merges == 0)
        return HR_OK;
    uint32_t cap = table_size((uint64_t)v->n_merges);
    v->merge_map = hr_malloc((size_t)cap * sizeof *v->merge_map);
    if (!v->merge_map)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for the merge index");
    for (uint32_t i = 0; i < cap; i++)
        v->merge_map[i].key = UINT64_MAX;
    v->merge_mask = cap - 1;
    for (int32_t r = 0; r < v->n_merges; r++) {
        uint64_t key =
            ((uint64_t)(uint32_t)v->merge_ids[r][0] << 32) | (uint32_t)v->merge_ids[r][1];
        uint32_t i = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & v->merge_mask;
        while (v->merge_map[i].key != UINT64_MAX && v->merge_map[i].key != key)
            i = (i + 1) & v->merge_mask;
        if (v->merge_map[i].key == key)
            continue; /* duplicate pair: the first rank stays */
        v->merge_map[i].key = key;
        v->merge_map[i].rank = r;
        v->merge_map[i].result = v->merge_ids[r][2];
    }
    return HR_OK;
}

/* ---------------------------------------------------------------- specials */

static const char *const k_eot_texts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81"
    "of\xe2\x96\x81"
    "sentence\xef\xbd\x9c>", /* DeepSeek */
    "<end_of_utterance>",
};

/* FIM pad / repo / file-separator tokens: llama.cpp ends generation on them. */
static const char *const k_fim_eog_texts[] = {
    "<|fim_pad|>",   "<fim-pad>",  "<fim_pad>", "<PAD>",      "[PAD]",        "<|fim_repo|>",
    "<|repo_name|>", "<fim-repo>", "<REPO>",    "<reponame>", "<|file_sep|>",
};

static const char *const k_eog_texts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81"
    "of\xe2\x96\x81"
    "sentence\xef\xbd\x9c>",
    "[e~[",
};

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static int32_t find_cstr(const tok_vocab *v, const char *s) { return vocab_find(v, s, strlen(s)); }

/* A token found by its text to end a turn is treated as control, whatever the
 * file said (llama.cpp does the same and warns). */
static void mark_control(tok_vocab *v, int32_t id) {
    uint8_t *t = &v->tokens[id].type;
    if (*t == TOK_TYPE_NORMAL || *t == TOK_TYPE_USER_DEFINED || *t == TOK_TYPE_UNDEFINED)
        *t = TOK_TYPE_CONTROL;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void eog_add(int32_t *ids, int32_t *n, int32_t cap, int32_t id) {
    for (int32_t i = 0; i < *n; i++)
        if (ids[i] == id)
            return;
    if (*n < cap)
        ids[(*n)++] = id;
}

hr_status vocab_finish_specials(tok_vocab *v, const int32_t *extra_eog, int32_t n_extra_eog,
                                hr_error *err) {
    int32_t *ids_of[] = {&v->bos_id, &v->eos_id, &v->unk_id, &v->pad_id,
                         &v->sep_id, &v->eot_id, &v->eom_id};
    for (int i = 0; i < N_OF(ids_of); i++)
        if (*ids_of[i] >= v->n_tokens || *ids_of[i] < -1)
            *ids_of[i] = -1;

    if (v->eot_id < 0)
        for (int i = 0; i < N_OF(k_eot_texts) && v->eot_id < 0; i++)
            v->eot_id = find_cstr(v, k_eot_texts[i]);
    if (v->eom_id < 0)
        v->eom_id = find_cstr(v, "<|eom_id|>");

    int32_t cap =
        N_OF(k_eog_texts) + N_OF(k_fim_eog_texts) + 3 + (n_extra_eog > 0 ? n_extra_eog : 0);
    int32_t *ids = hr_malloc((size_t)cap * sizeof *ids);
    if (!ids)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for end-of-generation ids");
    int32_t n = 0;
    for (int i = 0; i < N_OF(k_fim_eog_texts); i++) {
        int32_t id = find_cstr(v, k_fim_eog_texts[i]);
        if (id >= 0) {
            mark_control(v, id);
            eog_add(ids, &n, cap, id);
        }
    }
    for (int i = 0; i < N_OF(k_eog_texts); i++) {
        int32_t id = find_cstr(v, k_eog_texts[i]);
        if (id >= 0) {
            mark_control(v, id);
            eog_add(ids, &n, cap, id);
        }
    }
    if (v->eot_id >= 0)
        mark_control(v, v->eot_id);
    if (v->eom_id >= 0)
        mark_control(v, v->eom_id);
    int32_t fixed[3] = {v->eos_id, v->eot_id, v->eom_id};
    for (int i = 0; i < 3; i++)
        if (fixed[i] >= 0)
            eog_add(ids, &n, cap, fixed[i]);
    for (int32_t i = 0; i < n_extra_eog; i++)
        if (extra_eog[i] >= 0 && extra_eog[i] < v->n_tokens)
            eog_add(ids, &n, cap, extra_eog[i]);

    /* gpt-oss (<|return|> + <|call|>) and solar-open (<|calls|> + <|flush|>)
     * use <|end|> between messages, not at the end: it must not stop
     * generation there (llama.cpp's workaround, same condition). */
    int32_t end_id = find_cstr(v, "<|end|>");
    bool has_return = find_cstr(v, "<|return|>") >= 0, has_call = find_cstr(v, "<|call|>") >= 0;
    bool has_calls = find_cstr(v, "<|calls|>") >= 0, has_flush = find_cstr(v, "<|flush|>") >= 0;
    if (end_id >= 0 && ((has_return && has_call) || (has_calls && has_flush))) {
        for (int32_t i = 0; i < n; i++)
            if (ids[i] == end_id)
                ids[i] = ids[--n];
        v->tokens[end_id].type = TOK_TYPE_USER_DEFINED;
    }

    qsort(ids, (size_t)n, sizeof *ids, cmp_i32);
    hr_free(v->eog_ids);
    v->eog_ids = ids;
    v->n_eog = n;
    return HR_OK;
}

bool vocab_is_eog(const tok_vocab *v, int32_t id) {
    int32_t lo = 0, hi = v->n_eog;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (v->eog_ids[mid] == id)
            return true;
        if (v->eog_ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}
