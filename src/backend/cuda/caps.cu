/*
 * caps.cu — what the CUDA device can run, read once: the one place that
 * chooses between the Hopper path and the generic one.
 *
 * The library is built for sm_80, sm_86, sm_89 and sm_90 (CMakeLists.txt).
 * The generic path is what every one of them runs: each step op by op on
 * kernels that need sm_80 at most (mma.sync bf16, ldmatrix, cp.async, the
 * GEMV, flash attention, sampling) and cuBLASLt. The Hopper path adds
 * programmatic dependent launch (griddepcontrol: common.cuh), the
 * persistent decode step (cp.async.bulk, mbarrier transaction counts:
 * persistent.cu, built for sm_90 only) and, on compute capability 9.0
 * alone, the wgmma prefill attention (sm_90a code: attention_wgmma.cu).
 *
 * The Hopper path needs a 9.0+ device running code compiled for sm_90 or
 * later: a probe kernel built with the same architectures as the others
 * tells which the driver loaded (an sm_80-only build on an H200 runs its
 * compute_80 PTX, compiled at load, whose pdl_wait is empty: its kernels
 * must not be launched as dependents).
 * HEADROOM_CUDA_ARCH_FALLBACK=1 takes the generic path on any GPU (to
 * check it on a Hopper); =80, =86 or =89 also hold a block's shared memory
 * to what that card grants (A100: 163 KB; RTX 30xx/40xx: 99 KB), so a
 * Hopper runs the kernel variants those cards run. HEADROOM_CUDA_WGMMA=0
 * leaves out the wgmma kernel alone.
 *
 * What the Hopper parts are worth (H200, 2026-12-04, Llama-2-7B bf16,
 * prompt 128, 256 tokens, bench/results/2026-12-04-h200-arch-fallback):
 * decode 292.6 tok/s on the Hopper path, 232.2 on the generic one (232.4
 * from the compute_80 code of an sm_80-only build, 232.1 at 99 KB of
 * shared memory), prefill 24.3k against 23.0-23.4k tok/s.
 */
#include "backend/cuda/common.cuh"
#include "util/env.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

namespace {

__global__ void probe_kernel() {}

ck_caps caps;
pthread_once_t caps_once = PTHREAD_ONCE_INIT;

/* the shared memory a block may opt into on a card of this compute
 * capability (the CUDA programming guide's table), 0 when not emulated */
int emulated_smem(int cc) {
    switch (cc) {
    case 80: return 163 * 1024;
    case 86:
    case 89: return 99 * 1024;
    default: return 0;
    }
}

void caps_read(void) {
    int dev = 0, smem = 0;
    (void)cudaGetDevice(&dev);
    (void)cudaDeviceGetAttribute(&caps.major, cudaDevAttrComputeCapabilityMajor, dev);
    (void)cudaDeviceGetAttribute(&caps.minor, cudaDevAttrComputeCapabilityMinor, dev);
    (void)cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    struct cudaFuncAttributes fa;
    memset(&fa, 0, sizeof fa);
    (void)cudaFuncGetAttributes(&fa, probe_kernel);
    (void)cudaGetLastError(); /* no device, or no image for it: the generic path */
    caps.ptx = fa.ptxVersion;
    const int forced = hr_env_get()->cuda_arch_fallback;
    const int emulated = emulated_smem(forced);
    caps.smem_block = emulated > 0 && emulated < smem ? emulated : smem;
    caps.hopper = caps.major >= 9 && caps.ptx >= 90 && forced == 0;
    caps.wgmma = caps.hopper && caps.major == 9 && caps.minor == 0 && !hr_env_get()->cuda_wgmma_off;
    caps.path = caps.hopper ? "hopper" : "generic";
}

} // namespace

extern "C" const ck_caps *ck_device_caps(void) {
    (void)pthread_once(&caps_once, caps_read);
    return &caps;
}
