/*
 * gemm_packed.cu — y = x . W^T for a few dozen activation rows (batched
 * decode: 9 to 64 sequences) on packed weights, with tensor cores: each
 * weight element is decoded once per launch, in registers, straight into
 * the B fragment of mma.m16n8k16; no 16-bit copy of W exists anywhere.
 *
 * The fragment trick: a dot product does not care about the order of k, so
 * within each chunk of 32 k both operands use the same permutation, chosen
 * so that lane (g, t) (g = lane / 4, t = lane % 4) holds k = 8t .. 8t + 7 of
 * its row: one pk_decode8 of weight row g (8 consecutive elements, as the
 * dequantizer makes them) and one 16-byte load of activation rows g and
 * g + 8. Step s (0, 1) of the chunk feeds the mma the lane's k pairs
 * 8t + 4s + {0,1} in the place of k = 2t + {0,1} and 8t + 4s + {2,3} in
 * the place of k = 2t + 8 + {0,1}: over the two steps every k of the chunk
 * meets its partner exactly once.
 *
 * Numerics: W decoded as quant/ does (bit for bit in f32), rounded once to
 * the compute type, times x in the compute type, f32 sums: what the longer
 * steps get from ck_dequant_packed + cuBLASLt, up to summation order.
 *
 * A block is WK warps over the same NT x 8 weight rows, each warp taking
 * every WK-th chunk of K; their partial sums meet in shared memory and are
 * added in warp order (deterministic: the same inputs give the same bits).
 */
#include "backend/cuda/common.cuh"
#include "backend/cuda/packed.cuh"

#include <stdint.h>

namespace {

/* the launcher's configuration: n8 tiles (weight rows / 8) a block, and
 * warps a block, splitting K (packed_check times others) */
constexpr int kMmNT = 4;
constexpr int kMmWK = 8;

/* 8 consecutive x elements of row m at column k (zeros past the n rows) */
template <typename T>
__device__ __forceinline__ uint4 mm_x_load8(const T *x, int64_t ldx, int m, int n, int64_t k,
                                         bool vec) {
    if (m >= n)
        return make_uint4(0u, 0u, 0u, 0u);
    const T *p = x + (int64_t)m * ldx + k;
    if (vec)
        return __ldg(reinterpret_cast<const uint4 *>(p));
    uint16_t h[8];
#pragma unroll
    for (int i = 0; i < 8; i++)
        h[i] = reinterpret_cast<const uint16_t *>(p)[i];
    return make_uint4(h[0] | (uint32_t)h[1] << 16, h[2] | (uint32_t)h[3] << 16,
                      h[4] | (uint32_t)h[5] << 16, h[6] | (uint32_t)h[7] << 16);
}

/* vec: x 16-byte aligned with ldx % 8 == 0; y_ck: y in T, else f32 */
template <int TY, typename T, int MT, int NT, int WK>
__global__ void __launch_bounds__(32 * WK)
    gemm_packed_kernel(void *y, bool y_ck, int64_t ldy, const T *x, int64_t ldx, bool vec,
                       PkPlanes w, const float *bias, int n) {
    constexpr int BN = 8 * NT;
    __shared__ float part[WK][16][BN + 1]; /* +1: the column writes spread over banks */
    pk_codebook_to_shared<TY>(w);
    const int lane = threadIdx.x & 31, kw = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t row0 = (int64_t)blockIdx.x * BN;
    float acc[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                acc[mt][nt][i] = 0.0f;
    pdl_wait(); /* x comes from the previous kernel */
    pdl_release();
    const int chunks = w.K / 32;
#pragma unroll 2
    for (int c = kw; c < chunks; c += WK) {
        const int k = 32 * c + 8 * t;
        uint32_t b[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const int64_t r = row0 + 8 * nt + g;
            float v[8];
            if (r < w.N) {
                pk_decode8<TY>(w, r, k, v);
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++)
                    v[i] = 0.0f;
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
                b[nt][i] = ck_pair<T>::pack(v[2 * i], v[2 * i + 1]);
        }
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const uint4 lo = mm_x_load8<T>(x, ldx, 16 * mt + g, n, k, vec);
            const uint4 hi = mm_x_load8<T>(x, ldx, 16 * mt + g + 8, n, k, vec);
            const uint32_t a0[4] = {lo.x, hi.x, lo.y, hi.y}; /* k 8t + 0..3 */
            const uint32_t a1[4] = {lo.z, hi.z, lo.w, hi.w}; /* k 8t + 4..7 */
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                ck_pair<T>::mma(acc[mt][nt], a0, b[nt][0], b[nt][1]);
                ck_pair<T>::mma(acc[mt][nt], a1, b[nt][2], b[nt][3]);
            }
        }
    }
    /* C fragment: acc[..][0..1] at (row g, cols 2t, 2t + 1), [2..3] at row g + 8 */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            part[kw][g][8 * nt + 2 * t] = acc[mt][nt][0];
            part[kw][g][8 * nt + 2 * t + 1] = acc[mt][nt][1];
            part[kw][g + 8][8 * nt + 2 * t] = acc[mt][nt][2];
            part[kw][g + 8][8 * nt + 2 * t + 1] = acc[mt][nt][3];
        }
        __syncthreads();
        for (int o = threadIdx.x; o < 16 * BN; o += 32 * WK) {
            const int m = 16 * mt + o / BN, col = o % BN;
            const int64_t r = row0 + col;
            if (m < n && r < w.N) {
                float s = 0.0f;
#pragma unroll
                for (int j = 0; j < WK; j++)
                    s += part[j][o / BN][col];
                if (bias)
                    s += bias[r];
                if (y_ck)
                    ck_from_f32(static_cast<T *>(y) + (int64_t)m * ldy + r, s);
                else
                    static_cast<float *>(y)[(int64_t)m * ldy + r] = s;
            }
        }
        __syncthreads();
    }
}

template <int TY, typename T, int MT, int NT, int WK>
void mm_launch(cudaStream_t s, void *y, bool y_ck, int64_t ldy, const T *x, int64_t ldx,
               bool vec, const PkPlanes &w, const float *bias, int n) {
    const dim3 grid((unsigned)((w.N + 8 * NT - 1) / (8 * NT)));
    ck_launch(s, grid, 32 * WK, 0, gemm_packed_kernel<TY, T, MT, NT, WK>, y, y_ck, ldy, x, ldx,
              vec, w, bias, n);
}

/* m16 tiles: 1, 2 or 4 (48 rows take 4: three would spill on Q6_K) */
template <int TY, typename T>
void mm_launch_rows(cudaStream_t s, void *y, bool y_ck, int64_t ldy, const T *x, int64_t ldx,
                    bool vec, const PkPlanes &w, const float *bias, int n) {
    if (n <= 16)
        mm_launch<TY, T, 1, kMmNT, kMmWK>(s, y, y_ck, ldy, x, ldx, vec, w, bias, n);
    else if (n <= 32)
        mm_launch<TY, T, 2, kMmNT, kMmWK>(s, y, y_ck, ldy, x, ldx, vec, w, bias, n);
    else
        mm_launch<TY, T, 4, kMmNT, kMmWK>(s, y, y_ck, ldy, x, ldx, vec, w, bias, n);
}

} // namespace

extern "C" void ck_gemm_packed(cudaStream_t s, void *y, bool y_ck, int64_t ldy, const void *x,
                               int64_t ldx, const packed_matrix *W, const float *bias,
                               ck_dtype dt, int n) {
    if (n <= 0 || W->N <= 0 || W->K <= 0)
        return;
    const PkPlanes w = pk_planes(W);
    const size_t y_elem = y_ck ? 2 : 4;
    for (int r0 = 0; r0 < n; r0 += CK_GEMM_PACKED_MAX_ROWS) {
        const int nr = n - r0 < CK_GEMM_PACKED_MAX_ROWS ? n - r0 : CK_GEMM_PACKED_MAX_ROWS;
        const char *xr = static_cast<const char *>(x) + (size_t)r0 * (size_t)ldx * 2;
        void *yr = static_cast<char *>(y) + (size_t)r0 * (size_t)ldy * y_elem;
        const bool vec = ((uintptr_t)xr & 15u) == 0 && (nr == 1 || ldx % 8 == 0);
        PK_DISPATCH(W->type, CK_DISPATCH(dt, mm_launch_rows<TY, T>(s, yr, y_ck, ldy,
                                                                   (const T *)xr, ldx, vec, w,
                                                                   bias, nr)));
    }
}
