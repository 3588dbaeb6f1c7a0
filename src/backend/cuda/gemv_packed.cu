/*
 * gemv_packed.cu — decode's y (n, N) = x^ (n, K) . W^T (+ bias) on packed
 * quantized weights (backend/packed.h), n <= 8 a launch; and the 8-bit
 * activations x^ it reads (ck_quantize_x).
 *
 * Shapes: n = activation rows (1..CK_GEMV_MAX_ROWS a launch), N = weight
 * rows, K = weight columns. W's planes: q (codes), h (high bits), s (scales),
 * d (Q6_K's super-scale), each N rows of a fixed byte count.
 *
 * As gemv.cu, a stream over W: each warp owns RPW consecutive rows, lane l
 * reads 16-byte chunks l, l + 32, ... of each row's q plane (U chunks a row
 * in flight, with their scale and high-bit bytes, before any math) through
 * L1-bypassing loads, and uses every chunk for all n activation rows while
 * it sits in registers: W is read once for any n <= 8. The activations are
 * 8-bit codes (ck_quantize_x: per 32 along K, d = amax / 127, the CPU's
 * FAST rule), read through L1 once per chunk and reused for the RPW rows.
 *
 * What a 16-byte q chunk holds, and its math (isum: __dp4a over int8 words;
 * dx, sd: the activation block's d and d * sum of codes):
 *   Q8_0       16 codes, half a block: d dx isum
 *   Q4_0..Q5_1 one block of 32: nibbles by mask (low: elements 0..15, high:
 *              16..31), Q5's fifth bit spread from qh by a multiply, fixed
 *              offsets (Q4_0 -8, Q5_0 -16) by __vsub4: d dx isum (+ m sd)
 *   Q4_K, Q5_K 16 elements of each of two sub-blocks 2p, 2p+1 (qs low and
 *              high nibbles; Q5_K's bits 2p, 2p+1 of 16 qh bytes): for each,
 *              (d sc) dx isum, and the min (dmin mn) sd of the whole
 *              sub-block on even chunks only (a sub-block of 32 is one
 *              activation block, whose sd covers the chunk pair)
 *   Q6_K       16 elements of two 16-element groups (ql low and high
 *              nibbles, two bits of 16 qh bytes, -32 by __vsub4): (d sc) dx
 *              isum each, sc int8
 *   NF4, FP4   16 elements of each half of a block of 64 (low and high
 *              nibbles), looked up as 16-bit table values (2^-14 steps):
 *              d 2^-14 (dx0 isum0 + dx1 isum1), isum by __dp2a
 * Sums are f32 from here on (the lanes' partials, a butterfly of shuffles),
 * so y equals sum_k W_deq[r][k] x^[k] up to f32 rounding and order.
 *
 * Before waiting for the previous kernel (programmatic dependent launch,
 * common.cuh) each warp issues its first round of weight loads: weights
 * depend on no kernel, so they arrive during the previous kernel's tail.
 * Rows past N are clamped to N - 1 for loading and not stored.
 *
 * Registers (ptxas, sm_90, production configuration GvCfg, n = 1 / 8):
 * Q8_0 48 / 72, Q4_0 56 / 92, Q4_1 56 / 96, Q5_0 78 / 96, Q5_1 77 / 103,
 * Q4_K 80 / 122, Q5_K 112 / 112, Q6_K 96 / 126; no spills on sm_80..90
 * under the 128 of two blocks an SM. Without the row-group boundary
 * (kRowGroup) ptxas hoisted every activation row's loads and n = 8 took
 * 128 and spilled.
 *
 * Not tried (no device where this was written): folding the fixed offsets
 * (Q4_0 -8, Q5_0 -16) into the activations' code sums instead of __vsub4
 * (fewer integer ops a chunk at n <= 2, more at n = 8); tensor-core mma
 * (m16n8k32 s8) for n = 5..8, where __dp4a's issue rate, not HBM, bounds
 * the kernel.
 *
 * tests/cuda/packed_check.cu checks every type against a host reference
 * and times the launch configurations.
 */
#include "backend/cuda/common.cuh"
#include "backend/cuda/packed.cuh"

#include <stdint.h>

namespace {

constexpr int kThreads = 256; /* 8 warps: small blocks keep the last wave short, as gemv.cu */
constexpr int kWarps = kThreads / 32;
constexpr int kRowGroup = 2; /* activation rows whose loads ptxas may hoist together */

/* one weight row's planes */
struct PkRow {
    const uint8_t *q, *h, *s, *d;
};

/* spreads bits 0..3 of b to bit 4 of bytes 0..3: 0x02040810 adds copies
 * of b shifted by 4 + 7j (j = 0..3), disjoint so no carries; bit i of copy
 * j lands at 4 + 7j + i, which is 4 mod 8 only for i == j: 4 + 8j */
PK_HD uint32_t spread4_bit4(uint32_t b) {
    return (b * 0x02040810u) & 0x10101010u;
}

/* Per type: Raw (a chunk's bytes as loaded), Unp (unpacked once, used for
 * every activation row), X (an activation row's codes and scales for the
 * chunk), dot (the chunk's contribution). c: the chunk's index in the q
 * plane row; xb: the activation row's first block (its first code is at
 * 32 xb). */
template <int TY> struct Gv;

template <> struct Gv<PACKED_Q8_0> {
    struct Raw {
        uint4 q;
        uint32_t s;
    };
    struct Unp {
        int v[4];
        float d;
    };
    struct X {
        uint4 a;
        float dx;
    };
    static PK_HD Raw load(const PkRow &r, int c) {
        Raw w;
        w.q = pk_ld_stream16(r.q + 16 * (int64_t)c);
        w.s = pk_ld_stream2(r.s + 2 * (int64_t)(c >> 1));
        return w;
    }
    static PK_HD Unp unpack(const Raw &w, int) {
        Unp u;
        u.v[0] = (int)w.q.x;
        u.v[1] = (int)w.q.y;
        u.v[2] = (int)w.q.z;
        u.v[3] = (int)w.q.w;
        u.d = pk_f16(w.s);
        return u;
    }
    static PK_HD X load_x(const PkXq &x, uint32_t xb, int c) {
        X v;
        v.a = pk_ld_cached16(x.codes + (32 * xb + 16 * (uint32_t)c));
        v.dx = pk_ld_cached_f32(x.d + (xb + (uint32_t)(c >> 1)));
        return v;
    }
    static PK_HD float dot(const Unp &u, const X &x) {
        int s = pk_dp4a(u.v[0], (int)x.a.x, 0);
        s = pk_dp4a(u.v[1], (int)x.a.y, s);
        s = pk_dp4a(u.v[2], (int)x.a.z, s);
        s = pk_dp4a(u.v[3], (int)x.a.w, s);
        return u.d * x.dx * (float)s;
    }
};

/* isum of 8 words: lo against a, hi against b */
PK_HD int dot8(const int lo[4], const int hi[4], const uint4 &a, const uint4 &b) {
    int s = pk_dp4a(lo[0], (int)a.x, 0);
    s = pk_dp4a(lo[1], (int)a.y, s);
    s = pk_dp4a(lo[2], (int)a.z, s);
    s = pk_dp4a(lo[3], (int)a.w, s);
    s = pk_dp4a(hi[0], (int)b.x, s);
    s = pk_dp4a(hi[1], (int)b.y, s);
    s = pk_dp4a(hi[2], (int)b.z, s);
    return pk_dp4a(hi[3], (int)b.w, s);
}

PK_HD int dot4(const int w[4], const uint4 &a) {
    int s = pk_dp4a(w[0], (int)a.x, 0);
    s = pk_dp4a(w[1], (int)a.y, s);
    s = pk_dp4a(w[2], (int)a.z, s);
    return pk_dp4a(w[3], (int)a.w, s);
}

/* Q4_0, Q4_1, Q5_0, Q5_1: a chunk is one block of 32 */
template <int TY> struct GvLegacy {
    static constexpr bool kFive = TY == PACKED_Q5_0 || TY == PACKED_Q5_1;
    static constexpr bool kMin = TY == PACKED_Q4_1 || TY == PACKED_Q5_1;
    struct Raw {
        uint4 q;
        uint32_t s; /* f16 d, or d | m << 16 */
        uint32_t h; /* qh: bit j = fifth bit of element j */
    };
    struct Unp {
        int lo[4], hi[4]; /* elements 4i..4i+3 and 16+4i..16+4i+3 */
        float d, m;
    };
    struct X {
        uint4 a, b; /* codes 0..15, 16..31 */
        float dx, sd;
    };
    static PK_HD Raw load(const PkRow &r, int c) {
        Raw w;
        w.q = pk_ld_stream16(r.q + 16 * (int64_t)c);
        w.s = kMin ? pk_ld_stream4(r.s + 4 * (int64_t)c) : pk_ld_stream2(r.s + 2 * (int64_t)c);
        w.h = kFive ? pk_ld_stream4(r.h + 4 * (int64_t)c) : 0u;
        return w;
    }
    static PK_HD Unp unpack(const Raw &w, int) {
        Unp u;
        const uint32_t qw[4] = {w.q.x, w.q.y, w.q.z, w.q.w};
PK_UNROLL
        for (int i = 0; i < 4; i++) {
            uint32_t lo = qw[i] & 0x0f0f0f0fu, hi = (qw[i] >> 4) & 0x0f0f0f0fu;
            if (kFive) {
                lo |= spread4_bit4((w.h >> (4 * i)) & 15u);
                hi |= spread4_bit4((w.h >> (16 + 4 * i)) & 15u);
            }
            if (TY == PACKED_Q4_0) {
                lo = pk_vsub4(lo, 0x08080808u);
                hi = pk_vsub4(hi, 0x08080808u);
            } else if (TY == PACKED_Q5_0) {
                lo = pk_vsub4(lo, 0x10101010u);
                hi = pk_vsub4(hi, 0x10101010u);
            }
            u.lo[i] = (int)lo;
            u.hi[i] = (int)hi;
        }
        u.d = pk_f16(w.s);
        u.m = kMin ? pk_f16(w.s >> 16) : 0.0f;
        return u;
    }
    static PK_HD X load_x(const PkXq &x, uint32_t xb, int c) {
        X v;
        const uint32_t b = xb + (uint32_t)c;
        v.a = pk_ld_cached16(x.codes + 32 * b);
        v.b = pk_ld_cached16(x.codes + (32 * b + 16));
        v.dx = pk_ld_cached_f32(x.d + b);
        v.sd = kMin ? pk_ld_cached_f32(x.sd + b) : 0.0f;
        return v;
    }
    static PK_HD float dot(const Unp &u, const X &x) {
        const float r = u.d * x.dx * (float)dot8(u.lo, u.hi, x.a, x.b);
        return kMin ? r + u.m * x.sd : r;
    }
};
template <> struct Gv<PACKED_Q4_0> : GvLegacy<PACKED_Q4_0> {};
template <> struct Gv<PACKED_Q4_1> : GvLegacy<PACKED_Q4_1> {};
template <> struct Gv<PACKED_Q5_0> : GvLegacy<PACKED_Q5_0> {};
template <> struct Gv<PACKED_Q5_1> : GvLegacy<PACKED_Q5_1> {};

/* Q4_K, Q5_K: chunk c of a super-block (8 chunks of 16 qs bytes) is
 * cc = c % 8: pair p = cc / 2 (sub-blocks 2p, 2p+1), elements n0 = 16 (cc %
 * 2) .. n0 + 15 of each */
template <int TY> struct GvK45 {
    static constexpr bool kFive = TY == PACKED_Q5_K;
    struct Raw {
        uint4 q;
        uint4 s; /* f16 d | dmin << 16, scales[12] */
        uint4 h; /* qh[n0 .. n0 + 15]: bit j = fifth bit of sub-block j */
    };
    struct Unp {
        int lo[4], hi[4]; /* sub-blocks 2p, 2p+1 */
        float ds0, ds1;   /* d sc */
        float m0, m1;     /* dmin mn on even chunks, else 0 */
    };
    struct X {
        uint4 a, b;
        float dx0, dx1, sd0, sd1;
    };
    static PK_HD Raw load(const PkRow &r, int c) {
        Raw w;
        const int64_t sb = c >> 3;
        w.q = pk_ld_stream16(r.q + 16 * (int64_t)c);
        w.s = pk_ld_stream16(r.s + 16 * sb);
        w.h = kFive ? pk_ld_stream16(r.h + 32 * sb + 16 * (c & 1)) : make_uint4(0u, 0u, 0u, 0u);
        return w;
    }
    static PK_HD Unp unpack(const Raw &w, int c) {
        Unp u;
        const int p = (c >> 1) & 3;
        const uint32_t qw[4] = {w.q.x, w.q.y, w.q.z, w.q.w};
        const uint32_t hw[4] = {w.h.x, w.h.y, w.h.z, w.h.w};
PK_UNROLL
        for (int i = 0; i < 4; i++) {
            uint32_t lo = qw[i] & 0x0f0f0f0fu, hi = (qw[i] >> 4) & 0x0f0f0f0fu;
            if (kFive) {
                const uint32_t t = hw[i] >> (2 * p); /* bit 2p of each byte to bit 0 */
                lo |= (t << 4) & 0x10101010u;
                hi |= (t << 3) & 0x10101010u;
            }
            u.lo[i] = (int)lo;
            u.hi[i] = (int)hi;
        }
        int sc0, mn0, sc1, mn1;
        pk_k4_scale_min(w.s.y, w.s.z, w.s.w, 2 * p, sc0, mn0);
        pk_k4_scale_min(w.s.y, w.s.z, w.s.w, 2 * p + 1, sc1, mn1);
        const float d = pk_f16(w.s.x), dmin = (c & 1) ? 0.0f : pk_f16(w.s.x >> 16);
        u.ds0 = d * (float)sc0;
        u.ds1 = d * (float)sc1;
        u.m0 = dmin * (float)mn0;
        u.m1 = dmin * (float)mn1;
        return u;
    }
    static PK_HD X load_x(const PkXq &x, uint32_t xb, int c) {
        X v;
        /* the activation block of sub-block 2p */
        const uint32_t b = xb + 8 * (uint32_t)(c >> 3) + 2 * (uint32_t)((c >> 1) & 3);
        const uint32_t o = 32 * b + 16 * (uint32_t)(c & 1);
        v.a = pk_ld_cached16(x.codes + o);
        v.b = pk_ld_cached16(x.codes + (o + 32));
        v.dx0 = pk_ld_cached_f32(x.d + b);
        v.dx1 = pk_ld_cached_f32(x.d + (b + 1));
        v.sd0 = pk_ld_cached_f32(x.sd + b);
        v.sd1 = pk_ld_cached_f32(x.sd + (b + 1));
        return v;
    }
    static PK_HD float dot(const Unp &u, const X &x) {
        const float r = u.ds0 * x.dx0 * (float)dot4(u.lo, x.a) + u.ds1 * x.dx1 * (float)dot4(u.hi, x.b);
        return r - (u.m0 * x.sd0 + u.m1 * x.sd1);
    }
};
template <> struct Gv<PACKED_Q4_K> : GvK45<PACKED_Q4_K> {};
template <> struct Gv<PACKED_Q5_K> : GvK45<PACKED_Q5_K> {};

/* Q6_K: chunk cc = c % 8 of a super-block holds ql[16 cc .. 16 cc + 15]:
 * hf = cc / 4 (which 128), qa = (cc / 2) % 2, n0 = 16 (cc % 2); low nibbles
 * are elements 128 hf + 32 qa + n0 + i (quarter qa), high nibbles the same
 * + 64 (quarter qa + 2), their two high bits in qh[32 hf + n0 + i] at
 * 2 quarter. Each 16 elements share scale 8 hf + 2 qa + cc % 2 (+ 4). */
template <> struct Gv<PACKED_Q6_K> {
    struct Raw {
        uint4 q, h;
        uint2 s;    /* scales[8 hf .. 8 hf + 7] */
        uint32_t d; /* f16 */
    };
    struct Unp {
        int lo[4], hi[4];
        float ds0, ds1;
    };
    struct X {
        uint4 a, b;
        float dx0, dx1;
    };
    static PK_HD Raw load(const PkRow &r, int c) {
        Raw w;
        const int64_t sb = c >> 3;
        const int hf = (c >> 2) & 1;
        w.q = pk_ld_stream16(r.q + 16 * (int64_t)c);
        w.h = pk_ld_stream16(r.h + 64 * sb + 32 * hf + 16 * (c & 1));
        w.s = pk_ld_stream8(r.s + 16 * sb + 8 * hf);
        w.d = pk_ld_stream2(r.d + 2 * sb);
        return w;
    }
    static PK_HD Unp unpack(const Raw &w, int c) {
        Unp u;
        const int qa = (c >> 1) & 1;
        const uint32_t qw[4] = {w.q.x, w.q.y, w.q.z, w.q.w};
        const uint32_t hw[4] = {w.h.x, w.h.y, w.h.z, w.h.w};
PK_UNROLL
        for (int i = 0; i < 4; i++) {
            const uint32_t t = hw[i] >> (2 * qa); /* quarter qa's bits to 0..1, qa + 2's to 4..5 */
            const uint32_t lo = (qw[i] & 0x0f0f0f0fu) | ((t << 4) & 0x30303030u);
            const uint32_t hi = ((qw[i] >> 4) & 0x0f0f0f0fu) | (t & 0x30303030u);
            u.lo[i] = (int)pk_vsub4(lo, 0x20202020u);
            u.hi[i] = (int)pk_vsub4(hi, 0x20202020u);
        }
        const int sh = 8 * (c & 3);
        const float d = pk_f16(w.d);
        u.ds0 = d * (float)(int8_t)(uint8_t)(w.s.x >> sh);
        u.ds1 = d * (float)(int8_t)(uint8_t)(w.s.y >> sh);
        return u;
    }
    static PK_HD X load_x(const PkXq &x, uint32_t xb, int c) {
        X v;
        const int cc = c & 7;
        const uint32_t b = xb + 8 * (uint32_t)(c >> 3) + (uint32_t)(4 * (cc >> 2) + ((cc >> 1) & 1));
        const uint32_t o = 32 * b + 16 * (uint32_t)(cc & 1);
        v.a = pk_ld_cached16(x.codes + o);
        v.b = pk_ld_cached16(x.codes + (o + 64));
        v.dx0 = pk_ld_cached_f32(x.d + b);
        v.dx1 = pk_ld_cached_f32(x.d + (b + 2));
        return v;
    }
    static PK_HD float dot(const Unp &u, const X &x) {
        return u.ds0 * x.dx0 * (float)dot4(u.lo, x.a) + u.ds1 * x.dx1 * (float)dot4(u.hi, x.b);
    }
};

/* NF4, FP4: chunk c is half of block c / 2 (64 elements, 32 qs bytes):
 * its 16 bytes' low nibbles are elements 16 (c % 2) + i of the block,
 * activation block 2 (c / 2), and their high nibbles the same 32 later,
 * activation block 2 (c / 2) + 1. The codes become 16-bit table values
 * (packed.cuh: the table at 2^-14), multiplied with the activations by
 * __dp2a: the CPU's FAST arithmetic. */
template <int TY> struct GvCodebook {
    static constexpr int kTab = TY == PACKED_FP4;
    struct Raw {
        uint4 q;
        uint32_t s; /* f16 absmax */
    };
    struct Unp {
        uint32_t lo[8], hi[8]; /* 16-bit values of elements (2i, 2i + 1) of each half */
        float d;               /* absmax 2^-14 */
    };
    struct X {
        uint4 a, b;
        float dx0, dx1;
    };
    static PK_HD Raw load(const PkRow &r, int c) {
        Raw w;
        w.q = pk_ld_stream16(r.q + 16 * (int64_t)c);
        w.s = pk_ld_stream2(r.s + 2 * (int64_t)(c >> 1));
        return w;
    }
    static PK_HD Unp unpack(const Raw &w, int) {
        Unp u;
        const uint32_t qw[4] = {w.q.x, w.q.y, w.q.z, w.q.w};
PK_UNROLL
        for (int i = 0; i < 4; i++) {
            pk_cb_lookup4(kTab, qw[i] & 0x0f0f0f0fu, u.lo[2 * i], u.lo[2 * i + 1]);
            pk_cb_lookup4(kTab, (qw[i] >> 4) & 0x0f0f0f0fu, u.hi[2 * i], u.hi[2 * i + 1]);
        }
        u.d = pk_f16(w.s) * (1.0f / PK_CB_ONE);
        return u;
    }
    static PK_HD X load_x(const PkXq &x, uint32_t xb, int c) {
        X v;
        const uint32_t b = xb + 2 * (uint32_t)(c >> 1);
        const uint32_t o = 32 * b + 16 * (uint32_t)(c & 1);
        v.a = pk_ld_cached16(x.codes + o);
        v.b = pk_ld_cached16(x.codes + (o + 32));
        v.dx0 = pk_ld_cached_f32(x.d + b);
        v.dx1 = pk_ld_cached_f32(x.d + (b + 1));
        return v;
    }
    static PK_HD int dot16(const uint32_t w[8], const uint4 &a) {
        const uint32_t aw[4] = {a.x, a.y, a.z, a.w};
        int s = 0;
PK_UNROLL
        for (int i = 0; i < 4; i++) /* word i: activations 4i..4i+3 */
            s = pk_dp2a_hi(w[2 * i + 1], aw[i], pk_dp2a_lo(w[2 * i], aw[i], s));
        return s;
    }
    static PK_HD float dot(const Unp &u, const X &x) {
        return u.d * (x.dx0 * (float)dot16(u.lo, x.a) + x.dx1 * (float)dot16(u.hi, x.b));
    }
};
template <> struct Gv<PACKED_NF4> : GvCodebook<PACKED_NF4> {};
template <> struct Gv<PACKED_FP4> : GvCodebook<PACKED_FP4> {};

struct GvArgs {
    void *y;
    bool y_ck;
    ck_dtype dt;
    int64_t ldy;
    PkXq xq;      /* this launch's first activation row */
    PkPlanes w;
    const float *bias;
    int nx;       /* activation rows of the launch (the kernel's NX) */
};

/* NX activation rows, RPW weight rows a warp, U chunks a row in flight */
template <int TY, int NX, int RPW, int U>
__global__ void __launch_bounds__(kThreads, 2) gemv_packed_kernel(GvArgs a) {
    static_assert(RPW * NX <= 32, "one output per lane in the final store");
    using G = Gv<TY>;
    const int lane = threadIdx.x & 31;
    const int64_t row0 = ((int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5)) * RPW;
    const int N = a.w.N, K = a.w.K;
    if (row0 >= N)
        return; /* whole warp: row0 is warp-uniform */

    PkRow rows[RPW];
#pragma unroll
    for (int r = 0; r < RPW; r++) {
        const int64_t row = row0 + r < N ? row0 + r : (int64_t)N - 1;
        rows[r].q = a.w.q + row * a.w.rq;
        rows[r].h = a.w.h + row * a.w.rh;
        rows[r].s = a.w.s + row * a.w.rs;
        rows[r].d = a.w.d + row * a.w.rd;
    }
    const int n_chunk = (int)(a.w.rq / 16);

    /* Every load of a round is issued before any is used. The per-chunk
     * branch is kept on purpose (gemv.cu: a branch-free, zero-padded round
     * lets ptxas sink each load next to its use). */
    typename G::Raw raw[U][RPW];
    auto load_round = [&](int base) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = base + u * 32 + lane;
#pragma unroll
            for (int r = 0; r < RPW; r++) {
                if (c < n_chunk)
                    raw[u][r] = G::load(rows[r], c);
                else
                    raw[u][r] = typename G::Raw{};
            }
        }
    };
    load_round(0); /* the weights depend on no kernel: before the wait */
    pdl_wait();
    pdl_release();

    float acc[RPW][NX];
#pragma unroll
    for (int r = 0; r < RPW; r++)
#pragma unroll
        for (int q = 0; q < NX; q++)
            acc[r][q] = 0.0f;

    /* activation blocks a row (offsets into the launch's <= 8 rows of
     * activations fit 32 bits) */
    const uint32_t nb = (uint32_t)K / 32;
    for (int base = 0; base < n_chunk; base += 32 * U) {
        if (base > 0)
            load_round(base);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = base + u * 32 + lane;
            if (c >= n_chunk)
                continue;
            typename G::Unp w[RPW];
#pragma unroll
            for (int r = 0; r < RPW; r++)
                w[r] = G::unpack(raw[u][r], c);
#pragma unroll
            for (int q = 0; q < NX; q++) {
                /* never taken (a.nx == NX), but a block boundary every
                 * kRowGroup rows: ptxas hoists loads only within a block,
                 * and hoisting all 8 rows' activations ahead of any use
                 * took 128 registers and spilled the K-quants */
                if (q > 0 && q % kRowGroup == 0 && a.nx <= q)
                    break;
                const typename G::X xv = G::load_x(a.xq, (uint32_t)q * nb, c);
#pragma unroll
                for (int r = 0; r < RPW; r++)
                    acc[r][q] += G::dot(w[r], xv);
            }
        }
    }

    /* butterfly: every lane ends with every sum */
#pragma unroll
    for (int r = 0; r < RPW; r++)
#pragma unroll
        for (int q = 0; q < NX; q++)
            acc[r][q] = warp_sum(acc[r][q]);

    /* lane r NX + q stores output (q, row0 + r); indices stay compile-time
     * so acc stays in registers */
#pragma unroll
    for (int r = 0; r < RPW; r++) {
        const int64_t row = row0 + r;
#pragma unroll
        for (int q = 0; q < NX; q++)
            if (lane == r * NX + q && row < N) {
                const float v = a.bias ? acc[r][q] + a.bias[row] : acc[r][q];
                const int64_t o = q * a.ldy + row;
                if (!a.y_ck)
                    static_cast<float *>(a.y)[o] = v;
                else if (a.dt == CK_BF16)
                    ck_from_f32(static_cast<__nv_bfloat16 *>(a.y) + o, v);
                else
                    ck_from_f32(static_cast<__half *>(a.y) + o, v);
            }
    }
}

template <int TY, int NX, int RPW, int U> void gemv_packed_cfg(cudaStream_t s, const GvArgs &a) {
    const int64_t rows_per_block = (int64_t)RPW * kWarps;
    const int64_t n_block = (a.w.N + rows_per_block - 1) / rows_per_block;
    ck_launch(s, (unsigned)n_block, kThreads, 0, gemv_packed_kernel<TY, NX, RPW, U>, a);
}

/* Production choice, (rows a warp, chunks a row in flight) by type and
 * activation rows: two rows a warp as gemv.cu (x reused for both), two
 * chunks a row in flight (4 x 16 bytes of q a lane, plus the side planes),
 * but one for Q5_K from 3 rows on, the heaviest chunk (q, qh and scales:
 * 12 registers a row and chunk), which would reach the 128 registers two
 * blocks an SM allow. An estimate (no device where this was written):
 * packed_check times the alternatives on the device. */
template <int TY, int NX> struct GvCfg {
    static constexpr int kRpw = 2;
    static constexpr int kU = (TY == PACKED_Q5_K && NX >= 3) ? 1 : 2;
};

template <int TY, int NX> void gemv_packed_prod(cudaStream_t s, const GvArgs &a) {
    gemv_packed_cfg<TY, NX, GvCfg<TY, NX>::kRpw, GvCfg<TY, NX>::kU>(s, a);
}

/* a launcher of up to 8 activation rows (nx), the configuration fixed */
typedef void (*GvLaunch)(cudaStream_t s, const GvArgs &a, int nx);

template <int TY> void gemv_packed_prod_nx(cudaStream_t s, const GvArgs &a, int nx) {
    switch (nx) {
    case 1: gemv_packed_prod<TY, 1>(s, a); break;
    case 2: gemv_packed_prod<TY, 2>(s, a); break;
    case 3: gemv_packed_prod<TY, 3>(s, a); break;
    case 4: gemv_packed_prod<TY, 4>(s, a); break;
    case 5: gemv_packed_prod<TY, 5>(s, a); break;
    case 6: gemv_packed_prod<TY, 6>(s, a); break;
    case 7: gemv_packed_prod<TY, 7>(s, a); break;
    default: gemv_packed_prod<TY, 8>(s, a); break;
    }
}

/* one configuration for every nx (packed_check's timing of alternatives) */
template <int TY, int RPW, int U> void gemv_packed_nx(cudaStream_t s, const GvArgs &a, int nx) {
    switch (nx) {
    case 1: gemv_packed_cfg<TY, 1, RPW, U>(s, a); break;
    case 2: gemv_packed_cfg<TY, 2, RPW, U>(s, a); break;
    case 3: gemv_packed_cfg<TY, 3, RPW, U>(s, a); break;
    case 4: gemv_packed_cfg<TY, 4, RPW, U>(s, a); break;
    case 5: gemv_packed_cfg<TY, 5, RPW, U>(s, a); break;
    case 6: gemv_packed_cfg<TY, 6, RPW, U>(s, a); break;
    case 7: gemv_packed_cfg<TY, 7, RPW, U>(s, a); break;
    default: gemv_packed_cfg<TY, 8, RPW, U>(s, a); break;
    }
}

/* y, xq, W, bias as ck_gemv_packed; n rows in launches of up to 8 */
void gemv_packed_run(GvLaunch launch, cudaStream_t s, void *y, bool y_ck, int64_t ldy,
                     const void *xq, const packed_matrix *W, const float *bias, ck_dtype dt,
                     int n) {
    const int K = (int)W->K;
    const PkXq all = pk_xq_view(xq, n, K);
    const int64_t nb = K / 32;
    const size_t y_elem = y_ck ? 2 : 4;
    for (int r0 = 0; r0 < n; r0 += CK_GEMV_MAX_ROWS) {
        const int nr = n - r0 < CK_GEMV_MAX_ROWS ? n - r0 : CK_GEMV_MAX_ROWS;
        GvArgs a;
        a.y = static_cast<char *>(y) + (size_t)r0 * (size_t)ldy * y_elem;
        a.y_ck = y_ck;
        a.dt = dt;
        a.ldy = ldy;
        a.xq.codes = all.codes + (int64_t)r0 * K;
        a.xq.d = all.d + (int64_t)r0 * nb;
        a.xq.sd = all.sd + (int64_t)r0 * nb;
        a.w = pk_planes(W);
        a.bias = bias;
        a.nx = nr;
        launch(s, a, nr);
    }
}

/* ---- activation quantization: 4 lanes a block of 32, 8 elements a lane */
template <typename T, bool VEC>
__global__ void __launch_bounds__(kThreads)
    quantize_x_kernel(int8_t *codes, float *d, float *sd, const T *x, int64_t ldx, int n, int K) {
    pdl_wait();
    pdl_release();
    const int g = blockIdx.x * kThreads + threadIdx.x; /* group of 8 in the row */
    const bool ok = g < K / 8; /* whole blocks: K / 8 is a multiple of 4 */
    const int64_t nb = K / 32;
    for (int64_t row = blockIdx.y; row < n; row += gridDim.y) {
        float v[8];
        const T *xp = x + row * ldx + 8 * (int64_t)g;
        if (ok && VEC) {
            ck_load_n<T, 8>(xp, v);
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++)
                v[i] = ok ? ck_to_f32(xp[i]) : 0.0f;
        }
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++)
            amax = fmaxf(amax, fabsf(v[i]));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
        /* the CPU's rule: id = 127 / amax, q = rint(x id), d = amax / 127 */
        const float id = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
        int sum = 0;
        uint32_t w[2] = {0u, 0u};
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int q = __float2int_rn(__fmul_rn(v[i], id));
            sum += q;
            w[i / 4] |= (uint32_t)(uint8_t)(int8_t)q << (8 * (i & 3));
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        if (ok) {
            *reinterpret_cast<uint2 *>(codes + row * K + 8 * (int64_t)g) = make_uint2(w[0], w[1]);
            if ((threadIdx.x & 3) == 0) {
                const float dv = __fdiv_rn(amax, 127.0f);
                d[row * nb + g / 4] = dv;
                sd[row * nb + g / 4] = __fmul_rn(dv, (float)sum);
            }
        }
    }
}

} // namespace

extern "C" size_t ck_xq_bytes(int n, int K) {
    return pk_xq_sd_off(n, K) + pk_align16((size_t)n * (size_t)(K / 32) * 4);
}

extern "C" void ck_quantize_x(cudaStream_t s, void *xq, const void *x, int64_t ldx, ck_dtype dt,
                              int n, int K) {
    if (n <= 0 || K <= 0)
        return;
    const PkXq v = pk_xq_view(xq, n, K);
    int8_t *codes = const_cast<int8_t *>(v.codes);
    float *d = const_cast<float *>(v.d), *sd = const_cast<float *>(v.sd);
    const bool vec = ((uintptr_t)x & 15u) == 0 && (n == 1 || ldx % 8 == 0);
    const dim3 grid((unsigned)((K / 8 + kThreads - 1) / kThreads), (unsigned)(n < 65535 ? n : 65535));
    CK_DISPATCH(dt, vec ? ck_launch(s, grid, kThreads, 0, quantize_x_kernel<T, true>, codes, d, sd,
                                    (const T *)x, ldx, n, K)
                        : ck_launch(s, grid, kThreads, 0, quantize_x_kernel<T, false>, codes, d,
                                    sd, (const T *)x, ldx, n, K));
}

extern "C" void ck_gemv_packed(cudaStream_t s, void *y, bool y_ck, int64_t ldy, const void *xq,
                               const packed_matrix *W, const float *bias, ck_dtype dt, int n) {
    if (n <= 0 || W->N <= 0 || W->K <= 0)
        return;
    GvLaunch launch = nullptr;
    PK_DISPATCH(W->type, launch = gemv_packed_prod_nx<TY>);
    if (launch)
        gemv_packed_run(launch, s, y, y_ck, ldy, xq, W, bias, dt, n);
}
