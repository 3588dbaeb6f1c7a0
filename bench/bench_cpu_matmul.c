/*
 * bench_cpu_matmul.c — CPU matmul speed against this machine's own ceilings.
 *
 * Measures first what the hardware allows, then the kernels:
 *   1. streaming-read bandwidth with the pool's threads (a sum over 1 GiB);
 *   2. f32 FMA peak (independent FMA chains on every thread) and the pool's
 *      round trip (an empty cpu_pool_run, hot and after the workers slept);
 *   3. per dtype and mode, on TinyLlama-1.1B shapes (K=2048: N = 2048, 256,
 *      5632, 32000; K=5632: N = 2048): decode (B=1) in GB/s of weights
 *      streamed and % of (1), and prefill (B=512) in GFLOP/s and % of (2);
 *   4. the matmul time of one TinyLlama token (22 layers of fused qkv, o,
 *      fused gate/up, down, plus the output head) as decode tok/s and
 *      512-token prefill tok/s: an upper bound for the whole model.
 * Weights are random valid blocks (random codes, finite scales) spread over
 * 1 GiB and each timed call reads a different window, so decode streams from
 * DRAM as in a real model (32 MiB of L3 would otherwise hold a matrix); in
 * huge pages, as the engine holds weights (hr_alloc_pages).
 * Times are medians over the calls; bandwidth and FMA peak are best of 5.
 * Every configuration is checked against the reference level before timing.
 *
 * Build (until bench/ is wired into CMake), from the repository root:
 *   cmake -S . -B build-mm -DHR_CUDA=OFF -DHR_MODULES="util;quant;backend"
 *   cmake --build build-mm --target headroom
 *   gcc -O2 -std=c17 -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc bench/bench_cpu_matmul.c \
 *       build-mm/lib/libheadroom.a -lpthread -lm -o build-mm/bench_cpu_matmul
 * Run: build-mm/bench_cpu_matmul [threads=2] [full|quick|hot] [dtype]
 *   quick: shorter timings and no prefill model estimate; hot: as quick, with
 *   every call on the same weights (in cache: the compute ceiling; the % then
 *   compares with a read from DRAM); dtype: only that one.
 */
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/threadpool.h"
#include "quant/quant.h"
#include "util/alloc.h"
#include "util/dtype.h"
#include "util/fp16.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* ---------------------------------------------------------------- ceilings */

typedef struct {
    const uint64_t *buf;
    size_t n_words;
    uint64_t sums[64];
} bw_ctx;

#if defined(__x86_64__)
__attribute__((target("avx2"))) static uint64_t sum_words_avx2(const uint64_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 4)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 8)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 12)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t t[4];
    _mm256_storeu_si256((__m256i *)t, a0);
    return t[0] + t[1] + t[2] + t[3];
}
#endif

static uint64_t sum_words(const uint64_t *p, size_t n) {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2"))
        return sum_words_avx2(p, n);
#endif
    uint64_t s[4] = {0};
    for (size_t i = 0; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++)
            s[k] += p[i + k];
    return s[0] + s[1] + s[2] + s[3];
}

static void bw_task(void *ctx, int ith, int nth) {
    bw_ctx *c = ctx;
    size_t per = c->n_words / (size_t)nth / 16 * 16;
    c->sums[ith] = sum_words(c->buf + per * (size_t)ith, per);
}

static double measure_bandwidth(cpu_pool *pool) {
    const size_t bytes = (size_t)1 << 30;
    uint64_t *buf = hr_alloc_pages(bytes);
    for (size_t i = 0; i < bytes / 8; i++)
        buf[i] = i * 0x9e3779b97f4a7c15ull;
    bw_ctx c = {.buf = buf, .n_words = bytes / 8};
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        cpu_pool_run(pool, bw_task, &c);
        double t = now_s() - t0;
        if ((double)bytes / t > best)
            best = (double)bytes / t;
    }
    hr_free_pages(buf, bytes);
    return best / 1e9;
}

typedef struct {
    long iters;
    float sink[64];
} fma_ctx;

#if defined(__x86_64__)
/* Ten independent FMA chains in named registers (an array indexed in a loop
 * was kept in memory at -O2 and measured the store-forwarding latency). */
__attribute__((target("avx2,fma"))) static float fma_loop_avx2(long iters) {
    __m256 a0 = _mm256_set1_ps(0), a1 = _mm256_set1_ps(1), a2 = _mm256_set1_ps(2);
    __m256 a3 = _mm256_set1_ps(3), a4 = _mm256_set1_ps(4), a5 = _mm256_set1_ps(5);
    __m256 a6 = _mm256_set1_ps(6), a7 = _mm256_set1_ps(7), a8 = _mm256_set1_ps(8);
    __m256 a9 = _mm256_set1_ps(9);
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (long i = 0; i < iters; i++) {
        a0 = _mm256_fmadd_ps(a0, m, c);
        a1 = _mm256_fmadd_ps(a1, m, c);
        a2 = _mm256_fmadd_ps(a2, m, c);
        a3 = _mm256_fmadd_ps(a3, m, c);
        a4 = _mm256_fmadd_ps(a4, m, c);
        a5 = _mm256_fmadd_ps(a5, m, c);
        a6 = _mm256_fmadd_ps(a6, m, c);
        a7 = _mm256_fmadd_ps(a7, m, c);
        a8 = _mm256_fmadd_ps(a8, m, c);
        a9 = _mm256_fmadd_ps(a9, m, c);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(a8, a9));
    float t[8];
    _mm256_storeu_ps(t, s);
    return t[0];
}
#endif

static void fma_task(void *ctx, int ith, int nth) {
    (void)nth;
    fma_ctx *c = ctx;
#if defined(__x86_64__)
    c->sink[ith] = fma_loop_avx2(c->iters);
#else
    c->sink[ith] = 0;
#endif
}

/* f32 FLOP/s with 256-bit FMAs on every thread. 512-bit FMAs give the same
 * rate on Zen 4 (two 256-bit pipes) and up to twice it on Intel server parts. */
static double measure_fma_peak(cpu_pool *pool) {
    fma_ctx c = {.iters = 20000000};
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = now_s();
        cpu_pool_run(pool, fma_task, &c);
        double t = now_s() - t0;
        double flops = (double)cpu_pool_size(pool) * (double)c.iters * 10 * 8 * 2;
        if (flops / t > best)
            best = flops / t;
    }
    return best / 1e9;
}

static void empty_task(void *ctx, int ith, int nth) {
    (void)ctx;
    (void)ith;
    (void)nth;
}

static void measure_pool(cpu_pool *pool, double *hot_us, double *cold_us) {
    const int n = 200000;
    for (int i = 0; i < 1000; i++)
        cpu_pool_run(pool, empty_task, NULL);
    double t0 = now_s();
    for (int i = 0; i < n; i++)
        cpu_pool_run(pool, empty_task, NULL);
    *hot_us = (now_s() - t0) / n * 1e6;
    double worst = 0, sum = 0;
    for (int i = 0; i < 20; i++) {
        struct timespec pause = {.tv_sec = 0, .tv_nsec = 5000000};
        nanosleep(&pause, NULL); /* longer than the workers' spin: they sleep */
        double t1 = now_s();
        cpu_pool_run(pool, empty_task, NULL);
        double t = now_s() - t1;
        sum += t;
        worst = t > worst ? t : worst;
    }
    *cold_us = sum / 20 * 1e6;
}

/* ---------------------------------------------------------------- weights */

static void fix_scales(hr_dtype t, uint8_t *blk) {
    int off[2] = {-1, -1};
    switch (t) {
    case HR_DTYPE_Q8_0: case HR_DTYPE_Q4_0: case HR_DTYPE_Q5_0:
    case HR_DTYPE_NF4: case HR_DTYPE_FP4: off[0] = 0; break;
    case HR_DTYPE_Q4_1: case HR_DTYPE_Q5_1: case HR_DTYPE_Q4_K: case HR_DTYPE_Q5_K:
        off[0] = 0; off[1] = 2; break;
    case HR_DTYPE_Q2_K: off[0] = 80; off[1] = 82; break;
    case HR_DTYPE_Q3_K: off[0] = 108; break;
    case HR_DTYPE_Q6_K: off[0] = 208; break;
    default: break;
    }
    for (int i = 0; i < 2; i++) {
        if (off[i] < 0)
            continue;
        uint16_t h = hr_f32_to_f16(((float)(rnd() % 2001) - 1000.0f) * 1e-5f);
        memcpy(blk + off[i], &h, 2);
    }
}

/* Fills n bytes of weights of dtype t (whole blocks) with valid random data. */
static void fill_weights(hr_dtype t, uint8_t *p, size_t n) {
    const hr_dtype_info *d = &hr_dtype_table[t];
    if (d->is_quant) {
        for (size_t i = 0; i + 4 <= n; i += 4) {
            uint32_t r = rnd();
            memcpy(p + i, &r, 4);
        }
        for (size_t b = 0; b + (size_t)d->block_bytes <= n; b += (size_t)d->block_bytes)
            fix_scales(t, p + b);
    } else if (t == HR_DTYPE_F32) {
        float *f = (float *)(void *)p;
        for (size_t i = 0; i < n / 4; i++)
            f[i] = ((float)(rnd() % 2001) - 1000.0f) * 1e-3f;
    } else {
        uint16_t *h = (uint16_t *)(void *)p;
        for (size_t i = 0; i < n / 2; i++) {
            float v = ((float)(rnd() % 2001) - 1000.0f) * 1e-3f;
            h[i] = t == HR_DTYPE_F16 ? hr_f32_to_f16(v) : hr_f32_to_bf16(v);
        }
    }
}

/* ---------------------------------------------------------------- timing */

#define WBUF_BYTES ((size_t)1 << 30)

static uint8_t *wbuf;
static void *scratch;
static cpu_pool *pool;

typedef struct {
    int64_t K, N;
} shape;

static const shape shapes[] = {{2048, 2048}, {2048, 256}, {2048, 5632}, {2048, 32000}, {5632, 2048}};
#define N_SHAPES 5

/* Checks the active level against ref on one window; returns worst err/tol. */
static double validate(hr_dtype t, cpu_matmul_mode mode, int64_t B, int64_t K, int64_t N,
                       const float *x) {
    int64_t n_chk = N < 64 ? N : 64;
    cpu_mat m = {.dtype = t, .data = wbuf, .n_rows = n_chk, .huge_pages = true};
    float *y = malloc(sizeof(float) * (size_t)(B * n_chk));
    float *yr = malloc(sizeof(float) * (size_t)(B * n_chk));
    cpu_level lv = cpu_level_active();
    cpu_matmul(pool, scratch, mode, y, n_chk, x, K, B, K, &m, 1);
    cpu_level_set(CPU_LEVEL_REF);
    cpu_matmul(pool, scratch, mode, yr, n_chk, x, K, B, K, &m, 1);
    cpu_level_set(lv);
    /* both sides round at f32; allow K * 2^-23 relative to the row's |w||x| scale */
    float *w = malloc(sizeof(float) * (size_t)K);
    double worst = 0;
    for (int64_t n = 0; n < n_chk; n++) {
        quant_dequantize_row(t, wbuf + cpu_mm_row_bytes(t, K) * (size_t)n, w, K);
        for (int64_t b = 0; b < B; b++) {
            double sa = 0;
            for (int64_t k = 0; k < K; k++)
                sa += fabs((double)w[k] * x[b * K + k]);
            double tol = (double)K * 1.2e-7 * sa + 1e-30;
            double e = fabs((double)y[b * n_chk + n] - yr[b * n_chk + n]) / tol;
            if (e > worst || isnan(e))
                worst = e;
        }
    }
    free(w);
    free(y);
    free(yr);
    return worst;
}

static bool hot; /* "hot" on the command line */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median seconds per call, rotating over weight windows (the median: other
 * tenants of a shared machine make the mean noisy). When stream_s is not
 * NULL, every call is followed by a streaming read of as many bytes from the
 * window half the buffer ahead, and *stream_s gets the median time of those reads: this VM's
 * memory bandwidth drifts by 2x within minutes as neighbours come and go, so
 * decode speed is judged against the read speed of the same moment. */
static double time_matmul(cpu_matmul_mode mode, int64_t B, int64_t K, const cpu_mat *parts_tmpl,
                          int n_parts, const float *x, float *y, double min_s, double *stream_s) {
    size_t bytes = 0;
    for (int p = 0; p < n_parts; p++)
        bytes += cpu_mm_row_bytes(parts_tmpl[p].dtype, K) * (size_t)parts_tmpl[p].n_rows;
    bytes = (bytes + 4095) / 4096 * 4096;
    size_t n_win = WBUF_BYTES / bytes;
    if (n_win < 2)
        n_win = 2;
    if (hot) /* one window: the weights stay in cache, the kernels' compute ceiling */
        n_win = 1;
    cpu_mat parts[8];
    int64_t N = 0;
    for (int p = 0; p < n_parts; p++)
        N += parts_tmpl[p].n_rows;
    enum { MAX_ITERS = 4096 };
    static double times[MAX_ITERS], stimes[MAX_ITERS];
    int iters = 0;
    double t0 = now_s();
    for (;;) {
        size_t off = ((size_t)iters % n_win) * bytes;
        for (int p = 0; p < n_parts; p++) {
            parts[p] = parts_tmpl[p];
            parts[p].data = wbuf + off;
            off += cpu_mm_row_bytes(parts_tmpl[p].dtype, K) * (size_t)parts_tmpl[p].n_rows;
        }
        double t1 = now_s();
        cpu_matmul(pool, scratch, mode, y, N, x, K, B, K, parts, n_parts);
        times[iters] = now_s() - t1;
        if (stream_s != NULL) {
            /* half the buffer away: out of every cache when the matmul gets there */
            bw_ctx c = {.buf = (const uint64_t *)(const void *)(wbuf + ((size_t)iters + n_win / 2) % n_win * bytes),
                        .n_words = bytes / 8};
            t1 = now_s();
            cpu_pool_run(pool, bw_task, &c);
            stimes[iters] = now_s() - t1;
        }
        iters++;
        if ((now_s() - t0 > min_s && iters >= 5) || iters == MAX_ITERS)
            break;
    }
    if (stream_s != NULL) {
        qsort(stimes, (size_t)iters, sizeof(double), cmp_double);
        *stream_s = stimes[iters / 2];
    }
    qsort(times, (size_t)iters, sizeof(double), cmp_double);
    return times[iters / 2];
}

int main(int argc, char **argv) {
    int n_threads = argc > 1 ? atoi(argv[1]) : 2;
    bool quick = argc > 2 && strcmp(argv[2], "quick") == 0;
    hot = argc > 2 && strcmp(argv[2], "hot") == 0;
    quick |= hot;
    hr_dtype only = HR_DTYPE_COUNT;
    if (argc > 3 && !hr_dtype_from_name(argv[3], &only)) {
        fprintf(stderr, "unknown dtype %s\n", argv[3]);
        return 1;
    }
    hr_error err;
    if (cpu_pool_create(n_threads, &pool, &err) != HR_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("cpu level %s (supported %s), %d threads\n", cpu_level_name(cpu_level_active()),
           cpu_level_name(cpu_level_supported()), n_threads);

    double bw = measure_bandwidth(pool);
    double peak = measure_fma_peak(pool);
    double hot_us, cold_us;
    measure_pool(pool, &hot_us, &cold_us);
    printf("streaming read: %.1f GB/s   f32 FMA peak: %.1f GFLOP/s   "
           "pool round trip: %.2f us hot, %.1f us after sleep\n",
           bw, peak, hot_us, cold_us);

    const int64_t B_pre = 512, K_max = 5632;
    scratch = aligned_alloc(64, (cpu_matmul_scratch_bytes(B_pre, K_max, n_threads) + 63) / 64 * 64);
    wbuf = hr_alloc_pages(WBUF_BYTES);
    float *x = malloc(sizeof(float) * (size_t)(B_pre * K_max));
    float *y = malloc(sizeof(float) * (size_t)(B_pre * 32000));
    for (int64_t i = 0; i < B_pre * K_max; i++)
        x[i] = ((float)(rnd() % 2001) - 1000.0f) * 1e-3f;

    static const hr_dtype dtypes[] = {
        HR_DTYPE_F32,  HR_DTYPE_F16,  HR_DTYPE_BF16, HR_DTYPE_Q8_0, HR_DTYPE_Q4_0,
        HR_DTYPE_Q4_1, HR_DTYPE_Q5_0, HR_DTYPE_Q5_1, HR_DTYPE_Q2_K, HR_DTYPE_Q3_K,
        HR_DTYPE_Q4_K, HR_DTYPE_Q5_K, HR_DTYPE_Q6_K, HR_DTYPE_NF4,
    };
    printf("\n%-5s %-5s | decode B=1 GB/s (%% of a streaming read of the same bytes, timed "
           "right after) per N x K: 2048x2048 256x2048 5632x2048 32000x2048 2048x5632 | prefill "
           "B=512 GFLOP/s (%% of %.0f) | TinyLlama matmuls: decode tok/s (%% of the streaming "
           "read), prefill tok/s\n",
           "dtype", "mode", peak);
    for (size_t di = 0; di < sizeof(dtypes) / sizeof(dtypes[0]); di++) {
        hr_dtype t = dtypes[di];
        if (only != HR_DTYPE_COUNT && t != only)
            continue;
        fill_weights(t, wbuf, WBUF_BYTES);
        for (int mode = 0; mode < 2; mode++) {
            if (mode == CPU_MATMUL_FAST && !hr_dtype_table[t].is_quant && t != HR_DTYPE_F16 &&
                t != HR_DTYPE_BF16)
                continue; /* F32 ignores the mode */
            double worst = 0;
            for (int s = 0; s < N_SHAPES; s++) {
                double e1 = validate(t, (cpu_matmul_mode)mode, 1, shapes[s].K, shapes[s].N, x);
                double e2 = validate(t, (cpu_matmul_mode)mode, 37, shapes[s].K, shapes[s].N, x);
                worst = fmax(worst, fmax(e1, e2));
            }
            printf("%-5s %-5s |", hr_dtype_name(t), mode ? "fast" : "exact");
            if (!(worst <= 1.0)) {
                printf(" VALIDATION FAILED (err/tol %.3g)\n", worst);
                continue;
            }
            for (int s = 0; s < N_SHAPES; s++) {
                cpu_mat m = {.dtype = t, .n_rows = shapes[s].N, .huge_pages = true};
                double ss;
                double sec = time_matmul((cpu_matmul_mode)mode, 1, shapes[s].K, &m, 1, x, y,
                                         quick ? 0.05 : 0.25, &ss);
                double gbs = (double)cpu_mm_row_bytes(t, shapes[s].K) * (double)shapes[s].N / sec / 1e9;
                printf(" %5.1f (%3.0f%%)", gbs, 100 * ss / sec);
            }
            {
                cpu_mat m = {.dtype = t, .n_rows = 2048, .huge_pages = true};
                double sec = time_matmul((cpu_matmul_mode)mode, B_pre, 2048, &m, 1, x, y,
                                         quick ? 0.1 : 0.5, NULL);
                double gf = 2.0 * (double)B_pre * 2048 * 2048 / sec / 1e9;
                printf(" | %6.1f (%3.0f%%)", gf, 100 * gf / peak);
            }
            /* one TinyLlama token: 22 x (qkv 2560x2048, o 2048x2048, gate/up 11264x2048,
             * down 2048x5632) + head 32000x2048 */
            {
                cpu_mat qkv[3] = {{.dtype = t, .n_rows = 2048}, {.dtype = t, .n_rows = 256},
                                  {.dtype = t, .n_rows = 256}};
                cpu_mat o = {.dtype = t, .n_rows = 2048};
                cpu_mat gu[2] = {{.dtype = t, .n_rows = 5632}, {.dtype = t, .n_rows = 5632}};
                cpu_mat head = {.dtype = t, .n_rows = 32000};
                double ms = quick ? 0.03 : 0.15;
                /* decode: the token's matmul time, and its share of the
                 * streaming-read time of the same bytes */
                struct {
                    const cpu_mat *p;
                    int n;
                    int64_t K;
                    double mult;
                } dec_calls[5] = {{qkv, 3, 2048, 22}, {&o, 1, 2048, 22}, {gu, 2, 2048, 22},
                                  {&o, 1, 5632, 22}, {&head, 1, 2048, 1}};
                double dec = 0, dec_stream = 0;
                for (int c = 0; c < 5; c++) {
                    double ss;
                    dec += dec_calls[c].mult * time_matmul((cpu_matmul_mode)mode, 1, dec_calls[c].K,
                                                           dec_calls[c].p, dec_calls[c].n, x, y, ms, &ss);
                    dec_stream += dec_calls[c].mult * ss;
                }
                double pre = 0;
                if (!quick) {
                    pre = 22 * (time_matmul((cpu_matmul_mode)mode, B_pre, 2048, qkv, 3, x, y, 0.1, NULL) +
                                time_matmul((cpu_matmul_mode)mode, B_pre, 2048, &o, 1, x, y, 0.1, NULL) +
                                time_matmul((cpu_matmul_mode)mode, B_pre, 2048, gu, 2, x, y, 0.1, NULL) +
                                time_matmul((cpu_matmul_mode)mode, B_pre, 5632, &o, 1, x, y, 0.1, NULL));
                    /* prefill needs the head only for the last token */
                    pre += time_matmul((cpu_matmul_mode)mode, 1, 2048, &head, 1, x, y, 0.05, NULL);
                }
                printf(" | %6.1f (%3.0f%%) %6.1f\n", 1.0 / dec, 100 * dec_stream / dec,
                       pre > 0 ? (double)B_pre / pre : 0.0);
            }
            fflush(stdout);
        }
    }
    free(x);
    free(y);
    hr_free_pages(wbuf, WBUF_BYTES);
    free(scratch);
    cpu_pool_free(pool);
    return 0;
}
