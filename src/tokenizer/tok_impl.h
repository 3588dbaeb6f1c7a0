/*
 * tok_impl.h — what the files of src/tokenizer/ share with each other (the
 * rest of the library includes tokenizer.h only).
 *
 * A tokenizer is a pipeline, as in Hugging Face tokenizers:
 *
 *   text -> well-formed UTF-8 -> split on added/special tokens (tokenize.c)
 *        -> per text fragment: normalizers (normalize.c)
 *                              -> pre-tokenizers (pretok.c)
 *                              -> model: SentencePiece merge-by-score
 *                                 (spm.c) or BPE merge-by-rank (bpe.c)
 *        -> BOS/EOS as configured
 *
 * The SentencePiece front end (escape spaces as U+2581, the dummy prefix,
 * legacy handling after special tokens) is part of spm.c because
 * SentencePiece does it inside the model; tokenizer.json describes the same
 * steps as normalizers and pre-tokenizers, and those run through the generic
 * pipeline. A call keeps all its scratch in a tok_ctx, so one hr_tokenizer
 * can serve several threads.
 */
#ifndef HR_TOKENIZER_TOK_IMPL_H
#define HR_TOKENIZER_TOK_IMPL_H

#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pcre2_real_code_8;
struct pcre2_real_match_data_8;

typedef enum {
    TOK_ALGO_SPM = 0, /* SentencePiece BPE: merge the adjacent pair whose piece scores highest */
    TOK_ALGO_BPE = 1, /* BPE: merge the adjacent pair with the lowest merge rank */
} tok_algo;

/* Hugging Face's SplitDelimiterBehavior. */
typedef enum {
    TOK_SPLIT_REMOVED = 0,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_WITH_PREVIOUS,
    TOK_SPLIT_MERGED_WITH_NEXT,
    TOK_SPLIT_CONTIGUOUS,
} tok_split_behavior;

typedef enum {
    TOK_PRE_SPLIT = 0,  /* split on a regex or a literal */
    TOK_PRE_BYTE_LEVEL, /* [prefix space] [GPT-2 regex split] bytes -> GPT-2 characters */
    TOK_PRE_METASPACE,  /* ' ' -> U+2581, [prepend], [split before each U+2581] */
    TOK_PRE_FIXED_LENGTH, /* pieces of `length` code points */
    TOK_PRE_SCRIPTS,      /* split where the Unicode script changes (UnicodeScripts) */
} tok_pre_kind;

typedef enum { TOK_PREPEND_ALWAYS = 0, TOK_PREPEND_FIRST, TOK_PREPEND_NEVER } tok_prepend;

typedef struct {
    tok_pre_kind kind;
    tok_split_behavior behavior;
    bool invert;                  /* the pattern matches what to keep */
    struct pcre2_real_code_8 *re; /* SPLIT (regex) / BYTE_LEVEL (NULL: no regex) */
    char *lit;                    /* SPLIT with a literal pattern */
    size_t lit_len;
    bool add_prefix_space; /* BYTE_LEVEL */
    char repl[8];          /* METASPACE replacement, UTF-8 */
    size_t repl_len;
    tok_prepend prepend; /* METASPACE */
    bool split;          /* METASPACE */
    uint32_t length;     /* FIXED_LENGTH: code points per piece, >= 1 */
} tok_pre_op;

typedef enum {
    TOK_NORM_PREPEND = 0, /* prepend text unless the fragment is empty */
    TOK_NORM_REPLACE,     /* every match of a literal or regex -> content */
    TOK_NORM_STRIP,       /* strip White_Space left and/or right */
    TOK_NORM_NFC,
    TOK_NORM_NFD,
} tok_norm_kind;

typedef struct {
    tok_norm_kind kind;
    char *text; /* PREPEND text / REPLACE literal pattern */
    size_t text_len;
    struct pcre2_real_code_8 *re; /* REPLACE with a regex */
    char *content;                /* REPLACE replacement */
    size_t content_len;
    bool left, right; /* STRIP */
} tok_norm_op;

struct hr_tokenizer {
    tok_vocab v;
    char *name; /* the file or folder, for messages */
    tok_algo algo;

    /* SentencePiece front end (algo SPM) */
    bool spm_legacy;          /* dummy prefix on every fragment after a special token */
    bool spm_escape_ws;       /* ' ' -> U+2581 */
    bool spm_remove_extra_ws; /* strip and collapse spaces first */

    /* BPE model (algo BPE) */
    bool ignore_merges; /* a word that is a token is kept whole (Llama 3) */
    bool byte_fallback; /* unknown characters become <0xXX> tokens */
    bool fuse_unk;      /* consecutive unknowns give one unk */
    bool gguf_bpe;      /* llama.cpp's unknown handling: per-byte token or nothing */
    int32_t bpe_unk_id; /* unk for the BPE model, -1: unknowns are dropped */

    int32_t n_norm;
    tok_norm_op *norm;
    int32_t n_pre;
    tok_pre_op *pre;

    /* fast paths */
    bool word_chunks;      /* no token has U+2581 after another character, so no merge
                            * crosses a word start (tok_next_chunk): merge per word */
    int32_t byte_ids[256]; /* <0xXX> (byte fallback), or the one-byte token (gguf_bpe) */
    int32_t cp_ids[512];   /* id of the token that is exactly code point cp, -1 none */

    /* added/special tokens, for splitting text: ids grouped by first byte,
     * longest first within a group. added_list: tokenizer.json named them
     * (TOK_ATTR_ADDED); otherwise they are chosen by type. */
    bool added_list;
    int32_t n_special;
    int32_t *special_ids;
    uint32_t special_start[257];

    /* post-processing */
    int32_t prefix_id; /* added before the text when add_bos is -1 (-1: none) */
    int32_t suffix_id; /* added after it (-1: none) */

    /* decoding */
    bool dec_byte_level;  /* GPT-2 characters -> bytes */
    bool dec_strip_space; /* drop one leading space of the decoded text */
    const char **piece;   /* (n_tokens) decoded bytes of each token (special text kept) */
    uint32_t *piece_len;  /* (n_tokens) */
    uint32_t max_piece_len;
};

/* ---------------------------------------------------------------- scratch */

typedef struct {
    size_t off, len;
    bool at_start; /* begins at the start of the caller's text (Metaspace "first") */
} tok_span;

typedef struct {
    const char *base; /* the text the spans index: the caller's, or one of tok_ctx.tb */
    tok_span *sp;
    size_t n, cap_sp;
} tok_pieces;

typedef struct {
    const hr_tokenizer *tok;
    hr_error *err;
    int32_t *ids; /* output so far */
    size_t n_ids, cap_ids;
    struct pcre2_real_match_data_8 *md;
    tok_pieces pa, pb; /* pre-tokenizer spans, double-buffered */
    char *tb[2];       /* pre-tokenizer rewritten text (byte map, Metaspace) */
    size_t tbcap[2];
    void *seg; /* regex match segments of one span */
    size_t seg_cap;
    char *nbuf[2]; /* normalizer double buffer */
    size_t ncap[2];
    char *sbuf; /* SentencePiece fragment buffer */
    size_t scap;
    void *sym; /* merge loop symbols */
    size_t sym_cap;
    void *heap; /* merge loop priority queue */
    size_t heap_cap;
} tok_ctx;

void tok_ctx_init(tok_ctx *c, const hr_tokenizer *t, hr_error *err);
void tok_ctx_free(tok_ctx *c);
hr_status tok_push(tok_ctx *c, int32_t id);
/* Grows *buf to at least need bytes. */
hr_status tok_reserve(tok_ctx *c, void **buf, size_t *cap, size_t need, size_t elem_bytes);

/* End of the word chunk that starts at start: the next U+2581 that follows
 * a character other than U+2581 (see word_chunks). */
static inline size_t tok_next_chunk(const char *s, size_t n, size_t start) {
    for (size_t p = start + 1; p + 3 <= n; p++)
        if ((uint8_t)s[p] == 0xE2 && (uint8_t)s[p + 1] == 0x96 && (uint8_t)s[p + 2] == 0x81 &&
            !(p >= 3 && (uint8_t)s[p - 3] == 0xE2 && (uint8_t)s[p - 2] == 0x96 &&
              (uint8_t)s[p - 1] == 0x81))
            return p;
    return n;
}

/* Merge-loop symbols and priority queue, shared by spm.c and bpe.c. A
 * symbol is a run of bytes [off, off + len) of the word; len 0 once merged
 * into its left neighbour. The queue is a binary min-heap on key. */
typedef struct {
    int32_t prev, next;
    uint32_t off, len;
    int32_t id;
} tok_sym;

typedef struct {
    uint64_t key;
    int32_t a, b;
} tok_heap_item;

static inline void tok_heap_push(tok_heap_item *h, size_t *n, tok_heap_item x) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p].key <= x.key)
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static inline tok_heap_item tok_heap_pop(tok_heap_item *h, size_t *n) {
    tok_heap_item top = h[0];
    tok_heap_item last = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= m)
            break;
        size_t c = l + 1 < m && h[l + 1].key < h[l].key ? l + 1 : l;
        if (last.key <= h[c].key)
            break;
        h[i] = h[c];
        i = c;
    }
    if (m)
        h[i] = last;
    return top;
}

/* ---------------------------------------------------------------- modules */

/* spm.c: one text fragment through the SentencePiece front end and model.
 * prefix: whether the dummy prefix applies to this fragment. */
hr_status spm_encode_fragment(tok_ctx *c, const char *text, size_t n, bool prefix);

/* bpe.c: one pre-tokenized word through the BPE model. */
hr_status bpe_encode_word(tok_ctx *c, const char *w, size_t n);

/* pretok.c */
hr_status tok_regex_compile(const char *pattern, size_t len, const char *name,
                            struct pcre2_real_code_8 **out, hr_error *err);
void tok_regex_free(struct pcre2_real_code_8 *re);
void tok_match_data_free(struct pcre2_real_match_data_8 *md);
/* Calls fn(start, end) for each match of re in s[0..n) (well-formed UTF-8),
 * left to right, including empty matches except one right where the
 * previous match ended (Oniguruma's iteration). */
typedef hr_status (*tok_match_fn)(void *user, size_t start, size_t end);
hr_status tok_regex_each(tok_ctx *c, const struct pcre2_real_code_8 *re, const char *s, size_t n,
                         tok_match_fn fn, void *user);
/* The pieces of fragment text after the tokenizer's pre-tokenizers; borrowed
 * from c until the next call. */
hr_status pretok_run(tok_ctx *c, const char *text, size_t n, bool at_start, const tok_pieces **out);
/* The pre-tokenizer llama.cpp names in tokenizer.ggml.pre, as ops on t (plus
 * its ignore_merges / add_bos defaults). Unknown name: HR_ERR_UNSUPPORTED. */
hr_status pretok_from_gguf_name(hr_tokenizer *t, const char *name, bool *add_bos, hr_error *err);
/* The tokenizer.ggml.pre name whose single regex is pattern ("gpt-2" for a
 * ByteLevel pre-tokenizer with its own regex); "default" when none is. */
const char *pretok_guess_name(const char *pattern, bool byte_level_regex);
/* Appends one op to t->pre (ownership of the op's members moves to t). */
hr_status pretok_add(hr_tokenizer *t, const tok_pre_op *op, hr_error *err);
/* The Hugging Face ByteLevel regex (GPT-2's). */
extern const char tok_gpt2_pattern[];
void pretok_free_ops(hr_tokenizer *t);

/* normalize.c */
hr_status norm_run(tok_ctx *c, const char *text, size_t n, const char **out, size_t *out_len);
hr_status norm_add(hr_tokenizer *t, const tok_norm_op *op, hr_error *err);
void norm_free_ops(hr_tokenizer *t);
/* NFC or NFD of well-formed UTF-8 (unicode_norm.c), into c->nbuf[slot] or,
 * when nothing changes, s itself. */
hr_status norm_unicode(tok_ctx *c, tok_norm_kind kind, const char *s, size_t n, const char **out,
                       size_t *out_len, int slot);

/* sp_model.c: SentencePiece ModelProto -> t (vocab, SPM settings). */
hr_status sp_model_load(hr_tokenizer *t, const uint8_t *buf, size_t n, const char *name,
                        hr_error *err);

/* tokjson.c */
hr_status tokjson_load(hr_tokenizer *t, const char *text, size_t len, const char *name,
                       hr_error *err);
/* tokenizer_config.json / config.json / generation_config.json of a folder,
 * applied on top of a loaded vocabulary, then tokenizer_finish. has_json:
 * the vocabulary came from tokenizer.json (whose added tokens win over
 * tokenizer_config's). */
hr_status tokjson_apply_configs(hr_tokenizer *t, const char *dir, bool has_json, hr_error *err);

/* tokenize.c: after a loader filled t: indexes, specials, caches. */
hr_status tokenizer_finish(hr_tokenizer *t, const int32_t *extra_eog, int32_t n_extra_eog,
                           hr_error *err);
hr_tokenizer *tokenizer_new(const char *name);

/* detok.c */
hr_status detok_build_pieces(hr_tokenizer *t, hr_error *err);

#endif
