/*
 * test_kv_cache.c — the paged KV cache's bookkeeping: block pool, block
 * tables, slots, the clear refusal when blocks run out, and the prefix
 * cache (published blocks shared by reference, kept idle, evicted least
 * recently used first).
 */
#include "kv/kv_cache.h"
#include "test.h"

/* publishes seq's first n_blocks blocks of tokens as the engine does */
static void publish(kv_cache *kv, int32_t seq, const int32_t *tokens, int32_t n_blocks) {
    uint64_t h = 0;
    for (int32_t i = 0; i < n_blocks; i++) {
        h = kv_block_hash(h, tokens + i * kv->block_size, kv->block_size);
        kv_seq_publish(kv, seq, i, h, tokens + i * kv->block_size);
    }
}

static void check_prefix(void) {
    hr_error err;
    kv_cache *kv = NULL;
    /* 8 blocks of 4 tokens, 3 sequences of at most 4 blocks */
    CHECK_OK(kv_create(8, 4, 3, 4, true, &kv, &err), &err);
    if (!kv)
        return;
    const int32_t p1[14] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    int32_t p2[14];
    memcpy(p2, p1, sizeof p2);
    p2[9] = 99; /* differs in the third block */
    uint64_t chain;

    /* nothing published yet: no match */
    int32_t a = kv_seq_acquire(kv);
    CHECK_EQ_I64(kv_seq_match(kv, a, p1, 14, &chain), 0);
    CHECK_OK(kv_seq_reserve(kv, a, 14, &err), &err); /* 4 blocks */
    publish(kv, a, p1, 3); /* the 4th block is partial: never published */
    const int32_t a0 = kv->block_tables[a * 4], a1 = kv->block_tables[a * 4 + 1];

    /* a second sequence shares the first two blocks (the third differs) */
    int32_t b = kv_seq_acquire(kv);
    CHECK_EQ_I64(kv_seq_match(kv, b, p2, 14, &chain), 8);
    CHECK_EQ_I64(chain, kv_block_hash(kv_block_hash(0, p1, 4), p1 + 4, 4));
    CHECK_EQ_I64(kv->block_tables[b * 4], a0);
    CHECK_EQ_I64(kv->block_tables[b * 4 + 1], a1);
    CHECK_EQ_I64(kv->ref[a0], 2);
    CHECK_OK(kv_seq_reserve(kv, b, 14, &err), &err); /* 2 more blocks */
    CHECK_EQ_I64(kv->n_free, 2);

    /* the same prompt exactly: all whole blocks but the one holding the last
     * token, which must be computed for its logits (12 tokens: 2 blocks) */
    int32_t c = kv_seq_acquire(kv);
    CHECK_EQ_I64(kv_seq_match(kv, c, p1, 12, &chain), 8);
    kv_seq_release(kv, c);

    /* released: published blocks stay cached (idle), the rest are free */
    kv_seq_release(kv, a);
    CHECK_EQ_I64(kv->ref[a0], 1); /* b still holds it */
    CHECK_EQ_I64(kv->n_idle, 1);  /* a's third block */
    CHECK_EQ_I64(kv->n_free, 3);  /* a's partial fourth block returned */
    CHECK_EQ_I64(kv_available(kv), 4);
    kv_seq_release(kv, b);
    CHECK_EQ_I64(kv->n_idle, 3);
    CHECK_EQ_I64(kv_available(kv), 8);

    /* a later request finds the idle blocks again */
    a = kv_seq_acquire(kv);
    CHECK_EQ_I64(kv_seq_match(kv, a, p1, 14, &chain), 12);
    CHECK_EQ_I64(kv->n_idle, 0);
    kv_seq_release(kv, a);

    /* reservations evict idle blocks only when the free ones run out, the
     * least recently released first */
    a = kv_seq_acquire(kv);
    CHECK_OK(kv_seq_reserve(kv, a, 16, &err), &err); /* 4 of the 5 free */
    CHECK_EQ_I64(kv->n_idle, 3);
    b = kv_seq_acquire(kv);
    CHECK_OK(kv_seq_reserve(kv, b, 8, &err), &err); /* the last free, then one idle */
    CHECK_EQ_I64(kv->n_idle, 2);
    c = kv_seq_acquire(kv);
    /* the evicted one was p1's third block (released last of the three,
     * the tail: a prefix's later blocks go first); the first two remain */
    CHECK_EQ_I64(kv_seq_match(kv, c, p1, 14, &chain), 8);
    kv_seq_release(kv, c);
    /* nothing left to evict or take: refused, nothing taken */
    c = kv_seq_acquire(kv);
    CHECK_EQ_I64(kv_seq_reserve(kv, c, 12, &err), HR_ERR_NO_FIT);
    kv_seq_release(kv, a);
    kv_seq_release(kv, b);
    kv_seq_release(kv, c);
    CHECK_EQ_I64(kv_available(kv), 8);

    /* many publish and evict rounds keep the table consistent: every
     * published block is found by its own tokens */
    for (int round = 0; round < 200; round++) {
        int32_t t[16];
        for (int i = 0; i < 16; i++)
            t[i] = (round * 7 + i * 13) % 50 + (i / 4) * 1000;
        int32_t s = kv_seq_acquire(kv);
        int32_t hit = kv_seq_match(kv, s, t, 16, &chain);
        CHECK_OK(kv_seq_reserve(kv, s, 16, &err), &err);
        publish(kv, s, t, 4);
        kv_seq_release(kv, s);
        s = kv_seq_acquire(kv);
        CHECK_EQ_I64(kv_seq_match(kv, s, t, 16, &chain), 12);
        kv_seq_release(kv, s);
        (void)hit;
    }
    int32_t held = 0;
    for (int32_t i = 0; i < kv->n_block; i++)
        held += kv->ref[i];
    CHECK_EQ_I64(held, 0);
    CHECK_EQ_I64(kv_available(kv), 8);
    kv_free(kv);
}

int main(void) {
    check_prefix();
    hr_error err;
    kv_cache *kv = NULL;
    /* 6 blocks of 4 tokens, 3 sequences of at most 3 blocks (12 tokens) */
    CHECK_OK(kv_create(6, 4, 3, 3, false, &kv, &err), &err);
    if (!kv)
        TEST_END();
    CHECK_EQ_I64(kv_blocks_for(kv, 0), 0);
    CHECK_EQ_I64(kv_blocks_for(kv, 1), 1);
    CHECK_EQ_I64(kv_blocks_for(kv, 4), 1);
    CHECK_EQ_I64(kv_blocks_for(kv, 5), 2);

    int32_t a = kv_seq_acquire(kv), b = kv_seq_acquire(kv), c = kv_seq_acquire(kv);
    CHECK(a >= 0 && b >= 0 && c >= 0 && a != b && b != c);
    CHECK_EQ_I64(kv_seq_acquire(kv), -1); /* all slots taken */

    CHECK_OK(kv_seq_reserve(kv, a, 5, &err), &err); /* 2 blocks */
    CHECK_EQ_I64(kv->n_free, 4);
    CHECK_OK(kv_seq_reserve(kv, a, 8, &err), &err); /* still 2 */
    CHECK_EQ_I64(kv->n_free, 4);
    /* slots: positions map through the table, offsets within a block */
    int32_t b0 = kv->block_tables[a * 3 + 0], b1 = kv->block_tables[a * 3 + 1];
    CHECK(b0 != b1 && b0 >= 0 && b1 >= 0);
    CHECK_EQ_I64(kv_slot(kv, a, 0), b0 * 4);
    CHECK_EQ_I64(kv_slot(kv, a, 3), b0 * 4 + 3);
    CHECK_EQ_I64(kv_slot(kv, a, 6), b1 * 4 + 2);

    /* beyond the per-sequence bound: refused, nothing taken */
    CHECK_EQ_I64(kv_seq_reserve(kv, b, 13, &err), HR_ERR_NO_FIT);
    CHECK_MSG(strstr(err.msg, "13") && strstr(err.msg, "12"), "message: %s", err.msg);
    CHECK_EQ_I64(kv->n_free, 4);

    CHECK_OK(kv_seq_reserve(kv, b, 12, &err), &err); /* 3 blocks, 1 left */
    CHECK_EQ_I64(kv->n_free, 1);
    /* the pool is short: refused with the numbers, nothing taken */
    CHECK_EQ_I64(kv_seq_reserve(kv, c, 8, &err), HR_ERR_NO_FIT);
    CHECK_MSG(strstr(err.msg, "2 more blocks") && strstr(err.msg, "1 of 6"), "message: %s",
              err.msg);
    CHECK_EQ_I64(kv->n_free, 1);

    /* releasing returns every block; the slot can be taken again */
    kv_seq_release(kv, b);
    CHECK_EQ_I64(kv->n_free, 4);
    CHECK_OK(kv_seq_reserve(kv, c, 8, &err), &err);
    CHECK_EQ_I64(kv->n_free, 2);
    CHECK_EQ_I64(kv_seq_acquire(kv), b);
    kv_seq_release(kv, a);
    kv_seq_release(kv, c);
    kv_seq_release(kv, b);
    CHECK_EQ_I64(kv->n_free, 6);
    /* no block is handed out twice: every id appears once in the free stack */
    int seen[6] = {0};
    for (int i = 0; i < kv->n_free; i++)
        seen[kv->free_blocks[i]]++;
    for (int i = 0; i < 6; i++)
        CHECK_EQ_I64(seen[i], 1);
    kv_free(kv);

    CHECK_EQ_I64(kv_create(0, 16, 1, 1, false, &kv, &err), HR_ERR_INVALID);
    TEST_END();
}
