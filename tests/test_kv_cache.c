/*
 * test_kv_cache.c — the paged KV cache's bookkeeping: block pool, block
 * tables, slots, and the clear refusal when blocks run out.
 */
#include "kv/kv_cache.h"
#include "test.h"

int main(void) {
    hr_error err;
    kv_cache *kv = NULL;
    /* 6 blocks of 4 tokens, 3 sequences of at most 3 blocks (12 tokens) */
    CHECK_OK(kv_create(6, 4, 3, 3, &kv, &err), &err);
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

    CHECK_EQ_I64(kv_create(0, 16, 1, 1, &kv, &err), HR_ERR_INVALID);
    TEST_END();
}
