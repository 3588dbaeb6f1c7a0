/*
 * matmul.c — cpu_matmul: validation, scratch plan, work split, dispatch.
 *
 * One call = one pool run. Inside it every thread
 *   1. (FAST) quantizes chunks of the activation rows into the xq layouts
 *      the parts' kernels read, and x^ where a generic path needs it, until
 *      none is left, and waits for the chunks others are running (prefill
 *      with f32 kernels packs them the same way next);
 *   2. takes chunks of weight rows from an atomic counter until none is left
 *      and runs the level's rows kernel on each (bias added after).
 * Chunks never straddle two parts. Each part runs decode kernels or, from the
 * level's gemm_min_B_exact/_fast rows on, prefill kernels. Decode chunks are
 * guided: each takes 1/(MM_GUIDED * threads) of the rows still left (at least
 * MM_GEMV_MIN_CHUNK_BYTES of weights), so the first chunks are long
 * sequential streams and the last ones short enough that no thread waits
 * long for another at the end. Fixed chunks of 1/8 of a thread's share
 * (before) left a thread idle for half a chunk on average: 3-6% of a decode
 * matmul. Prefill hands out tiles of at most gemm_max_rows rows, each packed
 * once and reused for all B rows.
 * Every output element is computed by the same arithmetic whatever the chunk
 * boundaries (chunks start at multiples of MM_GEMV_ALIGN rows, the widest
 * decode tile), so results do not depend on the thread count.
 *
 * Generic paths (a NULL entry in the level's table): EXACT decode converts a
 * few weight rows to f32 in the thread's scratch and runs the level's F32
 * kernel on them; FAST for a quantized type without integer kernels runs the
 * EXACT kernels on x^ (so its results obey the same FAST contract). FAST with
 * F16 (BF16) weights rounds x to f16 (bf16) in step 1 (x16, and x^ in f32);
 * a one-row decode reads x16 (gemv_fast), BF16 prefill reads x16 packed in
 * pairs (gemm_fast[BF16]), everything else runs the EXACT kernels on x^,
 * whose 4-row tiles already share each weight load.
 *
 * Prefill with f32 kernels packs the activations once per call into panels
 * (gemm_pack_x), shared by all threads, before any thread starts on weights:
 * packing per weight tile instead cost 7% of a 512x2048x512 product.
 *
 * Scratch (one block, planned by the caller):
 *   [x^: B*K f32] [x16: B*K f16] [xq rows: 3 layouts * B * xq_row_bytes]
 *   [packed x, packed x^ or x16: 2 * (B+15) * kpad(K) f32] [per thread: tscratch]
 * Three layouts suffice: decode uses at most NATURAL/QUAD/K4, prefill T32/T16.
 */
#include "backend/cpu/matmul.h"

#include "backend/cpu/cpu_features.h"
#include "quant/quant.h"
#include "util/dtype.h"
#include "util/error.h"
#include "util/fp16.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#define MM_MAX_PARTS 16
#define MM_ALIGN 64
/* Rows converted at a time by the generic EXACT decode path. */
#define MM_GENERIC_ROWS 4
/* Decode: a chunk takes 1/(MM_GUIDED * threads) of the rows left, at least
 * MM_GEMV_MIN_CHUNK_BYTES of weights (a few microseconds of streaming, so the
 * shared counter stays cold), in multiples of MM_GEMV_ALIGN rows. */
#define MM_GUIDED 3
#define MM_GEMV_MIN_CHUNK_BYTES (24 * 1024)
#define MM_GEMV_ALIGN 16
/* Layout slots in scratch (see the file comment). */
#define MM_XQ_SLOTS 3

static size_t align_up(size_t n) {
    return (n + MM_ALIGN - 1) / MM_ALIGN * MM_ALIGN;
}

/* The AVX-512 table less its AVX512-BF16 kernels, for CPUs without them. */
static cpu_mm_isa avx512_no_bf16;
static pthread_once_t avx512_no_bf16_once = PTHREAD_ONCE_INIT;

static void make_avx512_no_bf16(void) {
    avx512_no_bf16 = cpu_mm_isa_avx512;
    avx512_no_bf16.gemv_fast[HR_DTYPE_BF16] = NULL;
    avx512_no_bf16.gemm_fast[HR_DTYPE_BF16] = NULL;
    avx512_no_bf16.gemm_min_B_bf16 = INT64_MAX;
}

static const cpu_mm_isa *isa_for(cpu_level level) {
    switch (level) {
    case CPU_LEVEL_AVX512:
        if (cpu_has_avx512_bf16())
            return &cpu_mm_isa_avx512;
        pthread_once(&avx512_no_bf16_once, make_avx512_no_bf16);
        return &avx512_no_bf16;
    case CPU_LEVEL_AVX2:
        return &cpu_mm_isa_avx2;
    default:
        return &cpu_mm_isa_ref;
    }
}

static bool is_weight_dtype(hr_dtype t) {
    switch (t) {
    case HR_DTYPE_F32:
    case HR_DTYPE_F16:
    case HR_DTYPE_BF16:
    case HR_DTYPE_Q8_0:
    case HR_DTYPE_Q4_0:
    case HR_DTYPE_Q4_1:
    case HR_DTYPE_Q5_0:
    case HR_DTYPE_Q5_1:
    case HR_DTYPE_Q2_K:
    case HR_DTYPE_Q3_K:
    case HR_DTYPE_Q4_K:
    case HR_DTYPE_Q5_K:
    case HR_DTYPE_Q6_K:
    case HR_DTYPE_NF4:
    case HR_DTYPE_FP4:
        return true;
    default:
        return false;
    }
}

size_t cpu_mm_row_bytes(hr_dtype t, int64_t K) {
    const hr_dtype_info *d = &hr_dtype_table[t];
    return (size_t)(K / d->block_elems) * (size_t)d->block_bytes;
}

void cpu_mm_to_f32(const cpu_mm_isa *isa, hr_dtype t, const void *row, int64_t k0, int64_t n,
                   float *dst) {
    if (isa->to_f32[t] != NULL) {
        isa->to_f32[t](row, k0, n, dst);
        return;
    }
    const hr_dtype_info *d = &hr_dtype_table[t];
    const char *p = (const char *)row + (size_t)(k0 / d->block_elems) * (size_t)d->block_bytes;
    quant_dequantize_row(t, p, dst, n);
}

int64_t cpu_xq_pos(cpu_xq_layout layout, int64_t k) {
    switch (layout) {
    case CPU_XQ_QUAD: {
        int64_t r = k % 128, b = r / 32, e = r % 32;
        return k - r + (e / 16) * 64 + b * 16 + e % 16;
    }
    case CPU_XQ_K4: {
        static const int slot[4] = {0, 2, 1, 3}; /* segment s of 32 lands in slot[s] */
        int64_t r = k % 128;
        return k - r + slot[r / 32] * 32 + r % 32;
    }
    case CPU_XQ_T32: {
        int64_t r = k % 512, j = r / 32, e = r % 32;
        return k - r + (e / 4) * 64 + j * 4 + e % 4;
    }
    case CPU_XQ_T16: {
        int64_t r = k % 256, j = r / 16, e = r % 16;
        return k - r + (e / 4) * 64 + j * 4 + e % 4;
    }
    default:
        return k;
    }
}

int cpu_xq_lane(cpu_xq_layout layout, int l) {
    const int L = l / 4, v = l % 4;
    switch (layout) {
    case CPU_XQ_NATURAL:
    case CPU_XQ_QUAD:
        return 4 * v + L;
    case CPU_XQ_K4: {
        /* register v of a super-block holds half blocks {0,1,4,5} + 2v (v < 2)
         * and {8,9,12,13} + 2(v - 2) in its four 128-bit lanes */
        static const int base[4] = {0, 1, 4, 5};
        return (v < 2 ? 0 : 8) + 2 * (v % 2) + base[L];
    }
    default:
        return l;
    }
}

void cpu_mm_round_f16_ref(const float *x, int64_t n, uint16_t *x16, float *xh) {
    for (int64_t i = 0; i < n; i++) {
        x16[i] = hr_f32_to_f16(x[i]);
        xh[i] = hr_f16_to_f32(x16[i]);
    }
}

void cpu_mm_round_bf16_ref(const float *x, int64_t n, uint16_t *x16, float *xh) {
    for (int64_t i = 0; i < n; i++) {
        x16[i] = hr_f32_to_bf16(x[i]);
        xh[i] = hr_bf16_to_f32(x16[i]);
    }
}

void cpu_mm_quantize_ref(const float *x, int64_t K, int64_t k0, int64_t k1,
                         void *const out[CPU_XQ_LAYOUT_COUNT], float *xh) {
    HR_ASSERT(k0 % CPU_XQ_PAD == 0 && k1 % CPU_XQ_PAD == 0 && k1 <= cpu_xq_kp(K));
    for (int l = 0; l < CPU_XQ_LAYOUT_COUNT; l++) {
        if (out[l] == NULL)
            continue;
        const cpu_xq_layout layout = (cpu_xq_layout)l;
        int8_t *codes = out[l];
        float *d = (float *)(void *)cpu_xq_d(out[l], K);
        int32_t *s32 = (int32_t *)(void *)cpu_xq_s32(out[l], K);
        float *d16 = (float *)(void *)cpu_xq_d16(out[l], K);
        int32_t *s16 = (int32_t *)(void *)cpu_xq_s16(out[l], K);
        const bool biased = layout == CPU_XQ_T32 || layout == CPU_XQ_T16;
        /* where block ib's d/s32 and half block ih's d16/s16 go */
        int pos32[16], pos16[16];
        for (int i = 0; i < 16; i++) {
            pos32[i] = pos16[i] = i;
        }
        for (int lane = 0; lane < 16; lane++) {
            if (layout == CPU_XQ_QUAD)
                pos32[cpu_xq_lane(layout, lane)] = lane;
            if (layout == CPU_XQ_NATURAL || layout == CPU_XQ_K4)
                pos16[cpu_xq_lane(layout, lane)] = lane;
        }
        for (int64_t ib = k0 / 32; ib < k1 / 32; ib++) {
            int32_t q[32] = {0};
            float amax = 0.0f;
            if (ib * 32 < K) {
                for (int i = 0; i < 32; i++) {
                    float a = fabsf(x[ib * 32 + i]);
                    amax = a > amax ? a : amax;
                }
                const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
                for (int i = 0; i < 32; i++)
                    q[i] = (int32_t)rintf(x[ib * 32 + i] * id);
            }
            const float dv = amax / 127.0f;
            int32_t sum_lo = 0, sum_hi = 0;
            for (int i = 0; i < 32; i++) {
                int64_t pos = cpu_xq_pos(layout, ib * 32 + i);
                codes[pos] = biased ? (int8_t)(uint8_t)(q[i] + 128) : (int8_t)q[i];
                if (i < 16)
                    sum_lo += q[i];
                else
                    sum_hi += q[i];
            }
            const int64_t at32 = ib - ib % 16 + pos32[ib % 16];
            d[at32] = dv;
            s32[at32] = sum_lo + sum_hi;
            for (int h = 0; h < 2; h++) {
                const int64_t ih = 2 * ib + h;
                const int64_t at16 = ih - ih % 16 + pos16[ih % 16];
                d16[at16] = dv;
                s16[at16] = h == 0 ? sum_lo : sum_hi;
            }
        }
    }
    if (xh != NULL) {
        for (int64_t ib = k0 / 32; ib < k1 / 32 && ib < K / 32; ib++) {
            float amax = 0.0f;
            for (int i = 0; i < 32; i++) {
                float a = fabsf(x[ib * 32 + i]);
                amax = a > amax ? a : amax;
            }
            const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
            const float dv = amax / 127.0f;
            for (int i = 0; i < 32; i++) /* via the integer code: +0 where it is 0 */
                xh[ib * 32 + i] = dv * (float)(int32_t)rintf(x[ib * 32 + i] * id);
        }
    }
}

/* ---------------------------------------------------------------- scratch */

static size_t tscratch_max(int64_t max_K) {
    size_t n = cpu_mm_isa_ref.tscratch_bytes(max_K);
    size_t a = cpu_mm_isa_avx2.tscratch_bytes(max_K);
    size_t b = cpu_mm_isa_avx512.tscratch_bytes(max_K);
    n = a > n ? a : n;
    n = b > n ? b : n;
    /* the generic decode path converts MM_GENERIC_ROWS rows to f32 */
    size_t g = (size_t)MM_GENERIC_ROWS * (size_t)max_K * sizeof(float);
    return align_up(g + align_up(n));
}

static size_t xpack_bytes(int64_t B, int64_t K) {
    return align_up((size_t)(B + 15) * (size_t)cpu_mm_kpad(K) * sizeof(float));
}

size_t cpu_matmul_scratch_bytes(int64_t max_rows_B, int64_t max_K, int n_threads) {
    HR_ASSERT(max_rows_B >= 0 && max_K > 0 && n_threads >= 1);
    size_t xh = align_up((size_t)max_rows_B * (size_t)max_K * sizeof(float));
    size_t x16 = align_up((size_t)max_rows_B * (size_t)max_K * sizeof(uint16_t));
    size_t xq = MM_XQ_SLOTS * align_up((size_t)max_rows_B * cpu_xq_row_bytes(max_K));
    return xh + x16 + xq + 2 * xpack_bytes(max_rows_B, max_K) +
           (size_t)n_threads * tscratch_max(max_K);
}

/* ---------------------------------------------------------------- the job */

typedef struct {
    int64_t n, chunk;        /* items, and items a thread takes at a time */
    atomic_llong next, done; /* first item not taken; items finished */
} mm_phase;

typedef struct {
    const cpu_mm_isa *isa;
    cpu_pool *pool;
    cpu_matmul_mode mode;
    float *y;
    int64_t ldy;
    const float *x;
    int64_t ldx, B, K;
    const cpu_mat *parts;
    int n_parts;
    bool part_gemm[MM_MAX_PARTS]; /* part p runs a prefill (gemm) kernel */
    cpu_mm_args args_x;  /* the activations as given */
    cpu_mm_args args_xh; /* FAST generic paths: x replaced by x^ */
    /* FAST preparation and prefill packing */
    bool need_quant;
    /* FAST without quantized parts: F16 (or else BF16) parts round x to that
     * type, x^ = x16; HR_DTYPE_COUNT: none */
    hr_dtype x16_type;
    uint16_t *x16;
    float *xpack_x, *xpack_xh; /* NULL when not needed */
    uint32_t *xpack16;         /* x16 in pairs (in xpack_xh's place) */
    void *xq[CPU_XQ_LAYOUT_COUNT]; /* layout base (row b at + b*xq_row_bytes) */
    float *xh;
    size_t xq_row_bytes;
    /* work split: rows are numbered across the parts (part p's row r is
     * part_col[p] + r); next_row is the first one no thread has taken */
    int nth;
    int64_t N;
    int64_t part_col[MM_MAX_PARTS + 1]; /* first output column of each part; N */
    int64_t part_rows[MM_MAX_PARTS];    /* prefill: rows per tile; decode: least rows per chunk */
    atomic_llong next_row;
    mm_phase prep, pack; /* FAST: x quantized or rounded; prefill: x packed */
    char *tscratch; /* thread i's at tscratch + i * tscratch_bytes */
    size_t tscratch_bytes;
} mm_job;

/* EXACT decode for a dtype without a fused kernel: MM_GENERIC_ROWS rows at a
 * time converted to f32 in scratch, then the level's F32 kernel. */
static void gemv_generic(const mm_job *j, const cpu_mm_args *a, const cpu_mat *m, int64_t r0,
                         int64_t r1, float *y, void *ts) {
    const size_t row_bytes = cpu_mm_row_bytes(m->dtype, a->K);
    float *w = ts;
    void *ts_rest = (char *)ts + align_up((size_t)MM_GENERIC_ROWS * (size_t)a->K * sizeof(float));
    for (int64_t r = r0; r < r1; r += MM_GENERIC_ROWS) {
        int64_t n = r1 - r < MM_GENERIC_ROWS ? r1 - r : MM_GENERIC_ROWS;
        for (int64_t i = 0; i < n; i++)
            cpu_mm_to_f32(j->isa, m->dtype, (const char *)m->data + (size_t)(r + i) * row_bytes,
                          0, a->K, w + i * a->K);
        cpu_mat wm = {.dtype = HR_DTYPE_F32, .data = w, .n_rows = n, .bias = NULL};
        j->isa->gemv_exact[HR_DTYPE_F32](a, &wm, 0, n, y + (r - r0), j->ldy, ts_rest);
    }
}

/* Whether a part of dtype t computes on rounded activations in this call. */
static bool part_fast(cpu_matmul_mode mode, hr_dtype x16_type, hr_dtype t) {
    return mode == CPU_MATMUL_FAST && (hr_dtype_table[t].is_quant || t == x16_type);
}

static void run_chunk(const mm_job *j, int p, int64_t r0, int64_t r1, void *ts) {
    const cpu_mat *m = &j->parts[p];
    const hr_dtype t = m->dtype;
    const cpu_mm_isa *isa = j->isa;
    float *y = j->y + j->part_col[p] + r0;
    const bool fast = part_fast(j->mode, j->x16_type, t);

    if (j->part_gemm[p]) {
        if (fast && isa->gemm_fast[t] != NULL)
            isa->gemm_fast[t](&j->args_x, m, r0, r1, y, j->ldy, ts);
        else
            isa->gemm_exact(fast ? &j->args_xh : &j->args_x, m, r0, r1, y, j->ldy, ts);
    } else if (fast && isa->gemv_fast[t] != NULL && (t != j->x16_type || j->B == 1)) {
        isa->gemv_fast[t](&j->args_x, m, r0, r1, y, j->ldy, ts);
    } else {
        const cpu_mm_args *a = fast ? &j->args_xh : &j->args_x;
        if (isa->gemv_exact[t] != NULL)
            isa->gemv_exact[t](a, m, r0, r1, y, j->ldy, ts);
        else
            gemv_generic(j, a, m, r0, r1, y, ts);
    }

    if (m->bias != NULL) {
        for (int64_t b = 0; b < j->B; b++) {
            float *yb = y + b * j->ldy;
            for (int64_t r = r0; r < r1; r++)
                yb[r - r0] += m->bias[r];
        }
    }
}

/* FAST: items [s, e) of the activations' (row, 512-code group) items. */
static void quantize_items(mm_job *j, int64_t s, int64_t e) {
    const int64_t ng = cpu_xq_kp(j->K) / CPU_XQ_PAD;
    for (int64_t b = s / ng; b * ng < e; b++) {
        const int64_t g0 = s > b * ng ? s - b * ng : 0, g1 = e - b * ng < ng ? e - b * ng : ng;
        void *out[CPU_XQ_LAYOUT_COUNT] = {0};
        for (int l = 0; l < CPU_XQ_LAYOUT_COUNT; l++)
            if (j->xq[l] != NULL)
                out[l] = (char *)j->xq[l] + (size_t)b * j->xq_row_bytes;
        j->isa->quantize(j->x + b * j->ldx, j->K, g0 * CPU_XQ_PAD, g1 * CPU_XQ_PAD, out,
                         j->xh ? j->xh + b * j->K : NULL);
    }
}

/* FAST with F16 or BF16 weights: x16 and x^ for elements [s, e) of the
 * B*K, cut at row ends. */
static void round_items(mm_job *j, int64_t s, int64_t e) {
    const cpu_round16_fn round =
        j->x16_type == HR_DTYPE_F16 ? j->isa->round_f16 : j->isa->round_bf16;
    for (int64_t i = s; i < e;) {
        const int64_t b = i / j->K, k = i % j->K;
        const int64_t len = (e - i < j->K - k) ? e - i : j->K - k;
        round(j->x + b * j->ldx + k, len, j->x16 + i, j->xh + i);
        i += len;
    }
}

/* Prefill with f32 kernels: panels [s, e) of the packed activations. */
static void pack_items(mm_job *j, int64_t s, int64_t e) {
    const int64_t mr = j->isa->gemm_mr;
    const size_t panel = (size_t)mr * (size_t)cpu_mm_kpad(j->K);
    for (int64_t p = s; p < e; p++) {
        const int rows = (int)(j->B - p * mr < mr ? j->B - p * mr : mr);
        if (j->xpack_x != NULL)
            j->isa->gemm_pack_x(j->x + p * mr * j->ldx, j->ldx, rows, j->K, j->xpack_x + p * panel);
        if (j->xpack_xh != NULL)
            j->isa->gemm_pack_x(j->xh + p * mr * j->K, j->K, rows, j->K, j->xpack_xh + p * panel);
        if (j->xpack16 != NULL)
            j->isa->gemm_pack_x16(j->x16 + p * mr * j->K, j->K, rows,
                                  j->xpack16 + (size_t)p * (size_t)mr * (size_t)cpu_mm_kpad32(j->K) / 2);
    }
}

/* One preparation phase of a run: threads take chunks of the items from
 * ph->next until none is left, then wait for the chunks others are still
 * running. No barrier: a slot that starts late finds the phase done, and
 * none waits for a slot nobody has taken (threadpool.h). */
static void run_phase(mm_job *j, mm_phase *ph, void (*items)(mm_job *, int64_t, int64_t)) {
    int64_t mine = 0;
    for (;;) {
        const int64_t s = atomic_fetch_add_explicit(&ph->next, ph->chunk, memory_order_relaxed);
        if (s >= ph->n)
            break;
        const int64_t e = s + ph->chunk < ph->n ? s + ph->chunk : ph->n;
        items(j, s, e);
        mine += e - s;
    }
    if (mine > 0)
        atomic_fetch_add_explicit(&ph->done, mine, memory_order_release);
    for (uint32_t i = 0; atomic_load_explicit(&ph->done, memory_order_acquire) < ph->n; i++)
        cpu_pool_wait_relax(i);
}

/* A phase of n items in chunks of about a quarter of a thread's share
 * (at least `least`, so that the shared counter stays cold). */
static void phase_init(mm_phase *ph, int64_t n, int nth, int64_t least) {
    int64_t chunk = (n + 4 * nth - 1) / (4 * nth);
    ph->n = n;
    ph->chunk = chunk > least ? chunk : least;
    atomic_init(&ph->next, 0);
    atomic_init(&ph->done, 0);
}

static void mm_task(void *ctx, int slot, int n_slots) {
    (void)n_slots;
    mm_job *j = ctx;
    if (j->need_quant)
        run_phase(j, &j->prep, j->x16_type != HR_DTYPE_COUNT ? round_items : quantize_items);
    if (j->pack.n > 0)
        run_phase(j, &j->pack, pack_items);
    void *ts = j->tscratch + (size_t)slot * j->tscratch_bytes;
    int p = 0;
    long long g = atomic_load_explicit(&j->next_row, memory_order_relaxed);
    while (g < j->N) {
        while (g >= j->part_col[p + 1])
            p++;
        const int64_t r0 = g - j->part_col[p], n = j->parts[p].n_rows;
        int64_t rows = j->part_rows[p];
        if (!j->part_gemm[p]) {
            const int64_t left = j->N - g, share = (left + MM_GUIDED * j->nth - 1) / (MM_GUIDED * j->nth);
            if (share > rows)
                rows = (share + MM_GEMV_ALIGN - 1) / MM_GEMV_ALIGN * MM_GEMV_ALIGN;
        }
        const int64_t r1 = n - r0 < rows ? n : r0 + rows;
        /* on failure g is reloaded with the current value: try again from there */
        if (atomic_compare_exchange_weak_explicit(&j->next_row, &g, j->part_col[p] + r1,
                                                  memory_order_relaxed, memory_order_relaxed)) {
            run_chunk(j, p, r0, r1, ts);
            g = atomic_load_explicit(&j->next_row, memory_order_relaxed);
        }
    }
}

void cpu_matmul(cpu_pool *pool, void *scratch, cpu_matmul_mode mode, float *y, int64_t ldy,
                const float *x, int64_t ldx, int64_t B, int64_t K, const cpu_mat *parts,
                int n_parts) {
    HR_ASSERT(B >= 0 && K > 0 && ldx >= K && n_parts >= 1 && n_parts <= MM_MAX_PARTS);
    HR_ASSERT(((uintptr_t)scratch & (MM_ALIGN - 1)) == 0);
    const int nth = pool != NULL ? cpu_pool_size(pool) : 1;
    const cpu_mm_isa *isa = isa_for(cpu_level_active());

    mm_job j = {.isa = isa,
                .pool = pool,
                .mode = mode,
                .y = y,
                .ldy = ldy,
                .x = x,
                .ldx = ldx,
                .B = B,
                .K = K,
                .parts = parts,
                .n_parts = n_parts};

    /* F16 (else BF16) parts round x to their type in FAST mode unless a
     * quantized part needs the 8-bit x^ of the same call */
    bool any_f16 = false, any_bf16 = false, any_quant = false;
    for (int p = 0; p < n_parts; p++) {
        any_f16 = any_f16 || parts[p].dtype == HR_DTYPE_F16;
        any_bf16 = any_bf16 || parts[p].dtype == HR_DTYPE_BF16;
        any_quant = any_quant || hr_dtype_table[parts[p].dtype].is_quant;
    }
    j.x16_type = HR_DTYPE_COUNT;
    if (mode == CPU_MATMUL_FAST && !any_quant && (any_f16 || any_bf16))
        j.x16_type = any_f16 ? HR_DTYPE_F16 : HR_DTYPE_BF16;

    int64_t N = 0;
    for (int p = 0; p < n_parts; p++) {
        const cpu_mat *m = &parts[p];
        HR_ASSERT(is_weight_dtype(m->dtype) && m->n_rows >= 0);
        HR_ASSERT(K % hr_dtype_table[m->dtype].block_elems == 0);
        HR_ASSERT(m->n_rows == 0 || m->data != NULL);
        j.part_col[p] = N;
        N += m->n_rows;
        const bool fast_gemm = part_fast(mode, j.x16_type, m->dtype) &&
                               isa->gemm_fast[m->dtype] != NULL;
        const bool xh_gemm = !fast_gemm && part_fast(mode, j.x16_type, m->dtype) &&
                             hr_dtype_table[m->dtype].is_quant;
        const int64_t min_B = xh_gemm                     ? isa->gemm_min_B_xh
                              : !fast_gemm                ? isa->gemm_min_B_exact
                              : m->dtype == HR_DTYPE_BF16 ? isa->gemm_min_B_bf16
                                                          : isa->gemm_min_B_fast;
        j.part_gemm[p] = isa->gemm_exact != NULL && B >= min_B;
    }
    HR_ASSERT(ldy >= N);
    if (B == 0 || N == 0)
        return;

    /* Which activation forms the parts need. */
    bool need_layout[CPU_XQ_LAYOUT_COUNT] = {0};
    bool need_xh = false, need_pack_x = false, need_pack_xh = false, need_pack16 = false;
    for (int p = 0; p < n_parts; p++) {
        hr_dtype t = parts[p].dtype;
        if (parts[p].n_rows == 0)
            continue;
        const bool gemm = j.part_gemm[p];
        if (!part_fast(mode, j.x16_type, t)) {
            need_pack_x = need_pack_x || gemm;
        } else if (t == j.x16_type) { /* x16 and x^, made together */
            need_xh = true;
            if (gemm && isa->gemm_fast[t] != NULL)
                need_pack16 = true;
            else
                need_pack_xh = need_pack_xh || gemm;
        } else if (gemm && isa->gemm_fast[t] != NULL) {
            need_layout[isa->gemm_fast_layout[t]] = true;
        } else if (!gemm && isa->gemv_fast[t] != NULL) {
            need_layout[isa->gemv_fast_layout[t]] = true;
        } else {
            need_xh = true;
            need_pack_xh = need_pack_xh || gemm;
        }
    }

    /* Carve the scratch: x^, xq layout slots, per-thread areas. */
    char *s = scratch;
    j.xq_row_bytes = cpu_xq_row_bytes(K);
    if (need_xh)
        j.xh = (float *)(void *)s;
    s += align_up((size_t)B * (size_t)K * sizeof(float));
    if (need_xh && j.x16_type != HR_DTYPE_COUNT)
        j.x16 = (uint16_t *)(void *)s;
    s += align_up((size_t)B * (size_t)K * sizeof(uint16_t));
    int slot = 0;
    for (int l = 0; l < CPU_XQ_LAYOUT_COUNT; l++) {
        if (!need_layout[l])
            continue;
        HR_ASSERT(slot < MM_XQ_SLOTS);
        j.xq[l] = s;
        s += align_up((size_t)B * j.xq_row_bytes);
        slot++;
        j.need_quant = true;
    }
    j.need_quant = j.need_quant || need_xh;
    s += (size_t)(MM_XQ_SLOTS - slot) * align_up((size_t)B * j.xq_row_bytes);
    if (need_pack_x)
        j.xpack_x = (float *)(void *)s;
    s += xpack_bytes(B, K);
    /* x16's pairs: (B + mr - 1) / mr * mr * kpad32(K) / 2 words, no more than
     * the slot's (B + 15) * kpad(K) */
    HR_ASSERT(!(need_pack_xh && need_pack16));
    if (need_pack_xh)
        j.xpack_xh = (float *)(void *)s;
    if (need_pack16)
        j.xpack16 = (uint32_t *)(void *)s;
    s += xpack_bytes(B, K);
    j.tscratch = s;
    j.tscratch_bytes = tscratch_max(K);

    j.args_x = (cpu_mm_args){.B = B, .K = K, .x = x, .ldx = ldx, .mode = mode,
                             .x16 = j.x16, .xq_row_bytes = j.xq_row_bytes};
    for (int l = 0; l < CPU_XQ_LAYOUT_COUNT; l++)
        j.args_x.xq[l] = j.xq[l];
    j.args_x.xpack = j.xpack_x;
    j.args_x.xpack16 = j.xpack16;
    j.args_xh = j.args_x;
    if (need_xh) {
        j.args_xh.x = j.xh;
        j.args_xh.ldx = K;
        j.args_xh.xpack = j.xpack_xh;
    }

    /* Chunk sizes per part (mm_task). */
    for (int p = 0; p < n_parts; p++) {
        int64_t n = parts[p].n_rows, rows;
        if (j.part_gemm[p]) {
            int64_t al = isa->gemm_row_align;
            rows = (n + 2 * nth - 1) / (2 * nth);
            rows = (rows + al - 1) / al * al;
            if (rows > isa->gemm_max_rows)
                rows = isa->gemm_max_rows;
        } else {
            const size_t rb = cpu_mm_row_bytes(parts[p].dtype, K);
            rows = (int64_t)((MM_GEMV_MIN_CHUNK_BYTES + rb - 1) / rb);
            rows = (rows + MM_GEMV_ALIGN - 1) / MM_GEMV_ALIGN * MM_GEMV_ALIGN;
        }
        j.part_rows[p] = rows > 0 ? rows : 1;
    }
    j.part_col[n_parts] = N;
    j.N = N;
    j.nth = nth;
    atomic_init(&j.next_row, 0);
    if (j.x16_type != HR_DTYPE_COUNT)
        phase_init(&j.prep, B * K, nth, 4096);
    else
        phase_init(&j.prep, B * (cpu_xq_kp(K) / CPU_XQ_PAD), nth, 1);
    phase_init(&j.pack, j.xpack_x || j.xpack_xh || j.xpack16 ? (B + isa->gemm_mr - 1) / isa->gemm_mr : 0,
               nth, 1);

    if (pool != NULL && nth > 1)
        cpu_pool_run(pool, mm_task, &j);
    else
        mm_task(&j, 0, 1);
}
