/*
 * kv_cache.h — the paged KV cache's bookkeeping (the bytes live in the
 * backend): a fixed pool of blocks of BS tokens, and one block table per
 * sequence slot mapping logical block i (positions i*BS .. i*BS+BS-1) to a
 * physical block. The pool size is fixed when the engine starts; a sequence
 * that cannot get a block gets HR_ERR_NO_FIT with the numbers, never a crash
 * or a silent reallocation.
 *
 * Prefix caching: a full block whose KV is written can be published under
 * the hash of its tokens chained to the hash of the blocks before it
 * (xxHash64, seeded with the previous block's hash), so the same tokens at
 * the same positions after the same prefix find it. Blocks carry a
 * reference count: a published block may back several sequences at once;
 * it is never written again (a sequence writes only past its shared
 * prefix, and the partial last block is never published). A block no
 * sequence references stays cached (idle, least recently used first out)
 * until the pool needs it; only then is it evicted and its hash forgotten.
 * A match also compares the block's tokens, so a hash collision of a block
 * cannot hand out another text's KV (the chain's earlier blocks are trusted
 * to their 64-bit hashes, as vLLM does).
 */
#ifndef HR_KV_KV_CACHE_H
#define HR_KV_KV_CACHE_H

#include "headroom.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int32_t n_block;            /* NB */
    int32_t block_size;         /* BS */
    int32_t n_seq_max;
    int32_t max_blocks_per_seq;
    int32_t *free_blocks;       /* (NB) stack of blocks holding nothing */
    int32_t n_free;
    int32_t *block_tables;      /* (n_seq_max, max_blocks_per_seq); -1 = unassigned */
    int32_t *seq_blocks;        /* (n_seq_max) blocks held */
    bool *seq_used;             /* (n_seq_max) */
    /* prefix caching (prefix: on) */
    bool prefix;
    int32_t *ref;               /* (NB) sequences holding the block */
    uint64_t *hash;             /* (NB) chained hash of a published block */
    bool *published;            /* (NB) */
    int32_t *tokens;            /* (NB, BS) a published block's tokens */
    int32_t *lru_prev, *lru_next; /* (NB) idle published blocks, most recent at head */
    int32_t lru_head, lru_tail, n_idle;
    int32_t *table;             /* (table_cap) open addressing: block ids by hash, -1 empty */
    int32_t table_cap;
} kv_cache;

hr_status kv_create(int32_t n_block, int32_t block_size, int32_t n_seq_max,
                    int32_t max_blocks_per_seq, bool prefix, kv_cache **out, hr_error *err);
void kv_free(kv_cache *kv);

/* A free sequence slot, or -1 when all n_seq_max are in use. */
int32_t kv_seq_acquire(kv_cache *kv);
/* Drops the slot's references: unreferenced blocks return to the pool, the
 * published ones as idle cached blocks. */
void kv_seq_release(kv_cache *kv, int32_t seq);
/* Makes positions [0, n_tokens) of seq backed by blocks, taking blocks from
 * the pool as needed (free ones first, then evicting the least recently
 * used idle ones). HR_ERR_NO_FIT (nothing taken) when the pool or the
 * per-sequence bound cannot hold them. */
hr_status kv_seq_reserve(kv_cache *kv, int32_t seq, int32_t n_tokens, hr_error *err);
/* Blocks needed to hold n_tokens. */
int32_t kv_blocks_for(const kv_cache *kv, int32_t n_tokens);
/* Blocks a reservation can take: free plus idle. */
int32_t kv_available(const kv_cache *kv);
/* Physical slot (block * BS + offset) of position pos of seq (reserved). */
int32_t kv_slot(const kv_cache *kv, int32_t seq, int32_t pos);

/* The chained hash of a full block of tokens after a prefix hashed to
 * prev (0 before the first block). */
uint64_t kv_block_hash(uint64_t prev, const int32_t *tokens, int32_t block_size);
/* For a slot that holds no blocks yet: attaches the published blocks that
 * hold the longest prefix of tokens[0, n_tokens) in whole blocks, leaving
 * at least one token to compute (the logits of the last one are wanted).
 * Returns the tokens matched (a multiple of BS); *chain gets the hash of
 * the last matched block (0 when none). */
int32_t kv_seq_match(kv_cache *kv, int32_t seq, const int32_t *tokens, int32_t n_tokens,
                     uint64_t *chain);
/* Publishes logical block i of seq, whose KV is written and whose tokens
 * are tokens[0, BS), under hash h (kv_block_hash of the chain before it).
 * A block already published, or a hash another block holds, stays as it is. */
void kv_seq_publish(kv_cache *kv, int32_t seq, int32_t i, uint64_t h, const int32_t *tokens);

#endif
