/*
 * kv_cache.h — the paged KV cache's bookkeeping (the bytes live in the
 * backend): a fixed pool of blocks of BS tokens, a free list, and one block
 * table per sequence slot mapping logical block i (positions i*BS ..
 * i*BS+BS-1) to a physical block. The pool size is fixed when the engine
 * starts; a sequence that cannot get a block gets HR_ERR_NO_FIT with the
 * numbers, never a crash or a silent reallocation.
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
    int32_t *free_blocks;       /* (NB) stack of free block ids */
    int32_t n_free;
    int32_t *block_tables;      /* (n_seq_max, max_blocks_per_seq); -1 = unassigned */
    int32_t *seq_blocks;        /* (n_seq_max) blocks held */
    bool *seq_used;             /* (n_seq_max) */
} kv_cache;

hr_status kv_create(int32_t n_block, int32_t block_size, int32_t n_seq_max,
                    int32_t max_blocks_per_seq, kv_cache **out, hr_error *err);
void kv_free(kv_cache *kv);

/* A free sequence slot, or -1 when all n_seq_max are in use. */
int32_t kv_seq_acquire(kv_cache *kv);
/* Returns the slot's blocks to the pool. */
void kv_seq_release(kv_cache *kv, int32_t seq);
/* Makes positions [0, n_tokens) of seq backed by blocks, taking blocks from
 * the pool as needed. HR_ERR_NO_FIT (nothing taken) when the pool or the
 * per-sequence bound cannot hold them. */
hr_status kv_seq_reserve(kv_cache *kv, int32_t seq, int32_t n_tokens, hr_error *err);
/* Blocks needed to hold n_tokens. */
int32_t kv_blocks_for(const kv_cache *kv, int32_t n_tokens);
/* Physical slot (block * BS + offset) of position pos of seq (reserved). */
int32_t kv_slot(const kv_cache *kv, int32_t seq, int32_t pos);

#endif
