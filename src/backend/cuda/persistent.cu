/*
 * persistent.cu — a decode step of one row as one kernel (Hopper: TMA bulk
 * copies and mbarriers, built for sm_90 only; caps.cu decides when it runs).
 *
 * Why: at batch 1 the step reads every weight once (13.5 GB for Llama-2-7B)
 * and does little else, so its speed is the rate at which HBM streams the
 * weights. Launched op by op, each of the step's 129 GEMVs loses a few
 * microseconds to its ramp and drain, and HBM idles during the small ops
 * between them: the kernels of gemv.cu stream at 3.0-3.9 TB/s back to back,
 * the step's matmuls all together at ~3.3 TB/s (H200, copy bandwidth 4.26).
 * As one kernel the step streams at ~86% of the read bound.
 *
 * The picture to keep in mind: one block per SM; in each block 8 consumer
 * warps that do the step's ops one after another, all blocks sharing each
 * op and meeting at a grid-wide barrier before the next; and one producer
 * warp that streams the block's share of every weight matrix into a ring of
 * shared-memory stages, running ahead of the consumers and across the
 * barriers (weights depend on no activation), so that while the consumers
 * do the attention or wait at a barrier the next matrix is already coming.
 *
 * The program: the backend records the step's ops (ck_pstep_op: the same
 * ops with the same rounding points as the op-by-op path) and the kernel
 * walks them in order, each op waiting at the barrier before it in its own
 * turn. The backend folds each norm into the GEMV that reads it (every
 * block normalises the row itself: no op, no barrier), each residual add
 * into the GEMV that made the addend (o and down add their rows to x), and
 * SwiGLU into the gate/up GEMV when each block's gate and up rows fit its
 * acc (a block takes gate rows [a, b) and up rows [F + a, F + b)). In bf16
 * each norm's weight is folded into the matrix after it at load, and a
 * form of the kernel that loads no norm weights runs (kFolded).
 *
 * The producer: the block's rows [r0, r1) of W are one contiguous run of
 * bytes, cut into pieces of kPiece (32 KB) bytes, the last shorter; it
 * copies them into the ring (as many 32 KB stages as fit beside x and acc,
 * at most 6: 192 KB a block for Llama-2-7B, 25 MB over 132 SMs, ~6 us of
 * streaming) by bulk copies with an evict_first L2 policy, with at most
 * kInFlight copies in flight, and refills the stages that a GEMV's last
 * kHold pieces free only once the block has arrived at the barrier after
 * that GEMV: copies in flight delay the arrival's release fence.
 *
 * A GEMV: the consumers copy x to shared memory (loads past K are zeros),
 * then warp w takes the w-th run of kSegPerWarp 512-byte segments of each
 * piece (K % 256 == 0, so a segment lies inside one row), loads them and
 * the matching x before any arithmetic, and keeps a running sum for the
 * row in tensor-core accumulators (seg_dot); a run that crosses one row
 * boundary is loaded two segments at a time and switches rows once. When a
 * run starts another row, the warp adds its lanes and writes the row's
 * partial to its own slot (acc[warp][row]), so the sums do not depend on
 * timing: the same step gives the same bits every time. A piece's stage,
 * parity, row and column are carried from piece to piece (no division).
 *
 * The other ops: embed (and swiglu, when not folded) spread over the
 * blocks; the final norm on block 0 when no GEMV takes it; the attention
 * one (head, split) item a block, flash-decoding style: q rotated on load,
 * this step's k rotated from qkv and stored with v by the first head of
 * its group, 8 keys a warp a round kept 16-bit, each round's pages loaded
 * a round ahead, and the last split of each head merging the others'
 * partials as they come (split_merge, no atomic). The attention waits at
 * its barrier itself, once it has its angles and first pages. While a block
 * waits at the barrier before the qkv GEMV, warps 1..7 prefetch into L2
 * the K/V rows its attention items will read.
 *
 * The barrier: consumers arrive with a release reduction on one counter
 * (the counter only grows within a launch: target = barriers so far x
 * blocks) and thread 0 polls it with acquire loads; between arrival and
 * wait a block may issue loads that need nothing of the op just done.
 *
 * A greedy step draws its own token: the lm head's epilogue ranks its rows
 * (an atomic max of ck_logit_key), and the last block out writes the token
 * and the next step's metadata (ck_chain), so no sampling kernel runs and
 * the host can queue the next step before it knows the token; that block
 * also zeroes the counters for the next launch.
 *
 * Where a token's time goes: with each part left out in turn (measurement
 * only), the barriers cost the most, then the attention, then the GEMVs'
 * x loads and norms, then their arithmetic; the ring alone streams the
 * weights at ~4.55 TB/s. HBM idles whenever the consumers of all blocks wait
 * at once, around each barrier and most of all around the attention.
 *
 * Registers: 9 warps put 3 on some of an SM's 4 register files (16K each),
 * so a thread gets at most 168 (__launch_bounds__ gives that); a larger
 * __maxnreg__ makes the kernel unlaunchable (ck_pstep_supported asks the
 * occupancy API first). No form of the kernel spills (-Xptxas -v).
 *
 * Activations written inside the kernel are read with ld.global.cg (L2): L1
 * is not coherent between SMs, and a line of an earlier layer could be in it.
 *
 * Every version of this kernel and every idea rejected on the way, with
 * its figures and timelines: docs/journal/decode-step.md.
 */
#include "backend/cuda/common.cuh"
#include "util/env.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

namespace {

constexpr int kWarps = 8;                    /* consumer warps */
constexpr int kConsumers = kWarps * 32;
constexpr int kThreads = kConsumers + 32;    /* + the producer warp */
constexpr int kSeg = 512;                    /* a warp's bytes at a time: 32 lanes x 16 */
constexpr int kXBytes = CK_PSTEP_MAX_K * 2;  /* x of a GEMV, ck */
constexpr int kAccBytes = kWarps * CK_PSTEP_ROWS * 4;

/* the ring: n_stages (at most kMaxStages) pieces of kPiece bytes, as many
 * as shared memory holds beside x (the model's widest K) and acc */
constexpr int kPiece = 32768;
constexpr int kMaxStages = 6;
constexpr int kSegPerPiece = kPiece / kSeg;
constexpr int kSegPerWarp = kSegPerPiece / kWarps; /* a warp's run of a piece */
constexpr int kSmemMax = 227 * 1024;               /* a block's shared memory on an H100/H200 */
static_assert(kPiece % kSeg == 0 && kSegPerPiece % kWarps == 0, "whole runs of segments");
static_assert(kXBytes + kAccBytes + 5 * kPiece <= kSmemMax, "5 stages at the widest x");

/* At most kInFlight of a block's copies in flight (issued, not landed); the
 * rest of the ring holds landed pieces. Why: the barrier's arrival after a
 * GEMV waits behind the copies the producer has issued (its release fence
 * took 2.3-3.9 us with up to 6 in flight, 0.4 after the attention, when
 * none are). Two in flight still keep HBM busy; 2 measured fastest of 1, 2,
 * 3, 4 and 6 (docs/journal/decode-step.md). */
constexpr int kInFlight = 2;

/* The refills of the stages that a GEMV's last kHold pieces free wait for
 * the block's arrival at the barrier after it: issued earlier, they are in
 * flight while the arrival's release fence runs, and it runs longer
 * (timelines: 1.45-1.59 us a GEMV barrier, 0.96-1.45 with 3 held; 0.4 after
 * the attention, when the ring is full). 3 held ran faster than 2, 4 and 6
 * (docs/journal/decode-step.md). */
constexpr int kHold = 3;

/* The timeline of one step (a build with -DHR_PSTEP_TIMELINE=ON only; the
 * step and file from HEADROOM_CUDA_PSTEP_TIMELINE=step:file, graphs off;
 * tools/pstep_timeline.py reads it): every piece's copy issued, seen
 * landed (the producer polls while it waits), its consumption started and
 * released by warp 0; for every op the arrival at the barrier after it,
 * its pass, for a GEMV the moment thread 0 had stored its part of x, the
 * moment the arrival's release was done (its fence waits for the block's
 * earlier memory operations), and for an attention (thread 0, the block's
 * last item) q in and rotated, warp 0's keys done, the warps merged, the
 * split's partial out (the head's last split: merged and out); per
 * block, in %globaltimer ns: kTlPieces x 4 then kTlOps x kTlOpSlots values. */
#ifdef HR_PSTEP_TIMELINE
constexpr bool kTimeline = true;
#else
constexpr bool kTimeline = false;
#endif
constexpr int kTlPieces = 4096, kTlOps = 512;
constexpr int kTlOpSlots = 8;
constexpr int kTlStride = kTlPieces * 4 + kTlOps * kTlOpSlots;

__device__ __forceinline__ void mbar_arrive_expect(uint64_t *bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned bytes,
                                          uint64_t *bar, uint64_t policy) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(policy)
                 : "memory");
}

/* the consumer warps only (the producer never joins): named barrier 1 */
__device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
}

__device__ __forceinline__ uint64_t now_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* The grid barrier, in two halves so that the block can issue loads that
 * need nothing of this op between them (pstep_kernel): every block's
 * consumers arrive, then thread 0 waits until all blocks have; the counter
 * only grows within a launch (target = barriers so far x blocks).
 * The arrival is a release reduction, not an atomic whose old value the
 * block would wait for: the last block to arrive learns that it was last
 * one L2 round trip sooner, from its first poll.
 * trace (diagnostics, may be NULL): [0] block 0 done with the op, [1] the
 * last block's arrival (a max over the blocks: the timer only grows, so it
 * needs no reset between steps), [2] block 0 past the barrier. */
__device__ __forceinline__ void grid_arrive(unsigned *count, uint64_t *trace, uint64_t *tl_op,
                                            volatile int *arrived, int op) {
    consumers_sync();
    if (threadIdx.x == 0) {
        if (kTimeline && tl_op)
            tl_op[0] = now_ns();
        if (trace && blockIdx.x == 0)
            trace[0] = now_ns();
        if (trace)
            atomicMax(reinterpret_cast<unsigned long long *>(trace + 1),
                      (unsigned long long)now_ns());
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(count) : "memory");
        *arrived = op + 1; /* the producer may refill the stages it held (kHold) */
        if (kTimeline && tl_op)
            tl_op[3] = now_ns();
    }
}

/* The barrier before an op: count null when there is none (the first op).
 * The program loop waits before each op; the attention waits itself, after
 * the loads that need no activation of the op before (its angles and
 * pages). */
struct barrier_wait {
    unsigned *count;
    unsigned target;
    uint64_t *trace, *tl_op;
};

__device__ __forceinline__ void grid_wait(const barrier_wait &w) {
    if (!w.count)
        return;
    if (threadIdx.x == 0) {
        unsigned seen;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];"
                         : "=r"(seen)
                         : "l"(w.count)
                         : "memory");
            if (seen < w.target)
                __nanosleep(32); /* fewer polls in the way of the arrivals */
        } while (seen < w.target);
        if (w.trace && blockIdx.x == 0)
            w.trace[2] = now_ns();
        if (kTimeline && w.tl_op)
            w.tl_op[1] = now_ns();
    }
    consumers_sync();
}

/* v rounded to T (where the op-by-op path stores T), as f32 */
template <class T> __device__ __forceinline__ float round_to(float v) {
    T h;
    ck_from_f32(&h, v);
    return ck_to_f32(h);
}

/* the block's rows of an N-row matrix */
__device__ __forceinline__ int2 block_rows(int N) {
    return make_int2((int)((int64_t)N * blockIdx.x / gridDim.x),
                     (int)((int64_t)N * (blockIdx.x + 1) / gridDim.x));
}

/* timeline: the pieces seen landed so far, in order, stamped. A stage's
 * parity names its piece only until the stage is reused: before piece
 * `issued` reuses one, every piece before issued - n_stages + 1 has landed
 * (its stage came back empty) and is stamped now if it was not seen. */
__device__ __forceinline__ void tl_lands(uint64_t *tl, uint64_t *full, int n_stages, int issued,
                                         int &landed) {
    while (landed < issued &&
           (landed <= issued - n_stages ||
            mbar_test(&full[landed % n_stages], (unsigned)(landed / n_stages) & 1u))) {
        if (landed < kTlPieces)
            tl[landed * 4 + 1] = now_ns();
        landed++;
    }
}

/* ---- the producer: every GEMV's share of this block, in program order */
__device__ void produce(const ck_pstep_op *prog, int n_op, uint8_t *ring, int n_stages,
                        uint64_t *full, uint64_t *empty, uint64_t *tl,
                        const volatile int *arrived) {
    /* hold: kHoldBits a stage, the refill of stage st waits until *arrived >=
     * its field (0: it need not), i.e. for the arrival after the GEMV that
     * used it last (n_op <= CK_PSTEP_MAX_OPS). Bit fields rather than
     * an array: a stage-indexed array lives in local memory, a load and a
     * store of it between a freed stage and its refill. */
    constexpr int kHoldBits = 10;
    constexpr uint64_t kHoldMask = (1u << kHoldBits) - 1;
    static_assert(kMaxStages * kHoldBits <= 64 && CK_PSTEP_MAX_OPS <= kHoldMask,
                  "a stage's hold in its bits");
    uint64_t hold = 0;
    /* weights are read once a step: let them leave L2 first (evict_normal
     * measured 2% slower, docs/journal/decode-step.md) */
    uint64_t policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    int piece = 0, landed = 0;
    /* piece's stage and the parity of its use of it, kept as the pieces go
     * (no division a piece): the stage's fill number is piece / n_stages */
    int st = 0;
    unsigned phase = 0;
    for (int i = 0; i < n_op; i++) {
        if (prog[i].kind != CKP_GEMV)
            continue;
        const ck_pstep_gemv &g = prog[i].gemv;
        const int2 rows = block_rows(g.pair ? g.pair : g.N);
        const int64_t bytes = (int64_t)(rows.y - rows.x) * g.K * 2;
        const int n_pieces = (g.pair ? 2 : 1) * (int)((bytes + kPiece - 1) / kPiece);
        const int last_piece = piece + n_pieces - 1;
        for (int run = 0; run < (g.pair ? 2 : 1); run++) { /* paired: gate rows, then up */
            const uint8_t *src = static_cast<const uint8_t *>(g.W) +
                                 ((int64_t)run * g.pair + rows.x) * g.K * 2;
            for (int64_t off = 0; off < bytes; off += kPiece, piece++) {
                const int shift = st * kHoldBits;
                if (piece >= n_stages) { /* its previous piece consumed by all warps */
                    if (kTimeline && tl)
                        while (!mbar_test(&empty[st], phase ^ 1u))
                            tl_lands(tl, full, n_stages, piece, landed);
                    else
                        mbar_wait(&empty[st], phase ^ 1u);
                    const int until = (int)((hold >> shift) & kHoldMask);
                    while (*arrived < until)
                        if (kTimeline && tl)
                            tl_lands(tl, full, n_stages, piece, landed);
                }
                /* the op's last pieces; at most n_stages, so that no refill
                 * waits for the end of the op it belongs to */
                const uint64_t mark = piece > last_piece - min(kHold, n_stages) ? i + 1 : 0;
                hold = (hold & ~(kHoldMask << shift)) | mark << shift;
                const unsigned len = (unsigned)min((int64_t)kPiece, bytes - off);
                /* the stage's next phase needs the copy's bytes: expecting
                 * them now takes the arrival off the path from the landing
                 * waited for below to the copy */
                mbar_arrive_expect(&full[st], len);
                if (piece >= kInFlight) { /* the copy kInFlight back has landed */
                    const int q = st >= kInFlight ? st - kInFlight : st - kInFlight + n_stages;
                    mbar_wait(&full[q], st >= kInFlight ? phase : phase ^ 1u);
                }
                if (kTimeline && tl) {
                    tl_lands(tl, full, n_stages, piece, landed);
                    if (piece < kTlPieces)
                        tl[piece * 4] = now_ns();
                }
                bulk_copy(ring + st * kPiece, src + off, len, &full[st], policy);
                if (++st == n_stages) {
                    st = 0;
                    phase ^= 1u;
                }
            }
        }
    }
    if (kTimeline && tl)
        while (landed < piece)
            tl_lands(tl, full, n_stages, piece, landed);
}

/* ---- the consumers' ops */

/* sum over the consumer threads; scratch: kWarps floats */
__device__ __forceinline__ float consumers_sum(float v, float *scratch) {
    v = warp_sum(v);
    consumers_sync();
    if ((threadIdx.x & 31) == 0)
        scratch[threadIdx.x >> 5] = v;
    consumers_sync();
    float t = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; w++)
        t += scratch[w];
    return t;
}

/* y (D, ck) = w * (x * scale), scale = 1 / rms(x) (+ eps), as
 * ck_add_rmsnorm; every consumer thread of the block takes part, loads of a
 * chunk of kNormPer elements a thread before its stores. kFolded: every
 * norm of the step has its weight folded into the matrix after it (w is
 * all ones), so y = x * scale and w is not loaded. A kernel of its own
 * rather than a branch: a branch on w cost 0.7% (docs/journal/decode-step.md). */
constexpr int kNormPer = 8;

template <class T, bool kFolded>
__device__ __forceinline__ void norm_into(const float *x, const float *w, float eps, int D,
                                          T *y, float *scratch) {
    constexpr int kRegs = 2 * kNormPer;
    if (D <= kRegs * kConsumers) {
        /* x and w loaded once, together: one L2 round trip, not two */
        float v[kRegs], wv[kRegs], ss = 0.0f;
#pragma unroll
        for (int j = 0; j < kRegs; j++) {
            const int d = threadIdx.x + j * kConsumers;
            v[j] = d < D ? __ldcg(x + d) : 0.0f;
            if constexpr (!kFolded)
                wv[j] = d < D ? w[d] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < kRegs; j++)
            ss += v[j] * v[j];
        const float scale = rsqrtf(consumers_sum(ss, scratch) / (float)D + eps);
#pragma unroll
        for (int j = 0; j < kRegs; j++) {
            const int d = threadIdx.x + j * kConsumers;
            if (d < D)
                ck_from_f32(y + d, kFolded ? v[j] * scale : wv[j] * (v[j] * scale));
        }
        return;
    }
    float ss = 0.0f;
    for (int d0 = 0; d0 < D; d0 += kNormPer * kConsumers) {
        float v[kNormPer];
#pragma unroll
        for (int j = 0; j < kNormPer; j++) {
            const int d = d0 + threadIdx.x + j * kConsumers;
            v[j] = d < D ? __ldcg(x + d) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < kNormPer; j++)
            ss += v[j] * v[j];
    }
    const float scale = rsqrtf(consumers_sum(ss, scratch) / (float)D + eps);
    for (int d0 = 0; d0 < D; d0 += kNormPer * kConsumers) {
        float v[kNormPer], wv[kNormPer];
#pragma unroll
        for (int j = 0; j < kNormPer; j++) {
            const int d = d0 + threadIdx.x + j * kConsumers;
            v[j] = d < D ? __ldcg(x + d) : 0.0f;
            if constexpr (!kFolded)
                wv[j] = d < D ? w[d] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < kNormPer; j++) {
            const int d = d0 + threadIdx.x + j * kConsumers;
            if (d < D)
                ck_from_f32(y + d, kFolded ? v[j] * scale : wv[j] * (v[j] * scale));
        }
    }
}

/* A warp's dot product of a 512-byte segment of W with the matching x on
 * the tensor cores: lane L holds elements 8L .. 8L + 7 of each (one uint4).
 * Read as fragments of mma.m16n8k16, the w words are a 16 x 16 A whose row
 * r (r < 8) holds the w elements of lanes 4r .. 4r + 3 that go in words 0
 * and 2, row r + 8 those of words 1 and 3; with B's column n made of the x
 * words that match A's row n (words 0 and 2 of lane 4n + t: B1) or row n +
 * 8 (words 1 and 3: B2), the diagonals C1[n][n] and C2[n + 8][n] hold the
 * segment's products summed in 32 groups, all of them once. The rest of
 * C is cross terms, never read. Two mma a segment replace 8 FMAs and 16
 * conversions a lane. c: C1 then C2 (f32, accumulated over a row). */
template <class T> __device__ __forceinline__ void seg_dot(uint4 w, uint4 x, float c[8]) {
    const uint32_t a[4] = {w.x, w.y, w.z, w.w};
    ck_pair<T>::mma(c, a, x.x, x.z);     /* C1: A rows 0..7 */
    ck_pair<T>::mma(c + 4, a, x.y, x.w); /* C2: A rows 8..15 */
}

/* this lane's share of the diagonals: lane 4n + n/2 holds C1[n][n] (c0 for
 * even n, c1 for odd) and C2[n + 8][n] (c2 or c3) */
__device__ __forceinline__ float seg_diag(const float c[8], int lane) {
    const int n = lane >> 2;
    if ((lane & 3) != n >> 1)
        return 0.0f;
    return n & 1 ? c[1] + c[7] : c[0] + c[6];
}

/* A warp's running sum (c) belongs to row `cur` (-1: none yet). For another
 * row, the sum goes to the warp's slot of cur and a new sum starts. */
__device__ __forceinline__ void start_row(int row, int &cur, float c[8], float *my_acc,
                                          int lane) {
    if (row == cur)
        return;
    const float v = warp_sum(seg_diag(c, lane));
    if (cur >= 0 && lane == 0)
        my_acc[cur] = v;
    cur = row;
#pragma unroll
    for (int e = 0; e < 8; e++)
        c[e] = 0.0f;
}

/* A greedy step's logits rows (f32, no residual) written and ranked: the
 * block's largest ck_logit_key into *rank (an atomic max over the blocks).
 * Every consumer thread; v is meaningful for tid < n_run. */
__device__ __noinline__ void rank_rows(float *y, int row0, int id0, int n_run, float v,
                                       unsigned long long *rank) {
    __shared__ unsigned long long warp_key[kWarps];
    const int tid = threadIdx.x, lane = tid & 31;
    unsigned long long key = 0;
    if (tid < n_run) {
        y[row0 + tid] = v;
        key = ck_logit_key(ck_logit_canon(v), id0 + row0 + tid);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long k = __shfl_xor_sync(0xffffffffu, key, o);
        key = k > key ? k : key;
    }
    if (lane == 0)
        warp_key[tid >> 5] = key;
    consumers_sync();
    if (tid == 0) {
        for (int w = 1; w < kWarps; w++)
            key = warp_key[w] > key ? warp_key[w] : key;
        atomicMax(rank, key);
    }
}

template <class T, bool kFolded>
__device__ __forceinline__ void gemv_op(const ck_pstep_op &op, const uint8_t *ring, int n_stages,
                                        uint16_t *xs, float *acc, uint64_t *full, uint64_t *empty,
                                        int &piece, float *scratch, uint64_t *tl,
                                        uint64_t *tl_op, unsigned long long *rank) {
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int K = op.gemv.K, pair = op.gemv.pair, n_runs = pair ? 2 : 1;
    const int2 rows = block_rows(pair ? pair : op.gemv.N);
    const int n_run = rows.y - rows.x; /* rows of a run; local rows run * n_run + r */
    const int n_rows = n_runs * n_run;
    /* what the epilogue adds, loaded now, beside x: a thread's row (pair:
     * gate row tid and up row tid) */
    static_assert(CK_PSTEP_ROWS <= kConsumers, "a row a thread in the epilogue");
    float bias0 = 0.0f, bias1 = 0.0f, resid0 = 0.0f;
    if (tid < n_run) {
        if (op.gemv.bias) {
            bias0 = op.gemv.bias[rows.x + tid];
            if (pair)
                bias1 = op.gemv.bias[pair + rows.x + tid];
        }
        if (op.gemv.resid)
            resid0 = __ldcg(op.gemv.resid + rows.x + tid);
    }
    if (op.gemv.norm_x) {
        norm_into<T, kFolded>(op.gemv.norm_x, op.gemv.norm_w, op.gemv.eps, K,
                              reinterpret_cast<T *>(xs), scratch);
        /* each thread copies the elements it wrote (norm_into's order) */
        if (op.gemv.norm_y && blockIdx.x == 0)
            for (int d = tid; d < K; d += kConsumers)
                static_cast<uint16_t *>(op.gemv.norm_y)[d] = xs[d];
    } else {
        /* x into shared memory, every load issued before the first store (a
         * plain loop waits out an L2 round trip per element: the compiler
         * cannot tell the stores from the loads); the loads past K are
         * zeros, so no x register lives on into the next GEMV (0.05%
         * faster, docs/journal/decode-step.md) */
        const uint4 *x4 = static_cast<const uint4 *>(op.gemv.x);
        constexpr int kXLoads = CK_PSTEP_MAX_K / 8 / kConsumers;
        uint4 xv[kXLoads];
#pragma unroll
        for (int j = 0; j < kXLoads; j++)
            xv[j] = tid + j * kConsumers < K / 8 ? __ldcg(x4 + tid + j * kConsumers)
                                                 : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int j = 0; j < kXLoads; j++)
            if (tid + j * kConsumers < K / 8)
                reinterpret_cast<uint4 *>(xs)[tid + j * kConsumers] = xv[j];
    }
    if (kTimeline && tl_op && tid == 0)
        tl_op[2] = now_ns();
    for (int i = tid; i < kWarps * n_rows; i += kConsumers)
        acc[i] = 0.0f;
    consumers_sync();

    const int seg_per_row = K * 2 / kSeg;
    const uint4 *xs4 = reinterpret_cast<const uint4 *>(xs);
    float *my_acc = acc + warp * n_rows;
    int cur = -1; /* the row of this warp's running sum */
    float part[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    const int64_t bytes = (int64_t)n_run * K * 2;
    const int s0 = warp * kSegPerWarp; /* this warp's run of a piece */
    /* the stage, its parity and the run's first row and column, kept as
     * the pieces go (no division a piece; a piece is kSegPerPiece
     * segments further on) */
    int st = piece % n_stages;
    unsigned phase = (unsigned)(piece / n_stages) & 1u;
    const int step_rows = kSegPerPiece / seg_per_row, step_col = kSegPerPiece % seg_per_row;
    /* the pieces of each run of rows (paired: the gate rows, then the up rows) */
    for (int run = 0; run < n_runs; run++) {
        int row = run * n_run + s0 / seg_per_row, col = s0 % seg_per_row;
        for (int64_t off = 0; off < bytes; off += kPiece, piece++) {
            const int n_seg = (int)(min((int64_t)kPiece, bytes - off) / kSeg);
            const int g0 = (int)(off / kSeg) + s0;
            const uint4 *w4 = reinterpret_cast<const uint4 *>(ring + st * kPiece) + s0 * 32 + lane;
            mbar_wait(&full[st], phase);
            if (kTimeline && tl && tid == 0 && piece < kTlPieces)
                tl[piece * 4 + 2] = now_ns();
            if (s0 + kSegPerWarp <= n_seg && col + kSegPerWarp <= seg_per_row) {
                /* the usual case: the whole run in one row, its loads first */
                start_row(row, cur, part, my_acc, lane);
                uint4 wv[kSegPerWarp], xv[kSegPerWarp];
#pragma unroll
                for (int u = 0; u < kSegPerWarp; u++) {
                    wv[u] = w4[u * 32];
                    xv[u] = xs4[(col + u) * 32 + lane];
                }
#pragma unroll
                for (int u = 0; u < kSegPerWarp; u++)
                    seg_dot<T>(wv[u], xv[u], part);
            } else if (seg_per_row >= kSegPerWarp && s0 < n_seg) {
                /* a run across one row boundary (its first `split` segments
                 * in `row`) or past the slice's end: the loads kGroup segments
                 * at a time before their sums (even past the end: still inside
                 * the stage and x), the same sums in the same order as segment
                 * by segment, with one row switch. Every 43-segment row of K =
                 * 11008 (Llama-2-7B's down GEMV) puts such a run in nearly
                 * every piece; segment by segment (two divisions a segment,
                 * each load waited for) warp 0 took 1.77 us on such a piece
                 * against 0.46 (docs/journal/decode-step.md) */
                /* loads at a time: 4 or 8 spill (168 registers); all 8 with the
                 * next row summed apart fit now that no x register is carried
                 * between GEMVs, and ran 0.3% slower (docs/journal/decode-step.md) */
                constexpr int kGroup = 2;
                const int split = seg_per_row - col, n = min(kSegPerWarp, n_seg - s0);
                start_row(row, cur, part, my_acc, lane);
#pragma unroll
                for (int h = 0; h < kSegPerWarp; h += kGroup) {
                    uint4 wv[kGroup], xv[kGroup];
#pragma unroll
                    for (int u = h; u < h + kGroup; u++) {
                        wv[u - h] = w4[u * 32];
                        xv[u - h] = xs4[(u < split ? col + u : col + u - seg_per_row) * 32 + lane];
                    }
#pragma unroll
                    for (int u = h; u < h + kGroup; u++) {
                        if (u >= n)
                            break;
                        if (u == split)
                            start_row(row + 1, cur, part, my_acc, lane);
                        seg_dot<T>(wv[u - h], xv[u - h], part);
                    }
                }
            } else if (s0 < n_seg) {
                /* rows shorter than a run (K < 2048): segment by segment */
                for (int u = 0; u < kSegPerWarp && s0 + u < n_seg; u++) {
                    const int r = run * n_run + (g0 + u) / seg_per_row;
                    start_row(r, cur, part, my_acc, lane);
                    seg_dot<T>(w4[u * 32], xs4[((g0 + u) % seg_per_row) * 32 + lane], part);
                }
            }
            __syncwarp();
            if (lane == 0)
                mbar_arrive(&empty[st]); /* the producer may refill the stage */
            if (kTimeline && tl && tid == 0 && piece < kTlPieces)
                tl[piece * 4 + 3] = now_ns();
            if (++st == n_stages) {
                st = 0;
                phase ^= 1u;
            }
            row += step_rows;
            col += step_col;
            if (col >= seg_per_row) {
                col -= seg_per_row;
                row++;
            }
        }
    }
    start_row(-1, cur, part, my_acc, lane); /* the last row's sum */
    consumers_sync();
    if (rank && op.gemv.logits) { /* f32 rows, no bias, no residual (the backend's logits) */
        float v = 0.0f;
        if (tid < n_run)
#pragma unroll
            for (int w = 0; w < kWarps; w++)
                v += acc[w * n_rows + tid];
        rank_rows(static_cast<float *>(op.gemv.y), rows.x, op.gemv.logits - 1, n_run, v, rank);
        return;
    }
    if (tid >= n_run)
        return;
    const int row = rows.x + tid;
    if (pair) { /* gate row and up row: h = silu(g) * u, as ck_swiglu */
        float g = 0.0f, u = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; w++) {
            g += acc[w * n_rows + tid];
            u += acc[w * n_rows + n_run + tid];
        }
        g += bias0;
        u += bias1;
        if (op.gemv.y_ck) { /* the gate/up product was kept narrow */
            g = round_to<T>(g);
            u = round_to<T>(u);
        }
        ck_from_f32(static_cast<T *>(op.gemv.y) + row, g / (1.0f + __expf(-g)) * u);
        return;
    }
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; w++)
        v += acc[w * n_rows + tid];
    v += bias0;
    if (op.gemv.resid) { /* as the op-by-op path: y rounded, then added */
        if (op.gemv.y_ck)
            v = round_to<T>(v);
        op.gemv.resid[row] = resid0 + v;
    } else if (op.gemv.y_ck) {
        ck_from_f32(static_cast<T *>(op.gemv.y) + row, v);
    } else {
        static_cast<float *>(op.gemv.y)[row] = v;
    }
}

template <class T> __device__ void embed_op(const ck_pstep_op &op) {
    const int D = op.embed.D;
    const T *row = static_cast<const T *>(op.embed.table) + (int64_t)op.embed.token[0] * D;
    for (int d = blockIdx.x * kConsumers + threadIdx.x; d < D; d += gridDim.x * kConsumers)
        op.embed.x[d] = ck_to_f32(row[d]);
}

/* the final norm (the one no GEMV takes), on block 0: y = w * (x / rms(x)) */
template <class T, bool kFolded> __device__ void norm_op(const ck_pstep_op &op, float *scratch) {
    if (blockIdx.x == 0) {
        norm_into<T, kFolded>(op.norm.x, op.norm.w, op.norm.eps, op.norm.D,
                              static_cast<T *>(op.norm.y), scratch);
    }
}

/* keys a warp has in flight a round, K and V kept as loaded (16-bit)
 * until used: 8 (4, 12 and, at head size 64, 16 measured slower:
 * docs/journal/decode-step.md) */
constexpr int kAttKeys = 8;

/* RoPE at pos on a row spread over a warp (lane: elements lane EPL ..
 * + EPL - 1), then rounded to the compute type, as ck_rope_kv_store stores
 * it: neox pairs (i, i + Dh/2) are 16 lanes apart, the others (2i, 2i + 1)
 * inside a lane. sn, cs: the angles of the lane's elements. Whole warp. */
template <class T, int EPL>
__device__ __forceinline__ void rope_row(float x[EPL], const float sn[EPL], const float cs[EPL],
                                         bool neox, int lane) {
    float y[EPL];
    if (neox) {
        const bool low = lane < 16; /* elements below Dh/2 */
#pragma unroll
        for (int e = 0; e < EPL; e++) {
            const float other = __shfl_xor_sync(0xffffffffu, x[e], 16);
            y[e] = low ? x[e] * cs[e] - other * sn[e] : x[e] * cs[e] + other * sn[e];
        }
    } else {
#pragma unroll
        for (int e = 0; e < EPL; e += 2) {
            y[e] = x[e] * cs[e] - x[e + 1] * sn[e];
            y[e + 1] = x[e + 1] * cs[e] + x[e] * sn[e];
        }
    }
#pragma unroll
    for (int e = 0; e < EPL; e++)
        x[e] = round_to<T>(y[e]);
}

/* A head's positions 0 .. ctx - 1 in splits: about one (head, split) item a
 * block, at least 32 keys a split (fewer splits, each walked in more
 * rounds, measured slower: docs/journal/decode-step.md) */
struct attn_splits {
    int n, len;
};

__device__ __forceinline__ attn_splits attn_split(const ck_pstep_op &op, int ctx) {
    int n = (int)gridDim.x / op.attn.H;
    n = min(max(n, 1), min(op.attn.max_splits, (ctx + 31) / 32));
    const int len = (ctx + n - 1) / n;
    return {(ctx + len - 1) / len, len};
}

__device__ __forceinline__ void prefetch_l2(const void *p, unsigned bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

/* The pool rows this block's attention items will read (every position
 * but this step's, which comes from qkv) into L2 by bulk prefetches, one a
 * page run of K and of V, by warps 1..7 (thread 0 polls the barrier
 * meanwhile): issued while the block waits at the barrier before the GEMV
 * that makes q, k and v, they land while it streams, and the attention's
 * loads then wait on L2 rather than HBM. The pages depend on no activation
 * of the step. */
template <int Dh> __device__ void attn_prefetch(const ck_pstep_op &op) {
    constexpr int kFirst = 32; /* warp 0 polls */
    const int H = op.attn.H, Hkv = op.attn.Hkv, BS = op.attn.BS, ctx = op.attn.pos[0] + 1;
    const attn_splits sp = attn_split(op, ctx);
    const int32_t *bt = op.attn.block_tables + (int64_t)op.attn.seq[0] * op.attn.max_blocks;
    const uint8_t *kpool = static_cast<const uint8_t *>(op.attn.k_pool);
    const uint8_t *vpool = static_cast<const uint8_t *>(op.attn.v_pool);
    for (int item = blockIdx.x; item < H * sp.n; item += gridDim.x) {
        const int kvh = item / sp.n / (H / Hkv);
        const int p0 = item % sp.n * sp.len, p1 = min(ctx - 1, p0 + sp.len);
        if ((int)threadIdx.x < kFirst)
            break;
        for (int pg = p0 / BS + (int)threadIdx.x - kFirst; pg * BS < p1;
             pg += kConsumers - kFirst) {
            const int a = max(p0, pg * BS), b = min(p1, pg * BS + BS);
            const int64_t at = (((int64_t)bt[pg] * Hkv + kvh) * BS + a % BS) * Dh * 2;
            prefetch_l2(kpool + at, (unsigned)(b - a) * Dh * 2);
            prefetch_l2(vpool + at, (unsigned)(b - a) * Dh * 2);
        }
    }
}

/* A head's splits meet at its last split, the merger, with no atomic:
 * each other split stores its partial as 64-bit words, a value with the
 * split's L beside it (L >= 1: the key at the split's max scores exp(0)),
 * relaxed; a word whose L half is 0 is not written yet. The merger loads
 * each until it is, and clears it for the next layer. Why not a counter
 * that the last split to arrive learns it is last from (the form before):
 * its atomic's release waits for the block's weight copies in flight, and
 * the merger's loads took one L2 round trip more (docs/journal/decode-step.md).
 * Every split has a block of its own (n_split >= 2 only when H * n_split
 * <= the grid, all resident), so the merger's wait ends.
 * Words of a split: (M, L), then (O[d], L) for d < Dh. */
__device__ __forceinline__ void tagged_store(unsigned long long *p, float v, float l) {
    const unsigned long long w = (unsigned long long)__float_as_uint(l) << 32 | __float_as_uint(v);
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(w) : "memory");
}

__device__ __forceinline__ unsigned long long tagged_load(const unsigned long long *p) {
    unsigned long long w;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(w) : "l"(p) : "memory");
    return w;
}

__device__ __forceinline__ void tagged_clear(const unsigned long long *p) {
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(0ull) : "memory");
}

/* thread d < Dh of a split that is not its head's last */
__device__ __forceinline__ void split_publish(unsigned long long *words, float M, float L,
                                              float O, int d) {
    tagged_store(words + 1 + d, O, L);
    if (d == 0)
        tagged_store(words, M, L);
}

/* Thread d < Dh of the head's last split (sp = n_split - 1, its own
 * partial M, L, O): element d of the head's output, the splits merged in
 * order, kMergeU at a time with all their loads in flight (one L2 round
 * trip for the usual <= 4 when they are written). It clears its O words;
 * the (M, L) words, which every thread reads, are cleared after the
 * block's next sync (attn_op). */
__device__ __forceinline__ float split_merge(const unsigned long long *head, int n_split,
                                             int Dh, float M, float L, float O, int d) {
    constexpr int kMergeU = 4;
    const int sp = n_split - 1;
    float MM = -INFINITY, LL = 0.0f, OO = 0.0f;
    for (int s0 = 0; s0 < n_split; s0 += kMergeU) {
        unsigned long long wm[kMergeU], wo[kMergeU]; /* ~0: nothing to wait for */
#pragma unroll
        for (int u = 0; u < kMergeU; u++) {
            const unsigned long long *words = head + (int64_t)(s0 + u) * (Dh + 1);
            const bool other = s0 + u < sp;
            wm[u] = other ? tagged_load(words) : ~0ull;
            wo[u] = other ? tagged_load(words + 1 + d) : ~0ull;
        }
        for (bool all = false; !all;) {
            all = true;
#pragma unroll
            for (int u = 0; u < kMergeU; u++) {
                const unsigned long long *words = head + (int64_t)(s0 + u) * (Dh + 1);
                if (!(wm[u] >> 32)) {
                    all = false;
                    wm[u] = tagged_load(words);
                }
                if (!(wo[u] >> 32)) {
                    all = false;
                    wo[u] = tagged_load(words + 1 + d);
                }
            }
        }
        float ms[kMergeU], ls[kMergeU], os[kMergeU];
#pragma unroll
        for (int u = 0; u < kMergeU; u++) {
            const int s = s0 + u;
            if (s > sp) {
                ms[u] = -INFINITY, ls[u] = 0.0f, os[u] = 0.0f;
            } else if (s == sp) {
                ms[u] = M, ls[u] = L, os[u] = O;
            } else {
                ms[u] = __uint_as_float((unsigned)wm[u]);
                ls[u] = __uint_as_float((unsigned)(wm[u] >> 32));
                os[u] = __uint_as_float((unsigned)wo[u]);
                tagged_clear(head + (int64_t)s * (Dh + 1) + 1 + d);
            }
        }
        float mx = MM;
#pragma unroll
        for (int u = 0; u < kMergeU; u++)
            mx = fmaxf(mx, ms[u]);
        const float keep = __expf(MM - mx); /* 0 at the first */
        LL *= keep;
        OO *= keep;
#pragma unroll
        for (int u = 0; u < kMergeU; u++) {
            const float c = __expf(ms[u] - mx);
            LL += ls[u] * c;
            OO += os[u] * c;
        }
        MM = mx;
    }
    return OO / LL;
}

/* Flash-decoding over (head, split) items, one a block at a time: warp w
 * takes keys p0 + w, p0 + w + 8, ... (lanes across Dh), keeps a running
 * max, sum and output; the block merges its warps; a head of one split
 * writes out directly, else the split's partial goes to the head's last
 * split, which merges them all (split_merge). The op waits at the barrier
 * before it (`before`) itself, once it has the angles and its first
 * round's pages: they need no activation of the step, and their chains of
 * dependent loads (the op's fields, the position, the block table; the
 * frequencies) then run while the block waits, so that q and the first
 * round's rows come in one round trip after it. */
template <class T, int EPL>
__device__ void attn_op(const ck_pstep_op &op, float *scratch, uint64_t *tl_op,
                        const barrier_wait &before) {
    constexpr int Dh = 32 * EPL, ATT_U = kAttKeys;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int H = op.attn.H, Hkv = op.attn.Hkv, BS = op.attn.BS;
    const int ctx = op.attn.pos[0] + 1;
    const int32_t *bt = op.attn.block_tables + (int64_t)op.attn.seq[0] * op.attn.max_blocks;
    const attn_splits splits = attn_split(op, ctx);
    const int n_split = splits.n, split_len = splits.len;
    const T *kpool = static_cast<const T *>(op.attn.k_pool);
    const T *vpool = static_cast<const T *>(op.attn.v_pool);
    const T *qkv = static_cast<const T *>(op.attn.qkv);
    constexpr int PART = Dh + 2;
    /* the angles of this lane's elements at pos (neox: element i and i +
     * Dh/2 share frequency i; gptj: 2i and 2i + 1 share i) */
    float sn[EPL], cs[EPL];
#pragma unroll
    for (int e = 0; e < EPL; e++) {
        const int i = lane * EPL + e;
        const int f = op.attn.neox ? i % (Dh / 2) : i / 2;
        sincosf((float)(ctx - 1) * op.attn.inv_freq[f], &sn[e], &cs[e]);
    }

    if ((int)blockIdx.x >= H * n_split)
        grid_wait(before); /* no item */
    for (int item = blockIdx.x; item < H * n_split; item += gridDim.x) {
        const int h = item / n_split, sp = item % n_split, kvh = h / (H / Hkv);
        const int p0 = sp * split_len, p1 = min(ctx, p0 + split_len);
        /* a round: keys p, p + 8, ... (ATT_U of them) of this warp, kept
         * as loaded (EPL elements of T a lane) until used */
        typedef typename ck_vec<EPL * sizeof(T)>::type KV;
        KV kr[ATT_U], vr[ATT_U];
        /* lane u < ATT_U: the page of key p + u kWarps of a round p, loaded
         * a round ahead, so that a round's rows are one round trip away */
        auto pages_of = [&](int p) {
            const int pp = p + lane * kWarps;
            return lane < ATT_U && pp < p1 ? bt[pp / BS] : 0;
        };
        /* the round's rows (page: pages_of(p)) */
        auto load_keys = [&](int p, int page) {
#pragma unroll
            for (int u = 0; u < ATT_U; u++) {
                const int pp = p + u * kWarps;
                if (pp >= p1)
                    continue;
                const int pg = __shfl_sync(0xffffffffu, page, u);
                const int64_t at = (((int64_t)pg * Hkv + kvh) * BS + pp % BS) * Dh + lane * EPL;
                if (pp == ctx - 1) {
                    /* this step's k and v: from qkv, k rotated here; the
                     * group's first head puts them in the pool for the
                     * steps after */
                    float kf[EPL];
                    T kh[EPL];
                    ck_load_n_cg<T, EPL>(qkv + (int64_t)(H + kvh) * Dh + lane * EPL, kf);
                    rope_row<T, EPL>(kf, sn, cs, op.attn.neox, lane);
#pragma unroll
                    for (int e = 0; e < EPL; e++)
                        ck_from_f32(&kh[e], kf[e]); /* exact: rope_row rounded to T */
                    memcpy(&kr[u], kh, sizeof kr[u]);
                    vr[u] = __ldcg(reinterpret_cast<const KV *>(
                        qkv + (int64_t)(H + Hkv + kvh) * Dh + lane * EPL));
                    if (h % (H / Hkv) == 0) {
                        *reinterpret_cast<KV *>(const_cast<T *>(kpool) + at) = kr[u];
                        *reinterpret_cast<KV *>(const_cast<T *>(vpool) + at) = vr[u];
                    }
                } else {
                    kr[u] = __ldcg(reinterpret_cast<const KV *>(kpool + at));
                    vr[u] = __ldcg(reinterpret_cast<const KV *>(vpool + at));
                }
            }
        };
        /* the first two rounds' pages (lane u: row u's), the wait (the
         * first item), then q and the round's rows in flight together, then
         * q rotated */
        const int page = pages_of(p0 + warp);
        int next_page = pages_of(p0 + warp + kWarps * ATT_U);
        if (item == (int)blockIdx.x)
            grid_wait(before);
        float q[EPL];
        ck_load_n_cg<T, EPL>(qkv + (int64_t)h * Dh + lane * EPL, q);
        if (p0 + warp < p1)
            load_keys(p0 + warp, page);
        rope_row<T, EPL>(q, sn, cs, op.attn.neox, lane);
#pragma unroll
        for (int e = 0; e < EPL; e++)
            q[e] *= op.attn.scale;
        if (kTimeline && tl_op && tid == 0)
            tl_op[4] = now_ns();
        float m = -INFINITY, l = 0.0f, o[EPL];
#pragma unroll
        for (int e = 0; e < EPL; e++)
            o[e] = 0.0f;
        for (int p = p0 + warp; p < p1; p += kWarps * ATT_U) {
            /* the round's scores together (their shuffles interleave), then
             * one rescale for the round. A key past p1 holds no row (its
             * registers may be anything): it is left out, not weighted 0 */
            const int n_keys = min(ATT_U, (p1 - p + kWarps - 1) / kWarps);
            float sc[ATT_U];
#pragma unroll
            for (int u = 0; u < ATT_U; u++) {
                sc[u] = 0.0f;
                if (u >= n_keys)
                    continue;
                float kf[EPL];
                ck_unpack_n<T, EPL>(kr[u], kf);
#pragma unroll
                for (int e = 0; e < EPL; e++)
                    sc[u] = fmaf(q[e], kf[e], sc[u]);
            }
#pragma unroll
            for (int x = 16; x > 0; x >>= 1)
#pragma unroll
                for (int u = 0; u < ATT_U; u++)
                    sc[u] += __shfl_xor_sync(0xffffffffu, sc[u], x);
            float m_new = m;
#pragma unroll
            for (int u = 0; u < ATT_U; u++)
                if (u < n_keys)
                    m_new = fmaxf(m_new, sc[u]);
            const float corr = __expf(m - m_new);
            l *= corr;
#pragma unroll
            for (int e = 0; e < EPL; e++)
                o[e] *= corr;
#pragma unroll
            for (int u = 0; u < ATT_U; u++) {
                if (u >= n_keys)
                    break;
                float vf[EPL];
                ck_unpack_n<T, EPL>(vr[u], vf);
                const float pe = __expf(sc[u] - m_new);
                l += pe;
#pragma unroll
                for (int e = 0; e < EPL; e++)
                    o[e] = fmaf(pe, vf[e], o[e]);
            }
            m = m_new;
            if (p + kWarps * ATT_U < p1) { /* the next round, and the pages of the one after */
                load_keys(p + kWarps * ATT_U, next_page);
                next_page = pages_of(p + 2 * kWarps * ATT_U);
            }
        }
        if (kTimeline && tl_op && tid == 0)
            tl_op[5] = now_ns();
        /* merge the warps */
        float *wp = scratch + warp * PART;
#pragma unroll
        for (int e = 0; e < EPL; e++)
            wp[2 + lane * EPL + e] = o[e];
        if (lane == 0) {
            wp[0] = m;
            wp[1] = l;
        }
        consumers_sync();
        float M = -INFINITY, L = 0.0f, O = 0.0f;
        if (tid < Dh) {
#pragma unroll
            for (int w = 0; w < kWarps; w++)
                M = fmaxf(M, scratch[w * PART]);
#pragma unroll
            for (int w = 0; w < kWarps; w++) {
                const float c = scratch[w * PART + 1] > 0.0f ? __expf(scratch[w * PART] - M) : 0.0f;
                L += scratch[w * PART + 1] * c;
                O += scratch[w * PART + 2 + tid] * c;
            }
        }
        if (kTimeline && tl_op && tid == 0)
            tl_op[6] = now_ns();
        T *out = static_cast<T *>(op.attn.out) + (int64_t)h * Dh;
        if (n_split == 1) {
            if (tid < Dh)
                ck_from_f32(out + tid, O / L);
        } else if (tid < Dh) {
            unsigned long long *head = op.attn.parts + (int64_t)h * n_split * (Dh + 1);
            if (sp != n_split - 1)
                split_publish(head + (int64_t)sp * (Dh + 1), M, L, O, tid);
            else
                ck_from_f32(out + tid, split_merge(head, n_split, Dh, M, L, O, tid));
        }
        if (kTimeline && tl_op && tid == 0)
            tl_op[7] = now_ns();
        consumers_sync(); /* scratch is reused by the next item */
        /* the merger's threads have all read the other splits' (M, L) */
        if (n_split > 1 && sp == n_split - 1 && tid < n_split - 1)
            tagged_clear(op.attn.parts + ((int64_t)h * n_split + tid) * (Dh + 1));
    }
}

/* as ck_swiglu: h = g / (1 + exp(-g)) * u */
template <class T> __device__ void swiglu_op(const ck_pstep_op &op) {
    const int F = op.swiglu.F;
    for (int i = blockIdx.x * kConsumers + threadIdx.x; i < F; i += gridDim.x * kConsumers) {
        float g, u;
        if (op.swiglu.gu_ck) {
            g = ck_to_f32(__ldcg(static_cast<const T *>(op.swiglu.gu) + i));
            u = ck_to_f32(__ldcg(static_cast<const T *>(op.swiglu.gu) + F + i));
        } else {
            g = __ldcg(static_cast<const float *>(op.swiglu.gu) + i);
            u = __ldcg(static_cast<const float *>(op.swiglu.gu) + F + i);
        }
        ck_from_f32(static_cast<T *>(op.swiglu.h) + i, g / (1.0f + __expf(-g)) * u);
    }
}

template <class T> __device__ void gather_op(const ck_pstep_op &op) {
    const int D = op.gather.D;
    const T *x = static_cast<const T *>(op.gather.x) + (int64_t)op.gather.row[0] * op.gather.ldx;
    for (int d = blockIdx.x * kConsumers + threadIdx.x; d < D; d += gridDim.x * kConsumers)
        static_cast<T *>(op.gather.y)[d] = __ldcg(x + d);
}

template <class T, int EPL, bool kFolded>
__global__ void __launch_bounds__(kThreads, 1)
    pstep_kernel(const ck_pstep_op *__restrict__ prog, int n_op, int x_bytes, int n_stages,
                 unsigned *sync, uint64_t *trace, uint64_t *tl, int32_t *tokens,
                 ck_chain chain) {
    extern __shared__ __align__(128) uint8_t smem[];
    if (kTimeline && tl)
        tl += (int64_t)blockIdx.x * kTlStride;
    __shared__ uint64_t full[kMaxStages], empty[kMaxStages];
    __shared__ float scratch[kWarps];
    __shared__ int arrived; /* the last op whose barrier arrival is released, + 1 */
    uint16_t *xs = reinterpret_cast<uint16_t *>(smem);
    float *acc = reinterpret_cast<float *>(smem + x_bytes);
    uint8_t *ring = smem + x_bytes + kAccBytes;

    if (threadIdx.x == 0) {
        arrived = 0;
        for (int st = 0; st < n_stages; st++) {
            mbar_init(&full[st], 1);
            mbar_init(&empty[st], kWarps);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x >= kConsumers) {
        if (threadIdx.x == kConsumers)
            produce(prog, n_op, ring, n_stages, full, empty, tl, &arrived);
        return;
    }
    int piece = 0;
    /* op i's timeline stamps */
    auto tl_of = [&](int i) {
        return kTimeline && tl && i < kTlOps ? tl + kTlPieces * 4 + kTlOpSlots * i : nullptr;
    };
    for (int i = 0; i < n_op; i++) {
        const ck_pstep_op &op = prog[i];
        uint64_t *tl_op = tl_of(i);
        /* the barrier after op i - 1 (none before the first op) */
        auto before = [&] {
            return barrier_wait{i > 0 ? sync : nullptr, (unsigned)i * gridDim.x,
                                trace && i > 0 ? trace + 3 * (i - 1) : nullptr,
                                i > 0 ? tl_of(i - 1) : nullptr};
        };
        switch (op.kind) {
        case CKP_GEMV: {
            /* while thread 0 waits for the other blocks, warps 1..7 issue
             * the K/V prefetch of the attention after this GEMV (it needs
             * no activation of the op before). The norm's weights are
             * loaded after the wait, beside x (docs/journal/decode-step.md) */
            if (i + 1 < n_op && prog[i + 1].kind == CKP_ATTN)
                attn_prefetch<32 * EPL>(prog[i + 1]);
            grid_wait(before());
            gemv_op<T, kFolded>(
                op, ring, n_stages, xs, acc, full, empty, piece, scratch, tl, tl_op,
                tokens ? reinterpret_cast<unsigned long long *>(sync + 2) : nullptr);
            break;
        }
        case CKP_ATTN: /* it waits itself, after the loads it can make before */
            attn_op<T, EPL>(op, reinterpret_cast<float *>(xs), tl_op, before());
            break;
        case CKP_EMBED: grid_wait(before()); embed_op<T>(op); break;
        case CKP_NORM: grid_wait(before()); norm_op<T, kFolded>(op, scratch); break;
        case CKP_SWIGLU: grid_wait(before()); swiglu_op<T>(op); break;
        case CKP_GATHER: grid_wait(before()); gather_op<T>(op); break;
        }
        if (i + 1 < n_op)
            grid_arrive(sync, trace ? trace + 3 * i : nullptr, tl_op, &arrived, i);
    }
    /* The last block out: a greedy step's token (every block's rank is in:
     * each ranked before it counted itself out), and the counters zeroed for
     * the next launch (every block is past its last barrier wait). */
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(sync + 1, 1u) == gridDim.x - 1) {
            __threadfence();
            auto *rank = reinterpret_cast<unsigned long long *>(sync + 2);
            const unsigned long long key = atomicExch(rank, 0ull);
            /* the best logit not finite (every logit NaN, as a NaN anywhere
             * in the hidden state makes them, or +inf): -1, the engine's
             * "the arithmetic broke"; NaN beside finite logits ranks last
             * and goes unseen here */
            const uint32_t best = (uint32_t)(key >> 32);
            const bool finite =
                best > ck_logit_ord(-INFINITY) && best < ck_logit_ord(INFINITY);
            if (tokens)
                ck_chain_emit(tokens, finite ? ck_logit_key_id(key) : -1, chain,
                              chain.tok ? *chain.count : 0);
            sync[0] = 0;
            sync[1] = 0;
        }
    }
}

int n_sm_cached = 0;

/* Shared memory: x (the widest K, and the attention's merge), acc, then
 * as many ring stages as fit. */
struct pstep_layout {
    int x_bytes, n_stages, smem;
};

pstep_layout layout_for(int max_k, int dh) {
    pstep_layout L;
    const int x = max(max_k * 2, kWarps * (dh + 2) * 4);
    L.x_bytes = (x + 127) / 128 * 128;
    L.n_stages = min(kMaxStages, (kSmemMax - L.x_bytes - kAccBytes) / kPiece);
    L.smem = L.x_bytes + kAccBytes + L.n_stages * kPiece;
    return L;
}

/* The timeline (kTimeline builds): which launch to record, where. The
 * launch count is the process's (diagnostics: one engine at a time). */
struct timeline_state {
    bool parsed;
    int step, launches;
    char file[512];
    uint64_t *dev;
};
timeline_state timeline;

/* the buffer for this launch, or NULL when it is not the one recorded */
uint64_t *timeline_begin(cudaStream_t s, int blocks) {
    if (!kTimeline)
        return nullptr;
    if (!timeline.parsed) {
        timeline.parsed = true;
        timeline.step = -1;
        const char *e = hr_env_get()->cuda_pstep_timeline;
        if (e && sscanf(e, "%d:%511s", &timeline.step, timeline.file) != 2)
            timeline.step = -1;
    }
    if (timeline.launches++ != timeline.step)
        return nullptr;
    const size_t bytes = (size_t)blocks * kTlStride * 8;
    if (!timeline.dev && cudaMalloc((void **)&timeline.dev, bytes) != cudaSuccess) {
        timeline.dev = nullptr;
        return nullptr;
    }
    (void)cudaMemsetAsync(timeline.dev, 0, bytes, s);
    return timeline.dev;
}

/* waits for the recorded launch and writes: int32 blocks, ops, stages,
 * kTlPieces, kTlOps, kPiece, kTlOpSlots; per op int32 kind, N, K, pair; then the
 * blocks' records (uint64). Frees the buffer: one step is recorded. */
void timeline_write(cudaStream_t s, const ck_pstep_op *ops, int n_op, int blocks, int n_stages) {
    const size_t bytes = (size_t)blocks * kTlStride * 8;
    uint64_t *h = static_cast<uint64_t *>(malloc(bytes));
    ck_pstep_op *hops = static_cast<ck_pstep_op *>(malloc((size_t)n_op * sizeof *hops));
    FILE *f = fopen(timeline.file, "wb");
    bool ok = h && hops && f && cudaStreamSynchronize(s) == cudaSuccess &&
              cudaMemcpy(h, timeline.dev, bytes, cudaMemcpyDeviceToHost) == cudaSuccess &&
              cudaMemcpy(hops, ops, (size_t)n_op * sizeof *hops, cudaMemcpyDeviceToHost) ==
                  cudaSuccess;
    if (ok) {
        const int32_t hdr[7] = {blocks, n_op, n_stages, kTlPieces, kTlOps, kPiece, kTlOpSlots};
        ok = fwrite(hdr, sizeof hdr, 1, f) == 1;
        for (int i = 0; ok && i < n_op; i++) {
            const bool g = hops[i].kind == CKP_GEMV;
            const int32_t r[4] = {(int32_t)hops[i].kind, g ? hops[i].gemv.N : 0,
                                  g ? hops[i].gemv.K : 0, g ? hops[i].gemv.pair : 0};
            ok = fwrite(r, sizeof r, 1, f) == 1;
        }
        ok = ok && fwrite(h, bytes, 1, f) == 1;
    }
    fprintf(stderr, "pstep timeline: %s %s\n", ok ? "wrote" : "could not write", timeline.file);
    if (f)
        fclose(f);
    free(h);
    free(hops);
    (void)cudaFree(timeline.dev);
    timeline.dev = nullptr;
}

template <class T, int EPL, bool kFolded>
void pstep_launch(cudaStream_t s, const ck_pstep_op *ops, int n_op, int max_k, unsigned *sync,
                  uint64_t *trace, int32_t *tokens, const ck_chain *greedy) {
    auto kernel = pstep_kernel<T, EPL, kFolded>;
    const pstep_layout L = layout_for(max_k, 32 * EPL);
    (void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L.smem);
    /* every block must be resident at once (the grid barrier): a
     * cooperative launch guarantees it or fails */
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeCooperative;
    attr.val.cooperative = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)ck_pstep_blocks());
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = (size_t)L.smem;
    cfg.stream = s;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    uint64_t *tl = timeline_begin(s, (int)cfg.gridDim.x);
    const ck_chain chain = greedy ? *greedy : ck_chain{};
    (void)cudaLaunchKernelEx(&cfg, kernel, ops, n_op, L.x_bytes, L.n_stages, sync, trace, tl,
                             greedy ? tokens : nullptr, chain);
    if (tl)
        timeline_write(s, ops, n_op, (int)cfg.gridDim.x, L.n_stages);
}

/* whether one block fits on an SM (registers, shared memory): the grid
 * barrier needs every block resident */
template <class T, int EPL, bool kFolded> bool pstep_fits(int max_k) {
    auto kernel = pstep_kernel<T, EPL, kFolded>;
    const pstep_layout L = layout_for(max_k, 32 * EPL);
    int n = 0;
    return L.n_stages >= 2 &&
           cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L.smem) ==
               cudaSuccess &&
           cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, L.smem) ==
               cudaSuccess &&
           n >= 1;
}

/* The kernel forms of head size 32 x EPL: bf16 has both (which one runs
 * depends on the step's norms); f16 folds no norm (cuda_upload.c's
 * fold_norm), so only the form that loads them is built for it, and it is
 * right for any program. */
template <int EPL> bool pstep_forms_fit(ck_dtype dt, int max_k) {
    if (dt == CK_BF16)
        return pstep_fits<__nv_bfloat16, EPL, false>(max_k) &&
               pstep_fits<__nv_bfloat16, EPL, true>(max_k);
    return pstep_fits<__half, EPL, false>(max_k);
}

template <int EPL>
void pstep_launch_form(cudaStream_t s, const ck_pstep_op *ops, int n_op, int max_k,
                       unsigned *sync, ck_dtype dt, bool folded, uint64_t *trace,
                       int32_t *tokens, const ck_chain *greedy) {
    if (folded && dt == CK_BF16)
        pstep_launch<__nv_bfloat16, EPL, true>(s, ops, n_op, max_k, sync, trace, tokens, greedy);
    else
        CK_DISPATCH(dt, (pstep_launch<T, EPL, false>(s, ops, n_op, max_k, sync, trace, tokens,
                                                     greedy)));
}

} // namespace

extern "C" int ck_pstep_supported(ck_dtype dt, int dh, int max_k) {
    if ((dh != 64 && dh != 128) || max_k > CK_PSTEP_MAX_K)
        return 0;
    const bool ok = dh == 64 ? pstep_forms_fit<2>(dt, max_k) : pstep_forms_fit<4>(dt, max_k);
    (void)cudaGetLastError();
    return ok;
}

extern "C" int ck_pstep_blocks(void) {
    if (n_sm_cached == 0) {
        int dev = 0;
        (void)cudaGetDevice(&dev);
        (void)cudaDeviceGetAttribute(&n_sm_cached, cudaDevAttrMultiProcessorCount, dev);
    }
    return n_sm_cached;
}

extern "C" void ck_pstep_run(cudaStream_t s, const ck_pstep_op *ops, int n_op, int max_k,
                             unsigned *sync, ck_dtype dt, int dh, bool folded, uint64_t *trace,
                             int32_t *tokens, const ck_chain *greedy) {
    if (n_op <= 0)
        return;
    if (dh == 64)
        pstep_launch_form<2>(s, ops, n_op, max_k, sync, dt, folded, trace, tokens, greedy);
    else
        pstep_launch_form<4>(s, ops, n_op, max_k, sync, dt, folded, trace, tokens, greedy);
}
