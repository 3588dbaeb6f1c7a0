/*
 * test_tok.h — helpers of the differential tokenizer tests (test_tokenizer_diff,
 * test_pretok_extra; include after test.h): building tokenizer.json variants
 * (parse a template, fill a BPE model's vocab and merges from a GGUF's
 * tokenizer arrays so fixtures keep only the small template, write the result
 * to the build folder), the hash the Python generators store, and printing a
 * failing case.
 */
#ifndef HR_TEST_TOK_H
#define HR_TEST_TOK_H

#include "format/gguf.h"

#include <cjson/cJSON.h>
#include <stdbool.h>

/* The JSON file at path, or NULL when it cannot be read or parsed. */
static inline cJSON *test_parse_json_file(const char *path) {
    size_t len;
    char *text = test_read_file(path, &len, 0);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    return root;
}

/* model.vocab = {token: id} and model.merges from tokenizer.ggml.tokens /
 * .merges of g; merges as ["a", "b"] pairs when pair_merges, else as the
 * "a b" strings (both forms exist in the wild). False when g lacks them. */
static inline bool test_bpe_from_gguf(cJSON *model, const gguf_file *g, bool pair_merges) {
    const gguf_kv *toks = gguf_find(g, "tokenizer.ggml.tokens");
    const gguf_kv *merges = gguf_find(g, "tokenizer.ggml.merges");
    if (!model || !toks || !merges || !toks->arr_str || !merges->arr_str)
        return false;
    cJSON *vocab = cJSON_CreateObject();
    for (uint64_t i = 0; i < toks->arr_n; i++) {
        char *s = strndup(toks->arr_str[i].ptr, (size_t)toks->arr_str[i].len);
        cJSON_AddItemToObject(vocab, s, cJSON_CreateNumber((double)i));
        free(s);
    }
    cJSON *ml = cJSON_CreateArray();
    for (uint64_t i = 0; i < merges->arr_n; i++) {
        char *s = strndup(merges->arr_str[i].ptr, (size_t)merges->arr_str[i].len);
        char *sp = pair_merges ? strchr(s + 1, ' ') : NULL;
        if (!pair_merges) {
            cJSON_AddItemToArray(ml, cJSON_CreateString(s));
        } else if (sp) {
            *sp = '\0';
            cJSON *pair = cJSON_CreateArray();
            cJSON_AddItemToArray(pair, cJSON_CreateString(s));
            cJSON_AddItemToArray(pair, cJSON_CreateString(sp + 1));
            cJSON_AddItemToArray(ml, pair);
        }
        free(s);
    }
    cJSON_ReplaceItemInObjectCaseSensitive(model, "vocab", vocab);
    cJSON_ReplaceItemInObjectCaseSensitive(model, "merges", ml);
    return true;
}

/* root as compact JSON at path; root stays the caller's. */
static inline bool test_write_json(const cJSON *root, const char *path) {
    char *json = cJSON_PrintUnformatted(root);
    FILE *f = json ? fopen(path, "wb") : NULL;
    bool ok = f && fwrite(json, 1, strlen(json), f) == strlen(json);
    if (f)
        ok = fclose(f) == 0 && ok;
    free(json);
    return ok;
}

/* FNV-1a over the little-endian bytes of n 32-bit words: the ids_hash of
 * the Python fixture generators. */
static inline uint32_t test_fnv1a_u32(const void *words, size_t n) {
    const uint32_t *x = words;
    uint32_t h = 0x811C9DC5u;
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 4; b++) {
            h ^= (x[i] >> (8 * b)) & 0xFF;
            h *= 0x01000193u;
        }
    return h;
}

/* s as a C string literal on stderr (printable ASCII kept, the rest \xNN). */
static inline void test_print_bytes(const uint8_t *s, uint32_t n) {
    fputc('"', stderr);
    for (uint32_t i = 0; i < n; i++) {
        if (s[i] >= 0x20 && s[i] < 0x7F && s[i] != '"' && s[i] != '\\')
            fputc(s[i], stderr);
        else
            fprintf(stderr, "\\x%02x", s[i]);
    }
    fputc('"', stderr);
}

#endif
