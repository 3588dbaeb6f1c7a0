/*
 * bandwidth.cu — how fast this GPU streams reads from its memory: the bound
 * of a decode step, which reads every weight once and writes next to
 * nothing. The copy bandwidth (cudaMemcpy device to device, a read and a
 * write a byte) is the usual bound, but GPUs of the same model differ in
 * the two apart: H200s that decode 1.5% faster copied 0.6% slower
 * (docs/journal/machines.md).
 *
 * A grid-stride loop of 16-byte streaming loads (ld.global.cs: the lines
 * are not kept), 8 in flight a thread, folded into one word that is stored
 * only if it equals a constant, so that no load can be left out.
 */
#include "backend/cuda/common.cuh"

namespace {

constexpr int kLoads = 8;
constexpr unsigned kNever = 0x9e3779b9u;

__global__ void read_stream_kernel(const uint4 *p, int64_t n, unsigned *sink) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned acc = 0;
    for (; i + (kLoads - 1) * stride < n; i += kLoads * stride) {
        uint4 v[kLoads];
#pragma unroll
        for (int u = 0; u < kLoads; u++)
            v[u] = __ldcs(p + i + u * stride);
#pragma unroll
        for (int u = 0; u < kLoads; u++)
            acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n; i += stride) {
        const uint4 v = __ldcs(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == kNever)
        *sink = acc;
}

} // namespace

extern "C" void ck_read_stream(cudaStream_t s, const void *p, int64_t bytes, unsigned *sink) {
    int dev = 0, n_sm = 0;
    (void)cudaGetDevice(&dev);
    (void)cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev);
    read_stream_kernel<<<(unsigned)(n_sm > 0 ? n_sm * 4 : 512), 512, 0, s>>>(
        static_cast<const uint4 *>(p), bytes / 16, sink);
}
