/*
 * rope.c — rotary position embedding of q and k inside the fused qkv rows.
 *
 * Angle of pair i at position p: p * inv_freq[i], computed in float32 and
 * fed to cosf/sinf, as transformers does (inv_freq @ position_ids in f32,
 * then cos/sin). The (cos, sin) table is built once per step and reused by
 * every layer. Pair layout by style:
 *   NEOX (HF checkpoints, rotate_half): (x[i], x[i + Dh/2])
 *   NORM (GGUF llama, permuted Q/K):    (x[2i], x[2i + 1])
 */
#include "backend/cpu/cpu_backend.h"

#include <math.h>

typedef struct {
    cpu_backend *c;
    float *qkv;
    int64_t ld;
    int32_t n_rot_heads, head_dim;
    rope_style style;
} rope_task;

static void rotate_head(float *x, const float *cs, const float *sn, int32_t half,
                        rope_style style) {
    if (style == ROPE_STYLE_NEOX) {
        for (int32_t i = 0; i < half; i++) {
            float x0 = x[i], x1 = x[i + half];
            x[i] = x0 * cs[i] - x1 * sn[i];
            x[i + half] = x1 * cs[i] + x0 * sn[i];
        }
    } else {
        for (int32_t i = 0; i < half; i++) {
            float x0 = x[2 * i], x1 = x[2 * i + 1];
            x[2 * i] = x0 * cs[i] - x1 * sn[i];
            x[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
        }
    }
}

static void rope_rows(void *ctx, int ith, int nth) {
    const rope_task *t = ctx;
    const cpu_backend *c = t->c;
    int32_t half = t->head_dim / 2;
    for (int32_t r = ith; r < c->step->n_rows; r += nth) {
        const float *cs = c->rope_cos + (int64_t)r * half, *sn = c->rope_sin + (int64_t)r * half;
        float *row = t->qkv + r * t->ld;
        /* q heads then k heads are contiguous at the start of the row */
        for (int32_t h = 0; h < t->n_rot_heads; h++)
            rotate_head(row + (int64_t)h * t->head_dim, cs, sn, half, t->style);
    }
}

void cpu_rope(hr_backend *b, be_tensor *qkv, const float *inv_freq, rope_style style,
              int32_t n_head, int32_t n_head_kv, int32_t head_dim) {
    cpu_backend *c = (cpu_backend *)b;
    int32_t half = head_dim / 2;
    if (!c->rope_ready) {
        for (int32_t r = 0; r < c->step->n_rows; r++) {
            float p = (float)c->step->pos[r];
            for (int32_t i = 0; i < half; i++) {
                float a = p * inv_freq[i];
                c->rope_cos[(int64_t)r * half + i] = cosf(a);
                c->rope_sin[(int64_t)r * half + i] = sinf(a);
            }
        }
        c->rope_ready = true;
    }
    rope_task t = {.c = c, .qkv = qkv->data, .ld = qkv->ld, .n_rot_heads = n_head + n_head_kv,
                   .head_dim = head_dim, .style = style};
    if (c->step->n_rows >= 4)
        cpu_pool_run(c->pool, rope_rows, &t);
    else
        rope_rows(&t, 0, 1);
}
