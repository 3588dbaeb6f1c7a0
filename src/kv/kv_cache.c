/*
 * kv_cache.c — block pool, block tables and the prefix cache (see
 * kv_cache.h).
 *
 * A stack of free block ids makes take and return O(1); idle published
 * blocks sit in a doubly linked list (most recently released first) and a
 * hash table finds published blocks by their chained hash. Blocks are taken
 * only in kv_seq_reserve (and attached in kv_seq_match) and returned only in
 * kv_seq_release, so free plus idle is exactly what admission control
 * reasons about.
 */
#include "kv/kv_cache.h"

#include "util/alloc.h"
#include "util/error.h"

#include <string.h>
#include <xxhash.h>

hr_status kv_create(int32_t n_block, int32_t block_size, int32_t n_seq_max,
                    int32_t max_blocks_per_seq, bool prefix, kv_cache **out, hr_error *err) {
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
    kv->ref = hr_calloc((size_t)n_block, sizeof(int32_t));
    bool ok = kv->free_blocks && kv->block_tables && kv->seq_blocks && kv->seq_used && kv->ref;
    kv->prefix = prefix;
    if (ok && prefix) {
        kv->table_cap = 16;
        while (kv->table_cap < 2 * n_block)
            kv->table_cap *= 2;
        kv->hash = hr_calloc((size_t)n_block, sizeof(uint64_t));
        kv->published = hr_calloc((size_t)n_block, sizeof(bool));
        kv->tokens = hr_calloc((size_t)n_block * (size_t)block_size, sizeof(int32_t));
        kv->lru_prev = hr_calloc((size_t)n_block, sizeof(int32_t));
        kv->lru_next = hr_calloc((size_t)n_block, sizeof(int32_t));
        kv->table = hr_calloc((size_t)kv->table_cap, sizeof(int32_t));
        ok = kv->hash && kv->published && kv->tokens && kv->lru_prev && kv->lru_next && kv->table;
    }
    if (!ok) {
        kv_free(kv);
        return hr_err_set(err, HR_ERR_NOMEM, "KV cache: out of memory for the block tables");
    }
    /* pushed in reverse so block 0 is handed out first (easier to read in tests) */
    for (int32_t i = 0; i < n_block; i++)
        kv->free_blocks[i] = n_block - 1 - i;
    kv->n_free = n_block;
    for (int64_t i = 0; i < (int64_t)n_seq_max * max_blocks_per_seq; i++)
        kv->block_tables[i] = -1;
    for (int32_t i = 0; prefix && i < kv->table_cap; i++)
        kv->table[i] = -1;
    kv->lru_head = kv->lru_tail = -1;
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
    hr_free(kv->ref);
    hr_free(kv->hash);
    hr_free(kv->published);
    hr_free(kv->tokens);
    hr_free(kv->lru_prev);
    hr_free(kv->lru_next);
    hr_free(kv->table);
    hr_free(kv);
}

/* ---- the idle list */

static void lru_push(kv_cache *kv, int32_t b) {
    kv->lru_prev[b] = -1;
    kv->lru_next[b] = kv->lru_head;
    if (kv->lru_head >= 0)
        kv->lru_prev[kv->lru_head] = b;
    kv->lru_head = b;
    if (kv->lru_tail < 0)
        kv->lru_tail = b;
    kv->n_idle++;
}

static void lru_unlink(kv_cache *kv, int32_t b) {
    if (kv->lru_prev[b] >= 0)
        kv->lru_next[kv->lru_prev[b]] = kv->lru_next[b];
    else
        kv->lru_head = kv->lru_next[b];
    if (kv->lru_next[b] >= 0)
        kv->lru_prev[kv->lru_next[b]] = kv->lru_prev[b];
    else
        kv->lru_tail = kv->lru_prev[b];
    kv->n_idle--;
}

/* ---- the table of published blocks (linear probing) */

static int32_t home(const kv_cache *kv, uint64_t h) { return (int32_t)(h & (uint64_t)(kv->table_cap - 1)); }

static int32_t table_find(const kv_cache *kv, uint64_t h, const int32_t *tokens) {
    for (int32_t i = home(kv, h);; i = (i + 1) & (kv->table_cap - 1)) {
        const int32_t b = kv->table[i];
        if (b < 0)
            return -1;
        if (kv->hash[b] == h &&
            memcmp(kv->tokens + (int64_t)b * kv->block_size, tokens,
                   (size_t)kv->block_size * sizeof(int32_t)) == 0)
            return b;
    }
}

static void table_insert(kv_cache *kv, int32_t b) {
    int32_t i = home(kv, kv->hash[b]);
    while (kv->table[i] >= 0)
        i = (i + 1) & (kv->table_cap - 1);
    kv->table[i] = b;
}

/* Removes b, moving later entries of its probe run back so that no lookup
 * stops early at the hole (no tombstones). */
static void table_remove(kv_cache *kv, int32_t b) {
    const int32_t mask = kv->table_cap - 1;
    int32_t i = home(kv, kv->hash[b]);
    while (kv->table[i] != b)
        i = (i + 1) & mask;
    kv->table[i] = -1;
    for (int32_t j = (i + 1) & mask; kv->table[j] >= 0; j = (j + 1) & mask) {
        const int32_t e = kv->table[j], k = home(kv, kv->hash[e]);
        /* e may move to the hole when its home is not in (i, j] cyclically */
        const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            kv->table[i] = e;
            kv->table[j] = -1;
            i = j;
        }
    }
}

/* ---- sequences */

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
    /* last block first: a prefix's later blocks leave before its earlier ones
     * (the idle list evicts from its tail, the earliest released) */
    for (int32_t i = kv->seq_blocks[seq] - 1; i >= 0; i--) {
        const int32_t b = bt[i];
        if (--kv->ref[b] == 0) {
            if (kv->prefix && kv->published[b])
                lru_push(kv, b);
            else
                kv->free_blocks[kv->n_free++] = b;
        }
        bt[i] = -1;
    }
    kv->seq_blocks[seq] = 0;
    kv->seq_used[seq] = false;
}

int32_t kv_blocks_for(const kv_cache *kv, int32_t n_tokens) {
    return (n_tokens + kv->block_size - 1) / kv->block_size;
}

int32_t kv_available(const kv_cache *kv) { return kv->n_free + kv->n_idle; }

/* A block for a new use: a free one, else the least recently used idle one. */
static int32_t take_block(kv_cache *kv) {
    if (kv->n_free > 0)
        return kv->free_blocks[--kv->n_free];
    const int32_t b = kv->lru_tail;
    lru_unlink(kv, b);
    table_remove(kv, b);
    kv->published[b] = false;
    return b;
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
    if (more > kv_available(kv))
        return hr_err_set(err, HR_ERR_NO_FIT,
                          "KV cache: %d more blocks of %d tokens needed, %d of %d free",
                          more, kv->block_size, kv_available(kv), kv->n_block);
    int32_t *bt = kv->block_tables + (int64_t)seq * kv->max_blocks_per_seq;
    for (int32_t i = 0; i < more; i++) {
        const int32_t b = take_block(kv);
        kv->ref[b] = 1;
        bt[kv->seq_blocks[seq]++] = b;
    }
    return HR_OK;
}

int32_t kv_slot(const kv_cache *kv, int32_t seq, int32_t pos) {
    int32_t b = kv->block_tables[(int64_t)seq * kv->max_blocks_per_seq + pos / kv->block_size];
    return b * kv->block_size + pos % kv->block_size;
}

/* ---- prefix caching */

uint64_t kv_block_hash(uint64_t prev, const int32_t *tokens, int32_t block_size) {
    return XXH64(tokens, (size_t)block_size * sizeof(int32_t), prev);
}

int32_t kv_seq_match(kv_cache *kv, int32_t seq, const int32_t *tokens, int32_t n_tokens,
                     uint64_t *chain) {
    *chain = 0;
    if (!kv->prefix || n_tokens < 1)
        return 0;
    HR_ASSERT(kv->seq_used[seq] && kv->seq_blocks[seq] == 0);
    const int32_t BS = kv->block_size;
    int32_t max = (n_tokens - 1) / BS;
    max = max < kv->max_blocks_per_seq ? max : kv->max_blocks_per_seq;
    int32_t *bt = kv->block_tables + (int64_t)seq * kv->max_blocks_per_seq;
    uint64_t h = 0;
    int32_t i = 0;
    for (; i < max; i++) {
        const uint64_t next = kv_block_hash(h, tokens + (int64_t)i * BS, BS);
        const int32_t b = table_find(kv, next, tokens + (int64_t)i * BS);
        if (b < 0)
            break;
        if (kv->ref[b]++ == 0)
            lru_unlink(kv, b);
        bt[i] = b;
        h = next;
    }
    kv->seq_blocks[seq] = i;
    *chain = h;
    return i * BS;
}

void kv_seq_publish(kv_cache *kv, int32_t seq, int32_t i, uint64_t h, const int32_t *tokens) {
    if (!kv->prefix)
        return;
    HR_ASSERT(kv->seq_used[seq] && i >= 0 && i < kv->seq_blocks[seq]);
    const int32_t b = kv->block_tables[(int64_t)seq * kv->max_blocks_per_seq + i];
    if (kv->published[b] || table_find(kv, h, tokens) >= 0)
        return;
    kv->hash[b] = h;
    memcpy(kv->tokens + (int64_t)b * kv->block_size, tokens,
           (size_t)kv->block_size * sizeof(int32_t));
    kv->published[b] = true;
    table_insert(kv, b);
}
