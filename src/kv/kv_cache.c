/*
 * kv_cache.c — block pool and block tables (see kv_cache.h).
 *
 * A stack of free block ids makes take and return O(1). Blocks are taken
 * only in kv_seq_reserve and returned only in kv_seq_release, so the number
 * of free blocks is exactly what admission control reasons about.
 */
#include "kv/kv_cache.h"

#include "util/alloc.h"
#include "util/error.h"

#include <string.h>

hr_status kv_create(int32_t n_block, int32_t block_size, int32_t n_seq_max,
                    int32_t max_blocks_per_seq, kv_cache **out, hr_error *err) {
    if (n_block <= 0 || block_size <= 0 || n_seq_max <= 0 || max_blocks_per_seq <= 0)
        return hr_err_set(err, HR_ERR_INVALID,
                          "KV cache: %d blocks of %d tokens for %d sequences of up to %d "
                          "blocks: every count must be positive",
                          n_block, block_size, n_seq_max, max_blocks_per_seq);
    kv_cache *kv = hr_calloc(1, sizeof *kv);
    if (!kv)
        return hr_err_set(err, HR_ERR_NOMEM, "KV cache: out of memory");
    kv->n_block = n_block;
    kv->block_size = block_size;
    kv->n_seq_max = n_seq_max;
    kv->max_blocks_per_seq = max_blocks_per_seq;
    kv->free_blocks = hr_calloc((size_t)n_block, sizeof(int32_t));
    kv->block_tables = hr_calloc((size_t)n_seq_max * (size_t)max_blocks_per_seq, sizeof(int32_t));
    kv->seq_blocks = hr_calloc((size_t)n_seq_max, sizeof(int32_t));
    kv->seq_used = hr_calloc((size_t)n_seq_max, sizeof(bool));
    if (!kv->free_blocks || !kv->block_tables || !kv->seq_blocks || !kv->seq_used) {
        kv_free(kv);
        return hr_err_set(err, HR_ERR_NOMEM, "KV cache: out of memory for the block tables");
    }
    /* pushed in reverse so block 0 is handed out first (easier to read in tests) */
    for (int32_t i = 0; i < n_block; i++)
        kv->free_blocks[i] = n_block - 1 - i;
    kv->n_free = n_block;
    for (int64_t i = 0; i < (int64_t)n_seq_max * max_blocks_per_seq; i++)
        kv->block_tables[i] = -1;
    *out = kv;
    return HR_OK;
}

void kv_free(kv_cache *kv) {
    if (!kv)
        return;
    hr_free(kv->free_blocks);
    hr_free(kv->block_tables);
    hr_free(kv->seq_blocks);
    hr_free(kv->seq_used);
    hr_free(kv);
}

int32_t kv_seq_acquire(kv_cache *kv) {
    for (int32_t s = 0; s < kv->n_seq_max; s++)
        if (!kv->seq_used[s]) {
            kv->seq_used[s] = true;
            return s;
        }
    return -1;
}

void kv_seq_release(kv_cache *kv, int32_t seq) {
    if (seq < 0 || seq >= kv->n_seq_max || !kv->seq_used[seq])
        return;
    int32_t *bt = kv->block_tables + (int64_t)seq * kv->max_blocks_per_seq;
    for (int32_t i = 0; i < kv->seq_blocks[seq]; i++) {
        kv->free_blocks[kv->n_free++] = bt[i];
        bt[i] = -1;
    }
    kv->seq_blocks[seq] = 0;
    kv->seq_used[seq] = false;
}

int32_t kv_blocks_for(const kv_cache *kv, int32_t n_tokens) {
    return (n_tokens + kv->block_size - 1) / kv->block_size;
}

hr_status kv_seq_reserve(kv_cache *kv, int32_t seq, int32_t n_tokens, hr_error *err) {
    HR_ASSERT(seq >= 0 && seq < kv->n_seq_max && kv->seq_used[seq]);
    int32_t need = kv_blocks_for(kv, n_tokens);
    if (need > kv->max_blocks_per_seq)
        return hr_err_set(err, HR_ERR_NO_FIT,
                          "KV cache: %d tokens exceed the context of %d tokens per sequence",
                          n_tokens, kv->max_blocks_per_seq * kv->block_size);
    int32_t more = need - kv->seq_blocks[seq];
    if (more <= 0)
        return HR_OK;
    if (more > kv->n_free)
        return hr_err_set(err, HR_ERR_NO_FIT,
                          "KV cache: %d more blocks of %d tokens needed, %d of %d free",
                          more, kv->block_size, kv->n_free, kv->n_block);
    int32_t *bt = kv->block_tables + (int64_t)seq * kv->max_blocks_per_seq;
    for (int32_t i = 0; i < more; i++)
        bt[kv->seq_blocks[seq]++] = kv->free_blocks[--kv->n_free];
    return HR_OK;
}

int32_t kv_slot(const kv_cache *kv, int32_t seq, int32_t pos) {
    int32_t b = kv->block_tables[(int64_t)seq * kv->max_blocks_per_seq + pos / kv->block_size];
    return b * kv->block_size + pos % kv->block_size;
}
