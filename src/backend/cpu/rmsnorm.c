/*
 * rmsnorm.c — y = x / sqrt(mean(x^2) + eps) * w, per row (Llama's RMSNorm),
 * and the fused residual form: x += dx, then y = rmsnorm(x) * w.
 *
 * The sum of squares is accumulated in double: D is a few thousand, the cost
 * is nothing beside the matmuls, and it keeps the result within an ulp or two
 * of transformers' float32 reduction whatever its summation order.
 * Rows are split across threads only when there are enough of them to pay
 * for the wake-up.
 */
#include "backend/cpu/cpu_backend.h"

#include <math.h>

typedef struct {
    float *x;          /* residual, updated in place when dx is set */
    const float *dx;
    float *y;
    const float *w;
    int64_t n_rows, cols, ldx, lddx, ldy;
    float eps;
} norm_task;

static void norm_rows(void *ctx, int ith, int nth) {
    const norm_task *t = ctx;
    for (int64_t r = ith; r < t->n_rows; r += nth) {
        float *x = t->x + r * t->ldx;
        float *y = t->y + r * t->ldy;
        if (t->dx) {
            const float *dx = t->dx + r * t->lddx;
            for (int64_t i = 0; i < t->cols; i++)
                x[i] += dx[i];
        }
        double ss = 0.0;
        for (int64_t i = 0; i < t->cols; i++)
            ss += (double)x[i] * (double)x[i];
        float scale = (float)(1.0 / sqrt(ss / (double)t->cols + (double)t->eps));
        for (int64_t i = 0; i < t->cols; i++)
            y[i] = t->w[i] * (x[i] * scale);
    }
}

static void run_norm(cpu_backend *c, norm_task *t) {
    if (t->n_rows >= 4)
        cpu_pool_run(c->pool, norm_rows, t);
    else
        norm_rows(t, 0, 1);
}

void cpu_rmsnorm(hr_backend *b, be_tensor *y, const be_tensor *x, const be_vector *w, float eps,
                 int64_t n) {
    norm_task t = {.x = x->data, .y = y->data, .w = w->data, .n_rows = n, .cols = x->cols,
                   .ldx = x->ld, .ldy = y->ld, .eps = eps};
    run_norm((cpu_backend *)b, &t);
}

void cpu_add_rmsnorm(hr_backend *b, be_tensor *x, const be_tensor *dx, be_tensor *y,
                     const be_vector *w, float eps) {
    cpu_backend *c = (cpu_backend *)b;
    norm_task t = {.x = x->data, .dx = dx->data, .y = y->data, .w = w->data,
                   .n_rows = c->step->n_rows, .cols = x->cols, .ldx = x->ld, .lddx = dx->ld,
                   .ldy = y->ld, .eps = eps};
    run_norm(c, &t);
}
