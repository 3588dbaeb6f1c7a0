/*
 * packed_check.cu — device check and timing of the kernels on packed
 * quantized weights (kernels_packed.h: gemv_packed.cu, dequant_packed.cu,
 * gemm_packed.cu) against host references. A standalone program: it
 * #includes the three .cu files (one translation unit, never a copy) so it
 * can also time GEMV and tensor-core configurations that the launchers do
 * not pick; quant/, packed.c and the rest come from the library.
 *
 *   packed_check [--small] [--no-timing] [--mma-timing] [--host]
 *
 * --small skips the 32000-row matrices; --no-timing skips the benchmarks;
 * --host runs no device code: it replays the GEMV's per-chunk arithmetic
 * and the dequantizer's element decoding on the host, lane by lane, against
 * the same references (checks the kernels' indexing on a machine without a
 * GPU). Without a device (and without --host): "SKIP: no CUDA device",
 * exit 0. Last line: "packed_check: N passed, M failed"; exit 1 on any
 * failure.
 *
 * Weights: each packed type, from normal values (with zero, constant and
 * outlier blocks) quantized by quant_quantize_row and split by
 * packed_split_rows, and from random planes (random codes, high bits and
 * 6-/8-bit scales, random finite f16 scales), which reach bit patterns a
 * quantizer never writes. The reference of every element is
 * packed_dequantize_row (itself checked against quant_dequantize_row).
 *
 * Checks:
 *   dequant  every element bit-exact to the reference rounded once to ck
 *            (host RNE), rows [0, N) and an odd sub-range, 16-byte and
 *            misaligned destinations, row padding untouched
 *   embed    rows of tokens (repeats, both ends, one id out of range, which
 *            reads row N - 1), f32 bit-exact
 *   xq       ck_quantize_x codes, d and sd equal to the host rule (the CPU's
 *            FAST rule, cpu/matmul.h) exactly, aligned and misaligned x
 *   gemv     n = 1..8 and 19 (three launches), y f32 and ck, with and
 *            without bias, against a double sum over the reference W times
 *            x^ = d q. Tolerance: the GPU sums f32 block products d_w d_x isum
 *            (+ m sd), a few roundings each, ~K/1024 + 5 adds a lane chain and
 *            5 shuffles: error <= ~20 2^-24 A, A = sum |W x^| + 2 sum_b |m_b|
 *            sum_b |x^| (the min terms cancel against the code terms) +
 *            |bias|. The check allows 1e-5 A (8x margin), plus half an ulp
 *            of ck (2^-8 bf16, 2^-11 f16 relative) for a ck y.
 *   mma      ck_gemm_packed, n = 9, 16, 17, 40, 64 and 70 (two launches),
 *            16-byte aligned and misaligned x, y f32 and ck, with and
 *            without bias, against a double sum over the reference W
 *            rounded to ck times x. Tolerance 1e-4 A (A = sum |W x| +
 *            |bias|: the tensor cores' f32 sums, K / 256 chunk partials a
 *            warp, 8 warps added in order), plus half an ulp of a ck y.
 *   An f16 y whose true value lies past f16's range must be the infinity
 *   of its sign (random planes reach such sums).
 *
 * Timing (H200: nominal 4.5 TB/s read; the measured streaming read is
 * printed beside it): GB/s = packed bytes of W / time, W rotating through
 * copies of >= 400 MB in all so L2 never holds the next one. "single": the
 * median of launches bracketed by events one at a time (launch ramp and
 * drain included); "b2b": back-to-back launches (what a decode step sees,
 * programmatic dependent launch overlapping each ramp with the previous
 * tail).
 */
#include "backend/cuda/dequant_packed.cu"
#include "backend/cuda/gemm_packed.cu"
#include "backend/cuda/gemv_packed.cu"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {
#include "quant/quant.h"
#include "util/dtype.h"
}
#include "util/fp16.h"

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
static bool g_small, g_timing = true, g_host, g_mma_only;

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

/* ---------------------------------------------------------------- types */

struct TypeInfo {
    packed_type t;
    hr_dtype dtype;
};
static const TypeInfo kTypes[] = {
    {PACKED_Q8_0, HR_DTYPE_Q8_0}, {PACKED_Q4_0, HR_DTYPE_Q4_0}, {PACKED_Q4_1, HR_DTYPE_Q4_1},
    {PACKED_Q5_0, HR_DTYPE_Q5_0}, {PACKED_Q5_1, HR_DTYPE_Q5_1}, {PACKED_Q4_K, HR_DTYPE_Q4_K},
    {PACKED_Q5_K, HR_DTYPE_Q5_K}, {PACKED_Q6_K, HR_DTYPE_Q6_K}, {PACKED_NF4, HR_DTYPE_NF4},
    {PACKED_FP4, HR_DTYPE_FP4},
};

static const char *dt_name(ck_dtype dt) { return dt == CK_BF16 ? "bf16" : "f16"; }
static uint16_t to_ck(float f, ck_dtype dt) {
    return dt == CK_BF16 ? hr_f32_to_bf16(f) : hr_f32_to_f16(f);
}
static float from_ck(uint16_t h, ck_dtype dt) {
    return dt == CK_BF16 ? hr_bf16_to_f32(h) : hr_f16_to_f32(h);
}
static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* a random finite f16 of magnitude 2^-6 .. 2^2 */
static uint16_t rand_f16(Rng &g) {
    uint64_t r = g.next();
    return (uint16_t)(((r & 1) << 15) | ((9 + (r >> 1) % 8) << 10) | ((r >> 8) & 1023));
}

/* ---------------------------------------------------------------- host matrices */

struct HostPacked {
    packed_type t;
    int64_t N, K;
    std::vector<uint8_t> plane[PACKED_PLANES];
    std::vector<float> deq; /* (N, K): packed_dequantize_row */
    packed_matrix view() const {
        packed_matrix m;
        m.type = t;
        m.N = N;
        m.K = K;
        for (int i = 0; i < PACKED_PLANES; i++) {
            m.plane[i] = plane[i].empty() ? nullptr : plane[i].data();
            m.row_bytes[i] = packed_row_bytes(t, i, K);
        }
        return m;
    }
};

static void alloc_planes(HostPacked &h) {
    for (int i = 0; i < PACKED_PLANES; i++)
        h.plane[i].assign((size_t)(packed_row_bytes(h.t, i, h.K) * h.N), 0);
}

static void fill_deq(HostPacked &h) {
    h.deq.resize((size_t)(h.N * h.K));
    const packed_matrix m = h.view();
    for (int64_t r = 0; r < h.N; r++)
        packed_dequantize_row(&m, r, h.deq.data() + r * h.K);
}

/* Normal values per row scale, with patterned blocks of 32: all zero,
 * constant, one outlier; quantized by the reference and split. Returns
 * whether packed_dequantize_row equals quant_dequantize_row of the blocks. */
static bool make_quantized(HostPacked &h, const TypeInfo &ti, int64_t N, int64_t K, Rng &g) {
    h.t = ti.t;
    h.N = N;
    h.K = K;
    const int64_t row_bytes =
        (int64_t)hr_dtype_table[ti.dtype].block_bytes * K / hr_dtype_table[ti.dtype].block_elems;
    std::vector<uint8_t> blocks((size_t)(row_bytes * N));
    std::vector<float> row((size_t)K);
    for (int64_t r = 0; r < N; r++) {
        const double scale = 0.02 * (1.0 + (double)(r % 5));
        for (int64_t b = 0; b < K / 32; b++) {
            const int pattern = (int)((r * 7 + b) % 13);
            for (int i = 0; i < 32; i++) {
                float v = (float)(scale * g.normal());
                if (pattern == 0)
                    v = 0.0f;
                else if (pattern == 1)
                    v = (float)scale;
                else if (pattern == 2 && i == 5)
                    v = (float)(30.0 * scale);
                row[(size_t)(b * 32 + i)] = v;
            }
        }
        quant_quantize_row(ti.dtype, row.data(), blocks.data() + r * row_bytes, K);
    }
    alloc_planes(h);
    uint8_t *dst[PACKED_PLANES];
    for (int i = 0; i < PACKED_PLANES; i++)
        dst[i] = h.plane[i].empty() ? nullptr : h.plane[i].data();
    packed_split_rows(ti.t, blocks.data(), N, K, dst);
    fill_deq(h);
    for (int64_t r = 0; r < N; r++) {
        quant_dequantize_row(ti.dtype, blocks.data() + r * row_bytes, row.data(), K);
        if (memcmp(row.data(), h.deq.data() + r * K, (size_t)K * 4) != 0)
            return false;
    }
    return true;
}

/* Random planes; every f16 field a random finite value. */
static void make_random(HostPacked &h, packed_type t, int64_t N, int64_t K, Rng &g) {
    h.t = t;
    h.N = N;
    h.K = K;
    alloc_planes(h);
    for (auto &p : h.plane)
        for (size_t i = 0; i + 8 <= p.size(); i += 8) {
            uint64_t r = g.next();
            memcpy(&p[i], &r, 8);
        }
    auto put = [&](std::vector<uint8_t> &p, size_t at) {
        uint16_t v = rand_f16(g);
        memcpy(&p[at], &v, 2);
    };
    std::vector<uint8_t> &s = h.plane[PACKED_PLANE_S];
    switch (t) {
    case PACKED_Q8_0:
    case PACKED_Q4_0:
    case PACKED_Q5_0:
    case PACKED_Q4_1:
    case PACKED_Q5_1:
    case PACKED_NF4:
    case PACKED_FP4: /* d, or d and m, or the absmax: all f16 */
        for (size_t i = 0; i < s.size(); i += 2)
            put(s, i);
        break;
    case PACKED_Q4_K:
    case PACKED_Q5_K: /* d, dmin, then 12 scale bytes (any bits) */
        for (size_t i = 0; i < s.size(); i += 16) {
            put(s, i);
            put(s, i + 2);
        }
        break;
    case PACKED_Q6_K: /* int8 scales (any), f16 d in its own plane */
        for (size_t i = 0; i < h.plane[PACKED_PLANE_D].size(); i += 2)
            put(h.plane[PACKED_PLANE_D], i);
        break;
    default: break;
    }
    fill_deq(h);
}

/* |m| of the min term over activation block b (32 elements) of row r:
 * Q4_1/Q5_1's m, Q4_K/Q5_K's dmin mn; 0 for the types without one */
static double block_min_abs(const HostPacked &h, int64_t r, int64_t b) {
    const uint8_t *s = h.plane[PACKED_PLANE_S].data() + r * packed_row_bytes(h.t, 2, h.K);
    uint16_t u;
    if (h.t == PACKED_Q4_1 || h.t == PACKED_Q5_1) {
        memcpy(&u, s + 4 * b + 2, 2);
        return fabs((double)hr_f16_to_f32(u));
    }
    if (h.t == PACKED_Q4_K || h.t == PACKED_Q5_K) {
        const uint8_t *e = s + 16 * (b / 8);
        uint32_t w[3];
        memcpy(&u, e + 2, 2);
        memcpy(w, e + 4, 12);
        int sc, mn;
        pk_k4_scale_min(w[0], w[1], w[2], (int)(b % 8), sc, mn);
        return fabs((double)hr_f16_to_f32(u) * mn);
    }
    return 0.0;
}

/* ---------------------------------------------------------------- device matrices */

struct DevPacked {
    uint8_t *mem = nullptr;
    size_t bytes = 0;
    packed_matrix m;
};

/* planes in one allocation, each at a multiple of PACKED_ALIGN, as the
 * backend lays them out (packed_bytes) */
static DevPacked dev_alloc(packed_type t, int64_t N, int64_t K) {
    DevPacked d;
    d.bytes = packed_bytes(t, N, K);
    CK(cudaMalloc(&d.mem, d.bytes));
    d.m.type = t;
    d.m.N = N;
    d.m.K = K;
    size_t off = 0;
    for (int i = 0; i < PACKED_PLANES; i++) {
        const int64_t rb = packed_row_bytes(t, i, K);
        d.m.row_bytes[i] = rb;
        d.m.plane[i] = rb ? d.mem + off : nullptr;
        off += ((size_t)(rb * N) + PACKED_ALIGN - 1) / PACKED_ALIGN * PACKED_ALIGN;
    }
    return d;
}

static DevPacked upload(const HostPacked &h) {
    DevPacked d = dev_alloc(h.t, h.N, h.K);
    for (int i = 0; i < PACKED_PLANES; i++)
        if (d.m.plane[i])
            CK(cudaMemcpy((void *)d.m.plane[i], h.plane[i].data(), h.plane[i].size(),
                          cudaMemcpyHostToDevice));
    return d;
}

static void dev_free(DevPacked &d) {
    CK(cudaFree(d.mem));
    d.mem = nullptr;
}

/* ---------------------------------------------------------------- activations */

struct HostXq {
    int n = 0, K = 0;
    std::vector<int8_t> codes; /* (n, K) */
    std::vector<float> d, sd;  /* (n, K/32) */
    /* the device layout (kernels_packed.h) */
    std::vector<uint8_t> bytes() const {
        std::vector<uint8_t> b(ck_xq_bytes(n, K), 0);
        memcpy(b.data(), codes.data(), codes.size());
        memcpy(b.data() + pk_xq_d_off(n, K), d.data(), d.size() * 4);
        memcpy(b.data() + pk_xq_sd_off(n, K), sd.data(), sd.size() * 4);
        return b;
    }
};

/* x (n, ldx) ck: normal values, block 1 of row 0 all zero, an outlier in
 * block 0 of the last row */
static std::vector<uint16_t> make_x(int n, int K, int64_t ldx, int64_t off, ck_dtype dt,
                                    Rng &g) {
    std::vector<uint16_t> x((size_t)(off + n * ldx), 0);
    for (int q = 0; q < n; q++)
        for (int k = 0; k < K; k++) {
            float v = (float)g.normal();
            if (q == 0 && k / 32 == 1)
                v = 0.0f;
            if (q == n - 1 && k == 3)
                v = 40.0f;
            x[(size_t)(off + q * ldx + k)] = to_ck(v, dt);
        }
    return x;
}

/* The CPU's FAST rule (cpu/matmul.c, cpu_mm_quantize_ref), and sd = d sum. */
static HostXq host_quantize(const std::vector<uint16_t> &x, int64_t off, int64_t ldx,
                            ck_dtype dt, int n, int K) {
    HostXq h;
    h.n = n;
    h.K = K;
    h.codes.resize((size_t)n * K);
    h.d.resize((size_t)n * (K / 32));
    h.sd.resize(h.d.size());
    for (int q = 0; q < n; q++)
        for (int b = 0; b < K / 32; b++) {
            float v[32], amax = 0.0f;
            for (int i = 0; i < 32; i++) {
                v[i] = from_ck(x[(size_t)(off + q * ldx + b * 32 + i)], dt);
                const float a = fabsf(v[i]);
                amax = a > amax ? a : amax;
            }
            const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
            int sum = 0;
            for (int i = 0; i < 32; i++) {
                const int c = (int)rintf(v[i] * id);
                h.codes[(size_t)q * K + b * 32 + i] = (int8_t)c;
                sum += c;
            }
            const float dv = amax / 127.0f;
            h.d[(size_t)q * (K / 32) + b] = dv;
            h.sd[(size_t)q * (K / 32) + b] = dv * (float)sum;
        }
    return h;
}

/* Element k of row r as the GEMV multiplies it: the reference's value,
 * but for NF4/FP4 the table value at 2^-14 (packed.cuh) times the absmax. */
static double gemv_weight(const HostPacked &h, int64_t r, int64_t k) {
    if (!pk_is_codebook(h.t))
        return (double)h.deq[(size_t)(r * h.K + k)];
    const uint8_t q = h.plane[PACKED_PLANE_Q][(size_t)(r * (h.K / 2) + 32 * (k / 64) + k % 32)];
    uint16_t d;
    memcpy(&d, &h.plane[PACKED_PLANE_S][(size_t)(r * (h.K / 32) + 2 * (k / 64))], 2);
    const int code = k % 64 >= 32 ? q >> 4 : q & 15;
    return pk_cb16(kPkCodebook[h.t == PACKED_FP4][code]) / (double)PK_CB_ONE *
           (double)hr_f16_to_f32(d);
}

/* the codebooks in packed.cuh against quant/'s: the f32 tables bit for bit,
 * the 16-bit ones as lrintf rounds (pk_cb16 rounds halves away from zero) */
static void check_codebooks() {
    int bad = 0;
    for (int t = 0; t < 2; t++) {
        const float *q = t ? quant_fp4_values : quant_nf4_values;
        for (int i = 0; i < 16; i++) {
            bad += f32_bits(kPkCodebook[t][i]) != f32_bits(q[i]);
            bad += pk_cb16(q[i]) != (int)lrintf(q[i] * PK_CB_ONE);
            const uint32_t lo = (pk_cb_word(t, i / 4) >> (8 * (i % 4))) & 0xffu;
            const uint32_t hi = (pk_cb_word(t, 4 + i / 4) >> (8 * (i % 4))) & 0xffu;
            bad += (int)(int16_t)(lo | hi << 8) != pk_cb16(q[i]);
        }
        for (uint32_t c = 0; c < 65536; c += 7) { /* four codes a word, through the lookup */
            const uint32_t codes = (c & 15) | ((c >> 4) & 15) << 8 | ((c >> 8) & 15) << 16 |
                                   ((c >> 12) & 15) << 24;
            uint32_t w01, w23;
            pk_cb_lookup4(t, codes, w01, w23);
            const uint32_t w[4] = {w01 & 0xffffu, w01 >> 16, w23 & 0xffffu, w23 >> 16};
            for (int j = 0; j < 4; j++)
                bad += (int)(int16_t)w[j] != pk_cb16(q[(codes >> (8 * j)) & 15]);
        }
    }
    check(bad == 0, "codebooks: packed.cuh's NF4/FP4 tables equal quant/'s (f32 bit for bit, "
                    "16-bit as lrintf), the four-code lookup too: %d differ",
          bad);
}

/* double reference of y (q, r) without bias, and its scale A (file comment) */
static void gemv_ref(const HostPacked &h, const HostXq &x, int64_t r, int q, double &ref,
                     double &A) {
    const int64_t K = h.K, nb = K / 32;
    ref = 0.0;
    A = 0.0;
    for (int64_t b = 0; b < nb; b++) {
        const double dx = x.d[(size_t)(q * nb + b)];
        double xs = 0.0;
        for (int i = 0; i < 32; i++) {
            const int64_t k = b * 32 + i;
            const double xh = dx * x.codes[(size_t)(q * K + k)];
            const double t = gemv_weight(h, r, k) * xh;
            ref += t;
            A += fabs(t);
            xs += fabs(xh);
        }
        A += 2.0 * block_min_abs(h, r, b) * xs;
    }
}

/* rows of an (N, .) output a check looks at: all when cheap, else both ends
 * and a random sample */
static std::vector<int64_t> check_rows(int64_t N, int64_t work, Rng &g) {
    std::vector<int64_t> rows;
    if (work <= 40000000) {
        for (int64_t j = 0; j < N; j++)
            rows.push_back(j);
    } else {
        for (int64_t j = 0; j < 8; j++) {
            rows.push_back(j);
            rows.push_back(N - 1 - j);
        }
        for (int j = 0; j < 256; j++)
            rows.push_back(g.below((int)N));
    }
    return rows;
}

/* ---------------------------------------------------------------- device checks */

static const uint32_t kSentinel = 0xABABABABu; /* cudaMemset byte 0xAB */

static void check_dequant(const HostPacked &h, const DevPacked &dw, ck_dtype dt, const char *tag) {
    const int64_t N = h.N, K = h.K;
    struct Range {
        int64_t r0, r1;
    } ranges[2] = {{0, N}, {N / 3, N - N / 4}};
    int64_t bad = 0, pad_bad = 0, checked = 0;
    char first[256] = "";
    for (int ri = 0; ri < 2; ri++) {
        const int64_t r0 = ranges[ri].r0, r1 = ranges[ri].r1, rows = r1 - r0;
        if (rows <= 0 || (ri == 1 && r0 == 0 && r1 == N))
            continue;
        for (int mis = 0; mis < 2; mis++) {
            const int64_t ld = mis ? K + 1 : K + 8, off = mis ? 1 : 0, guard = 64;
            const size_t elems = (size_t)(off + rows * ld + guard);
            uint16_t *d_dst;
            CK(cudaMalloc(&d_dst, elems * 2));
            CK(cudaMemset(d_dst, 0xAB, elems * 2));
            ck_dequant_packed(0, d_dst + off, ld, dt, &dw.m, r0, r1);
            CK(cudaGetLastError());
            std::vector<uint16_t> out(elems);
            CK(cudaMemcpy(out.data(), d_dst, elems * 2, cudaMemcpyDeviceToHost));
            CK(cudaFree(d_dst));
            for (int64_t i = 0; i < rows; i++) {
                for (int64_t k = 0; k < ld; k++) {
                    const uint16_t got = out[(size_t)(off + i * ld + k)];
                    if (k >= K) {
                        pad_bad += got != 0xABAB;
                        continue;
                    }
                    const float ref = h.deq[(size_t)((r0 + i) * K + k)];
                    const uint16_t want = to_ck(ref, dt);
                    checked++;
                    if (got != want && bad++ == 0)
                        snprintf(first, sizeof first,
                                 "first: rows [%lld,%lld) ld %lld row %lld col %lld: got 0x%04x "
                                 "want 0x%04x (f32 %.9g)",
                                 (long long)r0, (long long)r1, (long long)ld, (long long)(r0 + i),
                                 (long long)k, got, want, ref);
                }
            }
            if (off)
                pad_bad += out[0] != 0xABAB;
            for (size_t e = (size_t)(off + rows * ld); e < elems; e++)
                pad_bad += out[e] != 0xABAB;
        }
    }
    check(bad == 0 && pad_bad == 0,
          "dequant %s %s: %lld elements bit-exact to the reference rounded to ck, %lld differ, "
          "%lld padding/guard elements written %s",
          tag, dt_name(dt), (long long)checked, (long long)bad, (long long)pad_bad, first);
}

static void check_embed(const HostPacked &h, const DevPacked &dw, const char *tag, Rng &g) {
    const int64_t N = h.N, K = h.K;
    const int n = 6;
    const int32_t tok[n] = {0, (int32_t)(N - 1), (int32_t)(N / 2), 0, (int32_t)g.below((int)N),
                            (int32_t)(N + 5)}; /* the last is out of range: row N - 1 */
    const int64_t ldx = K + 4, guard = 16;
    int32_t *d_tok;
    float *d_x;
    CK(cudaMalloc(&d_tok, sizeof tok));
    CK(cudaMemcpy(d_tok, tok, sizeof tok, cudaMemcpyHostToDevice));
    const size_t elems = (size_t)(n * ldx + guard);
    CK(cudaMalloc(&d_x, elems * 4));
    CK(cudaMemset(d_x, 0xAB, elems * 4));
    ck_embed_packed(0, d_x, ldx, &dw.m, d_tok, n);
    CK(cudaGetLastError());
    std::vector<float> x(elems);
    CK(cudaMemcpy(x.data(), d_x, elems * 4, cudaMemcpyDeviceToHost));
    CK(cudaFree(d_x));
    CK(cudaFree(d_tok));
    int64_t bad = 0, pad_bad = 0;
    for (int i = 0; i < n; i++) {
        const int64_t r = tok[i] >= N ? N - 1 : tok[i];
        for (int64_t k = 0; k < ldx; k++) {
            const uint32_t got = f32_bits(x[(size_t)(i * ldx + k)]);
            if (k >= K)
                pad_bad += got != kSentinel;
            else
                bad += got != f32_bits(h.deq[(size_t)(r * K + k)]);
        }
    }
    for (size_t e = (size_t)(n * ldx); e < elems; e++)
        pad_bad += f32_bits(x[e]) != kSentinel;
    check(bad == 0 && pad_bad == 0,
          "embed %s: %d rows (ids 0, N-1, N/2, 0, random, N+5 -> N-1) bit-exact: %lld differ, "
          "%lld padding/guard written",
          tag, n, (long long)bad, (long long)pad_bad);
}

/* ck_quantize_x on x at element offset off, row stride ldx; returns the
 * device's xq bytes and whether they equal the host rule's */
static bool device_quantize(const std::vector<uint16_t> &x, int64_t off, int64_t ldx,
                            ck_dtype dt, int n, int K, const HostXq &want, void **d_xq_out,
                            char *why, size_t why_len) {
    uint16_t *d_x;
    void *d_xq;
    const size_t xq_bytes = ck_xq_bytes(n, K);
    CK(cudaMalloc(&d_x, x.size() * 2));
    CK(cudaMemcpy(d_x, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&d_xq, xq_bytes));
    CK(cudaMemset(d_xq, 0xAB, xq_bytes));
    ck_quantize_x(0, d_xq, d_x + off, ldx, dt, n, K);
    CK(cudaGetLastError());
    std::vector<uint8_t> got(xq_bytes);
    CK(cudaMemcpy(got.data(), d_xq, xq_bytes, cudaMemcpyDeviceToHost));
    CK(cudaFree(d_x));
    const std::vector<uint8_t> ref = want.bytes();
    bool ok = true;
    why[0] = 0;
    /* compare the three sections (alignment gaps are not written) */
    const size_t nc = (size_t)n * K, nbk = (size_t)n * (K / 32);
    for (size_t i = 0; i < nc && ok; i++)
        if (got[i] != ref[i]) {
            ok = false;
            snprintf(why, why_len, "code %zu (row %zu col %zu): got %d want %d", i, i / K, i % K,
                     (int8_t)got[i], (int8_t)ref[i]);
        }
    for (size_t s = 0; s < 2 && ok; s++) {
        const size_t base = s ? pk_xq_sd_off(n, K) : pk_xq_d_off(n, K);
        for (size_t i = 0; i < nbk && ok; i++) {
            float a, b;
            memcpy(&a, &got[base + 4 * i], 4);
            memcpy(&b, &ref[base + 4 * i], 4);
            if (f32_bits(a) != f32_bits(b)) {
                ok = false;
                snprintf(why, why_len, "%s of block %zu: got %.9g want %.9g", s ? "sd" : "d", i,
                         a, b);
            }
        }
    }
    if (d_xq_out)
        *d_xq_out = d_xq;
    else
        CK(cudaFree(d_xq));
    return ok;
}

static void check_quantize() {
    Rng g{77};
    const int Ks[] = {32, 64, 256, 4096, 11008};
    const int ns[] = {1, 3, 8, 19};
    for (ck_dtype dt : {CK_BF16, CK_F16})
        for (int K : Ks) {
            bool ok = true;
            char why[256] = "";
            int cases = 0;
            for (int n : ns)
                for (int mis = 0; mis < 2 && ok; mis++) {
                    const int64_t ldx = mis ? K + 1 : K + 8, off = mis ? 1 : 0;
                    const std::vector<uint16_t> x = make_x(n, K, ldx, off, dt, g);
                    const HostXq want = host_quantize(x, off, ldx, dt, n, K);
                    ok = device_quantize(x, off, ldx, dt, n, K, want, nullptr, why, sizeof why);
                    cases++;
                    if (!ok)
                        printf("         (n=%d %s)\n", n, mis ? "misaligned" : "aligned");
                }
            check(ok, "quantize_x %s K=%d n=1,3,8,19 aligned+misaligned x (%d cases): codes, d, "
                      "sd equal to the host rule %s",
                  dt_name(dt), K, cases, why);
        }
}

/* y = ck_gemv_packed for n = 1..8 and 19, four output variants each */
static void check_gemv(const HostPacked &h, const DevPacked &dw, ck_dtype dt, const char *tag,
                       Rng &g) {
    const int64_t N = h.N, K = h.K;
    std::vector<float> bias((size_t)N);
    for (auto &b : bias)
        b = (float)g.normal();
    float *d_bias;
    CK(cudaMalloc(&d_bias, (size_t)N * 4));
    CK(cudaMemcpy(d_bias, bias.data(), (size_t)N * 4, cudaMemcpyHostToDevice));
    double worst = 0.0;
    char worst_at[160] = "", first_fail[256] = "";
    int64_t n_fail = 0, pad_bad = 0, compared = 0;
    bool xq_ok = true;
    char xq_why[256] = "";
    const int ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 19};
    for (int n : ns) {
        const int64_t ldx = K + 8;
        const std::vector<uint16_t> x = make_x(n, (int)K, ldx, 0, dt, g);
        const HostXq xq = host_quantize(x, 0, ldx, dt, n, (int)K);
        void *d_xq;
        char why[200];
        if (!device_quantize(x, 0, ldx, dt, n, (int)K, xq, &d_xq, why, sizeof why) && xq_ok) {
            xq_ok = false;
            snprintf(xq_why, sizeof xq_why, "n=%d %s", n, why);
        }
        const std::vector<int64_t> rows = check_rows(N, N * K * n, g);
        std::vector<double> ref(rows.size() * n), A(rows.size() * n);
        for (size_t i = 0; i < rows.size(); i++)
            for (int q = 0; q < n; q++)
                gemv_ref(h, xq, rows[i], q, ref[i * n + q], A[i * n + q]);
        for (int y_ck = 0; y_ck < 2; y_ck++)
            for (int with_bias = 0; with_bias < 2; with_bias++) {
                const int64_t ldy = N + 3, guard = 64;
                const size_t elem = y_ck ? 2 : 4, bytes = (size_t)(n * ldy + guard) * elem;
                void *d_y;
                CK(cudaMalloc(&d_y, bytes));
                CK(cudaMemset(d_y, 0xAB, bytes));
                ck_gemv_packed(0, d_y, y_ck != 0, ldy, d_xq, &dw.m, with_bias ? d_bias : nullptr,
                               dt, n);
                CK(cudaGetLastError());
                std::vector<uint8_t> y(bytes);
                CK(cudaMemcpy(y.data(), d_y, bytes, cudaMemcpyDeviceToHost));
                CK(cudaFree(d_y));
                auto at = [&](int64_t i) -> double {
                    if (y_ck) {
                        uint16_t v;
                        memcpy(&v, &y[(size_t)i * 2], 2);
                        return from_ck(v, dt);
                    }
                    float v;
                    memcpy(&v, &y[(size_t)i * 4], 4);
                    return v;
                };
                auto is_sentinel = [&](int64_t i) {
                    for (size_t b = 0; b < elem; b++)
                        if (y[(size_t)i * elem + b] != 0xAB)
                            return false;
                    return true;
                };
                for (size_t i = 0; i < rows.size(); i++)
                    for (int q = 0; q < n; q++) {
                        const int64_t r = rows[i];
                        double s = ref[i * n + q], a = A[i * n + q];
                        if (with_bias) {
                            s += bias[(size_t)r];
                            a += fabs((double)bias[(size_t)r]);
                        }
                        const double got = at(q * ldy + r);
                        double tol = 1e-5 * a + 1e-30;
                        if (y_ck)
                            tol += (dt == CK_BF16 ? 0x1.0p-8 : 0x1.0p-11) * (fabs(s) + tol);
                        double e = std::isfinite(got) ? fabs(got - s) / tol : INFINITY;
                        /* random planes reach sums past f16's range: an f16 y rounds
                         * them to the infinity of their sign (from 65520 up) */
                        if (y_ck && dt == CK_F16 && std::isinf(got) && (got > 0) == (s > 0) &&
                            fabs(s) + tol >= 65520.0)
                            e = 0.0;
                        compared++;
                        if (e > worst) {
                            worst = e;
                            snprintf(worst_at, sizeof worst_at, "n=%d y=%s%s row %lld col %d", n,
                                     y_ck ? "ck" : "f32", with_bias ? " bias" : "", (long long)r,
                                     q);
                        }
                        if (!(e <= 1.0) && n_fail++ == 0)
                            snprintf(first_fail, sizeof first_fail,
                                     "first: n=%d y=%s%s row %lld col %d: got %.9g want %.9g "
                                     "(tol %.3g)",
                                     n, y_ck ? "ck" : "f32", with_bias ? " bias" : "",
                                     (long long)r, q, got, s, tol);
                    }
                for (int q = 0; q < n; q++)
                    for (int64_t j = N; j < ldy; j++)
                        pad_bad += !is_sentinel(q * ldy + j);
                for (int64_t j = n * ldy; j < n * ldy + guard; j++)
                    pad_bad += !is_sentinel(j);
            }
        CK(cudaFree(d_xq));
    }
    CK(cudaFree(d_bias));
    check(n_fail == 0 && pad_bad == 0 && xq_ok,
          "gemv %s %s n=1..8,19 y f32/ck, bias/none: %lld outputs, worst err/tol %.3f (%s), %lld "
          "over, %lld padding/guard written%s%s %s",
          tag, dt_name(dt), (long long)compared, worst, worst_at, (long long)n_fail,
          (long long)pad_bad, xq_ok ? "" : "; xq differs: ", xq_why, first_fail);
}

/* y = ck_gemm_packed (x in ck as it is) for several n */
static void check_mma(const HostPacked &h, const DevPacked &dw, ck_dtype dt, const char *tag,
                      Rng &g) {
    const int64_t N = h.N, K = h.K;
    std::vector<float> bias((size_t)N);
    for (auto &b : bias)
        b = (float)g.normal();
    float *d_bias;
    CK(cudaMalloc(&d_bias, (size_t)N * 4));
    CK(cudaMemcpy(d_bias, bias.data(), (size_t)N * 4, cudaMemcpyHostToDevice));
    std::vector<float> wck((size_t)(N * K)); /* W as the kernel multiplies it */
    for (size_t i = 0; i < wck.size(); i++)
        wck[i] = from_ck(to_ck(h.deq[i], dt), dt);
    double worst = 0.0;
    char worst_at[160] = "", first_fail[256] = "";
    int64_t n_fail = 0, pad_bad = 0, compared = 0;
    const int ns[] = {9, 16, 17, 40, 64, 70};
    for (int n : ns)
        for (int mis = 0; mis < 2; mis++) {
            if (mis && n != 17 && n != 70)
                continue;
            const int64_t ldx = mis ? K + 1 : K + 8, off = mis ? 1 : 0;
            const std::vector<uint16_t> x = make_x(n, (int)K, ldx, off, dt, g);
            uint16_t *d_x;
            CK(cudaMalloc(&d_x, x.size() * 2));
            CK(cudaMemcpy(d_x, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
            const std::vector<int64_t> rows = check_rows(N, N * K * n, g);
            std::vector<double> ref(rows.size() * n), A(rows.size() * n);
            for (size_t i = 0; i < rows.size(); i++)
                for (int q = 0; q < n; q++) {
                    double sum = 0.0, mag = 0.0;
                    const float *wr = &wck[(size_t)(rows[i] * K)];
                    const uint16_t *xr = &x[(size_t)(off + q * ldx)];
                    for (int64_t k = 0; k < K; k++) {
                        const double t = (double)wr[k] * from_ck(xr[k], dt);
                        sum += t;
                        mag += fabs(t);
                    }
                    ref[i * n + q] = sum;
                    A[i * n + q] = mag;
                }
            for (int y_ck = 0; y_ck < 2; y_ck++)
                for (int with_bias = 0; with_bias < 2; with_bias++) {
                    const int64_t ldy = N + 3, guard = 64;
                    const size_t elem = y_ck ? 2 : 4, bytes = (size_t)(n * ldy + guard) * elem;
                    void *d_y;
                    CK(cudaMalloc(&d_y, bytes));
                    CK(cudaMemset(d_y, 0xAB, bytes));
                    ck_gemm_packed(0, d_y, y_ck != 0, ldy, d_x + off, ldx, &dw.m,
                                   with_bias ? d_bias : nullptr, dt, n);
                    CK(cudaGetLastError());
                    std::vector<uint8_t> y(bytes);
                    CK(cudaMemcpy(y.data(), d_y, bytes, cudaMemcpyDeviceToHost));
                    CK(cudaFree(d_y));
                    auto at = [&](int64_t i) -> double {
                        if (y_ck) {
                            uint16_t v;
                            memcpy(&v, &y[(size_t)i * 2], 2);
                            return from_ck(v, dt);
                        }
                        float v;
                        memcpy(&v, &y[(size_t)i * 4], 4);
                        return v;
                    };
                    for (size_t i = 0; i < rows.size(); i++)
                        for (int q = 0; q < n; q++) {
                            const int64_t r = rows[i];
                            double s = ref[i * n + q], a = A[i * n + q];
                            if (with_bias) {
                                s += bias[(size_t)r];
                                a += fabs((double)bias[(size_t)r]);
                            }
                            const double got = at(q * ldy + r);
                            double tol = 1e-4 * a + 1e-30;
                            if (y_ck)
                                tol += (dt == CK_BF16 ? 0x1.0p-8 : 0x1.0p-11) * (fabs(s) + tol);
                            double e = std::isfinite(got) ? fabs(got - s) / tol : INFINITY;
                            if (y_ck && dt == CK_F16 && std::isinf(got) && (got > 0) == (s > 0) &&
                                fabs(s) + tol >= 65520.0)
                                e = 0.0;
                            compared++;
                            if (e > worst) {
                                worst = e;
                                snprintf(worst_at, sizeof worst_at, "n=%d%s y=%s%s row %lld col %d",
                                         n, mis ? " misaligned" : "", y_ck ? "ck" : "f32",
                                         with_bias ? " bias" : "", (long long)r, q);
                            }
                            if (!(e <= 1.0) && n_fail++ == 0)
                                snprintf(first_fail, sizeof first_fail,
                                         " first: %s: got %.9g want %.9g (tol %.3g)", worst_at,
                                         got, s, tol);
                        }
                    for (int64_t i = 0; i < n * ldy + guard; i++) {
                        const bool inside = i < n * ldy && i % ldy < N;
                        bool sentinel = true;
                        for (size_t b = 0; b < elem; b++)
                            sentinel = sentinel && y[(size_t)i * elem + b] == 0xAB;
                        pad_bad += !inside && !sentinel;
                    }
                }
            CK(cudaFree(d_x));
        }
    CK(cudaFree(d_bias));
    check(n_fail == 0 && pad_bad == 0,
          "mma %s %s n=9,16,17,40,64,70 y f32/ck, bias/none: %lld outputs, worst err/tol %.3f "
          "(%s), %lld over, %lld padding/guard written%s",
          tag, dt_name(dt), (long long)compared, worst, worst_at, (long long)n_fail,
          (long long)pad_bad, first_fail);
}

/* ---------------------------------------------------------------- host replay (--host) */

/* The kernel's arithmetic for one output, lane by lane: lane c % 32 takes
 * chunk c (in order), then the butterfly of gemv_packed_kernel. */
template <int TY>
static double replay_gemv(const HostPacked &h, const std::vector<uint8_t> &xq_bytes, int n,
                          int64_t r, int q) {
    using G = Gv<TY>;
    const packed_matrix m = h.view();
    const PkPlanes p = pk_planes(&m);
    PkRow pr;
    pr.q = p.q + r * p.rq;
    pr.h = p.h ? p.h + r * p.rh : nullptr;
    pr.s = p.s + r * p.rs;
    pr.d = p.d ? p.d + r * p.rd : nullptr;
    const PkXq xv = pk_xq_view(xq_bytes.data(), n, p.K);
    float acc[32] = {0};
    const int n_chunk = (int)(p.rq / 16);
    for (int c = 0; c < n_chunk; c++) {
        const typename G::Raw raw = G::load(pr, c);
        const typename G::Unp w = G::unpack(raw, c);
        const typename G::X x = G::load_x(xv, (uint32_t)q * (uint32_t)(p.K / 32), c);
        acc[c % 32] += G::dot(w, x);
    }
    for (int o = 16; o > 0; o >>= 1) {
        float t[32];
        for (int l = 0; l < 32; l++)
            t[l] = acc[l] + acc[l ^ o];
        memcpy(acc, t, sizeof acc);
    }
    return acc[0];
}

template <int TY> static void replay_checks(const HostPacked &h, const char *tag, Rng &g) {
    const packed_matrix m = h.view();
    const PkPlanes p = pk_planes(&m);
    /* the dequantizer's groups of 8 */
    int64_t bad = 0;
    for (int64_t r = 0; r < h.N; r++)
        for (int e0 = 0; e0 < p.K; e0 += 8) {
            float v[8];
            pk_decode8<TY>(p, r, e0, v);
            for (int i = 0; i < 8; i++)
                bad += f32_bits(v[i]) != f32_bits(h.deq[(size_t)(r * h.K + e0 + i)]);
        }
    check(bad == 0, "host replay: decode8 %s: %lld of %lld elements differ", tag, (long long)bad,
          (long long)(h.N * h.K));
    /* the GEMV's chunks */
    double worst = 0.0;
    int64_t over = 0;
    for (int n : {1, 3, 8}) {
        const std::vector<uint16_t> x = make_x(n, (int)h.K, h.K, 0, CK_BF16, g);
        const HostXq xq = host_quantize(x, 0, h.K, CK_BF16, n, (int)h.K);
        const std::vector<uint8_t> xb = xq.bytes();
        for (int64_t r = 0; r < h.N; r++)
            for (int q = 0; q < n; q++) {
                double ref, A;
                gemv_ref(h, xq, r, q, ref, A);
                const double got = replay_gemv<TY>(h, xb, n, r, q);
                const double e = fabs(got - ref) / (1e-5 * A + 1e-30);
                worst = std::max(worst, std::isfinite(e) ? e : INFINITY);
                over += !(e <= 1.0);
            }
    }
    check(over == 0, "host replay: gemv %s n=1,3,8: worst err/tol %.3f, %lld over", tag, worst,
          (long long)over);
}

static void host_replay() {
    Rng g{5};
    for (const TypeInfo &ti : kTypes) {
        const int blk = packed_block(ti.t);
        const int64_t shapes[][2] = {{1, blk}, {3, 2 * blk}, {5, 1024}, {3, 11008}};
        for (auto &sh : shapes) {
            for (int src = 0; src < 2; src++) {
                HostPacked h;
                bool split_ok = true;
                if (src == 0)
                    split_ok = make_quantized(h, ti, sh[0], sh[1], g);
                else
                    make_random(h, ti.t, sh[0], sh[1], g);
                char tag[96];
                snprintf(tag, sizeof tag, "%s N=%lld K=%lld %s", packed_type_name(ti.t),
                         (long long)sh[0], (long long)sh[1], src ? "random planes" : "quantized");
                if (!split_ok)
                    check(false, "split %s: packed_dequantize_row != quant_dequantize_row", tag);
                PK_DISPATCH(ti.t, replay_checks<TY>(h, tag, g));
            }
        }
    }
}

/* ---------------------------------------------------------------- device check driver */

static void device_checks() {
    Rng g{1234};
    for (const TypeInfo &ti : kTypes) {
        const int blk = packed_block(ti.t);
        struct Shape {
            int64_t N, K;
            int src; /* 0 quantized, 1 random planes */
        };
        std::vector<Shape> shapes = {
            {1, blk, 0},       {3, 2 * blk, 0},  {7, 3 * blk, 1},   {13, 1024, 0},
            {37, 4096, 0},     {33, 11008, 0},   {19, 11008, 1},    {300, 4096, 1},
        };
        if (!g_small)
            shapes.push_back({32000, 4096, 1});
        for (const Shape &sh : shapes) {
            HostPacked h;
            char tag[96];
            snprintf(tag, sizeof tag, "%s N=%lld K=%lld %s", packed_type_name(ti.t),
                     (long long)sh.N, (long long)sh.K, sh.src ? "random" : "quantized");
            if (sh.src == 0) {
                if (!make_quantized(h, ti, sh.N, sh.K, g))
                    check(false, "split %s: packed_dequantize_row != quant_dequantize_row", tag);
            } else {
                make_random(h, ti.t, sh.N, sh.K, g);
            }
            DevPacked dw = upload(h);
            for (ck_dtype dt : {CK_BF16, CK_F16})
                check_dequant(h, dw, dt, tag);
            check_embed(h, dw, tag, g);
            for (ck_dtype dt : {CK_BF16, CK_F16})
                check_gemv(h, dw, dt, tag, g);
            for (ck_dtype dt : {CK_BF16, CK_F16})
                if (sh.N * sh.K <= 300 * 4096) /* the float64 reference costs n N K */
                    check_mma(h, dw, dt, tag, g);
            dev_free(dw);
        }
    }
}

/* ---------------------------------------------------------------- timing */

__global__ void fill_kernel(uint32_t *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t z = (uint32_t)i * 0x9e3779b9u + seed;
        z = (z ^ (z >> 16)) * 0x85ebca6bu;
        z = (z ^ (z >> 13)) * 0xc2b2ae35u;
        p[i] = z ^ (z >> 16);
    }
}

/* copies of an (N, K) packed matrix, random bytes (the kernels' speed does
 * not depend on the values), >= 400 MB in all */
static std::vector<DevPacked> weight_ring(packed_type t, int64_t N, int64_t K) {
    const size_t one = packed_bytes(t, N, K);
    std::vector<DevPacked> ring(std::max<size_t>(3, ((size_t)400 << 20) / one + 1));
    uint32_t seed = 1;
    for (auto &d : ring) {
        d = dev_alloc(t, N, K);
        fill_kernel<<<1024, 256>>>((uint32_t *)d.mem, d.bytes / 4, seed++);
    }
    CK(cudaDeviceSynchronize());
    return ring;
}

static void free_ring(std::vector<DevPacked> &ring) {
    for (auto &d : ring)
        dev_free(d);
    ring.clear();
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

/* (single, back-to-back) us per launch; launch(stream, W) enqueues one */
template <class Launch>
static void time_launches(Launch launch, const std::vector<DevPacked> &ring, double &t_single,
                          double &t_b2b) {
    const int reps = 100;
    std::vector<cudaEvent_t> e0(reps), e1(reps);
    for (int i = 0; i < reps; i++) {
        CK(cudaEventCreate(&e0[i]));
        CK(cudaEventCreate(&e1[i]));
    }
    for (int i = 0; i < 10; i++) /* warm-up */
        launch(0, ring[i % ring.size()].m);
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(e0[i]));
        launch(0, ring[i % ring.size()].m);
        CK(cudaEventRecord(e1[i]));
    }
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    std::vector<double> single, b2b;
    for (int i = 0; i < reps; i++) {
        float ms;
        CK(cudaEventElapsedTime(&ms, e0[i], e1[i]));
        single.push_back(ms * 1000.0);
    }
    const int per = 2 * (int)ring.size();
    for (int rep = 0; rep < 5; rep++) {
        CK(cudaEventRecord(e0[rep]));
        for (int i = 0; i < per; i++)
            launch(0, ring[i % ring.size()].m);
        CK(cudaEventRecord(e1[rep]));
        CK(cudaEventSynchronize(e1[rep]));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0[rep], e1[rep]));
        b2b.push_back(ms * 1000.0 / per);
    }
    for (int i = 0; i < reps; i++) {
        CK(cudaEventDestroy(e0[i]));
        CK(cudaEventDestroy(e1[i]));
    }
    t_single = median(single);
    t_b2b = median(b2b);
}

static const double kNominal = 4.5e12; /* H200 HBM3e read, bytes/s (the brief's target base) */
static double g_measured = 0.0;       /* ck_read_stream, bytes/s */

static void measure_read() {
    const int64_t bytes = (int64_t)1 << 30;
    void *p;
    unsigned *sink;
    CK(cudaMalloc(&p, (size_t)bytes));
    CK(cudaMalloc(&sink, 4));
    fill_kernel<<<1024, 256>>>((uint32_t *)p, (size_t)bytes / 4, 7);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<double> t;
    for (int rep = 0; rep < 6; rep++) {
        CK(cudaEventRecord(e0));
        ck_read_stream(0, p, bytes, sink);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (rep)
            t.push_back(ms * 1e-3);
    }
    CK(cudaGetLastError());
    g_measured = (double)bytes / median(t);
    printf("streaming read (ck_read_stream, 1 GiB): %.0f GB/s measured; nominal %.0f GB/s\n",
           g_measured / 1e9, kNominal / 1e9);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaFree(p));
    CK(cudaFree(sink));
}

struct Shape7b {
    int64_t N, K;
    const char *what;
};
static const Shape7b kShapes7b[] = {
    {4096, 4096, "o"},     {12288, 4096, "qkv"},  {22016, 4096, "gate+up"},
    {4096, 11008, "down"}, {32000, 4096, "lm head"},
};

/* an activation scratch of n rows for K, quantized from random x */
static void *make_dev_xq(int n, int K) {
    Rng g{99};
    const std::vector<uint16_t> x = make_x(n, K, K, 0, CK_BF16, g);
    uint16_t *d_x;
    void *d_xq;
    CK(cudaMalloc(&d_x, x.size() * 2));
    CK(cudaMemcpy(d_x, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&d_xq, ck_xq_bytes(n, K)));
    ck_quantize_x(0, d_xq, d_x, K, CK_BF16, n, K);
    CK(cudaDeviceSynchronize());
    CK(cudaFree(d_x));
    return d_xq;
}

static void gemv_timing() {
    printf("\nck_gemv_packed (production configuration), GB/s of packed W read; %% of nominal "
           "4.5 TB/s [of measured]\n");
    printf("  %-5s %-8s %6s %6s %2s %8s | %9s %7s %11s | %9s %7s %11s\n", "type", "matrix", "N",
           "K", "n", "MB", "single us", "GB/s", "%", "b2b us", "GB/s", "%");
    for (const TypeInfo &ti : kTypes)
        for (const Shape7b &sh : kShapes7b) {
            std::vector<DevPacked> ring = weight_ring(ti.t, sh.N, sh.K);
            float *d_y;
            CK(cudaMalloc(&d_y, (size_t)8 * sh.N * 4));
            for (int n : {1, 8}) {
                void *d_xq = make_dev_xq(n, (int)sh.K);
                double t1, t2;
                time_launches(
                    [&](cudaStream_t s, const packed_matrix &W) {
                        ck_gemv_packed(s, d_y, false, sh.N, d_xq, &W, nullptr, CK_BF16, n);
                    },
                    ring, t1, t2);
                const double mb = (double)ring[0].bytes;
                printf("  %-5s %-8s %6lld %6lld %2d %8.2f | %9.2f %7.0f %4.0f%% [%3.0f%%] | %9.2f "
                       "%7.0f %4.0f%% [%3.0f%%]\n",
                       packed_type_name(ti.t), sh.what, (long long)sh.N, (long long)sh.K, n,
                       mb / 1e6, t1, mb / t1 / 1e3, 100 * mb / t1 / 1e-6 / kNominal,
                       100 * mb / t1 / 1e-6 / g_measured, t2, mb / t2 / 1e3,
                       100 * mb / t2 / 1e-6 / kNominal, 100 * mb / t2 / 1e-6 / g_measured);
                fflush(stdout);
                CK(cudaFree(d_xq));
            }
            CK(cudaFree(d_y));
            free_ring(ring);
        }
}

/* batched decode: the tensor-core kernel at n = 16, 32 and 64 in several
 * configurations (MT m16 tiles x NT n8 tiles a block, WK warps splitting K;
 * "2x32": two launches of 32 rows) beside the GEMV's ceil(n / 8) launches;
 * back-to-back us (GB/s of packed W) */
template <int TY, int MT, int NT, int WK>
static void mm_cfg(cudaStream_t s, void *y, const void *x, int64_t K, const packed_matrix &W,
                   int n) {
    mm_launch<TY, __nv_bfloat16, MT, NT, WK>(s, y, false, W.N, (const __nv_bfloat16 *)x, K, true,
                                             pk_planes(&W), nullptr, n);
}
typedef void (*MmFn)(cudaStream_t, void *, const void *, int64_t, const packed_matrix &, int);
struct MmCfg {
    const char *name;
    MmFn fn;
    int max_n; /* rows one launch takes */
};
template <int TY> static std::vector<MmCfg> mm_configs(int n) {
    if (n <= 16)
        return {{"1x4x8*", mm_cfg<TY, 1, 4, 8>, 16}, {"1x2x8", mm_cfg<TY, 1, 2, 8>, 16},
                {"1x4x4", mm_cfg<TY, 1, 4, 4>, 16},  {"1x2x4", mm_cfg<TY, 1, 2, 4>, 16},
                {"1x1x8", mm_cfg<TY, 1, 1, 8>, 16}};
    if (n <= 32)
        return {{"2x4x8*", mm_cfg<TY, 2, 4, 8>, 32}, {"2x2x8", mm_cfg<TY, 2, 2, 8>, 32},
                {"2x4x4", mm_cfg<TY, 2, 4, 4>, 32},  {"2x2x4", mm_cfg<TY, 2, 2, 4>, 32},
                {"2x1x8", mm_cfg<TY, 2, 1, 8>, 32}};
    return {{"4x4x8*", mm_cfg<TY, 4, 4, 8>, 64}, {"4x2x8", mm_cfg<TY, 4, 2, 8>, 64},
            {"4x4x4", mm_cfg<TY, 4, 4, 4>, 64},  {"4x2x4", mm_cfg<TY, 4, 2, 4>, 64},
            {"4x1x8", mm_cfg<TY, 4, 1, 8>, 64},  {"2x32", mm_cfg<TY, 2, 4, 8>, 32}};
}

static void mma_timing() {
    printf("\nck_gemm_packed (tensor cores, bf16) by configuration MTxNTxWK (* = production) "
           "against ck_gemv_packed's n / 8 launches: back-to-back us (GB/s of packed W)\n");
    for (const TypeInfo &ti : kTypes) {
        if (ti.t != PACKED_Q8_0 && ti.t != PACKED_Q4_0 && ti.t != PACKED_Q4_K &&
            ti.t != PACKED_Q6_K)
            continue;
        for (const Shape7b &sh : kShapes7b) {
            std::vector<DevPacked> ring = weight_ring(ti.t, sh.N, sh.K);
            float *d_y;
            CK(cudaMalloc(&d_y, (size_t)64 * sh.N * 4));
            const double mb = (double)ring[0].bytes;
            for (int n : {16, 32, 64}) {
                Rng g{5};
                const std::vector<uint16_t> x = make_x(n, (int)sh.K, sh.K, 0, CK_BF16, g);
                uint16_t *d_x;
                CK(cudaMalloc(&d_x, x.size() * 2));
                CK(cudaMemcpy(d_x, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
                void *d_xq = make_dev_xq(n, (int)sh.K);
                printf("  %-5s %-8s %5lldx%-5lld n=%2d", packed_type_name(ti.t), sh.what,
                       (long long)sh.N, (long long)sh.K, n);
                std::vector<MmCfg> cfgs;
                PK_DISPATCH(ti.t, cfgs = mm_configs<TY>(n));
                for (const MmCfg &c : cfgs) {
                    double t1, t2;
                    time_launches(
                        [&](cudaStream_t s, const packed_matrix &W) {
                            for (int r0 = 0; r0 < n; r0 += c.max_n)
                                c.fn(s, d_y, d_x + (size_t)r0 * sh.K, sh.K, W,
                                     n - r0 < c.max_n ? n - r0 : c.max_n);
                        },
                        ring, t1, t2);
                    printf("  %s %6.1f (%4.0f)", c.name, t2, mb / t2 / 1e3);
                }
                double t1, tg;
                time_launches(
                    [&](cudaStream_t s, const packed_matrix &W) {
                        ck_gemv_packed(s, d_y, false, sh.N, d_xq, &W, nullptr, CK_BF16, n);
                    },
                    ring, t1, tg);
                printf("  gemv %6.1f (%4.0f)\n", tg, mb / tg / 1e3);
                fflush(stdout);
                CK(cudaFree(d_xq));
                CK(cudaFree(d_x));
            }
            CK(cudaFree(d_y));
            free_ring(ring);
        }
    }
}

/* n = 1 configurations (rows a warp, chunks a row in flight) beside the
 * production one, to retune GvCfg */
template <int TY, int RPW, int U> static void launch_cfg1(cudaStream_t s, const GvArgs &a, int) {
    gemv_packed_cfg<TY, 1, RPW, U>(s, a);
}

struct Cfg {
    int rpw, u;
    GvLaunch fn;
};

/* Q5_K and Q6_K carry the most bytes a chunk: 2x4 and 4x2 would spill */
template <int TY> static std::vector<Cfg> configs() {
    std::vector<Cfg> c = {{1, 2, launch_cfg1<TY, 1, 2>}, {1, 4, launch_cfg1<TY, 1, 4>},
                          {2, 1, launch_cfg1<TY, 2, 1>}, {2, 2, launch_cfg1<TY, 2, 2>},
                          {4, 1, launch_cfg1<TY, 4, 1>}};
    if constexpr (TY != PACKED_Q5_K && TY != PACKED_Q6_K) {
        c.push_back({2, 4, launch_cfg1<TY, 2, 4>});
        c.push_back({4, 2, launch_cfg1<TY, 4, 2>});
    }
    return c;
}

static void config_timing() {
    printf("\nck_gemv_packed n=1 by configuration (RPW rows a warp x U chunks a row in flight), "
           "back-to-back GB/s; * = production (GvCfg)\n");
    const Shape7b shapes[] = {{4096, 4096, "o"}, {22016, 4096, "gate+up"}, {4096, 11008, "down"}};
    for (const TypeInfo &ti : kTypes) {
        std::vector<Cfg> cfgs;
        int prod_rpw = 0, prod_u = 0;
        PK_DISPATCH(ti.t, cfgs = configs<TY>(); prod_rpw = GvCfg<TY, 1>::kRpw;
                    prod_u = GvCfg<TY, 1>::kU);
        for (const Shape7b &sh : shapes) {
            std::vector<DevPacked> ring = weight_ring(ti.t, sh.N, sh.K);
            float *d_y;
            CK(cudaMalloc(&d_y, (size_t)sh.N * 4));
            void *d_xq = make_dev_xq(1, (int)sh.K);
            printf("  %-5s %-8s %5lldx%-5lld", packed_type_name(ti.t), sh.what, (long long)sh.N,
                   (long long)sh.K);
            for (const Cfg &c : cfgs) {
                double t1, t2;
                time_launches(
                    [&](cudaStream_t s, const packed_matrix &W) {
                        gemv_packed_run(c.fn, s, d_y, false, sh.N, d_xq, &W, nullptr, CK_BF16, 1);
                    },
                    ring, t1, t2);
                printf("  %dx%d%s %5.0f", c.rpw, c.u,
                       c.rpw == prod_rpw && c.u == prod_u ? "*" : " ",
                       (double)ring[0].bytes / t2 / 1e3);
            }
            printf("\n");
            fflush(stdout);
            CK(cudaFree(d_xq));
            CK(cudaFree(d_y));
            free_ring(ring);
        }
    }
}

static void dequant_timing() {
    printf("\nck_dequant_packed, all N rows to bf16; GB/s of bytes moved (packed read + 2 N K "
           "written)\n");
    const Shape7b shapes[] = {{4096, 4096, "o"}, {22016, 4096, "gate+up"}, {4096, 11008, "down"}};
    for (const TypeInfo &ti : kTypes)
        for (const Shape7b &sh : shapes) {
            std::vector<DevPacked> ring = weight_ring(ti.t, sh.N, sh.K);
            uint16_t *d_dst;
            CK(cudaMalloc(&d_dst, (size_t)(sh.N * sh.K * 2)));
            double t1, t2;
            time_launches(
                [&](cudaStream_t s, const packed_matrix &W) {
                    ck_dequant_packed(s, d_dst, sh.K, CK_BF16, &W, 0, sh.N);
                },
                ring, t1, t2);
            const double bytes = (double)ring[0].bytes + 2.0 * (double)(sh.N * sh.K);
            printf("  %-5s %-8s %5lldx%-5lld  %8.2f us  %6.0f GB/s  (%3.0f%% of nominal)\n",
                   packed_type_name(ti.t), sh.what, (long long)sh.N, (long long)sh.K, t2,
                   bytes / t2 / 1e3, 100 * bytes / t2 / 1e-6 / kNominal);
            fflush(stdout);
            CK(cudaFree(d_dst));
            free_ring(ring);
        }
}

static void quantize_timing() {
    printf("\nck_quantize_x (bf16 x)\n");
    for (int K : {4096, 11008})
        for (int n : {1, 8}) {
            Rng g{3};
            const std::vector<uint16_t> x = make_x(n, K, K, 0, CK_BF16, g);
            uint16_t *d_x;
            void *d_xq;
            CK(cudaMalloc(&d_x, x.size() * 2));
            CK(cudaMemcpy(d_x, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
            CK(cudaMalloc(&d_xq, ck_xq_bytes(n, K)));
            cudaEvent_t e0, e1;
            CK(cudaEventCreate(&e0));
            CK(cudaEventCreate(&e1));
            for (int i = 0; i < 10; i++)
                ck_quantize_x(0, d_xq, d_x, K, CK_BF16, n, K);
            const int reps = 200;
            CK(cudaEventRecord(e0));
            for (int i = 0; i < reps; i++)
                ck_quantize_x(0, d_xq, d_x, K, CK_BF16, n, K);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            printf("  n=%d K=%5d  %6.2f us a call (back-to-back)\n", n, K, ms * 1000.0 / reps);
            CK(cudaEventDestroy(e0));
            CK(cudaEventDestroy(e1));
            CK(cudaFree(d_x));
            CK(cudaFree(d_xq));
        }
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--small"))
            g_small = true;
        else if (!strcmp(argv[i], "--no-timing"))
            g_timing = false;
        else if (!strcmp(argv[i], "--mma-timing"))
            g_mma_only = true;
        else if (!strcmp(argv[i], "--host"))
            g_host = true;
        else {
            fprintf(stderr, "usage: %s [--small] [--no-timing] [--mma-timing] [--host]\n", argv[0]);
            return 2;
        }
    }
    if (g_host) {
        check_codebooks();
        host_replay();
        printf("packed_check (host replay): %d passed, %d failed\n", g_pass, g_fail);
        return g_fail ? 1 : 0;
    }
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("SKIP: no CUDA device\n");
        return 0;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs; programmatic dependent launch %s\n", prop.name,
           prop.multiProcessorCount, ck_pdl_on() ? "on" : "off");
    if (g_mma_only) { /* the batched-decode table alone */
        mma_timing();
        return 0;
    }
    check_codebooks();
    check_quantize();
    device_checks();
    if (g_timing) {
        measure_read();
        quantize_timing();
        gemv_timing();
        mma_timing();
        config_timing();
        dequant_timing();
    }
    printf("packed_check: %d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
