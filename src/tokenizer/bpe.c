/*
 * bpe.c — BPE merged by rank, per pre-tokenized word: byte-level (GPT-2,
 * Llama 3, Qwen2, StarCoder) and SentencePiece-style tokenizer.json models
 * with byte fallback (Llama 2's and Mistral's tokenizer.json).
 *
 * As in Hugging Face's BPE model (and llama.cpp's): the word starts as one
 * symbol per character, looked up in the vocabulary. Every adjacent pair that
 * has a merge goes into a priority queue keyed by (rank, position); the
 * lowest rank wins, the leftmost on ties. A popped entry applies only if the
 * pair at its position still merges into the same token (otherwise a merge
 * next to it changed the symbols since). After a merge the new pairs with
 * both neighbours are queued. Merges are keyed by token ids, so the loop
 * never builds strings.
 *
 * Characters that are not tokens: with byte fallback each byte becomes its
 * <0xXX> token, else the unknown token (consecutive ones fused when
 * fuse_unk), else they are dropped (Hugging Face); for GGUF files each byte
 * that is itself a one-byte token is emitted instead (llama.cpp).
 * ignore_merges (Llama 3): a word that is a token is emitted whole.
 */
#include "tokenizer/tok_impl.h"

#include "tokenizer/unicode.h"

static void queue_pair(const tok_vocab *v, tok_sym *sym, tok_heap_item *heap, size_t *n_heap,
                       int32_t left) {
    int32_t right = sym[left].next;
    if (right < 0 || sym[left].id < 0 || sym[right].id < 0)
        return;
    int32_t rank, result;
    if (!vocab_merge(v, sym[left].id, sym[right].id, &rank, &result))
        return;
    tok_heap_item it = {((uint64_t)(uint32_t)rank << 32) | (uint32_t)left, result, 0};
    tok_heap_push(heap, n_heap, it);
}

hr_status bpe_encode_word(tok_ctx *c, const char *w, size_t n) {
    const hr_tokenizer *t = c->tok;
    const tok_vocab *v = &t->v;
    if (n == 0)
        return HR_OK;
    if (t->ignore_merges) {
        int32_t id = vocab_find(v, w, n);
        if (id >= 0)
            return tok_push(c, id);
    }

    /* a byte-fallback character can give 4 symbols: reserve for n bytes */
    HR_TRY(tok_reserve(c, &c->sym, &c->sym_cap, n, sizeof(tok_sym)));
    HR_TRY(tok_reserve(c, &c->heap, &c->heap_cap, 3 * n + 1, sizeof(tok_heap_item)));
    tok_sym *sym = c->sym;
    tok_heap_item *heap = c->heap;
    int32_t n_sym = 0;
    bool last_unk = false; /* the last symbol is an unk made for an unknown character */

    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = uni_next(w + i, n - i, &cp);
        int32_t id = cp < 512 ? t->cp_ids[cp] : vocab_find(v, w + i, len);
        if (id >= 0) {
            sym[n_sym] = (tok_sym){n_sym - 1, -1, (uint32_t)i, (uint32_t)len, id};
            n_sym++;
            last_unk = false;
        } else if (t->gguf_bpe) {
            /* kept as an unmergeable symbol; its bytes are looked up at the end */
            sym[n_sym] = (tok_sym){n_sym - 1, -1, (uint32_t)i, (uint32_t)len, -1};
            n_sym++;
            last_unk = false;
        } else {
            bool done = false;
            if (t->byte_fallback) {
                bool all = true;
                for (size_t k = 0; k < len && all; k++)
                    all = t->byte_ids[(uint8_t)w[i + k]] >= 0;
                if (all) {
                    for (size_t k = 0; k < len; k++) {
                        sym[n_sym] = (tok_sym){n_sym - 1, -1, (uint32_t)(i + k), 1,
                                               t->byte_ids[(uint8_t)w[i + k]]};
                        n_sym++;
                    }
                    done = true;
                    last_unk = false;
                }
            }
            if (!done && t->bpe_unk_id >= 0) {
                if (last_unk && t->fuse_unk) {
                    sym[n_sym - 1].len += (uint32_t)len;
                } else {
                    sym[n_sym] =
                        (tok_sym){n_sym - 1, -1, (uint32_t)i, (uint32_t)len, t->bpe_unk_id};
                    n_sym++;
                    last_unk = true;
                }
            }
        }
        i += len;
    }
    for (int32_t k = 0; k + 1 < n_sym; k++)
        sym[k].next = k + 1;

    size_t n_heap = 0;
    for (int32_t k = 0; k + 1 < n_sym; k++)
        queue_pair(v, sym, heap, &n_heap, k);
    while (n_heap > 0) {
        tok_heap_item top = tok_heap_pop(heap, &n_heap);
        int32_t pos = (int32_t)(uint32_t)top.key;
        tok_sym *s = &sym[pos];
        if (s->len == 0 || s->next < 0)
            continue;
        tok_sym *r = &sym[s->next];
        int32_t rank, result;
        if (s->id < 0 || r->id < 0 || !vocab_merge(v, s->id, r->id, &rank, &result) ||
            result != top.a)
            continue; /* stale */
        s->id = result;
        s->len += r->len;
        r->len = 0;
        s->next = r->next;
        if (s->next >= 0)
            sym[s->next].prev = pos;
        if (s->prev >= 0)
            queue_pair(v, sym, heap, &n_heap, s->prev);
        queue_pair(v, sym, heap, &n_heap, pos);
    }

    for (int32_t k = n_sym ? 0 : -1; k >= 0; k = sym[k].next) {
        if (sym[k].id >= 0) {
            HR_TRY(tok_push(c, sym[k].id));
            continue;
        }
        for (uint32_t b = 0; b < sym[k].len; b++) {
            int32_t id = t->byte_ids[(uint8_t)w[sym[k].off + b]];
            if (id >= 0)
                HR_TRY(tok_push(c, id));
        }
    }
    return HR_OK;
}
