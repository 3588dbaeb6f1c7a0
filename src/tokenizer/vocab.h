/*
 * vocab.h — the tokenizer vocabulary: token bytes, scores, types, the
 * text -> id map, BPE merges and the special ids.
 *
 * One tok_vocab is filled by each loader (GGUF, tokenizer.model,
 * tokenizer.json) and is what the GGUF writer exports, so its public fields
 * follow GGUF's tokenizer.ggml.* keys:
 *
 *   model          "llama" (SentencePiece BPE merged by score) or "gpt2"
 *                  (BPE merged by rank)          -> tokenizer.ggml.model
 *   pre            pre-tokenizer name            -> tokenizer.ggml.pre
 *   tokens[i]      text/len (bytes as stored: U+2581 for spaces in SentencePiece
 *                  vocabularies, GPT-2 byte-level characters in byte-level ones),
 *                  score, type (GGUF numbering, tok_type)
 *                                  -> tokenizer.ggml.tokens / scores / token_type
 *   merges[r]      "left right" for rank r (gpt2 only; NULL for llama)
 *                                                -> tokenizer.ggml.merges
 *   *_id           special ids, -1 when none     -> tokenizer.ggml.*_token_id
 *   add_bos/add_eos/add_space_prefix             -> tokenizer.ggml.add_*
 *
 * Lookups are an open-addressing hash table of ids keyed by token bytes, and
 * one keyed by (left id, right id) for merges; both sized to a power of two at
 * least twice the entries so probes stay short. Strings live in an arena owned
 * by the vocabulary.
 */
#ifndef HR_TOKENIZER_VOCAB_H
#define HR_TOKENIZER_VOCAB_H

#include "util/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* GGUF's token types (llama.cpp's llama_token_type, SentencePiece's Type). */
typedef enum {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
} tok_type;

/* Added-token behaviour when it is split out of text (tokenizer.json's
 * lstrip/rstrip): whitespace on that side is swallowed by the token. */
#define TOK_ATTR_LSTRIP 0x1u
#define TOK_ATTR_RSTRIP 0x2u
/* tokenizer.json's added_tokens: split out of the text before the model runs
 * (GGUF and tokenizer.model have no such list: their control, user-defined
 * and unknown tokens are split, as llama.cpp and transformers do). */
#define TOK_ATTR_ADDED 0x4u

typedef struct {
    const char *text; /* len bytes, NUL-terminated for convenience; arena-owned */
    uint32_t len;
    float score;
    uint8_t type; /* tok_type */
    uint8_t attr; /* TOK_ATTR_* */
} tok_token;

typedef struct {
    uint64_t key; /* (uint32 left) << 32 | (uint32 right); UINT64_MAX = empty */
    int32_t rank;
    int32_t result;
} tok_merge_slot;

typedef struct tok_arena tok_arena;

typedef struct tok_vocab {
    char model[8]; /* "llama" or "gpt2" */
    char pre[48];  /* tokenizer.ggml.pre; "default" when none applies */
    int32_t n_tokens;
    tok_token *tokens; /* (n_tokens) */
    int32_t n_merges;
    const char **merges; /* (n_merges) "left right" in rank order, or NULL */
    int32_t bos_id, eos_id, unk_id, pad_id, sep_id, eot_id, eom_id;
    int32_t n_eog;
    int32_t *eog_ids; /* (n_eog) sorted: ids that end generation */
    bool add_bos;
    bool add_eos;
    bool add_space_prefix;

    /* lookup tables (internal) */
    uint32_t max_token_len;
    uint32_t map_mask;
    int32_t *map; /* (map_mask + 1) ids, -1 empty */
    uint32_t merge_mask;
    tok_merge_slot *merge_map;
    int32_t (*merge_ids)[3]; /* (n_merges) left, right, result ids */
    int32_t merges_cap;
    tok_arena *arena;
} tok_vocab;

/* Zeroes v and allocates n_tokens tokens (type UNDEFINED, empty text). */
hr_status vocab_alloc(tok_vocab *v, int32_t n_tokens, hr_error *err);
void vocab_free(tok_vocab *v);

/* Copies len bytes into the vocabulary's arena (NUL-terminated); NULL on OOM. */
char *vocab_strdup(tok_vocab *v, const char *s, size_t len);

/* Sets token id (0 <= id < n_tokens) to a copy of text. */
hr_status vocab_set(tok_vocab *v, int32_t id, const char *text, size_t len, float score,
                    tok_type type, hr_error *err);

/* Builds the text -> id map. Tokens with empty text are not indexed. Two
 * tokens with the same text give HR_ERR_FORMAT naming both (name: the file). */
hr_status vocab_index(tok_vocab *v, const char *name, hr_error *err);

/* -1 when no token has exactly these bytes. */
int32_t vocab_find(const tok_vocab *v, const char *s, size_t n);

/* Appends merge "a b" with the next rank. strict: a missing part or result is
 * HR_ERR_FORMAT (Hugging Face refuses such files); otherwise the merge is
 * skipped (llama.cpp tolerates them, and no word can ever use it). */
hr_status vocab_add_merge(tok_vocab *v, const char *a, size_t na, const char *b, size_t nb,
                          bool strict, const char *name, hr_error *err);
/* Builds the merge map once all merges are added. The first of duplicate
 * pairs keeps its rank. */
hr_status vocab_index_merges(tok_vocab *v, hr_error *err);

static inline bool vocab_merge(const tok_vocab *v, int32_t a, int32_t b, int32_t *rank,
                               int32_t *result) {
    if (!v->merge_map)
        return false;
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    uint32_t i = (uint32_t)(h >> 32) & v->merge_mask;
    for (;;) {
        const tok_merge_slot *s = &v->merge_map[i];
        if (s->key == key) {
            *rank = s->rank;
            *result = s->result;
            return true;
        }
        if (s->key == UINT64_MAX)
            return false;
        i = (i + 1) & v->merge_mask;
    }
}

/* After the ids are known: finds end-of-turn tokens by their text
 * ("<|eot_id|>", "<|im_end|>", ...; the list llama.cpp keeps), marks them
 * CONTROL, and builds eog_ids from eos/eot/eom, those texts and extra_eog
 * (e.g. generation_config.json's eos list; out-of-range ids are ignored). */
hr_status vocab_finish_specials(tok_vocab *v, const int32_t *extra_eog, int32_t n_extra_eog,
                                hr_error *err);

bool vocab_is_eog(const tok_vocab *v, int32_t id);

#endif
