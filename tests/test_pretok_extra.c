// ctest-label: numeric
/*
 * test_pretok_extra.c — the FixedLength and UnicodeScripts pre-tokenizers
 * and the Unicode Script table behind the second, against Hugging Face
 * tokenizers.
 *
 * tests/data/pretok/ (tools/gen_unicode_scripts.py --fixtures) holds 2,500
 * strings (tests/tokenizer_diff.py's mixed-script generator, plus strings
 * that switch script without spaces: Latin, Cyrillic, Greek, Han, kana,
 * Hangul, Arabic, Hebrew, Devanagari, Thai, digits, punctuation, combining
 * marks, emoji, code points Unicode 9 lacks, space runs) and, per variant,
 * what Hugging Face gives: the pieces of pre_tokenize_str (count and hash
 * of the byte offsets) and the ids of encode (count and hash). A variant is
 * a template naming a base (the llama2 tokenizer.json fixture, or GPT-2's
 * vocabulary from ggml-vocab-gpt-2.gguf in the hf/gpt2 template) and the
 * normalizer and pre-tokenizer to put in it; this test builds each one in
 * the build folder and loads it. Pieces come from pretok_run directly
 * (internal API), ids from hr_tokenize. A mismatch prints the case; the
 * tool's --show N prints what Hugging Face made of it.
 */
#include "headroom.h"
#include "test.h"
#include "test_tok.h"

#include "format/gguf.h"
#include "tokenizer/tok_impl.h"
#include "tokenizer/unicode.h"
#include "tokenizer/unicode_scripts.h"

#include <cjson/cJSON.h>

#define MAX_VARIANTS 16

typedef struct {
    uint32_t n_pieces, pieces_hash, n_ids, ids_hash;
    bool has_pieces;
} expect;

typedef struct {
    uint32_t n_cases, n_variants;
    char names[MAX_VARIANTS][32];
    const uint8_t **cases;
    uint32_t *case_len;
    expect *want[MAX_VARIANTS]; /* (n_cases) per variant */
    bool pieces[MAX_VARIANTS];
    uint8_t *blob;
} case_file;

/* ---------------------------------------------------------------- fixture file */

static const uint8_t *rd_u8(const uint8_t *p, const uint8_t *end, uint8_t *v) {
    if (!p || p >= end)
        return NULL;
    *v = *p;
    return p + 1;
}

static void free_cases(case_file *cf) {
    for (uint32_t v = 0; v < MAX_VARIANTS; v++)
        free(cf->want[v]);
    free(cf->cases);
    free(cf->case_len);
    free(cf->blob);
}

static bool load_cases(const char *path, case_file *cf) {
    memset(cf, 0, sizeof *cf);
    size_t n = 0;
    cf->blob = (uint8_t *)test_read_file(path, &n, 0);
    if (!cf->blob || n < 16 || memcmp(cf->blob, "HRPT", 4) != 0)
        return false;
    const uint8_t *p = cf->blob + 4, *end = cf->blob + n;
    uint32_t version = 0;
    p = test_rd_u32(p, end, &version);
    p = test_rd_u32(p, end, &cf->n_cases);
    p = test_rd_u32(p, end, &cf->n_variants);
    if (!p || version != 1 || cf->n_variants == 0 || cf->n_variants > MAX_VARIANTS ||
        cf->n_cases > (uint32_t)n)
        return false;
    for (uint32_t v = 0; v < cf->n_variants; v++) {
        uint8_t len = 0;
        p = rd_u8(p, end, &len);
        if (!p || len >= 32 || end - p < len)
            return false;
        memcpy(cf->names[v], p, len);
        p += len;
    }
    cf->cases = calloc(cf->n_cases, sizeof *cf->cases);
    cf->case_len = calloc(cf->n_cases, sizeof *cf->case_len);
    if (!cf->cases || !cf->case_len)
        return false;
    for (uint32_t i = 0; i < cf->n_cases; i++) {
        p = test_rd_u32(p, end, &cf->case_len[i]);
        if (!p || (size_t)(end - p) < cf->case_len[i])
            return false;
        cf->cases[i] = p;
        p += cf->case_len[i];
    }
    for (uint32_t v = 0; v < cf->n_variants; v++) {
        uint8_t has = 0;
        p = rd_u8(p, end, &has);
        cf->pieces[v] = has != 0;
        cf->want[v] = calloc(cf->n_cases, sizeof(expect));
        if (!p || !cf->want[v])
            return false;
        for (uint32_t i = 0; i < cf->n_cases; i++) {
            expect *e = &cf->want[v][i];
            if (cf->pieces[v]) {
                uint8_t flag = 0;
                p = rd_u8(p, end, &flag);
                e->has_pieces = flag != 0;
                if (e->has_pieces) {
                    p = test_rd_varint(p, end, &e->n_pieces);
                    p = test_rd_u32(p, end, &e->pieces_hash);
                }
            }
            p = test_rd_varint(p, end, &e->n_ids);
            p = test_rd_u32(p, end, &e->ids_hash);
            if (!p)
                return false;
        }
    }
    return p == end;
}

/* ---------------------------------------------------------------- variants */

/* GPT-2 as tokenizer.json: the hf/gpt2 template (added <|endoftext|>,
 * ByteLevel decoder) with the GGUF's vocab and merges. */
static cJSON *gpt2_json(const gguf_file *g) {
    cJSON *root = test_parse_json_file(TEST_PATH("tests/fixtures/tokenizers/hf/gpt2.template.json"));
    if (!test_bpe_from_gguf(cJSON_GetObjectItemCaseSensitive(root, "model"), g, false)) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* The variant's tokenizer.json, written to the build folder. */
static bool build_variant(const char *name, const cJSON *llama2, const cJSON *gpt2, char *out,
                          size_t cap) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/pretok/%s.template.json", HR_SOURCE_DIR, name);
    cJSON *tmpl = test_parse_json_file(path);
    const char *base = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(tmpl, "base"));
    const cJSON *from = base && strcmp(base, "llama2") == 0 ? llama2
                        : base && strcmp(base, "gpt2") == 0 ? gpt2
                                                            : NULL;
    cJSON *root = from ? cJSON_Duplicate(from, 1) : NULL;
    const char *keys[] = {"normalizer", "pre_tokenizer"};
    for (int k = 0; root && k < 2; k++)
        cJSON_ReplaceItemInObjectCaseSensitive(
            root, keys[k], cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(tmpl, keys[k]), 1));
    cJSON_Delete(tmpl);
    if (!root)
        return false;
    snprintf(out, cap, "%s/pretok_%s.json", HR_BINARY_DIR, name);
    bool ok = test_write_json(root, out);
    cJSON_Delete(root);
    return ok;
}

/* Every case's pieces (for valid UTF-8) and ids against variant v. */
static void compare_variant(const case_file *cf, uint32_t v, const hr_tokenizer *tok) {
    static int32_t ids[1 << 16];
    static uint32_t offs[1 << 16];
    hr_tokenize_params tp = hr_tokenize_params_default();
    int n_ok = 0, n_pieces_ok = 0, n_pieces = 0, n_shown = 0;
    for (uint32_t i = 0; i < cf->n_cases; i++) {
        const expect *e = &cf->want[v][i];
        const char *text = (const char *)cf->cases[i];
        size_t len = cf->case_len[i], n = 0, n_got = 0;
        hr_error err = {0};
        bool pieces_ok = true;
        if (e->has_pieces) {
            tok_ctx c;
            const tok_pieces *pc = NULL;
            tok_ctx_init(&c, tok, &err);
            hr_status st = pretok_run(&c, text, len, true, &pc);
            pieces_ok = st == HR_OK && pc->base == text && pc->n == e->n_pieces &&
                        2 * pc->n <= sizeof offs / sizeof offs[0];
            for (size_t k = 0; pieces_ok && k < pc->n; k++) {
                offs[2 * k] = (uint32_t)pc->sp[k].off;
                offs[2 * k + 1] = (uint32_t)(pc->sp[k].off + pc->sp[k].len);
            }
            pieces_ok = pieces_ok && test_fnv1a_u32(offs, 2 * pc->n) == e->pieces_hash;
            n_got = st == HR_OK ? pc->n : 0;
            tok_ctx_free(&c);
            n_pieces++;
            n_pieces_ok += pieces_ok;
        }
        hr_status st =
            hr_tokenize(tok, text, len, &tp, ids, sizeof ids / sizeof ids[0], &n, &err);
        bool ids_ok = st == HR_OK && n == e->n_ids &&
                      test_fnv1a_u32(ids, n) == e->ids_hash;
        n_ok += ids_ok;
        if ((!ids_ok || !pieces_ok) && n_shown++ < 6) {
            fprintf(stderr, "%s case %u ", cf->names[v], i);
            test_print_bytes(cf->cases[i], cf->case_len[i]);
            if (!pieces_ok)
                fprintf(stderr, "\n  pieces: want %u, got %zu (offsets differ?)", e->n_pieces,
                        n_got);
            if (!ids_ok)
                fprintf(stderr, "\n  ids: want %u, got %zu%s%s", e->n_ids, n,
                        st == HR_OK ? "" : ": ", st == HR_OK ? "" : err.msg);
            fprintf(stderr, "\n  (tools/gen_unicode_scripts.py --show %u)\n", i);
        }
    }
    printf("%-24s ids %d/%u", cf->names[v], n_ok, cf->n_cases);
    if (cf->pieces[v])
        printf(", pieces %d/%d", n_pieces_ok, n_pieces);
    printf("\n");
    CHECK_MSG(n_ok == (int)cf->n_cases, "%s: %u id mismatches", cf->names[v],
              cf->n_cases - (uint32_t)n_ok);
    CHECK_MSG(n_pieces_ok == n_pieces, "%s: %d piece mismatches", cf->names[v],
              n_pieces - n_pieces_ok);
}

static void differential(void) {
    case_file cf;
    bool ok = load_cases(TEST_PATH("tests/data/pretok/cases.bin"), &cf);
    CHECK_MSG(ok, "cannot read tests/data/pretok/cases.bin");
    hr_error err = {0};
    gguf_file *g = NULL;
    cJSON *llama2 = test_parse_json_file(TEST_PATH("tests/fixtures/tokenizers/llama2/tokenizer.json"));
    CHECK_MSG(llama2 != NULL, "cannot read the llama2 tokenizer.json fixture");
    CHECK_OK(gguf_open(TEST_PATH("tests/data/tokenizer-vectors/ggml-vocab-gpt-2.gguf"), &g, &err),
             &err);
    cJSON *gpt2 = g ? gpt2_json(g) : NULL;
    CHECK_MSG(gpt2 != NULL, "cannot build GPT-2's tokenizer.json");
    for (uint32_t v = 0; ok && llama2 && gpt2 && v < cf.n_variants; v++) {
        char path[1024];
        CHECK_MSG(build_variant(cf.names[v], llama2, gpt2, path, sizeof path), "building %s",
                  cf.names[v]);
        hr_tokenizer *tok = NULL;
        CHECK_OK(hr_tokenizer_load(path, &tok, &err), &err);
        if (tok)
            compare_variant(&cf, v, tok);
        hr_tokenizer_free(tok);
    }
    cJSON_Delete(gpt2);
    cJSON_Delete(llama2);
    gguf_free(g);
    free_cases(&cf);
}

/* ---------------------------------------------------------------- small cases */

/* A tokenizer.json with a two-letter vocabulary and the given pre_tokenizer. */
static hr_status load_tiny(const char *pre_json, hr_tokenizer **tok, hr_error *err) {
    char path[1024];
    snprintf(path, sizeof path, "%s/pretok_tiny.json", HR_BINARY_DIR);
    FILE *f = fopen(path, "wb");
    if (!f)
        return HR_ERR_IO;
    fprintf(f,
            "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": []},"
            " \"pre_tokenizer\": %s}",
            pre_json);
    fclose(f);
    return hr_tokenizer_load(path, tok, err);
}

/* The pieces of text under pre_json, joined with '|'. */
static void check_pieces(const char *pre_json, const char *text, const char *want) {
    hr_error err = {0};
    hr_tokenizer *tok = NULL;
    CHECK_OK(load_tiny(pre_json, &tok, &err), &err);
    if (!tok)
        return;
    tok_ctx c;
    const tok_pieces *pc = NULL;
    char got[512] = "";
    size_t m = 0;
    tok_ctx_init(&c, tok, &err);
    CHECK_OK(pretok_run(&c, text, strlen(text), true, &pc), &err);
    for (size_t k = 0; pc && k < pc->n && m + pc->sp[k].len + 2 < sizeof got; k++) {
        if (k)
            got[m++] = '|';
        memcpy(got + m, pc->base + pc->sp[k].off, pc->sp[k].len);
        m += pc->sp[k].len;
        got[m] = '\0';
    }
    CHECK_MSG(strcmp(got, want) == 0, "%s on \"%s\": want \"%s\", got \"%s\"", pre_json, text,
              want, got);
    tok_ctx_free(&c);
    hr_tokenizer_free(tok);
}

static void small_cases(void) {
    const char *sc = "{\"type\": \"UnicodeScripts\"}";
    /* from Hugging Face's own tests and pre_tokenize_str */
    check_pieces(sc, "どこで生れ。Yes", "どこで生れ|。|Yes");
    check_pieces(sc, "Apples are りんご 林檎", "Apples are |りんご 林檎");
    check_pieces(sc, "カタカナーひらがな漢字", "カタカナーひらがな漢字");
    check_pieces(sc, "  abc", "abc");  /* leading spaces are dropped */
    check_pieces(sc, "   ", "");       /* as is a text of spaces only */
    check_pieces(sc, "a 1", "a |1");   /* a space joins the piece before it */
    check_pieces(sc, "a\tb", "a|\t|b"); /* only ' ' is "any"; tab is Common */
    check_pieces(sc, "e\xcc\x81x", "e|\xcc\x81|x");              /* Inherited is its own */
    check_pieces(sc, "abc\xf0\x9f\xa5\xb0" "def", "abc\xf0\x9f\xa5\xb0" "def"); /* U+1F970: 11.0 */
    check_pieces(sc, "\xd6\x89" "!", "\xd6\x89" "!");           /* U+0589 was Common in 9.0 */
    check_pieces(sc, "Привет, мир! Hello", "Привет|, |мир|! |Hello");
    const char *fl3 = "{\"type\": \"FixedLength\", \"length\": 3}";
    check_pieces(fl3, "ab\xf0\x9f\x98\x80" "cd\xc3\xa9", "ab\xf0\x9f\x98\x80|cd\xc3\xa9");
    check_pieces(fl3, "abcdefg", "abc|def|g");
    check_pieces("{\"type\": \"FixedLength\"}", "abcdefghijkl", "abcde|fghij|kl");
    check_pieces("{\"type\": \"FixedLength\", \"length\": 1}", "ab", "a|b");
    check_pieces("{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"WhitespaceSplit\"},"
                 " {\"type\": \"FixedLength\", \"length\": 2}]}",
                 "abc de", "ab|c|de");

    static const char *const bad[] = {
        "{\"type\": \"FixedLength\", \"length\": 0}",
        "{\"type\": \"FixedLength\", \"length\": -1}",
        "{\"type\": \"FixedLength\", \"length\": 2.5}",
        "{\"type\": \"FixedLength\", \"length\": \"5\"}",
        "{\"type\": \"FixedLength\", \"length\": 1e12}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hr_error err = {0};
        hr_tokenizer *tok = NULL;
        hr_status st = load_tiny(bad[i], &tok, &err);
        CHECK_MSG(st == HR_ERR_FORMAT && !tok, "%s: %s", bad[i], hr_status_name(st));
        hr_tokenizer_free(tok);
    }
}

static void script_table(void) {
    /* the runs cover U+0000.. in order with known ids */
    CHECK_EQ_I64(uni_script_runs[0] >> 8, 0);
    bool sorted = true;
    for (size_t i = 0; i < UNI_N_SCRIPT_RUNS; i++) {
        if (i > 0 && uni_script_runs[i] >> 8 <= uni_script_runs[i - 1] >> 8)
            sorted = false;
        if ((uni_script_runs[i] & 0xFF) >= UNI_N_SCRIPTS || uni_script_runs[i] >> 8 > 0x10FFFF)
            sorted = false;
    }
    CHECK_MSG(sorted, "uni_script_runs is not sorted, or has an id out of range");
    static const struct {
        uint32_t cp;
        const char *script;
    } cases[] = {
        {0x41, "Latin"},         {0x20, "Common"},       {0x30, "Common"},
        {0x301, "Inherited"},    {0x410, "Cyrillic"},    {0x3B1, "Greek"},
        {0x4E00, "Han"},         {0x3042, "Hiragana"},   {0x30A2, "Katakana"},
        {0x30FC, "Common"},      {0xAC00, "Hangul"},     {0x627, "Arabic"},
        {0x5D0, "Hebrew"},       {0x905, "Devanagari"},  {0xE01, "Thai"},
        {0x1F600, "Common"},     {0x589, "Common"},      {0x953, "Devanagari"},
        {0x18AF2, "Tangut"},     {0x1E900, "Adlam"},     {0x1F970, "Unknown"},
        {0x378, "Unknown"},      {0x10FFFF, "Unknown"},  {0x110000, "Unknown"},
        {0xFFFD, "Common"},      {0xE0001, "Common"},    {0x2B81D, "Han"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *got = uni_script_names[uni_script(cases[i].cp)];
        CHECK_MSG(strcmp(got, cases[i].script) == 0, "U+%04X: want %s, got %s", cases[i].cp,
                  cases[i].script, got);
    }
}

int main(void) {
    script_table();
    small_cases();
    differential();
    TEST_END();
}
