/*
 * fuzz_tokenizer.c — libFuzzer target: arbitrary bytes through the Llama 2
 * SentencePiece tokenizer (tokenizer.model) and the GPT-2 byte-level one
 * (vocab-only GGUF), then back through the streaming detokenizer.
 *
 * The first input byte picks the options (parse_special, add_bos, which
 * tokenizers); the rest is the text. Checked: tokenizing never fails except
 * for memory; every id is in the vocabulary; the stream only ever emits
 * well-formed UTF-8; for valid UTF-8 input without special-token text or
 * U+2581 the detokenized text equals the input (SentencePiece adds and
 * removes its dummy space; GPT-2 maps bytes one to one).
 *
 * Data files are found under HR_SOURCE_DIR (compile definition, or the
 * environment variable of that name, else the current folder).
 */
#include "fuzz_util.h"
#include "headroom.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static hr_tokenizer *g_tok[2];

static void load_once(void) {
    static int done;
    if (done)
        return;
    done = 1;
    static const char *const rel[2] = {"tests/data/llama2-tokenizer/tokenizer.model",
                                       "tests/data/tokenizer-vectors/ggml-vocab-gpt-2.gguf"};
    for (int i = 0; i < 2; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", fuzz_root_dir(), rel[i]);
        hr_error err;
        if (hr_tokenizer_load(path, &g_tok[i], &err) != HR_OK) {
            fprintf(stderr, "fuzz_tokenizer: %s\n", err.msg);
            abort();
        }
    }
}

/* Text the round trip cannot reproduce: special-token text, and U+2581,
 * which SentencePiece decodes as a space. */
static int no_round_trip(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] == '<' || (s[i] == 0xE2 && i + 2 < n && s[i + 1] == 0x96 && s[i + 2] == 0x81))
            return 1;
    return 0;
}

static void run(const hr_tokenizer *tok, const uint8_t *text, size_t n, uint8_t opts) {
    hr_tokenize_params tp = {.add_bos = (int)(opts >> 1 & 3) - 1, .parse_special = opts & 1};
    if (tp.add_bos > 1)
        tp.add_bos = 1;
    size_t cap = n + 8, n_ids = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids)
        return;
    hr_error err;
    hr_status st = hr_tokenize(tok, (const char *)text, n, &tp, ids, cap, &n_ids, &err);
    if (st == HR_ERR_INVALID) { /* more ids than bytes + 8: retry with the size asked for */
        free(ids);
        cap = n_ids;
        ids = malloc(cap * sizeof *ids + 1);
        if (!ids)
            return;
        st = hr_tokenize(tok, (const char *)text, n, &tp, ids, cap, &n_ids, &err);
    }
    if (st != HR_OK && st != HR_ERR_NOMEM) {
        fprintf(stderr, "hr_tokenize: %s\n", err.msg);
        abort();
    }
    if (st != HR_OK) {
        free(ids);
        return;
    }
    int32_t n_vocab = hr_tokenizer_n_vocab(tok);
    hr_detok *d = NULL;
    if (hr_detok_create(tok, &d, &err) != HR_OK) {
        free(ids);
        return;
    }
    char *out = malloc(3 * n + 64), piece[4096];
    size_t m = 0;
    for (size_t i = 0; i < n_ids; i++) {
        if (ids[i] < 0 || ids[i] >= n_vocab)
            abort();
        int32_t k = hr_detok_push(d, ids[i], piece, sizeof piece);
        if (k < 0 || !fuzz_valid_utf8(piece, (size_t)k))
            abort();
        if (out && m + (size_t)k <= 3 * n + 64) {
            memcpy(out + m, piece, (size_t)k);
            m += (size_t)k;
        }
    }
    int32_t k = hr_detok_flush(d, piece, sizeof piece);
    if (k < 0 || !fuzz_valid_utf8(piece, (size_t)k))
        abort();
    if (out && m + (size_t)k <= 3 * n + 64) {
        memcpy(out + m, piece, (size_t)k);
        m += (size_t)k;
    }
    if (out && fuzz_valid_utf8((const char *)text, n) && !no_round_trip(text, n) &&
        (m != n || memcmp(out, text, n) != 0))
        abort();
    free(out);
    hr_detok_free(d);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    load_once();
    if (size == 0)
        return 0;
    uint8_t opts = data[0];
    for (int i = 0; i < 2; i++)
        if (opts & (0x10 << i) || !(opts & 0x30))
            run(g_tok[i], data + 1, size - 1, opts);
    return 0;
}
