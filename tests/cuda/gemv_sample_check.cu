/*
 * gemv_sample_check.cu — device check and timing of ck_gemv (gemv.cu) and
 * ck_sample (sample.cu) against CPU references, and a timing of cuBLASLt
 * (gemm.c, from the library) on the products of batched decode steps. A
 * standalone program: it #includes the production .cu files (one translation
 * unit, never a copy) so it can also time GEMV variants that the launcher
 * does not pick.
 *
 *   nvcc -arch=sm_90 -std=c++17 -O3 -I src -I include \
 *        tests/cuda/gemv_sample_check.cu -o build/gemv_sample_check
 *   build/gemv_sample_check [--small] [--no-timing]
 *
 * --small skips the large shapes and vocabularies (a quick first run);
 * --no-timing skips the benchmarks. Without a device: "SKIP: no CUDA device",
 * exit 0. Last line: "gemv_sample_check: N passed, M failed"; exit 1 on any
 * failure.
 *
 * GEMV tolerance: bf16 x bf16 and f16 x f16 products are exact in f32, so
 * the only error is f32 accumulation. A lane sums K/32 products in a chain,
 * then 5 butterfly adds and the bias: at most (K/32 + 6) roundings of a sum
 * bounded by S = sum |x w| + |bias|, so |y - ref| <= (K/32 + 8) 2^-24 S
 * (two spare terms for second-order effects). The reference is double.
 *
 * Sampling: a token must lie in the CPU sampler's kept set (same order of
 * filters as engine/sampler.c), computed with a slack of 1e-6 in top-p mass
 * and 1e-5 relative in the min-p cut, since the GPU's masses are f32 exp2
 * (documented in sample.cu); boundary hits are counted and printed.
 */
#include "backend/cuda/elementwise.cu" /* the launch switch ck_pdl_on */
#include "backend/cuda/gemv.cu"
#include "backend/cuda/sample.cu"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_gemm.h"

#define CK(call)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                    \
                    cudaGetErrorString(e_));                                                  \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

static int g_pass, g_fail;
static bool g_small, g_timing = true;

static void check(bool ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "  ok  " : "  FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok)
        g_pass++;
    else
        g_fail++;
    fflush(stdout);
}

/* ---------------------------------------------------------------- random */

struct Rng {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    double uniform() { return (double)(next() >> 11) * 0x1.0p-53; } /* [0, 1) */
    double normal() {
        double u = 1.0 - uniform(), v = uniform();
        return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
    }
    int below(int n) { return (int)(uniform() * n); }
};

/* ---------------------------------------------------------------- 16-bit floats */

static float bf16_to_f32(uint16_t h) {
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static float f16_to_f32(uint16_t h) {
    int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v;
    if (e == 0)
        v = ldexpf((float)m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexpf((float)(1024 + m), e - 25);
    return sign ? -v : v;
}

/* A random 16-bit float with |v| in [2^-6, 2) or zero: every value is exact
 * in both formats' decoders above. */
static uint16_t rand_ck(Rng &g, ck_dtype dt) {
    uint64_t r = g.next();
    if ((r & 63) == 0)
        return 0;
    uint16_t sign = (uint16_t)((r >> 8) & 1) << 15;
    int e = (int)((r >> 9) % 7); /* 2^-6 .. 2^0 */
    if (dt == CK_BF16)
        return (uint16_t)(sign | (uint16_t)((121 + e) << 7) | (uint16_t)((r >> 20) & 127));
    return (uint16_t)(sign | (uint16_t)((9 + e) << 10) | (uint16_t)((r >> 20) & 1023));
}

static float ck_to_f32(uint16_t h, ck_dtype dt) { return dt == CK_BF16 ? bf16_to_f32(h) : f16_to_f32(h); }

/* ---------------------------------------------------------------- GEMV check */

static const uint32_t kSentinel = 0xABABABABu; /* cudaMemset byte 0xAB */

/* x_off / w_off: element offsets from an aligned allocation (1: misaligned). */
static void gemv_case(ck_dtype dt, int N, int K, int n, bool with_bias, int x_off, int w_off,
                      const std::vector<uint16_t> &W, Rng &g) {
    const int64_t ldx = (int64_t)K + (x_off ? 1 : 8);
    const int64_t ldy = (int64_t)N + 3;
    const int64_t guard = 64;
    std::vector<uint16_t> x((size_t)(n * ldx + x_off));
    for (auto &v : x)
        v = rand_ck(g, dt);
    std::vector<float> bias(N);
    for (auto &b : bias)
        b = (float)g.normal();
    uint16_t *d_x, *d_W;
    float *d_y, *d_b;
    CK(cudaMalloc(&d_x, x.size() * 2));
    CK(cudaMalloc(&d_W, ((size_t)N * K + w_off) * 2));
    CK(cudaMalloc(&d_b, (size_t)N * 4));
    CK(cudaMalloc(&d_y, (size_t)(n * ldy + guard) * 4));
    CK(cudaMemcpy(d_x, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_W + w_off, W.data(), (size_t)N * K * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_b, bias.data(), (size_t)N * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(d_y, 0xAB, (size_t)(n * ldy + guard) * 4));
    ck_gemv(0, d_y, false, ldy, d_x + x_off, ldx, d_W + w_off, with_bias ? d_b : nullptr, dt, n, N,
            K);
    CK(cudaGetLastError());
    std::vector<float> y((size_t)(n * ldy + guard));
    CK(cudaMemcpy(y.data(), d_y, y.size() * 4, cudaMemcpyDeviceToHost));

    /* rows checked: all when cheap, else the ends and a random sample */
    std::vector<int> rows;
    if ((int64_t)N * K * n <= 40000000) {
        for (int j = 0; j < N; j++)
            rows.push_back(j);
    } else {
        for (int j = 0; j < 8; j++) {
            rows.push_back(j);
            rows.push_back(N - 1 - j);
        }
        for (int j = 0; j < 256; j++)
            rows.push_back(g.below(N));
    }
    std::vector<float> xf((size_t)n * K);
    for (int q = 0; q < n; q++)
        for (int k = 0; k < K; k++)
            xf[(size_t)q * K + k] = ck_to_f32(x[(size_t)(x_off + q * ldx + k)], dt);
    double worst = 0.0, err2 = 0.0, ref2 = 0.0;
    bool finite = true;
    int worst_q = 0, worst_row = 0;
    std::vector<float> wf(K);
    for (int row : rows) {
        for (int k = 0; k < K; k++)
            wf[k] = ck_to_f32(W[(size_t)row * K + k], dt);
        for (int q = 0; q < n; q++) {
            double s = with_bias ? bias[row] : 0.0, a = with_bias ? fabs(bias[row]) : 0.0;
            for (int k = 0; k < K; k++) {
                double t = (double)xf[(size_t)q * K + k] * wf[k];
                s += t;
                a += fabs(t);
            }
            double got = y[(size_t)(q * ldy + row)];
            double bound = (K / 32.0 + 8.0) * 0x1.0p-24 * a + 1e-30;
            double e = fabs(got - s);
            if (!std::isfinite(got))
                finite = false;
            if (e / bound > worst) {
                worst = e / bound;
                worst_q = q;
                worst_row = row;
            }
            err2 += e * e;
            ref2 += s * s;
        }
    }
    /* gaps between rows and the guard after the last must be untouched */
    bool guards = true;
    for (int q = 0; q < n; q++)
        for (int64_t j = N; j < ldy; j++) {
            uint32_t b;
            memcpy(&b, &y[(size_t)(q * ldy + j)], 4);
            guards = guards && b == kSentinel;
        }
    for (int64_t j = 0; j < guard; j++) {
        uint32_t b;
        memcpy(&b, &y[(size_t)(n * ldy + j)], 4);
        guards = guards && b == kSentinel;
    }
    check(finite && worst <= 1.0 && guards,
          "gemv %s n=%d N=%d K=%d bias=%d x_off=%d w_off=%d  err/bound=%.3g (q=%d row=%d) "
          "nmse=%.2e guards=%s",
          dt == CK_BF16 ? "bf16" : "f16", n, N, K, (int)with_bias, x_off, w_off, worst, worst_q,
          worst_row, ref2 > 0 ? err2 / ref2 : 0.0, guards ? "ok" : "OVERWRITTEN");
    CK(cudaFree(d_x));
    CK(cudaFree(d_W));
    CK(cudaFree(d_b));
    CK(cudaFree(d_y));
}

static void gemv_checks(void) {
    printf("== gemv correctness\n");
    const int shapes[][2] = {{1, 8},       {37, 64},     {4096, 4096},
                             {11008, 4096}, {4096, 11008}, {32000, 4096}};
    const int ns[] = {1, 2, 3, 8};
    Rng g = {42};
    for (ck_dtype dt : {CK_BF16, CK_F16})
        for (const auto &sh : shapes) {
            const int N = sh[0], K = sh[1];
            if (g_small && (int64_t)N * K > 4096 * 4096)
                continue;
            std::vector<uint16_t> W((size_t)N * K);
            for (auto &v : W)
                v = rand_ck(g, dt);
            for (int n : ns)
                for (int b = 0; b < 2; b++)
                    gemv_case(dt, N, K, n, b != 0, 0, 0, W, g);
            if (N <= 4096 && K <= 4096) {
                /* misaligned x, then misaligned W: the 2-byte-load path */
                gemv_case(dt, N, K, 3, true, 1, 0, W, g);
                gemv_case(dt, N, K, 1, false, 0, 1, W, g);
                /* more rows than one launch takes: split into launches of 8 */
                gemv_case(dt, N, K, 9, true, 0, 0, W, g);
                gemv_case(dt, N, K, 16, false, 0, 0, W, g);
            }
        }
    /* beyond the contract (K % 8 != 0): the launcher falls back to 2-byte loads */
    const int odd[][2] = {{5, 37}, {33, 100}, {3, 1}};
    for (const auto &sh : odd) {
        std::vector<uint16_t> W((size_t)sh[0] * sh[1]);
        for (auto &v : W)
            v = rand_ck(g, CK_BF16);
        gemv_case(CK_BF16, sh[0], sh[1], 2, true, 0, 0, W, g);
    }
}

/* ---------------------------------------------------------------- GEMV timing */

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

/* N x K 16-bit weights in enough copies (>= 3, >= 192 MB in all) that L2
 * (50-60 MB) never holds the next one a timing loop reads; 0x3C3C is a
 * small normal value in both types. */
static std::vector<uint16_t *> weight_ring(int N, int K) {
    const size_t wbytes = (size_t)N * K * 2;
    std::vector<uint16_t *> ring(std::max<size_t>(3, (3 * ((size_t)64 << 20)) / wbytes + 1));
    for (auto &p : ring) {
        CK(cudaMalloc(&p, wbytes));
        CK(cudaMemset(p, 0x3C, wbytes));
    }
    return ring;
}

static void free_ring(std::vector<uint16_t *> &ring) {
    for (auto p : ring)
        CK(cudaFree(p));
    ring.clear();
}

__global__ void read_kernel(const uint4 *p, size_t n16, unsigned *sink) {
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16;
         i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = __ldcs(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u)
        *sink = acc; /* keeps the loads alive */
}

typedef void (*gemv_fn)(cudaStream_t, const GemvArgs &);

/* Median time (us) of one launch bracketed by events, and the per-launch
 * time of back-to-back launches; weights rotate through a weight_ring.
 * launch(stream, W) enqueues one
 * product of n rows with weights W. */
template <class Launch>
static void time_product(const char *what, Launch launch, int n, int N, int K,
                         const std::vector<uint16_t *> &Wbuf) {
    const int reps = 200;
    std::vector<cudaEvent_t> e0(reps), e1(reps);
    for (int i = 0; i < reps; i++) {
        CK(cudaEventCreate(&e0[i]));
        CK(cudaEventCreate(&e1[i]));
    }
    for (int i = 0; i < 10; i++) /* warm-up */
        launch(0, Wbuf[i % Wbuf.size()]);
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(e0[i]));
        launch(0, Wbuf[i % Wbuf.size()]);
        CK(cudaEventRecord(e1[i]));
    }
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    std::vector<double> single;
    for (int i = 0; i < reps; i++) {
        float ms;
        CK(cudaEventElapsedTime(&ms, e0[i], e1[i]));
        single.push_back(ms * 1000.0);
    }
    std::vector<double> stream;
    for (int rep = 0; rep < 5; rep++) {
        CK(cudaEventRecord(e0[rep]));
        for (int i = 0; i < 50; i++)
            launch(0, Wbuf[i % Wbuf.size()]);
        CK(cudaEventRecord(e1[rep]));
        CK(cudaEventSynchronize(e1[rep]));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0[rep], e1[rep]));
        stream.push_back(ms * 1000.0 / 50);
    }
    for (int i = 0; i < reps; i++) {
        CK(cudaEventDestroy(e0[i]));
        CK(cudaEventDestroy(e1[i]));
    }
    const double bytes = 2.0 * N * K + 2.0 * n * K + 4.0 * n * N;
    const double t1 = median(single), t2 = median(stream);
    printf("  %-22s n=%-2d N=%5d K=%5d  single %7.2f us %6.0f GB/s (%3.0f%% of 4.3T, %3.0f%% of "
           "4.57T)   back-to-back %7.2f us %6.0f GB/s\n",
           what, n, N, K, t1, bytes / t1 / 1e3, bytes / t1 / 1e3 / 43.0,
           bytes / t1 / 1e3 / 45.7, t2, bytes / t2 / 1e3);
    fflush(stdout);
}

static void time_gemv(const char *what, gemv_fn fn, int n, int N, int K,
                      const std::vector<uint16_t *> &Wbuf, const uint16_t *d_x, float *d_y) {
    time_product(
        what,
        [&](cudaStream_t s, const uint16_t *W) {
            fn(s, GemvArgs{d_y, false, (int64_t)N, d_x, (int64_t)K, W, nullptr, N, K});
        },
        n, N, K, Wbuf);
}

template <int NX>
static void prod_bf16(cudaStream_t s, const GemvArgs &a) {
    gemv_launch_n<Bf16Tag, NX, true>(s, a);
}

template <int NX>
static void prod_f16(cudaStream_t s, const GemvArgs &a) {
    gemv_launch_n<F16Tag, NX, true>(s, a);
}

static void gemv_timing(void) {
    printf("== gemv timing (bf16 unless noted; GB/s counts W + x + y bytes)\n");
    /* reference points: a streaming read and a device copy of 1 GiB */
    {
        const size_t bytes = (size_t)1 << 30;
        void *a, *b;
        unsigned *sink;
        CK(cudaMalloc(&a, bytes));
        CK(cudaMalloc(&b, bytes));
        CK(cudaMalloc(&sink, 4));
        CK(cudaMemset(a, 1, bytes));
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        std::vector<double> tr, tc;
        for (int i = 0; i < 10; i++) {
            float ms;
            CK(cudaEventRecord(e0));
            read_kernel<<<132 * 8, 256>>>((const uint4 *)a, bytes / 16, sink);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&ms, e0, e1));
            tr.push_back(ms);
            CK(cudaEventRecord(e0));
            CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&ms, e0, e1));
            tc.push_back(ms);
        }
        CK(cudaGetLastError());
        printf("  streaming read 1 GiB: %.0f GB/s   device copy 1 GiB: %.0f GB/s (read + write)\n",
               bytes / median(tr) / 1e6, 2.0 * bytes / median(tc) / 1e6);
        CK(cudaEventDestroy(e0));
        CK(cudaEventDestroy(e1));
        CK(cudaFree(a));
        CK(cudaFree(b));
        CK(cudaFree(sink));
    }
    /* Llama-2-7B's: o, q/k/v and gate/up fused, down, the head */
    const int shapes[][2] = {{4096, 4096}, {12288, 4096}, {22016, 4096}, {4096, 11008},
                             {32000, 4096}};
    struct Variant {
        const char *name;
        gemv_fn fn;
    } variants[] = {
        {"rpw=1 u=4", gemv_launch_cfg<Bf16Tag, 1, 1, 4, true>},
        {"rpw=1 u=8", gemv_launch_cfg<Bf16Tag, 1, 1, 8, true>},
        {"rpw=2 u=2 (prod)", gemv_launch_cfg<Bf16Tag, 1, 2, 2, true>},
        {"rpw=2 u=4", gemv_launch_cfg<Bf16Tag, 1, 2, 4, true>},
        {"rpw=2 u=8", gemv_launch_cfg<Bf16Tag, 1, 2, 8, true>},
        {"rpw=4 u=2", gemv_launch_cfg<Bf16Tag, 1, 4, 2, true>},
        {"rpw=4 u=4", gemv_launch_cfg<Bf16Tag, 1, 4, 4, true>},
    };
    for (const auto &sh : shapes) {
        const int N = sh[0], K = sh[1];
        std::vector<uint16_t *> Wbuf = weight_ring(N, K);
        uint16_t *d_x;
        float *d_y;
        CK(cudaMalloc(&d_x, (size_t)8 * K * 2));
        CK(cudaMalloc(&d_y, (size_t)8 * N * 4));
        CK(cudaMemset(d_x, 0x3C, (size_t)8 * K * 2));
        for (const auto &v : variants)
            time_gemv(v.name, v.fn, 1, N, K, Wbuf, d_x, d_y);
        time_gemv("prod f16", prod_f16<1>, 1, N, K, Wbuf, d_x, d_y);
        time_gemv("prod", prod_bf16<2>, 2, N, K, Wbuf, d_x, d_y);
        time_gemv("prod", prod_bf16<4>, 4, N, K, Wbuf, d_x, d_y);
        time_gemv("prod", prod_bf16<8>, 8, N, K, Wbuf, d_x, d_y);
        free_ring(Wbuf);
        CK(cudaFree(d_x));
        CK(cudaFree(d_y));
    }
}

/* cuBLASLt on the products of a Llama-2-7B decode step of 16..128 rows
 * (q/k/v and gate/up fused): how near the weight stream it runs. */
static void batch_gemm_timing(void) {
    printf("== cuBLASLt on batched decode (bf16; GB/s counts W + x + y bytes)\n");
    const int shapes[][2] = {{4096, 4096}, {12288, 4096}, {22016, 4096}, {4096, 11008},
                             {32000, 4096}};
    const int max_n = 128;
    void *ws;
    const size_t ws_bytes = (size_t)32 << 20;
    CK(cudaMalloc(&ws, ws_bytes));
    cuda_gemm *lt = NULL;
    hr_error err = {};
    if (cuda_gemm_create(ws, ws_bytes, &lt, &err) != HR_OK) {
        check(false, "cuBLASLt: %s", err.msg);
        return;
    }
    for (const auto &sh : shapes) {
        const int N = sh[0], K = sh[1];
        std::vector<uint16_t *> Wbuf = weight_ring(N, K);
        uint16_t *d_x;
        float *d_y;
        CK(cudaMalloc(&d_x, (size_t)max_n * K * 2));
        CK(cudaMalloc(&d_y, (size_t)max_n * N * 4));
        CK(cudaMemset(d_x, 0x3C, (size_t)max_n * K * 2));
        for (int n : {16, 32, 64, 128})
            time_product(
                "cuBLASLt",
                [&](cudaStream_t s, const uint16_t *W) {
                    hr_error e = {};
                    if (cuda_gemm_run(lt, s, d_y, false, N, d_x, K, W, CK_BF16, n, N, K, &e) != HR_OK)
                        fprintf(stderr, "cuBLASLt: %s\n", e.msg);
                },
                n, N, K, Wbuf);
        free_ring(Wbuf);
        CK(cudaFree(d_x));
        CK(cudaFree(d_y));
    }
    cuda_gemm_free(lt);
    CK(cudaFree(ws));
}

/* ---------------------------------------------------------------- sampling: CPU reference */

struct Cfg {
    float temperature;
    int top_k;
    float top_p;
    float min_p;
};

/* Ids the CPU sampler may draw (engine/sampler.c order: temperature, top-k,
 * top-p, min-p), with slack for the GPU's f32 masses; strict: without slack. */
static void cpu_kept(const std::vector<float> &l, const Cfg &c, std::vector<char> &allowed,
                     std::vector<char> &strict) {
    const int V = (int)l.size();
    std::vector<float> z(V);
    std::vector<int> order(V);
    for (int i = 0; i < V; i++) {
        z[i] = l[i] / c.temperature;
        order[i] = i;
    }
    std::sort(order.begin(), order.end(), [&](int a, int b) {
        return z[a] != z[b] ? z[a] > z[b] : a < b;
    });
    int n = V;
    if (c.top_k > 0 && c.top_k < V)
        n = c.top_k;
    const double mx = z[order[0]];
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += exp((double)z[order[i]] - mx);
    int n_strict = n, n_slack = n;
    if (c.top_p < 1.0f) {
        double cum = 0.0;
        bool s_done = false;
        for (int i = 0; i < n; i++) {
            cum += exp((double)z[order[i]] - mx) / sum;
            if (!s_done && cum >= (double)c.top_p) {
                n_strict = i + 1;
                s_done = true;
            }
            if (cum >= (double)c.top_p + 1e-6) {
                n_slack = i + 1;
                break;
            }
        }
        if (!s_done)
            n_strict = n;
    }
    if (c.min_p > 0.0f) {
        const double cut = mx + log((double)c.min_p);
        const double cut_slack = cut - 1e-5 * (1.0 + fabs(cut));
        int k1 = 1, k2 = 1;
        while (k1 < n_strict && (double)z[order[k1]] >= cut)
            k1++;
        while (k2 < n_slack && (double)z[order[k2]] >= cut_slack)
            k2++;
        n_strict = k1;
        n_slack = k2;
    }
    allowed.assign(V, 0);
    strict.assign(V, 0);
    for (int i = 0; i < n_slack; i++)
        allowed[order[i]] = 1;
    for (int i = 0; i < n_strict; i++)
        strict[order[i]] = 1;
}

/* softmax over the strict kept set, the distribution the draw must follow */
static std::vector<double> cpu_probs(const std::vector<float> &l, const Cfg &c) {
    std::vector<char> allowed, strict;
    cpu_kept(l, c, allowed, strict);
    const int V = (int)l.size();
    double mx = -INFINITY, sum = 0.0;
    for (int i = 0; i < V; i++)
        if (strict[i])
            mx = std::max(mx, (double)(l[i] / c.temperature));
    std::vector<double> p(V, 0.0);
    for (int i = 0; i < V; i++)
        if (strict[i]) {
            p[i] = exp((double)(l[i] / c.temperature) - mx);
            sum += p[i];
        }
    for (auto &v : p)
        v /= sum;
    return p;
}

/* Runs ck_sample on n rows (row r = logits of rows[r % rows.size()]). */
static std::vector<int32_t> run_sample(const std::vector<std::vector<float>> &rows, int n,
                                       const std::vector<be_sample> &params) {
    const int V = (int)rows[0].size();
    const int64_t ld = (int64_t)V + 3;
    std::vector<float> h((size_t)(n * ld), 0.0f);
    for (int r = 0; r < n; r++)
        memcpy(&h[(size_t)(r * ld)], rows[r % rows.size()].data(), (size_t)V * 4);
    float *d_l;
    int32_t *d_t;
    be_sample *d_p;
    CK(cudaMalloc(&d_l, h.size() * 4));
    CK(cudaMalloc(&d_t, (size_t)(n + 16) * 4));
    CK(cudaMalloc(&d_p, (size_t)n * sizeof(be_sample)));
    CK(cudaMemcpy(d_l, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_p, params.data(), (size_t)n * sizeof(be_sample),
                  cudaMemcpyHostToDevice));
    CK(cudaMemset(d_t, 0xAB, (size_t)(n + 16) * 4));
    ck_sample(0, d_t, d_l, ld, n, V, d_p, nullptr, nullptr);
    CK(cudaGetLastError());
    std::vector<int32_t> t((size_t)n + 16);
    std::vector<float> after(h.size());
    CK(cudaMemcpy(t.data(), d_t, t.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(after.data(), d_l, h.size() * 4, cudaMemcpyDeviceToHost));
    bool guard = true;
    for (int i = n; i < n + 16; i++)
        guard = guard && (uint32_t)t[i] == kSentinel;
    bool same = memcmp(after.data(), h.data(), h.size() * 4) == 0;
    if (!guard || !same)
        check(false, "sample V=%d n=%d: %s", V, n,
              !guard ? "wrote past tokens[n-1]" : "modified the logits");
    CK(cudaFree(d_l));
    CK(cudaFree(d_t));
    CK(cudaFree(d_p));
    t.resize(n);
    return t;
}

static be_sample make_params(const Cfg &c, uint64_t seed, uint64_t step) {
    be_sample p;
    p.temperature = c.temperature;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    p.seed = seed;
    p.step = step;
    return p;
}

enum Dist { DIST_NORMAL, DIST_PEAKED, DIST_TIES, DIST_FLAT, DIST_MASKED, DIST_COUNT };
static const char *dist_name[] = {"normal", "peaked", "ties", "flat", "masked"};

static std::vector<float> make_logits(int V, Dist d, Rng &g) {
    std::vector<float> l(V);
    for (int i = 0; i < V; i++) {
        switch (d) {
        case DIST_NORMAL: l[i] = (float)(2.0 * g.normal()); break;
        case DIST_PEAKED: l[i] = (float)g.normal(); break;
        case DIST_TIES: l[i] = 0.5f * (float)(int)(4.0 * g.normal()); break; /* many equal */
        case DIST_FLAT: l[i] = 1.25f; break;
        case DIST_MASKED: l[i] = g.below(10) == 0 ? (float)g.normal() : -INFINITY; break;
        default: break;
        }
    }
    if (d == DIST_PEAKED)
        for (int j = 0; j < 5 && j < V; j++)
            l[g.below(V)] = 8.0f + (float)j;
    if (d == DIST_MASKED)
        l[g.below(V)] = 3.0f; /* at least one finite logit */
    return l;
}

static int cpu_argmax(const std::vector<float> &l) {
    int best = 0;
    for (int i = 1; i < (int)l.size(); i++)
        if (l[i] > l[best])
            best = i;
    return best;
}

/* ---------------------------------------------------------------- sampling checks */

static void greedy_checks(void) {
    printf("== sampling: greedy and top_k = 1\n");
    Rng g = {7};
    const int Vs[] = {1, 7, 1000, 32000, 128256};
    for (int V : Vs) {
        if (g_small && V > 40000)
            continue;
        std::vector<std::vector<float>> rows;
        for (int r = 0; r < 16; r++) {
            std::vector<float> l = make_logits(V, (Dist)(r % DIST_COUNT), g);
            if (r % 3 == 1) {
                /* ties of the maximum at random places */
                float mx = *std::max_element(l.begin(), l.end());
                for (int j = 0; j < 3; j++)
                    l[g.below(V)] = mx;
            }
            rows.push_back(l);
        }
        const Cfg greedy_cfgs[] = {{0.0f, 0, 1.0f, 0.0f},  {-1.0f, 40, 0.9f, 0.1f},
                                   {0.7f, 1, 1.0f, 0.0f},  {1.3f, 1, 0.5f, 0.2f}};
        for (const Cfg &c : greedy_cfgs) {
            std::vector<be_sample> params;
            for (int r = 0; r < 16; r++)
                params.push_back(make_params(c, 1000 + r, r));
            std::vector<int32_t> t = run_sample(rows, 16, params);
            int bad = 0, first_bad = -1;
            for (int r = 0; r < 16; r++) {
                /* top_k = 1 ranks l / T; the same as l for these logits */
                if (t[r] != cpu_argmax(rows[r])) {
                    bad++;
                    if (first_bad < 0)
                        first_bad = r;
                }
            }
            check(bad == 0, "greedy V=%d T=%.1f top_k=%d: %d/16 rows differ from the CPU argmax%s",
                  V, c.temperature, c.top_k, bad,
                  first_bad >= 0 ? " (see the first failing row below)" : "");
            if (first_bad >= 0)
                printf("        row %d (%s): gpu %d cpu %d\n", first_bad,
                       dist_name[first_bad % DIST_COUNT], t[first_bad], cpu_argmax(rows[first_bad]));
        }
    }
}

static void kept_set_checks(void) {
    printf("== sampling: drawn tokens lie in the CPU kept set\n");
    const Cfg cfgs[] = {
        {1.0f, 0, 1.0f, 0.0f},    {0.7f, 40, 1.0f, 0.0f},    {1.0f, 0, 0.9f, 0.0f},
        {1.3f, 0, 0.5f, 0.0f},    {1.0f, 50, 0.95f, 0.0f},   {1.0f, 0, 1.0f, 0.1f},
        {0.8f, 40, 0.9f, 0.05f},  {1.0f, 3000, 1.0f, 0.0f},  {1.0f, 3000, 0.99f, 0.0f},
        {2.0f, 0, 0.999f, 0.0f},  {1.0f, 5, 0.0f, 0.0f},     {1.0f, 0, 1.0f, 1.0f},
        {1.0f, 100000, 0.9f, 0.0f}, {0.5f, 7, 0.8f, 0.3f},   {5.0f, 0, 0.3f, 0.0f},
    };
    const int Vs[] = {50, 1000, 32000, 128256};
    const int n = 64;
    Rng g = {99};
    for (int V : Vs) {
        if (g_small && V > 40000)
            continue;
        for (int d = 0; d < DIST_COUNT; d++) {
            std::vector<std::vector<float>> rows = {make_logits(V, (Dist)d, g)};
            for (const Cfg &c : cfgs) {
                std::vector<char> allowed, strict;
                cpu_kept(rows[0], c, allowed, strict);
                std::vector<be_sample> params;
                for (int r = 0; r < n; r++)
                    params.push_back(make_params(c, 77 + r, 3 * r));
                std::vector<int32_t> t = run_sample(rows, n, params);
                int bad = 0, boundary = 0, first_bad = -1;
                for (int r = 0; r < n; r++) {
                    const bool in = t[r] >= 0 && t[r] < V && allowed[t[r]];
                    if (!in) {
                        bad++;
                        if (first_bad < 0)
                            first_bad = r;
                    } else if (!strict[t[r]]) {
                        boundary++;
                    }
                }
                int n_strict = 0;
                for (char s : strict)
                    n_strict += s;
                check(bad == 0,
                      "kept V=%6d %-6s T=%.1f k=%6d p=%.3f min_p=%.2f: kept %6d, %d/%d outside%s",
                      V, dist_name[d], c.temperature, c.top_k, c.top_p, c.min_p, n_strict, bad, n,
                      boundary ? " (boundary hits within slack)" : "");
                if (first_bad >= 0)
                    printf("        row %d: token %d logit %g\n", first_bad, t[first_bad],
                           t[first_bad] >= 0 && t[first_bad] < V ? rows[0][t[first_bad]] : NAN);
            }
        }
    }
    /* flat rows: every kept set is the lowest ids, exactly */
    for (int V : {1000, 5000}) {
        std::vector<std::vector<float>> rows = {std::vector<float>(V, 0.5f)};
        for (int k : {1, 2, 17, 999, 2049, 4000}) {
            if (k >= V)
                continue;
            std::vector<be_sample> params;
            for (int r = 0; r < n; r++)
                params.push_back(make_params({1.0f, k, 1.0f, 0.0f}, 5 + r, r));
            std::vector<int32_t> t = run_sample(rows, n, params);
            int bad = 0;
            for (int r = 0; r < n; r++)
                bad += t[r] < 0 || t[r] >= k;
            check(bad == 0, "flat V=%d top_k=%d: %d/%d tokens >= k", V, k, bad, n);
        }
    }
}

/* Frequencies of n_draw draws against the kept softmax. Tokens are pooled,
 * most probable first, into groups expected at least 25 times (a normal
 * approximation needs that much; a token expected 0.05 times and drawn 3
 * times is not a 5-sigma event), and every group must lie within 5 sigma. */
static void frequency_check(int V, const Cfg &c, int n_draw, Rng &g) {
    std::vector<float> l(V);
    for (auto &v : l)
        v = (float)(1.5 * g.normal());
    std::vector<double> p = cpu_probs(l, c);
    std::vector<be_sample> params;
    for (int r = 0; r < n_draw; r++)
        params.push_back(make_params(c, 12345, (uint64_t)r));
    std::vector<int32_t> t = run_sample({l}, n_draw, params);
    std::vector<int> cnt(V, 0), ids;
    int outside = 0;
    for (int32_t x : t) {
        if (x < 0 || x >= V || p[x] == 0.0)
            outside++;
        else
            cnt[x]++;
    }
    for (int i = 0; i < V; i++)
        if (p[i] > 0.0)
            ids.push_back(i);
    std::sort(ids.begin(), ids.end(), [&](int a, int b) { return p[a] > p[b]; });
    std::vector<double> gp;
    std::vector<int> gc, gfirst;
    for (size_t j = 0; j < ids.size(); j++) {
        if (gp.empty() || n_draw * gp.back() >= 25.0) {
            gp.push_back(0.0);
            gc.push_back(0);
            gfirst.push_back(ids[j]);
        }
        gp.back() += p[ids[j]];
        gc.back() += cnt[ids[j]];
    }
    if (gp.size() > 1 && n_draw * gp.back() < 25.0) { /* fold a small last group */
        gp[gp.size() - 2] += gp.back();
        gc[gc.size() - 2] += gc.back();
        gp.pop_back();
        gc.pop_back();
    }
    double worst = 0.0, chi2 = 0.0;
    int worst_g = 0;
    for (size_t k = 0; k < gp.size(); k++) {
        const double e = n_draw * gp[k], sd = sqrt(e * (1.0 - gp[k]));
        const double z = (fabs(gc[k] - e) - 1.0) / std::max(sd, 1e-9);
        if (z > worst) {
            worst = z;
            worst_g = (int)k;
        }
        chi2 += (gc[k] - e) * (gc[k] - e) / e;
    }
    check(outside == 0 && worst <= 5.0,
          "freq V=%d T=%.1f k=%d p=%.2f min_p=%.2f draws=%d: %d groups, worst %.2f sigma "
          "(group of id %d: %d vs %.1f), chi2 %.1f on %d dof, %d outside",
          V, c.temperature, c.top_k, c.top_p, c.min_p, n_draw, (int)gp.size(), worst,
          gfirst[worst_g], gc[worst_g], n_draw * gp[worst_g], chi2, (int)gp.size() - 1, outside);
}

static void distribution_checks(void) {
    printf("== sampling: draw frequencies\n");
    Rng g = {2024};
    frequency_check(16, {1.0f, 0, 1.0f, 0.0f}, 20000, g);   /* draw pass */
    frequency_check(16, {0.8f, 6, 0.9f, 0.0f}, 20000, g);   /* sorted prefix draw */
    frequency_check(16, {1.0f, 0, 1.0f, 0.2f}, 20000, g);   /* min-p in the draw pass */
    frequency_check(40, {1.0f, 0, 0.8f, 0.0f}, 20000, g);   /* top-p alone */
    frequency_check(3000, {1.0f, 0, 1.0f, 0.0f}, 20000, g); /* several elements per thread */

    /* steps: distinct draws; the same (seed, step) repeats */
    std::vector<float> l(1000);
    for (auto &v : l)
        v = (float)(0.5 * g.normal());
    std::vector<be_sample> params;
    for (int r = 0; r < 256; r++)
        params.push_back(make_params({1.0f, 0, 1.0f, 0.0f}, 31337, (uint64_t)r));
    std::vector<int32_t> a = run_sample({l}, 256, params), b = run_sample({l}, 256, params);
    std::vector<int32_t> u = a;
    std::sort(u.begin(), u.end());
    const int distinct = (int)(std::unique(u.begin(), u.end()) - u.begin());
    check(distinct >= 150, "steps 0..255 of one seed: %d distinct tokens of 1000 (expect ~220)",
          distinct);
    check(a == b, "the same (seed, step) gives the same token");
    for (auto &p : params)
        p.seed = 31338;
    std::vector<int32_t> c2 = run_sample({l}, 256, params);
    int same = 0;
    for (int r = 0; r < 256; r++)
        same += a[r] == c2[r];
    check(same < 32, "another seed: %d/256 draws coincide (expect ~1)", same);

    /* two live tokens, one far along its thread's elements: the draw pass's
     * walk must reach it */
    std::vector<float> two(70000, -INFINITY);
    two[5] = 1.0f;
    two[69999] = 1.0f;
    params.clear();
    for (int r = 0; r < 400; r++)
        params.push_back(make_params({1.0f, 0, 1.0f, 0.0f}, 1, (uint64_t)r));
    std::vector<int32_t> w = run_sample({two}, 400, params);
    int n5 = 0, n_last = 0;
    for (int32_t x : w) {
        n5 += x == 5;
        n_last += x == 69999;
    }
    check(n5 + n_last == 400 && n5 > 140 && n_last > 140,
          "two equal live tokens 5 and 69999: drawn %d and %d times of 400", n5, n_last);
}

/* ---------------------------------------------------------------- graph capture */

static void graph_check(void) {
    printf("== graph capture\n");
    const int N = 1000, K = 512, n = 2, V = 1000;
    Rng g = {5};
    std::vector<uint16_t> W((size_t)N * K), x((size_t)n * K);
    for (auto &v : W)
        v = rand_ck(g, CK_BF16);
    for (auto &v : x)
        v = rand_ck(g, CK_BF16);
    std::vector<be_sample> params = {make_params({0.9f, 40, 0.9f, 0.0f}, 1, 2),
                                            make_params({1.0f, 0, 1.0f, 0.0f}, 3, 4)};
    uint16_t *d_W, *d_x;
    float *d_y;
    int32_t *d_t;
    be_sample *d_p;
    CK(cudaMalloc(&d_W, W.size() * 2));
    CK(cudaMalloc(&d_x, x.size() * 2));
    CK(cudaMalloc(&d_y, (size_t)n * N * 4));
    CK(cudaMalloc(&d_t, (size_t)n * 4));
    CK(cudaMalloc(&d_p, params.size() * sizeof(be_sample)));
    CK(cudaMemcpy(d_W, W.data(), W.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_x, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_p, params.data(), params.size() * sizeof(be_sample),
                  cudaMemcpyHostToDevice));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    /* eager */
    ck_gemv(s, d_y, false, N, d_x, K, d_W, nullptr, CK_BF16, n, N, K);
    ck_sample(s, d_t, d_y, N, n, V, d_p, nullptr, nullptr);
    CK(cudaStreamSynchronize(s));
    CK(cudaGetLastError());
    std::vector<float> y1((size_t)n * N), y2((size_t)n * N);
    std::vector<int32_t> t1(n), t2(n);
    CK(cudaMemcpy(y1.data(), d_y, y1.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(t1.data(), d_t, (size_t)n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemset(d_y, 0, (size_t)n * N * 4));
    CK(cudaMemset(d_t, 0xff, (size_t)n * 4));
    /* captured */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    ck_gemv(s, d_y, false, N, d_x, K, d_W, nullptr, CK_BF16, n, N, K);
    ck_sample(s, d_t, d_y, N, n, V, d_p, nullptr, nullptr);
    CK(cudaStreamEndCapture(s, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaGetLastError());
    CK(cudaMemcpy(y2.data(), d_y, y2.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(t2.data(), d_t, (size_t)n * 4, cudaMemcpyDeviceToHost));
    check(memcmp(y1.data(), y2.data(), y1.size() * 4) == 0 && t1 == t2,
          "gemv + sample captured in a graph reproduce the eager run (tokens %d %d)", t2[0],
          t2[1]);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaStreamDestroy(s));
    CK(cudaFree(d_W));
    CK(cudaFree(d_x));
    CK(cudaFree(d_y));
    CK(cudaFree(d_t));
    CK(cudaFree(d_p));
}

/* ---------------------------------------------------------------- sampling timing */

static void sample_timing(void) {
    printf("== sampling timing (one launch, median of 100; us)\n");
    const Cfg cfgs[] = {{0.0f, 0, 1.0f, 0.0f},   {1.0f, 0, 1.0f, 0.0f},  {1.0f, 40, 1.0f, 0.0f},
                        {1.0f, 0, 0.9f, 0.0f},   {1.0f, 40, 0.95f, 0.0f}, {1.0f, 0, 1.0f, 0.05f},
                        {1.5f, 0, 0.999f, 0.0f}, {1.0f, 5000, 1.0f, 0.0f}};
    Rng g = {11};
    for (int V : {32000, 128256}) {
        for (int n : {1, 8}) {
            std::vector<float> h((size_t)n * V);
            for (auto &v : h)
                v = (float)(2.5 * g.normal());
            for (int r = 0; r < n; r++)
                for (int j = 0; j < 10; j++)
                    h[(size_t)r * V + g.below(V)] = 12.0f + (float)j;
            float *d_l;
            int32_t *d_t;
            be_sample *d_p;
            CK(cudaMalloc(&d_l, h.size() * 4));
            CK(cudaMalloc(&d_t, (size_t)n * 4));
            CK(cudaMalloc(&d_p, (size_t)n * sizeof(be_sample)));
            CK(cudaMemcpy(d_l, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
            printf("  V=%6d n=%d:", V, n);
            for (const Cfg &c : cfgs) {
                std::vector<be_sample> params;
                for (int r = 0; r < n; r++)
                    params.push_back(make_params(c, 9, (uint64_t)r));
                CK(cudaMemcpy(d_p, params.data(), params.size() * sizeof(be_sample),
                              cudaMemcpyHostToDevice));
                cudaEvent_t e0, e1;
                CK(cudaEventCreate(&e0));
                CK(cudaEventCreate(&e1));
                std::vector<double> ts;
                for (int i = 0; i < 110; i++) {
                    CK(cudaEventRecord(e0));
                    ck_sample(0, d_t, d_l, V, n, V, d_p, nullptr, nullptr);
                    CK(cudaEventRecord(e1));
                    CK(cudaEventSynchronize(e1));
                    float ms;
                    CK(cudaEventElapsedTime(&ms, e0, e1));
                    if (i >= 10)
                        ts.push_back(ms * 1000.0);
                }
                CK(cudaGetLastError());
                printf("  [T=%.1f k=%d p=%.3g mp=%.2g] %.1f", c.temperature, c.top_k, c.top_p,
                       c.min_p, median(ts));
                CK(cudaEventDestroy(e0));
                CK(cudaEventDestroy(e1));
            }
            printf("\n");
            CK(cudaFree(d_l));
            CK(cudaFree(d_t));
            CK(cudaFree(d_p));
        }
    }
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--small"))
            g_small = true;
        else if (!strcmp(argv[i], "--no-timing"))
            g_timing = false;
        else {
            fprintf(stderr, "usage: %s [--small] [--no-timing]\n", argv[0]);
            return 2;
        }
    }
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("SKIP: no CUDA device\n");
        return 0;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    gemv_checks();
    greedy_checks();
    kept_set_checks();
    distribution_checks();
    graph_check();
    if (g_timing) {
        gemv_timing();
        batch_gemm_timing();
        sample_timing();
    }
    printf("gemv_sample_check: %d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
