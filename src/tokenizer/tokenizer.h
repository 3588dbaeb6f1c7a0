/*
 * tokenizer.h — the tokenizer as the rest of the library sees it.
 *
 * The public functions (hr_tokenizer_load, hr_tokenize, hr_token_to_piece,
 * hr_detok_*) are declared in headroom.h. This header adds the loaders the
 * model loader calls directly and read-only access to the vocabulary for
 * writing it into a GGUF file (see vocab.h for the fields: model kind,
 * pre-tokenizer name, tokens with scores and GGUF token types, merges as
 * "left right" strings, special ids, add_bos/add_eos/add_space_prefix).
 *
 * Supported: SentencePiece BPE (Llama 2, Mistral, Phi-3: GGUF "llama",
 * tokenizer.model, or tokenizer.json with byte fallback) and byte-level BPE
 * (GPT-2, Llama 3, Qwen2, StarCoder: GGUF "gpt2" with the pre-tokenizers
 * llama.cpp names, or tokenizer.json). Unigram, WordPiece and others give
 * HR_ERR_UNSUPPORTED.
 */
#ifndef HR_TOKENIZER_TOKENIZER_H
#define HR_TOKENIZER_TOKENIZER_H

#include "format/gguf.h"
#include "tokenizer/vocab.h"
#include "util/error.h"

/* From the tokenizer.ggml.* keys of an open GGUF file (the tokenizer copies
 * what it needs; g may be freed afterwards). */
hr_status tokenizer_from_gguf(const gguf_file *g, hr_tokenizer **out, hr_error *err);

/* From a Hugging Face model folder: tokenizer.json if present, else
 * tokenizer.model; plus tokenizer_config.json, config.json and
 * generation_config.json when present. */
hr_status tokenizer_from_dir(const char *dir, hr_tokenizer **out, hr_error *err);

/* borrowed: valid until hr_tokenizer_free */
const tok_vocab *tokenizer_vocab(const hr_tokenizer *t);

#endif
