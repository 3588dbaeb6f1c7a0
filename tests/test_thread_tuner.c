/*
 * test_thread_tuner.c — the thread tuner against modelled machines: step
 * times given by a table of (threads -> ms), as an idle machine and one with
 * a busy neighbour show them (tools/cpu_neighbours.py measured the shapes).
 */
#include "backend/cpu/thread_tuner.h"
#include "test.h"

typedef struct {
    double ms[3]; /* step time with 1 and 2 threads (index 1, 2) */
} machine;

/* Runs n decode steps of one row; returns the steps that ran with each count. */
static void run(cpu_thread_tuner *t, const machine *m, int n, int used[3]) {
    used[1] = used[2] = 0;
    for (int i = 0; i < n; i++) {
        int th = cpu_tuner_before(t, 1);
        used[th]++;
        cpu_tuner_after(t, m->ms[th] * 1e6);
    }
}

int main(void) {
    const machine idle = {{0, 8.6, 6.9}};  /* SmolLM2: 116 tok/s with 2 threads, 85 with 1 */
    const machine busy = {{0, 11.9, 17.1}}; /* one neighbour: 84 with 1, 58 with 2 */
    cpu_thread_tuner t;
    int used[3];

    /* idle: 2 threads stay; a trial (3 steps here: 1 thread is not 1.3x slower, which
     * ends one at its first step) comes further and further apart: 4 in 1000 steps */
    cpu_tuner_init(&t, 2, true);
    run(&t, &idle, 1000, used);
    CHECK(used[1] >= 3 && used[1] <= 12);
    CHECK_EQ_I64(t.active, 2);

    /* a neighbour comes: the tuner moves to 1 thread soon after */
    run(&t, &busy, 100, used);
    CHECK_EQ_I64(t.active, 1);
    run(&t, &busy, 1000, used);
    CHECK(used[2] <= 10); /* only trials */
    CHECK_EQ_I64(t.active, 1);

    /* it leaves: back to 2 threads within the longest interval */
    run(&t, &idle, 600, used);
    CHECK_EQ_I64(t.active, 2);

    /* a prefill step between decode steps is neither timed nor tried */
    CHECK_EQ_I64(cpu_tuner_before(&t, -1), 2);
    cpu_tuner_after(&t, 1e12);
    run(&t, &idle, 100, used);
    CHECK_EQ_I64(t.active, 2);

    /* disabled (a given --threads), or one core: always the pool's size */
    cpu_tuner_init(&t, 2, false);
    run(&t, &busy, 500, used);
    CHECK_EQ_I64(used[2], 500);
    cpu_tuner_init(&t, 1, true);
    CHECK_EQ_I64(cpu_tuner_before(&t, 1), 1);
    TEST_END();
}
