/*
 * common.cuh — device helpers shared by the kernels: the two 16-bit types
 * behind ck_dtype, conversions, warp and block reductions, and the dispatch
 * from the run-time ck_dtype to a template instance.
 */
#ifndef HR_BACKEND_CUDA_COMMON_CUH
#define HR_BACKEND_CUDA_COMMON_CUH

#include "backend/cuda/kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

__device__ __forceinline__ float ck_to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float ck_to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ void ck_from_f32(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void ck_from_f32(__half *p, float v) { *p = __float2half_rn(v); }
/* f32 through the same names, for kernels that take either */
__device__ __forceinline__ float ck_to_f32(float v) { return v; }
__device__ __forceinline__ void ck_from_f32(float *p, float v) { *p = v; }

/* Ranking logits (the sampler's order, and a greedy persistent step's):
 * a logit made canonical (NaN ranks last, -0 and +0 are one value), its
 * order-preserving bits, and a unique key, bits << 32 | ~id, so the largest
 * key is the argmax, the lowest id on ties. */
__device__ __forceinline__ float ck_logit_canon(float l) {
    if (l != l)
        return -INFINITY;
    return l == 0.0f ? 0.0f : l;
}

__device__ __forceinline__ uint32_t ck_logit_ord(float l) {
    uint32_t b = __float_as_uint(l);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/* l canonical */
__device__ __forceinline__ unsigned long long ck_logit_key(float l, int id) {
    return ((unsigned long long)ck_logit_ord(l) << 32) |
           (unsigned long long)(0xffffffffu - (uint32_t)id);
}

__device__ __forceinline__ int ck_logit_key_id(unsigned long long key) {
    return (int)(0xffffffffu - (uint32_t)(key & 0xffffffffu));
}

/* One thread, once a step of one row has its token: tokens[0], and with a
 * chain (ch.tok set) the next step's metadata (kernels.h, ck_chain). count:
 * *ch.count as the step began. */
__device__ __forceinline__ void ck_chain_emit(int32_t *tokens, int token, const ck_chain &ch,
                                              int count) {
    tokens[0] = token;
    if (!ch.tok)
        return;
    ch.host_tok[count & 1] = token;
    /* -1 (the logits were not finite) feeds row 0 to the step queued
     * after: the engine fails the request and drops that step's output,
     * but its embedding must still read inside the table */
    *ch.tok = token < 0 ? 0 : token;
    const int pos = *ch.pos + 1, b = pos / ch.block_size;
    *ch.pos = pos;
    if (b < ch.max_blocks)
        *ch.slot = ch.block_tables[(int64_t)*ch.seq * ch.max_blocks + b] * ch.block_size +
                   pos % ch.block_size;
    *ch.count = count + 1;
}

/* N consecutive elements of T (ck or f32) as one load or store of
 * N sizeof(T) bytes (2 to 16; p aligned to it), as N floats */
template <int BYTES> struct ck_vec;
template <> struct ck_vec<2> { typedef uint16_t type; };
template <> struct ck_vec<4> { typedef uint32_t type; };
template <> struct ck_vec<8> { typedef uint2 type; };
template <> struct ck_vec<16> { typedef uint4 type; };

template <typename T, int N, typename V>
__device__ __forceinline__ void ck_unpack_n(V v, float f[N]) {
    T h[N];
    memcpy(h, &v, sizeof v);
#pragma unroll
    for (int e = 0; e < N; e++)
        f[e] = ck_to_f32(h[e]);
}

template <typename T, int N> __device__ __forceinline__ void ck_load_n(const T *p, float f[N]) {
    typedef typename ck_vec<N * sizeof(T)>::type V;
    ck_unpack_n<T, N>(*reinterpret_cast<const V *>(p), f);
}

/* the same through L2 only (ld.global.cg): data another block of the same
 * kernel wrote, which a stale line in this SM's L1 could hide */
template <typename T, int N> __device__ __forceinline__ void ck_load_n_cg(const T *p, float f[N]) {
    typedef typename ck_vec<N * sizeof(T)>::type V;
    ck_unpack_n<T, N>(__ldcg(reinterpret_cast<const V *>(p)), f);
}

template <typename T, int N> __device__ __forceinline__ void ck_store_n(T *p, const float f[N]) {
    typedef typename ck_vec<N * sizeof(T)>::type V;
    T h[N];
#pragma unroll
    for (int e = 0; e < N; e++)
        ck_from_f32(&h[e], f[e]);
    V v;
    memcpy(&v, h, sizeof v);
    *reinterpret_cast<V *>(p) = v;
}

/* the same for four elements as a float4 (the row kernels' registers) */
template <typename T> __device__ __forceinline__ float4 ck_load4(const T *p) {
    float f[4];
    ck_load_n<T, 4>(p, f);
    return make_float4(f[0], f[1], f[2], f[3]);
}

template <typename T> __device__ __forceinline__ void ck_store4(T *p, float4 v) {
    const float f[4] = {v.x, v.y, v.z, v.w};
    ck_store_n<T, 4>(p, f);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread
 * gets the result. scratch: 32 floats of shared memory. */
__device__ __forceinline__ float block_sum(float v, float *scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* scratch may still be read from a previous call */
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    v = lane < n_warp ? scratch[lane] : 0.0f;
    return warp_sum(v);
}

/* Max over the block, as block_sum. */
__device__ __forceinline__ float block_max(float v, float *scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    v = lane < n_warp ? scratch[lane] : -INFINITY;
    return warp_max(v);
}

/* Calls f.template operator()<T>() with T the element type of dt. */
#define CK_DISPATCH(dt, ...)                                                   \
    do {                                                                       \
        if ((dt) == CK_BF16) {                                                 \
            typedef __nv_bfloat16 T;                                           \
            __VA_ARGS__;                                                       \
        } else {                                                               \
            typedef __half T;                                                  \
            __VA_ARGS__;                                                       \
        }                                                                      \
    } while (0)

/* Element offset of position t's row in an attention pool (attention.cu's
 * layout): page (block bt[t / BS], kv head g), row t % BS. */
__device__ __forceinline__ int64_t kv_row(const ck_attn_args &a, const int32_t *bt, int g,
                                          int t) {
    return (((int64_t)bt[t / a.BS] * a.Hkv + g) * a.BS + t % a.BS) * a.Dh;
}

/* d (16x8 f32) += a (16x16, row; a[0..3]) . b (16x8, col; b0, b1), ty the
 * 16-bit type's PTX name */
#define CK_MMA_16816(ty, d, a, b0, b1)                                                        \
    asm("mma.sync.aligned.m16n8k16.row.col.f32." ty "." ty ".f32 {%0,%1,%2,%3}, "              \
        "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                                               \
        : "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3])                                \
        : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "r"(b0), "r"(b1))

/* The ck-type specific pieces: pairs of elements packed in 32 bits, and the
 * tensor-core product for that type. */
template <typename T> struct ck_pair;

template <> struct ck_pair<__nv_bfloat16> {
    /* low half = first element; bf16 is the top half of an f32 */
    static __device__ __forceinline__ float2 to_f32(uint32_t w) {
        return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
    /* d (16x8 f32) += a (16x16, row) . b (16x8, col) */
    static __device__ __forceinline__ void mma(float d[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1) {
        CK_MMA_16816("bf16", d, a, b0, b1);
    }
};

template <> struct ck_pair<__half> {
    static __device__ __forceinline__ float2 to_f32(uint32_t w) {
        return __half22float2(*reinterpret_cast<const __half2 *>(&w));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
    static __device__ __forceinline__ void mma(float d[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1) {
        CK_MMA_16816("f16", d, a, b0, b1);
    }
};

/* 2^x on the MUFU alone: exp2f adds a range test and two multiplies per
 * call to keep results below 2^-126 (p that small changes no sum) */
__device__ __forceinline__ float ex2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* cp.async groups (sm_80+): close this thread's group of copies; wait until
 * at most n of its committed groups are still pending */
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int n> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(n) : "memory");
}

/* Shared-memory barriers (mbarrier; try_wait is sm_90), as the kernels with a
 * producer filling stages for consumers use them: init with the count of
 * arrivals a phase takes, arrive, wait for the phase of the given parity
 * to complete. */
__device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mbar_init(uint64_t *bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count)
                 : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t *bar, unsigned parity) {
    uint32_t done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(smem_u32(bar)), "r"(parity)
                     : "memory");
    } while (!done);
}

/* whether the phase of that parity has completed, without waiting */
__device__ __forceinline__ bool mbar_test(uint64_t *bar, unsigned parity) {
    uint32_t done;
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                 "selp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(done)
                 : "r"(smem_u32(bar)), "r"(parity)
                 : "memory");
    return done != 0;
}

/* Programmatic dependent launch (sm_90: the Hopper path only, caps.cu; in
 * code for older architectures both are empty, and those kernels are never
 * launched as dependents). A kernel started with ck_launch may begin while
 * the previous kernel of the stream is still finishing: until pdl_wait()
 * returns it may only read what no earlier kernel writes (the weights), and
 * must write nothing. pdl_wait() returns once the previous kernel has
 * completed and its writes are visible; pdl_release() then lets the next
 * kernel start its own prologue. Chained this way, each GEMV's first
 * weight loads are in flight during the previous kernel's tail instead of
 * after it (the launch ramp was ~2-5 us of each decode kernel). Both are
 * no-ops in a kernel launched the ordinary way. */
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_release() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Launches kernel<<<grid, block, smem, s>>>(args...), as a programmatic
 * dependent of the previous kernel unless ck_set_pdl(0). The kernel must
 * call pdl_wait() before its first dependent access. */
template <typename... Params, typename... Args>
static inline void ck_launch(cudaStream_t s, dim3 grid, unsigned block, size_t smem,
                             void (*kernel)(Params...), Args... args) {
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = ck_pdl_on();
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(block);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    (void)cudaLaunchKernelEx(&cfg, kernel, ((Params)args)...);
}

static inline unsigned ck_blocks(int64_t n, int per_block) {
    return (unsigned)((n + per_block - 1) / per_block);
}

#endif
