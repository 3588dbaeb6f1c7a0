/*
 * test_tokenizer.c — tokenizer units: special-token splitting (longest
 * match, parse_special, lstrip/rstrip, legacy dummy prefix), BOS/EOS rules,
 * invalid UTF-8, the hr_tokenize and hr_token_to_piece buffer contracts, the
 * streaming detokenizer (characters split across byte tokens, U+FFFD, the
 * leading space), round trips, hostile tokenizer.model / tokenizer.json /
 * GGUF inputs, and allocation-failure injection on load and tokenize.
 */
#include "headroom.h"
#include "test.h"

#include "format/gguf.h"
#include "util/alloc.h"

#include <sys/stat.h>

#define SPM_MODEL TEST_PATH("tests/data/llama2-tokenizer/tokenizer.model")
#define SPM_GGUF TEST_PATH("tests/data/tokenizer-vectors/ggml-vocab-llama-spm.gguf")
#define GPT2_GGUF TEST_PATH("tests/data/tokenizer-vectors/ggml-vocab-gpt-2.gguf")
#define LLAMA2_DIR TEST_PATH("tests/fixtures/tokenizers/llama2")

static hr_tokenizer *load(const char *path) {
    hr_error err;
    hr_tokenizer *tok = NULL;
    hr_status st = hr_tokenizer_load(path, &tok, &err);
    CHECK_MSG(st == HR_OK, "%s: %s", path, err.msg);
    return st == HR_OK ? tok : NULL;
}

/* Tokenizes s; returns the count (or -1) and the ids in out. */
static int tok_ids(const hr_tokenizer *t, const char *s, size_t len, int add_bos, bool special,
                   int32_t *out, size_t cap) {
    hr_tokenize_params p = {.add_bos = add_bos, .parse_special = special};
    size_t n = 0;
    hr_error err;
    if (hr_tokenize(t, s, len, &p, out, cap, &n, &err) != HR_OK)
        return -1;
    return (int)n;
}

static bool ids_eq(const int32_t *a, int na, const int32_t *b, int nb) {
    return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

#define CHECK_IDS(tok, str, add_bos, special, ...)                                                 \
    do {                                                                                           \
        const int32_t want_[] = {__VA_ARGS__};                                                     \
        int32_t got_[256];                                                                         \
        int n_ = tok_ids(tok, str, strlen(str), add_bos, special, got_, 256);                      \
        int nw_ = (int)(sizeof want_ / sizeof want_[0]);                                           \
        CHECK_MSG(ids_eq(got_, n_, want_, nw_), "'%s': got %d ids, first %d", str, n_,             \
                  n_ > 0 ? got_[0] : -1);                                                          \
    } while (0)

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    if (!f)
        return;
    CHECK(fwrite(data, 1, n, f) == n);
    fclose(f);
}

static bool valid_utf8(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t k = c < 0x80 ? 1 : c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
        if (k == 0 || i + k > n)
            return 0;
        /* second-byte ranges rule out overlongs, surrogates and > U+10FFFF */
        unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
        unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
        if (k > 1 && (u[i + 1] < lo || u[i + 1] > hi))
            return 0;
        for (size_t j = 2; j < k; j++)
            if ((u[i + j] & 0xC0) != 0x80)
                return 0;
        i += k;
    }
    return 1;
}

/* ---------------------------------------------------------------- a tiny tokenizer.json */

static const char tiny_json[] =
    "{\"version\":\"1.0\",\"added_tokens\":["
    "{\"id\":5,\"content\":\"<a>\",\"special\":true},"
    "{\"id\":6,\"content\":\"<a><b>\",\"special\":true},"
    "{\"id\":7,\"content\":\"[X]\",\"special\":false,\"lstrip\":true,\"rstrip\":true}],"
    "\"normalizer\":null,\"pre_tokenizer\":null,\"post_processor\":null,\"decoder\":null,"
    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"abc\":4,"
    "\"<a>\":5,\"<a><b>\":6,\"[X]\":7,\" \":8},\"merges\":[\"a b\",[\"ab\",\"c\"]]}}";

static char tiny_path[1024];

static void test_special_split(void) {
    snprintf(tiny_path, sizeof tiny_path, "%s/tok_unit_tiny.json", HR_BINARY_DIR);
    write_file(tiny_path, tiny_json, sizeof tiny_json - 1);
    hr_tokenizer *t = load(tiny_path);
    if (t) {
        CHECK_IDS(t, "abc", 0, true, 4);
        CHECK_IDS(t, "abc<a><b>c", 0, true, 4, 6, 2); /* longest match wins */
        CHECK_IDS(t, "ab<a>", 0, true, 3, 5);
        /* special text is plain text when parse_special is off: '<' and '>'
         * are not tokens and there is no unk, so they are dropped */
        CHECK_IDS(t, "abc<a>", 0, false, 4, 0);
        /* a non-special added token splits either way; lstrip/rstrip eat spaces */
        CHECK_IDS(t, "a [X] b", 0, false, 0, 7, 1);
        CHECK_IDS(t, "a [X] b", 0, true, 0, 7, 1);
        CHECK_IDS(t, "a b", 0, true, 0, 8, 1);
        int32_t ids[4];
        CHECK_EQ_I64(tok_ids(t, "", 0, -1, true, ids, 4), 0);
        hr_tokenizer_free(t);
    }

    t = load(SPM_GGUF);
    if (t) {
        CHECK_IDS(t, "<s>Hello</s>", 0, true, 1, 15043, 2);
        /* llama.cpp (legacy): the dummy prefix comes back after a special token */
        CHECK_IDS(t, "Hello</s>world", 0, true, 15043, 2, 3186);
        int32_t ids[64];
        int n = tok_ids(t, "<s>Hello</s>", 12, 0, false, ids, 64);
        CHECK(n > 3);
        for (int i = 0; i < n; i++)
            CHECK(ids[i] != 1 && ids[i] != 2);
        hr_tokenizer_free(t);
    }
}

/* tokenizer.model with a tokenizer_config.json saying legacy false: no dummy
 * prefix after special tokens (transformers' LlamaTokenizer) */
static void test_legacy(void) {
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/tok_unit_nonlegacy", HR_BINARY_DIR);
    mkdir(dir, 0755);
    size_t n = 0;
    char *model = test_read_file(SPM_MODEL, &n, 0);
    CHECK(model != NULL);
    if (!model)
        return;
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    write_file(path, model, n);
    free(model);
    static const char cfg[] =
        "{\"legacy\": false, \"add_bos_token\": true, \"bos_token\": \"<s>\"}";
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    write_file(path, cfg, sizeof cfg - 1);
    hr_tokenizer *t = load(dir);
    if (t) {
        CHECK_IDS(t, "Hello</s>world", 0, true, 15043, 2, 11526); /* "world" without ▁ */
        CHECK_IDS(t, "<s>Hello", 0, true, 1, 10994);
        CHECK_IDS(t, "Hello", -1, true, 1, 15043);
        hr_tokenizer_free(t);
    }
    t = load(SPM_MODEL); /* no config: legacy, like sentencepiece per fragment */
    if (t) {
        CHECK_IDS(t, "Hello</s>world", 0, true, 15043, 2, 3186);
        hr_tokenizer_free(t);
    }
}

static void test_bos_rules(void) {
    hr_tokenizer *t = load(SPM_GGUF);
    if (t) {
        CHECK_EQ_I64(hr_tokenizer_bos(t), 1);
        CHECK_EQ_I64(hr_tokenizer_eos(t), 2);
        CHECK(hr_tokenizer_is_eog(t, 2));
        CHECK(!hr_tokenizer_is_eog(t, 1));
        CHECK_EQ_I64(hr_tokenizer_n_vocab(t), 32000);
        CHECK_IDS(t, "Hello world", -1, true, 1, 15043, 3186);
        CHECK_IDS(t, "Hello world", 0, true, 15043, 3186);
        CHECK_IDS(t, "Hello world", 1, true, 1, 15043, 3186);
        int32_t ids[4];
        CHECK_EQ_I64(tok_ids(t, "", 0, -1, true, ids, 4), 1); /* [BOS], as sentencepiece+HF */
        CHECK_EQ_I64(ids[0], 1);
        hr_tokenizer_free(t);
    }
    t = load(GPT2_GGUF);
    if (t) {
        CHECK_IDS(t, "Hello", -1, true, 15496); /* gpt-2 adds no BOS */
        CHECK_IDS(t, "Hello", 1, true, 50256, 15496);
        CHECK(hr_tokenizer_is_eog(t, 50256));
        CHECK_IDS(t, "<|endoftext|>x", 0, true, 50256, 87);
        hr_tokenizer_free(t);
    }
    t = load(LLAMA2_DIR); /* tokenizer.json template: <s> in front */
    if (t) {
        CHECK_IDS(t, "Hello world", -1, true, 1, 15043, 3186);
        CHECK_IDS(t, "Hello world", 0, true, 15043, 3186);
        CHECK_EQ_I64(hr_tokenizer_eos(t), 2);
        hr_tokenizer_free(t);
    }
    /* add_bos_token false in the config overrides the template */
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/tok_unit_nobos", HR_BINARY_DIR);
    mkdir(dir, 0755);
    size_t n = 0;
    char *json = test_read_file(LLAMA2_DIR "/tokenizer.json", &n, 0);
    if (json) {
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        write_file(path, json, n);
        free(json);
        static const char cfg[] = "{\"add_bos_token\": false, \"add_eos_token\": true, "
                                  "\"eos_token\": {\"content\": \"</s>\"}}";
        snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
        write_file(path, cfg, sizeof cfg - 1);
        t = load(dir);
        if (t) {
            CHECK_IDS(t, "Hello world", -1, true, 15043, 3186, 2);
            CHECK_IDS(t, "Hello world", 0, true, 15043, 3186);
            hr_tokenizer_free(t);
        }
    }
}

static void test_invalid_utf8_and_buffers(void) {
    hr_tokenizer *t = load(SPM_MODEL);
    if (!t)
        return;
    int32_t a[64], b[64];
    int na = tok_ids(t,
                     "x\xff"
                     "y\xe2\x82",
                     5, 0, false, a, 64);
    int nb = tok_ids(t, "x\xef\xbf\xbdy\xef\xbf\xbd", 8, 0, false, b, 64);
    CHECK(na > 0 && ids_eq(a, na, b, nb));

    /* too small a buffer: HR_ERR_INVALID and the count needed */
    hr_tokenize_params p = {.add_bos = 1, .parse_special = true};
    size_t n = 0;
    hr_error err;
    CHECK_EQ_I64(hr_tokenize(t, "Hello world", 11, &p, a, 2, &n, &err), HR_ERR_INVALID);
    CHECK_EQ_I64(n, 3);
    CHECK_EQ_I64(hr_tokenize(t, "Hello world", 11, &p, NULL, 0, &n, &err), HR_ERR_INVALID);
    CHECK_EQ_I64(n, 3);
    CHECK_OK(hr_tokenize(t, "Hello world", 11, &p, a, 3, &n, &err), &err);
    CHECK_EQ_I64(hr_tokenize(t, NULL, 3, &p, a, 3, &n, &err), HR_ERR_INVALID);
    hr_tokenizer_free(t);
}

static void test_token_to_piece(void) {
    hr_tokenizer *t = load(SPM_MODEL);
    if (!t)
        return;
    char buf[64];
    memset(buf, 'Z', sizeof buf);
    CHECK_EQ_I64(hr_token_to_piece(t, 15043, false, buf, 3), -6); /* " Hello" */
    CHECK_EQ_I64(buf[0], 'Z');                                    /* nothing written */
    CHECK_EQ_I64(hr_token_to_piece(t, 15043, false, buf, 6), 6);
    CHECK(memcmp(buf, " Hello", 6) == 0 && buf[6] == 'Z'); /* not NUL-terminated */
    CHECK_EQ_I64(hr_token_to_piece(t, 15043, false, NULL, 0), -6);
    CHECK_EQ_I64(hr_token_to_piece(t, 1, false, buf, 64), 0); /* <s> hidden */
    CHECK_EQ_I64(hr_token_to_piece(t, 1, true, buf, 64), 3);
    CHECK(memcmp(buf, "<s>", 3) == 0);
    CHECK_EQ_I64(hr_token_to_piece(t, 68, false, buf, 64), 1); /* <0x41> */
    CHECK_EQ_I64(buf[0], 'A');
    CHECK_EQ_I64(hr_token_to_piece(t, -1, true, buf, 64), 0);
    CHECK_EQ_I64(hr_token_to_piece(t, 32000, true, buf, 64), 0);
    hr_tokenizer_free(t);

    t = load(GPT2_GGUF);
    if (t) {
        CHECK_EQ_I64(hr_token_to_piece(t, 18435, false, buf, 64), 6); /* "ĠHello" */
        CHECK(memcmp(buf, " Hello", 6) == 0);
        CHECK_EQ_I64(hr_token_to_piece(t, 198, false, buf, 64), 1); /* "Ċ" */
        CHECK_EQ_I64(buf[0], '\n');
        hr_tokenizer_free(t);
    }
}

/* Pushes ids through a stream; returns the concatenated output. */
static size_t stream_all(const hr_tokenizer *t, const int32_t *ids, int n, char *out, size_t cap) {
    hr_detok *d = NULL;
    hr_error err;
    CHECK_OK(hr_detok_create(t, &d, &err), &err);
    if (!d)
        return 0;
    size_t m = 0;
    char piece[512];
    for (int i = 0; i < n; i++) {
        int32_t k = hr_detok_push(d, ids[i], piece, sizeof piece);
        CHECK(k >= 0);
        CHECK_MSG(valid_utf8(piece, k > 0 ? (size_t)k : 0), "stream emitted broken UTF-8");
        if (k > 0 && m + (size_t)k <= cap) {
            memcpy(out + m, piece, (size_t)k);
            m += (size_t)k;
        }
    }
    int32_t k = hr_detok_flush(d, piece, sizeof piece);
    CHECK(k >= 0);
    if (k > 0 && m + (size_t)k <= cap) {
        memcpy(out + m, piece, (size_t)k);
        m += (size_t)k;
    }
    hr_detok_free(d);
    return m;
}

static void test_detok_stream(void) {
    hr_tokenizer *t = load(SPM_MODEL);
    if (!t)
        return;
    hr_detok *d = NULL;
    hr_error err;
    CHECK_OK(hr_detok_create(t, &d, &err), &err);
    if (d) {
        char buf[64];
        /* U+10330 split over four byte tokens: nothing until complete */
        CHECK_EQ_I64(hr_detok_push(d, 1, buf, 64), 0);   /* <s> */
        CHECK_EQ_I64(hr_detok_push(d, 243, buf, 64), 0); /* F0 */
        CHECK_EQ_I64(hr_detok_push(d, 147, buf, 64), 0); /* 90 */
        CHECK_EQ_I64(hr_detok_push(d, 143, buf, 64), 0); /* 8C */
        CHECK_EQ_I64(hr_detok_push(d, 179, buf, 3), -4); /* B0, buffer too small */
        CHECK_EQ_I64(hr_detok_push(d, 179, buf, 64), 4); /* same push again */
        CHECK(memcmp(buf, "\xf0\x90\x8c\xb0", 4) == 0);
        /* a sequence broken by an ASCII byte: U+FFFD, then the byte */
        CHECK_EQ_I64(hr_detok_push(d, 243, buf, 64), 0); /* F0 */
        CHECK_EQ_I64(hr_detok_push(d, 68, buf, 64), 4);  /* 'A' */
        CHECK(memcmp(buf,
                     "\xef\xbf\xbd"
                     "A",
                     4) == 0);
        /* an unfinished sequence at the end: flush gives one U+FFFD */
        CHECK_EQ_I64(hr_detok_push(d, 243, buf, 64), 0);
        CHECK_EQ_I64(hr_detok_push(d, 147, buf, 64), 0);
        CHECK_EQ_I64(hr_detok_flush(d, buf, 2), -3);
        CHECK_EQ_I64(hr_detok_flush(d, buf, 64), 3);
        CHECK(memcmp(buf, "\xef\xbf\xbd", 3) == 0);
        CHECK_EQ_I64(hr_detok_flush(d, buf, 64), 0);
        /* a stray continuation byte is invalid at once */
        CHECK_EQ_I64(hr_detok_push(d, 147, buf, 64), 3);
        hr_detok_free(d);
    }
    /* the dummy prefix space of the first token is dropped, later ones kept */
    int32_t hw[] = {1, 15043, 3186};
    char out[256];
    size_t m = stream_all(t, hw, 3, out, sizeof out);
    CHECK(m == 11 && memcmp(out, "Hello world", 11) == 0);

    /* round trips: what went in comes out (SentencePiece and byte-level) */
    static const char *texts[] = {
        "Hello world",
        " two  spaces\tand\ttabs\n\nnew lines ",
        "caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80",
        ("\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 \xf0\x90\x8c\xb0"
         "\xf0\x90\x8c\xb1 e\xcc\x81"),
        "12345 3.14159 x=y+z; // \xe2\x82\xac\xe2\x82\xac",
    };
    const char *paths[] = {SPM_MODEL, GPT2_GGUF, LLAMA2_DIR};
    for (int p = 0; p < 3; p++) {
        hr_tokenizer *u = p == 0 ? t : load(paths[p]);
        if (!u)
            continue;
        for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
            int32_t ids[512];
            int n = tok_ids(u, texts[i], strlen(texts[i]), -1, true, ids, 512);
            CHECK(n > 0);
            m = stream_all(u, ids, n, out, sizeof out);
            CHECK_MSG(m == strlen(texts[i]) && memcmp(out, texts[i], m) == 0,
                      "%s: round trip of '%s' gave '%.*s'", paths[p], texts[i], (int)m, out);
        }
        if (p != 0)
            hr_tokenizer_free(u);
    }
    hr_tokenizer_free(t);
}

/* ---------------------------------------------------------------- hostile inputs */

static hr_status load_status(const char *path, hr_error *err) {
    hr_tokenizer *t = NULL;
    hr_status st = hr_tokenizer_load(path, &t, err);
    hr_tokenizer_free(t);
    return st;
}

static void test_hostile_model(void) {
    size_t n = 0;
    char *model = test_read_file(SPM_MODEL, &n, 0);
    CHECK(model != NULL);
    if (!model)
        return;
    char path[1024];
    snprintf(path, sizeof path, "%s/tok_unit_hostile.model", HR_BINARY_DIR);
    /* truncations: inside a piece, inside the specs, a few bytes in */
    size_t cuts[] = {1, 2, 5, 17, 100, 1000, n / 2, n - 300, n - 40, n - 7, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        write_file(path, model, cuts[i]);
        hr_error err;
        hr_status st = load_status(path, &err);
        CHECK_MSG(st == HR_ERR_FORMAT || st == HR_ERR_UNSUPPORTED, "cut at %zu: %s (%s)", cuts[i],
                  hr_status_name(st), err.msg);
    }
    /* a length that runs past the end */
    char *bad = malloc(n);
    memcpy(bad, model, n);
    bad[1] = (char)0xff; /* first piece's length varint: huge */
    bad[2] = (char)0xff;
    bad[3] = (char)0x7f;
    write_file(path, bad, n);
    hr_error err;
    CHECK_EQ_I64(load_status(path, &err), HR_ERR_FORMAT);
    /* random byte flips: any status, no crash (ASan checks the rest) */
    srand(1234);
    for (int k = 0; k < 60; k++) {
        memcpy(bad, model, n);
        for (int j = 0; j < 8; j++)
            bad[(size_t)rand() % n] = (char)rand();
        write_file(path, bad, n);
        (void)load_status(path, &err);
    }
    static const char garbage[] = "this is not a protobuf at all";
    write_file(path, garbage, sizeof garbage - 1);
    CHECK(load_status(path, &err) != HR_OK);
    write_file(path, "", 0);
    CHECK(load_status(path, &err) != HR_OK);
    free(bad);
    free(model);
}

static void test_hostile_json(void) {
    static const struct {
        const char *json;
        hr_status want;
        const char *in_msg; /* the message must name this */
    } cases[] = {
        {"{", HR_ERR_FORMAT, "JSON"},
        {"[]", HR_ERR_FORMAT, "object"},
        {"{\"model\": 3}", HR_ERR_FORMAT, "model"},
        {"{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", HR_ERR_UNSUPPORTED, "Unigram"},
        {"{\"model\": {\"type\": \"WordPiece\"}}", HR_ERR_UNSUPPORTED, "WordPiece"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": [], \"merges\": []}}", HR_ERR_FORMAT, "vocab"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"0\"}, \"merges\": []}}",
         HR_ERR_FORMAT, "integer"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}", HR_ERR_FORMAT,
         "integer"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1e12}, \"merges\": []}}",
         HR_ERR_FORMAT, "integer"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0.5}, \"merges\": []}}", HR_ERR_FORMAT,
         "integer"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}",
         HR_ERR_FORMAT, "two"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a z\"]}}",
         HR_ERR_FORMAT, "merge"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [7]}}", HR_ERR_FORMAT,
         "merge"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": {}}}", HR_ERR_FORMAT,
         "merges"},
        {"{\"added_tokens\": [{\"id\": 1}], \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
         "\"merges\": []}}",
         HR_ERR_FORMAT, "added"},
        {"{\"pre_tokenizer\": {\"type\": \"NoSuchPreTokenizer\"}, \"model\": {\"type\": "
         "\"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
         HR_ERR_UNSUPPORTED, "NoSuchPreTokenizer"},
        {"{\"normalizer\": {\"type\": \"Lowercase\"}, \"model\": {\"type\": \"BPE\", "
         "\"vocab\": {\"a\": 0}, \"merges\": []}}",
         HR_ERR_UNSUPPORTED, "Lowercase"},
        {"{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, "
         "\"behavior\": \"Isolated\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
         "\"merges\": []}}",
         HR_ERR_UNSUPPORTED, "regex"},
        {"{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, "
         "\"behavior\": \"Sideways\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
         "\"merges\": []}}",
         HR_ERR_FORMAT, "Sideways"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"dropout\": "
         "0.1}}",
         HR_ERR_UNSUPPORTED, "dropout"},
    };
    char path[1024];
    snprintf(path, sizeof path, "%s/tok_unit_hostile.json", HR_BINARY_DIR);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_file(path, cases[i].json, strlen(cases[i].json));
        hr_error err;
        err.msg[0] = '\0';
        hr_status st = load_status(path, &err);
        CHECK_MSG(st == cases[i].want && strstr(err.msg, cases[i].in_msg), "case %zu: %s: %s", i,
                  hr_status_name(st), err.msg);
    }
    /* truncations of a real tokenizer.json: all refused cleanly */
    size_t n = 0;
    char *json = test_read_file(LLAMA2_DIR "/tokenizer.json", &n, 0);
    if (json) {
        size_t cuts[] = {0, 1, 10, 1000, n / 3, n - 2};
        for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
            write_file(path, json, cuts[i]);
            hr_error err;
            CHECK_EQ_I64(load_status(path, &err), HR_ERR_FORMAT);
        }
        free(json);
    }
}

static void write_gguf(const char *path, const char *model, const char *pre, bool tokens_ok) {
    gguf_writer *w = NULL;
    hr_error err;
    CHECK_OK(gguf_writer_create(&w, &err), &err);
    if (!w)
        return;
    const char *toks[] = {"a", "b", "ab"};
    gguf_writer_set_str(w, "tokenizer.ggml.model", model);
    if (pre)
        gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    if (tokens_ok) {
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 3);
    } else {
        int32_t nums[3] = {1, 2, 3};
        gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_TYPE_INT32, nums, 3);
    }
    const char *merges[] = {"a b"};
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, 1);
    CHECK_OK(gguf_writer_write(w, path, &err), &err);
    gguf_writer_free(w);
}

static void test_hostile_gguf(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tok_unit_vocab.gguf", HR_BINARY_DIR);
    hr_error err;
    write_gguf(path, "gpt2", "no-such-pre", true);
    CHECK_EQ_I64(load_status(path, &err), HR_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "no-such-pre") != NULL, "%s", err.msg);
    write_gguf(path, "bert", NULL, true);
    CHECK_EQ_I64(load_status(path, &err), HR_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "bert") != NULL, "%s", err.msg);
    write_gguf(path, "gpt2", "qwen2", false);
    CHECK_EQ_I64(load_status(path, &err), HR_ERR_FORMAT);
    write_gguf(path, "gpt2", "qwen2", true);
    hr_tokenizer *t = load(path);
    if (t) {
        CHECK_IDS(t, "ab", 0, true, 2);
        CHECK_IDS(t, "ba", 0, true, 1, 0);
        hr_tokenizer_free(t);
    }
}

/* ---------------------------------------------------------------- allocation failures */

static void test_alloc_faults(void) {
    const char *paths[] = {tiny_path, SPM_MODEL, GPT2_GGUF, LLAMA2_DIR};
    for (int p = 0; p < 4; p++) {
        /* Every allocation of the first 2000, then 2% steps: past the loaders'
         * own allocations the rest are cJSON nodes of one repeated code path,
         * and walking all of a 1.4 MB tokenizer.json one by one takes minutes. */
        int64_t k, walked = 0;
        for (k = 1; k < 10000000; k = k < 2000 ? k + 1 : k + k / 50, walked++) {
            hr_alloc_fail_at(k);
            hr_tokenizer *t = NULL;
            hr_error err;
            hr_status st = hr_tokenizer_load(paths[p], &t, &err);
            if (st == HR_OK) {
                size_t n = 0;
                int32_t ids[64];
                hr_tokenize_params tp = hr_tokenize_params_default();
                st = hr_tokenize(t, "abc [X] caf\xc3\xa9 \xff", 14, &tp, ids, 64, &n, &err);
                hr_tokenizer_free(t);
            }
            bool fired = hr_alloc_fault_fired();
            hr_alloc_fail_at(0);
            if (!fired) {
                CHECK_MSG(st == HR_OK, "%s: %s", paths[p], err.msg);
                break;
            }
            if (st != HR_OK && st != HR_ERR_NOMEM) {
                CHECK_MSG(0, "%s: allocation %lld failed with %s: %s", paths[p], (long long)k,
                          hr_status_name(st), err.msg);
                break;
            }
        }
        printf("fault injection %s: %lld of %lld allocations failed in turn\n", paths[p],
               (long long)walked, (long long)k);
    }
}

int main(void) {
    test_special_split();
    test_legacy();
    test_bos_rules();
    test_invalid_utf8_and_buffers();
    test_token_to_piece();
    test_detok_stream();
    test_hostile_model();
    test_hostile_json();
    test_hostile_gguf();
    test_alloc_faults();
    TEST_END();
}
