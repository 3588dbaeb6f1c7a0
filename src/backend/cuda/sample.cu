/*
 * sample.cu — one token per row of logits (n, V) f32: greedy, or temperature
 * then top-k, top-p, min-p and a draw, in the CPU sampler's order
 * (engine/sampler.c). One block of 1024 threads per row; no global scratch,
 * no host sync: the launch is graph-capturable.
 *
 * Order and ties. Tokens are ranked by logit, then by lower id (a unique
 * 64-bit key: order-preserving logit bits << 32 | ~id). Every filter keeps a
 * prefix of that ranking, so the kept set is {key >= theta} (and the min-p
 * test). Ranking uses the raw logit l, not l / T: the same order, except
 * where the division rounds two different logits to one value. Greedy
 * (T <= 0, or top_k == 1) is the argmax, lowest id on ties. A row holding NaN
 * or +inf, or no finite logit, gives -1: the engine fails that request (its
 * arithmetic broke); -inf alone is a mask.
 *
 * Mass. p_i ~ m_i = (u64)(2^(40 - x_i)), x_i = (l_max - l_i) log2(e) / T,
 * exact integer sums in any order, so a (seed, step) reproduces its token
 * run after run. Tokens with m_i = 0 (probability below 2^-40 of the best)
 * are "dead": never drawn, and top-k / top-p only rank live tokens (dead
 * ones cannot change which live token is drawn).
 *
 * Selection without a full sort: a 2048-bin histogram (count, mass) over
 * d = l_max - l in [0, live range) finds the bin where the k-th token / the
 * top-p mass falls; the bin (or, when it fits, every bin above it too: the
 * whole prefix) is gathered into shared memory, bitonic-sorted by key and
 * scanned exactly. A bin of more than 2048 tokens (massive ties) is split
 * again over its key range, 11 bits per pass, until it fits. When the kept
 * prefix is in shared memory the draw is made there; otherwise one more pass
 * sums the kept mass per thread, a block scan finds the thread holding the
 * drawn position, and warp 0 walks that thread's elements.
 *
 * Cost (passes over the row; each pass ~ V / 1024 elements per thread, from
 * L1 at V = 32000, from L2 at 128256): greedy 1; temperature only 2; top-k or
 * top-p 3 when the prefix fits 2048 tokens, else 4; top-k and top-p 3..6.
 * One launch for one row takes 12-45 us at V = 32000 and 25-141 us at
 * 128256 on the H200, greedy the least, top-p the most
 * (tests/cuda/gemv_sample_check.cu; figures and a batched-load variant
 * that was not merged: docs/journal/host.md).
 * Rejected: bisection on the threshold value (32+ passes), radix select on
 * raw float bits (logits pile into a few exponent buckets and serialise the
 * shared atomics), a full sort (V log V).
 *
 * Random number: h = mix(mix(seed ^ K1) + step * K2), mix = splitmix64's
 * finaliser (a bijection, so distinct steps of a seed give distinct h); the
 * draw is floor(h * M / 2^64) within the kept mass M. The row index is not
 * mixed in, so a request's draws do not depend on its slot in the batch.
 */
#include "backend/cuda/common.cuh"

#include <math.h>
#include <stdint.h>

namespace {

typedef unsigned long long u64;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 2 * kThreads; /* each thread owns two bins in the scans */
constexpr int kCap = 2 * kThreads;  /* gathered candidates: two per thread */
constexpr int kBinBits = 11;        /* log2(kBins): key bits resolved per split pass */
constexpr float kMassBits = 40.0f;  /* m = 2^(40 - x): V <= 2^23 keeps sums < 2^63 */
static_assert(kWarps == 32, "warp 0 scans one value per warp");
static_assert(kBins == 1 << kBinBits, "bins");

struct Smem {
    unsigned hcnt[kBins];
    u64 hmass[kBins];
    u64 keys[kCap];
    u64 wa[kWarps], wb[kWarps];
    /* broadcast slots */
    float red_f[kWarps], red_g[kWarps];
    int red_i[kWarps];
    unsigned n_gather;
    int sel_bin;
    u64 sel_above_cnt, sel_above_mass, sel_cum_cnt;
    int found;
    u64 found_key, found_cnt, found_mass;
    int draw_t;
    u64 draw_r;
    int token;
};

/* Row constants, identical in every thread. */
struct Row {
    const float *l;
    int V;
    float lmax;
    float c;    /* log2(e) / T */
    float s;    /* histogram bins per unit of d */
    float dcut; /* min-p: keep d <= dcut */
    bool minp;
    int amax;
};

struct Elem {
    u64 key;
    u64 m;
    float d;
    bool live;
};

/* keys, canonical logits: common.cuh (ck_logit_*); the inverse of ck_logit_ord */
__device__ __forceinline__ float from_ord(uint32_t o) {
    return __uint_as_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}

/* Explicit _rn operations: the same value in every pass, no contraction. */
__device__ __forceinline__ Elem eval_l(const Row &r, float l, int i) {
    Elem e;
    e.key = ck_logit_key(l, i);
    e.d = __fsub_rn(r.lmax, l);
    const float x = __fmul_rn(e.d, r.c);
    e.live = x <= kMassBits; /* false for NaN (inf * 0) */
    e.m = e.live ? (u64)exp2f(__fsub_rn(kMassBits, x)) : 0ull;
    return e;
}

__device__ __forceinline__ Elem eval_i(const Row &r, int i) {
    return eval_l(r, ck_logit_canon(r.l[i]), i);
}

__device__ __forceinline__ Elem eval_key(const Row &r, u64 key) {
    return eval_l(r, from_ord((uint32_t)(key >> 32)), ck_logit_key_id(key));
}

__device__ __forceinline__ unsigned bin0(const Row &r, float d) {
    return (unsigned)fminf(__fmul_rn(d, r.s), (float)(kBins - 1));
}

__device__ __forceinline__ bool minp_ok(const Row &r, const Elem &e) {
    return !r.minp || e.d <= r.dcut || ck_logit_key_id(e.key) == r.amax;
}

__device__ __forceinline__ u64 mix64(u64 z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Exclusive scan of 2 * kThreads items in thread order, thread t holding
 * items 2t and 2t + 1 with values (a0, b0) and (a1, b1). Gives the prefix
 * before item 2t and the totals. */
__device__ void scan2(Smem &sm, u64 a0, u64 b0, u64 a1, u64 b1, u64 &ea, u64 &eb, u64 &ta,
                      u64 &tb) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u64 sa = a0 + a1, sb = b0 + b1;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        u64 xa = __shfl_up_sync(0xffffffffu, sa, o), xb = __shfl_up_sync(0xffffffffu, sb, o);
        if (lane >= o) {
            sa += xa;
            sb += xb;
        }
    }
    __syncthreads(); /* the previous user of wa / wb is done */
    if (lane == 31) {
        sm.wa[warp] = sa;
        sm.wb[warp] = sb;
    }
    __syncthreads();
    if (warp == 0) {
        u64 va = sm.wa[lane], vb = sm.wb[lane];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            u64 xa = __shfl_up_sync(0xffffffffu, va, o), xb = __shfl_up_sync(0xffffffffu, vb, o);
            if (lane >= o) {
                va += xa;
                vb += xb;
            }
        }
        sm.wa[lane] = va;
        sm.wb[lane] = vb;
    }
    __syncthreads();
    ea = (warp ? sm.wa[warp - 1] : 0ull) + sa - (a0 + a1);
    eb = (warp ? sm.wb[warp - 1] : 0ull) + sb - (b0 + b1);
    ta = sm.wa[kWarps - 1];
    tb = sm.wb[kWarps - 1];
}

/* Across the warp: the max (lowest id on ties) with its id, and the min. */
__device__ __forceinline__ void warp_extremes(float &mx, int &ix, float &mn) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float omx = __shfl_xor_sync(0xffffffffu, mx, o);
        const int oix = __shfl_xor_sync(0xffffffffu, ix, o);
        mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o));
        if (omx > mx || (omx == mx && oix < ix)) {
            mx = omx;
            ix = oix;
        }
    }
}

/* Pass 1: max logit (lowest id on ties) and min logit of the row. */
__device__ void row_extremes(Smem &sm, const float *l, int V, float &lmax, float &lmin,
                             int &amax, bool &broken) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float mx = -INFINITY, mn = INFINITY;
    int ix = 0x7fffffff, bad = 0;
    for (int i = threadIdx.x; i < V; i += kThreads) {
        const float raw = l[i], v = ck_logit_canon(raw);
        bad |= raw != raw || raw == INFINITY;
        if (v > mx || (v == mx && i < ix)) {
            mx = v;
            ix = i;
        }
        mn = fminf(mn, v);
    }
    warp_extremes(mx, ix, mn);
    broken = __syncthreads_or(bad) != 0;
    if (lane == 0) {
        sm.red_f[warp] = mx;
        sm.red_g[warp] = mn;
        sm.red_i[warp] = ix;
    }
    __syncthreads();
    if (warp == 0) {
        mx = sm.red_f[lane];
        mn = sm.red_g[lane];
        ix = sm.red_i[lane];
        warp_extremes(mx, ix, mn);
        if (lane == 0) {
            sm.red_f[0] = mx;
            sm.red_g[0] = mn;
            sm.red_i[0] = ix;
        }
    }
    __syncthreads();
    lmax = sm.red_f[0];
    lmin = sm.red_g[0];
    amax = sm.red_i[0];
    /* V >= 1, so some thread saw index 0 and ix is a real index; this only
     * guards the contract */
    if (amax < 0 || amax >= V)
        amax = 0;
}

/* Adds (1, m) to bin b. Shared 64-bit adds are compare-and-swap loops, so a
 * warp whose members all hit one bin (ties, a flat row) adds once. */
__device__ __forceinline__ void hist_add(Smem &sm, bool member, unsigned b, u64 m, bool by_mass) {
    const unsigned ball = __ballot_sync(0xffffffffu, member);
    if (ball == 0u)
        return;
    const int lane = threadIdx.x & 31;
    const unsigned b_first = __shfl_sync(0xffffffffu, b, __ffs(ball) - 1);
    if (__all_sync(0xffffffffu, !member || b == b_first)) {
        u64 sum = member ? m : 0ull;
        if (by_mass)
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == __ffs(ball) - 1) {
            atomicAdd(&sm.hcnt[b_first], (unsigned)__popc(ball));
            if (by_mass)
                atomicAdd(&sm.hmass[b_first], sum);
        }
    } else if (member) {
        atomicAdd(&sm.hcnt[b], 1u);
        if (by_mass)
            atomicAdd(&sm.hmass[b], m);
    }
}

__device__ void hist_clear(Smem &sm) {
    __syncthreads(); /* previous readers of the bins are done */
    for (int b = threadIdx.x; b < kBins; b += kThreads) {
        sm.hcnt[b] = 0u;
        sm.hmass[b] = 0ull;
    }
    __syncthreads();
}

/* The weight a target is measured in: a count (top-k) or a mass (top-p). */
__device__ __forceinline__ double weight(bool by_mass, u64 cnt, u64 mass) {
    return by_mass ? (double)mass : (double)cnt;
}

/* Finds the bin where above + cumulative weight first reaches target: the
 * bin b with above + excl(b) < target <= above + incl(b). Sets sel_bin (-1
 * if none), sel_above_* (the weight before b, above included) and
 * sel_cum_cnt (the count through b, above excluded). Returns the totals. */
__device__ void find_bin(Smem &sm, bool by_mass, double target, u64 above_cnt, u64 above_mass,
                         u64 &tot_cnt, u64 &tot_mass) {
    const int b0 = 2 * threadIdx.x, b1 = b0 + 1;
    const u64 c0 = sm.hcnt[b0], c1 = sm.hcnt[b1];
    const u64 m0 = sm.hmass[b0], m1 = sm.hmass[b1];
    __syncthreads(); /* readers of the previous sel_* are done */
    if (threadIdx.x == 0)
        sm.sel_bin = -1;
    u64 ec, em;
    scan2(sm, c0, m0, c1, m1, ec, em, tot_cnt, tot_mass);
    const u64 ec1 = ec + c0, em1 = em + m0;
    if (weight(by_mass, above_cnt + ec, above_mass + em) < target &&
        target <= weight(by_mass, above_cnt + ec1, above_mass + em1)) {
        sm.sel_bin = b0;
        sm.sel_above_cnt = above_cnt + ec;
        sm.sel_above_mass = above_mass + em;
        sm.sel_cum_cnt = ec1;
    } else if (weight(by_mass, above_cnt + ec1, above_mass + em1) < target &&
               target <= weight(by_mass, above_cnt + ec1 + c1, above_mass + em1 + m1)) {
        sm.sel_bin = b1;
        sm.sel_above_cnt = above_cnt + ec1;
        sm.sel_above_mass = above_mass + em1;
        sm.sel_cum_cnt = ec1 + c1;
    }
    __syncthreads();
}

enum GatherMode { GATHER_PREFIX, GATHER_BIN, GATHER_RANGE };

/* Collects the keys of the members selected by mode into sm.keys and sorts
 * them in descending order. Returns how many (at most kCap). */
__device__ int gather_sort(Smem &sm, const Row &r, u64 kfloor, GatherMode mode, unsigned bin,
                           u64 klo, u64 khi) {
    __syncthreads(); /* previous readers of keys are done */
    if (threadIdx.x == 0)
        sm.n_gather = 0u;
    __syncthreads();
    for (int i = threadIdx.x; i < r.V; i += kThreads) {
        const Elem e = eval_i(r, i);
        if (!e.live || e.key < kfloor)
            continue;
        bool take;
        if (mode == GATHER_RANGE)
            take = e.key >= klo && e.key <= khi;
        else if (mode == GATHER_BIN)
            take = bin0(r, e.d) == bin;
        else
            take = bin0(r, e.d) <= bin;
        if (take) {
            const unsigned slot = atomicAdd(&sm.n_gather, 1u);
            if (slot < (unsigned)kCap)
                sm.keys[slot] = e.key;
        }
    }
    __syncthreads();
    const int n = sm.n_gather < (unsigned)kCap ? (int)sm.n_gather : kCap;
    int p = 1;
    while (p < n)
        p <<= 1;
    /* pad with key 0, below every real key (ord(-inf) << 32 > 0) */
    for (int i = n + (int)threadIdx.x; i < p; i += kThreads)
        sm.keys[i] = 0ull;
    __syncthreads();
    /* bitonic sort, descending */
    for (int k = 2; k <= p; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < p; i += kThreads) {
                const int o = i ^ j;
                if (o > i) {
                    const u64 a = sm.keys[i], b = sm.keys[o];
                    const bool desc = (i & k) == 0;
                    if (desc ? a < b : a > b) {
                        sm.keys[i] = b;
                        sm.keys[o] = a;
                    }
                }
            }
            __syncthreads();
        }
    return n;
}

/* Scans sorted keys[0 .. n) with weights (1, m) from above_*; finds the first
 * item j where the cumulative weight reaches target. Sets found (j, -1 if
 * none), found_key, and found_cnt / found_mass: the totals through j. */
__device__ void scan_sorted(Smem &sm, const Row &r, int n, bool by_mass, double target,
                            u64 above_cnt, u64 above_mass) {
    const int j0 = 2 * threadIdx.x, j1 = j0 + 1;
    const u64 m0 = j0 < n ? eval_key(r, sm.keys[j0]).m : 0ull;
    const u64 m1 = j1 < n ? eval_key(r, sm.keys[j1]).m : 0ull;
    const u64 c0 = j0 < n ? 1ull : 0ull, c1 = j1 < n ? 1ull : 0ull;
    __syncthreads(); /* readers of the previous found* are done */
    if (threadIdx.x == 0)
        sm.found = -1;
    u64 ec, em, tc, tm;
    scan2(sm, c0, m0, c1, m1, ec, em, tc, tm);
    const u64 ac = above_cnt + ec, am = above_mass + em;
    if (j0 < n && weight(by_mass, ac, am) < target &&
        target <= weight(by_mass, ac + c0, am + m0)) {
        sm.found = j0;
        sm.found_key = sm.keys[j0];
        sm.found_cnt = ac + c0;
        sm.found_mass = am + m0;
    } else if (j1 < n && weight(by_mass, ac + c0, am + m0) < target &&
               target <= weight(by_mass, ac + c0 + c1, am + m0 + m1)) {
        sm.found = j1;
        sm.found_key = sm.keys[j1];
        sm.found_cnt = ac + c0 + c1;
        sm.found_mass = am + m0 + m1;
    }
    __syncthreads();
}

struct Sel {
    bool cut;     /* false: the target covers every member, nothing removed */
    u64 theta;    /* kept: key >= theta */
    u64 mass;     /* mass of the kept members; set only when n_sorted > 0 */
    int n_sorted; /* > 0: keys[0 .. n_sorted) hold the whole kept prefix, sorted */
    int j;        /* index of theta in keys when n_sorted > 0 */
};

/* Among members (live, key >= kfloor): top-k (by_mass false, keep k) or
 * top-p (by_mass true, keep the shortest prefix whose mass reaches frac of
 * the members' mass). */
__device__ Sel select_prefix(Smem &sm, const Row &r, u64 kfloor, bool by_mass, u64 k, double frac) {
    Sel out = {false, kfloor, 0ull, 0, -1};
    /* level 0: histogram over d */
    hist_clear(sm);
    for (int base = 0; base < r.V; base += kThreads) {
        const int i = base + (int)threadIdx.x;
        Elem e = {0ull, 0ull, 0.0f, false};
        if (i < r.V)
            e = eval_i(r, i);
        const bool member = e.live && e.key >= kfloor;
        hist_add(sm, member, member ? bin0(r, e.d) : 0u, e.m, by_mass);
    }
    __syncthreads();
    /* mass bins are only filled for top-p (the 64-bit adds cost): a top-k
     * result knows its kept mass only when it gathered the whole prefix */
    u64 tot_cnt, tot_mass;
    double target = (double)k;
    if (by_mass) {
        /* the totals come with the scan; run it once to learn them */
        find_bin(sm, true, 0.0, 0ull, 0ull, tot_cnt, tot_mass);
        target = frac * (double)tot_mass;
        find_bin(sm, true, target, 0ull, 0ull, tot_cnt, tot_mass);
    } else {
        find_bin(sm, false, target, 0ull, 0ull, tot_cnt, tot_mass);
        if ((u64)k >= tot_cnt)
            return out; /* every live member is in the top k */
    }
    if (sm.sel_bin < 0)
        return out; /* unreachable by construction; keeping all is safe */
    const unsigned b = (unsigned)sm.sel_bin;
    u64 above_cnt = sm.sel_above_cnt, above_mass = sm.sel_above_mass;
    int n;
    bool prefix = false;
    if (sm.sel_cum_cnt <= (u64)kCap) {
        /* bins 0 .. b hold the whole prefix and fit: gather all of it */
        n = gather_sort(sm, r, kfloor, GATHER_PREFIX, b, 0ull, 0ull);
        above_cnt = 0ull;
        above_mass = 0ull;
        prefix = true;
    } else if (sm.hcnt[b] <= (unsigned)kCap) {
        n = gather_sort(sm, r, kfloor, GATHER_BIN, b, 0ull, 0ull);
    } else {
        /* too many in one bin: find its key range, then split the range */
        u64 kmin = ~0ull, kmax = 0ull;
        for (int i = threadIdx.x; i < r.V; i += kThreads) {
            const Elem e = eval_i(r, i);
            if (e.live && e.key >= kfloor && bin0(r, e.d) == b) {
                kmin = e.key < kmin ? e.key : kmin;
                kmax = e.key > kmax ? e.key : kmax;
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const u64 a = __shfl_xor_sync(0xffffffffu, kmin, o);
            const u64 c = __shfl_xor_sync(0xffffffffu, kmax, o);
            kmin = a < kmin ? a : kmin;
            kmax = c > kmax ? c : kmax;
        }
        __syncthreads();
        if ((threadIdx.x & 31) == 0) {
            sm.wa[threadIdx.x >> 5] = kmin;
            sm.wb[threadIdx.x >> 5] = kmax;
        }
        __syncthreads();
        u64 klo = ~0ull, khi = 0ull;
        for (int w = 0; w < kWarps; w++) {
            klo = sm.wa[w] < klo ? sm.wa[w] : klo;
            khi = sm.wb[w] > khi ? sm.wb[w] : khi;
        }
        for (;;) {
            const u64 span = khi - klo;
            const int bits = span ? 64 - __clzll((long long)span) : 0;
            const int shift = bits > kBinBits ? bits - kBinBits : 0;
            hist_clear(sm);
            for (int base = 0; base < r.V; base += kThreads) {
                const int i = base + (int)threadIdx.x;
                Elem e = {0ull, 0ull, 0.0f, false};
                if (i < r.V)
                    e = eval_i(r, i);
                const bool member = e.live && e.key >= kfloor && e.key >= klo && e.key <= khi;
                hist_add(sm, member, member ? (unsigned)((khi - e.key) >> shift) : 0u, e.m,
                         by_mass);
            }
            __syncthreads();
            find_bin(sm, by_mass, target, above_cnt, above_mass, tot_cnt, tot_mass);
            if (sm.sel_bin < 0)
                return out; /* unreachable by construction */
            const unsigned sb = (unsigned)sm.sel_bin;
            above_cnt = sm.sel_above_cnt;
            above_mass = sm.sel_above_mass;
            const u64 mask = (shift ? (1ull << shift) : 1ull) - 1ull;
            khi -= (u64)sb << shift;
            klo = khi - klo < mask ? klo : khi - mask;
            if (sm.hcnt[sb] <= (unsigned)kCap)
                break;
        }
        n = gather_sort(sm, r, kfloor, GATHER_RANGE, 0u, klo, khi);
    }
    scan_sorted(sm, r, n, by_mass, target, above_cnt, above_mass);
    if (sm.found < 0)
        return out; /* unreachable by construction */
    out.cut = true;
    out.theta = sm.found_key;
    out.mass = sm.found_mass;
    if (prefix) {
        out.n_sorted = n;
        out.j = sm.found;
    }
    return out;
}

/* Draw among keys[0 .. n) (sorted, the kept prefix) passing min-p. */
__device__ int draw_sorted(Smem &sm, const Row &r, int n, u64 h) {
    const int j0 = 2 * threadIdx.x, j1 = j0 + 1;
    u64 w0 = 0ull, w1 = 0ull;
    if (j0 < n) {
        const Elem e = eval_key(r, sm.keys[j0]);
        w0 = minp_ok(r, e) ? e.m : 0ull;
    }
    if (j1 < n) {
        const Elem e = eval_key(r, sm.keys[j1]);
        w1 = minp_ok(r, e) ? e.m : 0ull;
    }
    __syncthreads(); /* readers of the previous found* are done */
    if (threadIdx.x == 0)
        sm.token = -1;
    u64 e0, unused_e, tot, unused_t;
    scan2(sm, w0, 0ull, w1, 0ull, e0, unused_e, tot, unused_t);
    const u64 x = __umul64hi(h, tot);
    if (w0 && e0 <= x && x < e0 + w0)
        sm.token = ck_logit_key_id(sm.keys[j0]);
    else if (w1 && e0 + w0 <= x && x < e0 + w0 + w1)
        sm.token = ck_logit_key_id(sm.keys[j1]);
    __syncthreads();
    return sm.token >= 0 ? sm.token : r.amax;
}

/* Draw over the whole row among live tokens with key >= theta passing
 * min-p. Position order: thread t's elements t, t + 1024, ... then t + 1's. */
__device__ int draw_pass(Smem &sm, const Row &r, u64 theta, u64 h) {
    u64 own = 0ull;
    for (int i = threadIdx.x; i < r.V; i += kThreads) {
        const Elem e = eval_i(r, i);
        if (e.live && e.key >= theta && minp_ok(r, e))
            own += e.m;
    }
    __syncthreads(); /* readers of the previous found* are done */
    if (threadIdx.x == 0) {
        sm.draw_t = -1;
        sm.token = -1;
    }
    u64 excl, unused_e, tot, unused_t;
    scan2(sm, own, 0ull, 0ull, 0ull, excl, unused_e, tot, unused_t);
    const u64 x = __umul64hi(h, tot);
    if (own && excl <= x && x < excl + own) {
        sm.draw_t = (int)threadIdx.x;
        sm.draw_r = x - excl;
    }
    __syncthreads();
    const int t = sm.draw_t;
    if (t >= 0 && threadIdx.x < 32) {
        const int lane = threadIdx.x;
        u64 rest = sm.draw_r;
        const int n_elem = t < r.V ? (r.V - 1 - t) / kThreads + 1 : 0;
        for (int c = 0; c < n_elem; c += 32) {
            const int j = c + lane, i = t + j * kThreads;
            u64 w = 0ull;
            if (j < n_elem) {
                const Elem e = eval_i(r, i);
                w = e.live && e.key >= theta && minp_ok(r, e) ? e.m : 0ull;
            }
            u64 incl = w;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const u64 v = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o)
                    incl += v;
            }
            const bool hit = w && incl - w <= rest && rest < incl;
            const unsigned hits = __ballot_sync(0xffffffffu, hit);
            if (hits) {
                if (lane == __ffs(hits) - 1)
                    sm.token = i;
                break;
            }
            rest -= __shfl_sync(0xffffffffu, incl, 31);
        }
    }
    __syncthreads();
    return sm.token >= 0 ? sm.token : r.amax;
}

/* thread 0, once the row's id is known (with a chain, n == 1) */
__device__ void emit(int32_t *tokens, int token, const ck_chain &ch, int count) {
    if (ch.tok)
        ck_chain_emit(tokens, token, ch, count);
    else
        tokens[blockIdx.x] = token;
}

__global__ void __launch_bounds__(kThreads, 1)
    sample_kernel(int32_t *__restrict__ tokens, const float *__restrict__ logits, int64_t ld, int V,
                  const be_sample *__restrict__ params, ck_chain ch) {
    __shared__ Smem sm;
    const be_sample p = params[blockIdx.x];
    const int count = ch.tok ? *ch.count : 0;
    Row r;
    r.l = logits + (int64_t)blockIdx.x * ld;
    r.V = V;
    float lmin;
    bool broken;
    row_extremes(sm, r.l, V, r.lmax, lmin, r.amax, broken);
    /* a NaN or +inf logit, or no finite one (every token masked to -inf):
     * the arithmetic broke, and -1 tells the engine so (it fails the
     * request, naming the position); -inf alone is a mask, not an error */
    if (broken || r.lmax == -INFINITY) {
        if (threadIdx.x == 0)
            emit(tokens, -1, ch, count);
        return;
    }
    /* NaN temperature is greedy too */
    if (be_sample_is_greedy(p.temperature, p.top_k) || !isfinite(r.lmax)) {
        if (threadIdx.x == 0)
            emit(tokens, r.amax, ch, count);
        return;
    }
    r.c = (float)(1.4426950408889634 / (double)p.temperature);
    if (!isfinite(r.c)) {
        /* T below ~1e-38: every token but the best has probability 0 */
        if (threadIdx.x == 0)
            emit(tokens, r.amax, ch, count);
        return;
    }
    /* bins cover the live range of d: x = d c <= 40 */
    const float drange = fminf(__fsub_rn(r.lmax, lmin), kMassBits / r.c);
    r.s = drange > 0.0f && isfinite(drange) ? (float)kBins / drange : 0.0f;
    if (!isfinite(r.s))
        r.s = 0.0f;
    r.minp = p.min_p > 0.0f;
    /* p_i >= min_p p_max  <=>  (l_max - l_i) / T <= -ln(min_p) */
    r.dcut = r.minp ? (float)(-(double)p.temperature * log((double)p.min_p)) : 0.0f;

    Sel sel = {false, 0ull, 0ull, 0, -1};
    if (p.top_k > 0 && p.top_k < V)
        sel = select_prefix(sm, r, 0ull, false, (u64)p.top_k, 0.0);
    if (p.top_p < 1.0f) {
        if (!(p.top_p > 0.0f)) {
            /* the CPU keeps one token: cum >= top_p at the first */
            sel.cut = true;
            sel.theta = ck_logit_key(r.lmax, r.amax);
            sel.j = 0;
        } else if (sel.cut && sel.n_sorted > 0) {
            /* the top-k prefix is sorted in shared memory: scan it */
            scan_sorted(sm, r, sel.j + 1, true, (double)p.top_p * (double)sel.mass, 0ull, 0ull);
            if (sm.found >= 0) {
                sel.theta = sm.found_key;
                sel.j = sm.found;
            }
        } else {
            const Sel sp = select_prefix(sm, r, sel.cut ? sel.theta : 0ull, true, 0ull,
                                         (double)p.top_p);
            if (sp.cut)
                sel = sp;
        }
    }
    const u64 step = p.step + (u64)count;
    const u64 h = mix64(mix64(p.seed ^ 0x6a09e667f3bcc909ull) + step * 0x9e3779b97f4a7c15ull);
    int token;
    if (sel.cut && sel.n_sorted > 0 && sel.j >= 0)
        token = draw_sorted(sm, r, sel.j + 1, h);
    else
        token = draw_pass(sm, r, sel.cut ? sel.theta : 0ull, h);
    if (threadIdx.x == 0)
        emit(tokens, token, ch, count);
}

} // namespace

extern "C" void ck_sample(cudaStream_t s, int32_t *tokens, const float *logits, int64_t ld, int n,
                          int V, const be_sample *params, void *work,
                          const ck_chain *chain) {
    (void)work; /* everything lives in shared memory (see ck_sample_work_bytes) */
    if (n <= 0 || V <= 0)
        return;
    const ck_chain ch = chain && n == 1 ? *chain : ck_chain{};
    sample_kernel<<<(unsigned)n, kThreads, 0, s>>>(tokens, logits, ld, V, params, ch);
}

