/*
 * swiglu.c — h = silu(gate) * up, the Llama MLP's gate, from the fused
 * gate/up projection gu (B, 2F) = [gate (F) | up (F)].
 * silu(g) = g * sigmoid(g) = g / (1 + exp(-g)), as torch.nn.functional.silu.
 */
#include "backend/cpu/cpu_backend.h"

#include <math.h>

typedef struct {
    float *h;
    const float *gu;
    int64_t n_rows, f, ldh, ldgu;
} swiglu_task;

static void swiglu_rows(void *ctx, int ith, int nth) {
    const swiglu_task *t = ctx;
    /* split the (rows x F) elements evenly, so one row is shared at decode */
    int64_t total = t->n_rows * t->f;
    int64_t per = (total + nth - 1) / nth;
    int64_t lo = per * ith, hi = lo + per < total ? lo + per : total;
    for (int64_t e = lo; e < hi;) {
        int64_t r = e / t->f, i = e % t->f;
        int64_t end = hi - e < t->f - i ? i + (hi - e) : t->f;
        const float *g = t->gu + r * t->ldgu, *u = g + t->f;
        float *h = t->h + r * t->ldh;
        for (; i < end; i++, e++)
            h[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}

void cpu_swiglu(hr_backend *b, be_tensor *h, const be_tensor *gu) {
    cpu_backend *c = (cpu_backend *)b;
    swiglu_task t = {.h = h->data, .gu = gu->data, .n_rows = c->step->n_rows, .f = h->cols,
                     .ldh = h->ld, .ldgu = gu->ld};
    cpu_pool_run(c->pool, swiglu_rows, &t);
}
