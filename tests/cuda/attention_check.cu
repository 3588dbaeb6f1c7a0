/*
 * attention_check.cu — device check of src/backend/cuda/attention.cu and
 * attention_wgmma.cu: every path (flash decode, flash prefill with narrow
 * and wide tiles, the wide ones of head size 128 on the wgmma kernel where
 * the device has it, naive, and the naive fallback for head sizes without
 * a flash instance) against a
 * double-precision reference computed here, on random data laid out like
 * the engine's: KV pools (NB, Hkv, BS, Dh) with shuffled block tables, q
 * (ck, values exact in ck) inside a padded qkv row, a padded output.
 *
 * Traps: positions past each sequence's context, unused blocks, the k/v
 * columns of qkv and every output element start as NaN, so a read outside
 * [0, pos] or a missing write shows as NaN; output padding columns must keep
 * their NaN sentinel. q amplitudes 1, 4, 8 per head make the softmax range
 * from flat to peaked; v has mean 0.5 so outputs are not near zero.
 *
 * Error: max |gpu - ref| over the checked elements, and that over max |ref|
 * ("rel"), against 1e-2: bf16 holds 8 bits (output rounding alone is 2^-9 =
 * 2e-3 relative), and prefill also rounds P to ck for the tensor cores.
 * Segments over 160 rows check a sample of rows (tile edges, first, last,
 * every 37th). Timed prefill cases come in pairs, t64 and t128, to show the
 * narrow and the wide kernel side by side.
 *
 * Built by CMake with the CUDA backend (target attention_check, linked
 * with the library); on the device: attention_check [name filter].
 * HEADROOM_CUDA_WGMMA=0 times the mma.sync kernels in place of the wgmma one.
 * Exit 0 when every case passes (or no device: "SKIP: no CUDA device").
 */
#include "backend/cuda/kernels.h"
#include "util/fp16.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <thread>
#include <vector>

#define CUDA_OK(x)                                                                             \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

enum { PATH_FLASH, PATH_NAIVE };
/* TIMED: time the launch. GRAPH: capture the launch in a CUDA graph while
 * every position is 0, then replay it at other positions (the decode graph
 * of the engine: fixed grid, contexts read at run time); the first use of
 * its kernel instance is inside the capture. T64, T128: prefill tiles of
 * CK_ATT_TILE or CK_ATT_TILE_WIDE rows (the narrow or the wide kernel);
 * without either, the backend's rule (ck_attention_tile_rows) picks. */
enum { TIMED = 1, GRAPH = 2, T64 = 4, T128 = 8 };
enum { SEG_DEC, SEG_PRE };

typedef struct {
    int mode; /* SEG_DEC: rows go to dec_rows; SEG_PRE: rows go to tiles */
    int ctx;  /* context of the sequence after the step */
    int n;    /* rows of the step: positions ctx - n .. ctx - 1 */
} seg_spec;

#define MAX_SEG 6

typedef struct {
    const char *name;
    int H, Hkv, Dh, BS;
    ck_dtype dt;
    int path;
    int split_len, n_splits; /* 0: the default below */
    int flags;               /* TIMED, GRAPH */
    int n_seg;
    seg_spec seg[MAX_SEG];
} case_spec;

/* what a decode graph would fix: 128 splits keep a 32k context of 8 kv
 * heads at 1024 blocks; a context spreads over them, 64 positions at least */
#define DEFAULT_SPLIT_LEN 64
#define DEFAULT_N_SPLITS 128
#define PEAK_GBS 4300.0 /* H200 read bandwidth the decode target refers to */
#define TOL 1e-2

#define D(c) {SEG_DEC, c, 1}
#define P(c, n) {SEG_PRE, c, n}
static const case_spec cases[] = {
    /* decode, flash */
    {"llama2-7b decode", 32, 32, 128, 16, CK_BF16, PATH_FLASH, 0, 0, 0, 4, {D(1), D(17), D(300), D(4100)}},
    {"llama2-7b decode 32k", 32, 32, 128, 16, CK_BF16, PATH_FLASH, 0, 0, TIMED, 1, {D(32768)}},
    {"llama3-8b decode", 32, 8, 128, 16, CK_BF16, PATH_FLASH, 0, 0, 0, 4, {D(1), D(17), D(300), D(4100)}},
    {"llama3-8b decode 32k", 32, 8, 128, 16, CK_BF16, PATH_FLASH, 0, 0, TIMED, 1, {D(32768)}},
    {"llama3-8b decode 32k f16", 32, 8, 128, 16, CK_F16, PATH_FLASH, 0, 0, TIMED, 1, {D(32768)}},
    {"g8 64:8 decode 32k", 64, 8, 128, 16, CK_BF16, PATH_FLASH, 0, 0, TIMED, 1, {D(32768)}},
    {"smollm2 decode", 9, 3, 64, 16, CK_BF16, PATH_FLASH, 0, 0, 0, 5, {D(1), D(17), D(300), D(4100), D(32768)}},
    {"qwen2 decode", 14, 2, 64, 16, CK_BF16, PATH_FLASH, 0, 0, 0, 5, {D(1), D(17), D(300), D(4100), D(32768)}},
    {"llama3-8b decode f16", 32, 8, 128, 16, CK_F16, PATH_FLASH, 0, 0, 0, 3, {D(1), D(17), D(4100)}},
    {"smollm2 decode BS8", 9, 3, 64, 8, CK_BF16, PATH_FLASH, 0, 0, 0, 3, {D(1), D(17), D(300)}},
    {"llama3-8b decode BS32", 32, 8, 128, 32, CK_BF16, PATH_FLASH, 0, 0, 0, 3, {D(17), D(300), D(4100)}},
    {"dh80 decode 32:32", 32, 32, 80, 16, CK_BF16, PATH_FLASH, 0, 0, 0, 3, {D(17), D(300), D(4100)}},
    {"dh96 decode 24:8", 24, 8, 96, 16, CK_F16, PATH_FLASH, 0, 0, 0, 3, {D(17), D(300), D(4100)}},
    {"g16 32:2 decode", 32, 2, 64, 16, CK_BF16, PATH_FLASH, 0, 0, 0, 3, {D(17), D(300), D(4100)}},
    {"g2 16:8 decode", 16, 8, 128, 16, CK_BF16, PATH_FLASH, 0, 0, 0, 2, {D(33), D(1000)}},
    {"4 splits of >= 64 (spread)", 32, 8, 128, 16, CK_BF16, PATH_FLASH, 64, 4, 0, 3, {D(100), D(300), D(4100)}},
    {"one split", 9, 3, 64, 16, CK_BF16, PATH_FLASH, 4096, 1, 0, 2, {D(17), D(5000)}},
    {"one split llama2-7b rows", 32, 32, 128, 16, CK_BF16, PATH_FLASH, 128, 1, 0, 6, {D(128), D(129), D(300), D(384), D(17), D(1)}},
    {"one split llama3-8b rows f16", 32, 8, 128, 16, CK_F16, PATH_FLASH, 128, 1, 0, 4, {D(1), D(200), D(384), D(4100)}},
    {"graph qwen2 f16", 14, 2, 64, 16, CK_F16, PATH_FLASH, 0, 0, GRAPH, 3, {D(17), D(300), D(4100)}},
    {"graph dh80 prefill+decode f16", 16, 4, 80, 16, CK_F16, PATH_FLASH, 0, 0, GRAPH, 2, {D(200), P(300, 70)}},
    {"split_len 1000 (few splits)", 32, 8, 128, 16, CK_BF16, PATH_FLASH, 1000, 128, 0, 2, {D(999), D(4100)}},
    {"fallback dh256 decode", 8, 1, 256, 16, CK_BF16, PATH_FLASH, 0, 0, 0, 2, {D(17), D(300)}},
    {"fallback dh32 decode", 8, 4, 32, 16, CK_F16, PATH_FLASH, 0, 0, 0, 2, {D(1), D(300)}},
    /* prefill, flash */
    {"llama2-7b prefill", 32, 32, 128, 16, CK_BF16, PATH_FLASH, 0, 0, 0, 4, {P(1, 1), P(137, 37), P(1512, 512), P(2048, 2048)}},
    {"llama3-8b prefill", 32, 8, 128, 16, CK_BF16, PATH_FLASH, 0, 0, 0, 4, {P(1, 1), P(137, 37), P(1512, 512), P(2048, 2048)}},
    {"smollm2 prefill", 9, 3, 64, 16, CK_BF16, PATH_FLASH, 0, 0, 0, 4, {P(1, 1), P(137, 37), P(1512, 512), P(2048, 2048)}},
    {"qwen2 prefill", 14, 2, 64, 16, CK_BF16, PATH_FLASH, 0, 0, 0, 4, {P(1, 1), P(137, 37), P(1512, 512), P(2048, 2048)}},
    {"llama3-8b prefill f16", 32, 8, 128, 16, CK_F16, PATH_FLASH, 0, 0, 0, 2, {P(137, 37), P(1512, 512)}},
    {"smollm2 prefill BS8", 9, 3, 64, 8, CK_BF16, PATH_FLASH, 0, 0, 0, 2, {P(137, 37), P(700, 300)}},
    {"llama3-8b prefill BS32", 32, 8, 128, 32, CK_BF16, PATH_FLASH, 0, 0, 0, 2, {P(137, 37), P(700, 300)}},
    {"dh80 prefill 32:32", 32, 32, 80, 16, CK_BF16, PATH_FLASH, 0, 0, 0, 2, {P(65, 65), P(700, 300)}},
    {"dh96 prefill 24:8", 24, 8, 96, 16, CK_F16, PATH_FLASH, 0, 0, 0, 2, {P(63, 63), P(700, 300)}},
    {"fallback dh256 prefill", 8, 1, 256, 16, CK_BF16, PATH_FLASH, 0, 0, 0, 2, {P(137, 37), P(300, 100)}},
    {"mixed step llama3-8b", 32, 8, 128, 16, CK_BF16, PATH_FLASH, 0, 0, 0, 5, {D(4100), P(137, 37), D(17), P(600, 100), D(1)}},
    /* prefill, flash, wide tiles (two row blocks per warp) */
    {"llama2-7b prefill wide", 32, 32, 128, 16, CK_BF16, PATH_FLASH, 0, 0, T128, 4, {P(1, 1), P(137, 37), P(1100, 1100), P(2048, 2048)}},
    {"llama3-8b prefill wide", 32, 8, 128, 16, CK_BF16, PATH_FLASH, 0, 0, T128, 4, {P(160, 160), P(1612, 1100), P(2048, 2048), P(3000, 129)}},
    {"llama2-7b prefill wide f16", 32, 32, 128, 16, CK_F16, PATH_FLASH, 0, 0, T128, 2, {P(150, 150), P(2048, 2048)}},
    {"llama3-8b prefill wide f16 BS32", 32, 8, 128, 32, CK_F16, PATH_FLASH, 0, 0, T128, 3, {P(137, 37), P(1100, 1100), P(700, 300)}},
    {"smollm2 prefill wide", 9, 3, 64, 16, CK_BF16, PATH_FLASH, 0, 0, T128, 4, {P(1, 1), P(137, 37), P(1100, 1100), P(2048, 2048)}},
    {"dh64 prefill wide 32:32 f16 BS32", 32, 32, 64, 32, CK_F16, PATH_FLASH, 0, 0, T128, 3, {P(160, 160), P(1100, 1100), P(2048, 2048)}},
    {"dh64 prefill wide 32:8", 32, 8, 64, 16, CK_BF16, PATH_FLASH, 0, 0, T128, 2, {P(700, 300), P(1100, 1100)}},
    {"smollm2 prefill wide BS8", 9, 3, 64, 8, CK_BF16, PATH_FLASH, 0, 0, T128, 2, {P(137, 37), P(700, 300)}},
    {"dh80 prefill wide 32:32", 32, 32, 80, 16, CK_BF16, PATH_FLASH, 0, 0, T128, 2, {P(65, 65), P(1100, 1100)}},
    {"dh96 prefill wide 24:8", 24, 8, 96, 16, CK_F16, PATH_FLASH, 0, 0, T128, 2, {P(63, 63), P(1100, 1100)}},
    {"fallback dh256 prefill wide", 8, 1, 256, 16, CK_BF16, PATH_FLASH, 0, 0, T128, 2, {P(137, 37), P(300, 200)}},
    {"mixed step wide llama3-8b", 32, 8, 128, 16, CK_BF16, PATH_FLASH, 0, 0, T128, 5, {D(4100), P(137, 37), D(17), P(1300, 1100), D(1)}},
    {"graph dh80 prefill wide f16", 16, 4, 80, 16, CK_F16, PATH_FLASH, 0, 0, GRAPH | T128, 2, {D(200), P(300, 200)}},
    /* prefill timings: narrow (t64) and wide (t128) tiles side by side;
     * "after 6144": a 2048-row chunk at positions 6144 .. 8191 */
    {"llama2-7b prefill 128 t64", 32, 32, 128, 16, CK_BF16, PATH_FLASH, 0, 0, TIMED | T64, 1, {P(128, 128)}},
    {"llama2-7b prefill 128 t128", 32, 32, 128, 16, CK_BF16, PATH_FLASH, 0, 0, TIMED | T128, 1, {P(128, 128)}},
    {"llama2-7b prefill 512 t64", 32, 32, 128, 16, CK_BF16, PATH_FLASH, 0, 0, TIMED | T64, 1, {P(512, 512)}},
    {"llama2-7b prefill 512 t128", 32, 32, 128, 16, CK_BF16, PATH_FLASH, 0, 0, TIMED | T128, 1, {P(512, 512)}},
    {"llama2-7b prefill 1024 t64", 32, 32, 128, 16, CK_BF16, PATH_FLASH, 0, 0, TIMED | T64, 1, {P(1024, 1024)}},
    {"llama2-7b prefill 1024 t128", 32, 32, 128, 16, CK_BF16, PATH_FLASH, 0, 0, TIMED | T128, 1, {P(1024, 1024)}},
    {"llama2-7b prefill 2048 t64", 32, 32, 128, 16, CK_BF16, PATH_FLASH, 0, 0, TIMED | T64, 1, {P(2048, 2048)}},
    {"llama2-7b prefill 2048 t128", 32, 32, 128, 16, CK_BF16, PATH_FLASH, 0, 0, TIMED | T128, 1, {P(2048, 2048)}},
    {"llama2-7b prefill 4096 t64", 32, 32, 128, 16, CK_BF16, PATH_FLASH, 0, 0, TIMED | T64, 1, {P(4096, 4096)}},
    {"llama2-7b prefill 4096 t128", 32, 32, 128, 16, CK_BF16, PATH_FLASH, 0, 0, TIMED | T128, 1, {P(4096, 4096)}},
    {"llama2-7b 2048 after 6144 t64", 32, 32, 128, 16, CK_BF16, PATH_FLASH, 0, 0, TIMED | T64, 1, {P(8192, 2048)}},
    {"llama2-7b 2048 after 6144 t128", 32, 32, 128, 16, CK_BF16, PATH_FLASH, 0, 0, TIMED | T128, 1, {P(8192, 2048)}},
    {"llama3-8b prefill 4096 t64", 32, 8, 128, 16, CK_BF16, PATH_FLASH, 0, 0, TIMED | T64, 1, {P(4096, 4096)}},
    {"llama3-8b prefill 4096 t128", 32, 8, 128, 16, CK_BF16, PATH_FLASH, 0, 0, TIMED | T128, 1, {P(4096, 4096)}},
    {"qwen2 prefill 4096 t64", 14, 2, 64, 16, CK_BF16, PATH_FLASH, 0, 0, TIMED | T64, 1, {P(4096, 4096)}},
    {"qwen2 prefill 4096 t128", 14, 2, 64, 16, CK_BF16, PATH_FLASH, 0, 0, TIMED | T128, 1, {P(4096, 4096)}},
    /* naive */
    {"naive llama3-8b mixed", 32, 8, 128, 16, CK_BF16, PATH_NAIVE, 0, 0, 0, 3, {D(300), P(137, 37), D(4100)}},
    {"naive smollm2", 9, 3, 64, 16, CK_BF16, PATH_NAIVE, 0, 0, 0, 2, {D(17), P(1512, 512)}},
    {"naive dh256 f16", 8, 2, 256, 8, CK_F16, PATH_NAIVE, 0, 0, 0, 2, {D(1), P(300, 100)}},
    {"naive llama2-7b decode 32k", 32, 32, 128, 16, CK_BF16, PATH_NAIVE, 0, 0, TIMED, 1, {D(32768)}},
};
#undef D
#undef P

/* ---- host helpers */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rng_uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)((rng_next() >> 40) * (1.0 / 16777216.0));
}

static uint16_t to_ck(ck_dtype dt, float v) {
    return dt == CK_BF16 ? hr_f32_to_bf16(v) : hr_f32_to_f16(v);
}

static float from_ck(ck_dtype dt, uint16_t v) {
    return dt == CK_BF16 ? hr_bf16_to_f32(v) : hr_f16_to_f32(v);
}

static uint16_t ck_nan(ck_dtype dt) { return dt == CK_BF16 ? (uint16_t)0x7fc0 : (uint16_t)0x7e00; }

static std::vector<float> ck_table(ck_dtype dt) { /* every 16-bit pattern -> f32 */
    std::vector<float> t(65536);
    for (uint32_t i = 0; i < 65536; i++)
        t[i] = dt == CK_BF16 ? hr_bf16_to_f32((uint16_t)i) : hr_f16_to_f32((uint16_t)i);
    return t;
}

template <typename X> static X *dev_copy(const std::vector<X> &h) {
    X *d = NULL;
    CUDA_OK(cudaMalloc((void **)&d, h.size() * sizeof(X)));
    CUDA_OK(cudaMemcpy(d, h.data(), h.size() * sizeof(X), cudaMemcpyHostToDevice));
    return d;
}

/* everything one case builds on the host */
typedef struct {
    int n_rows, n_seq, max_blocks, NB;
    int tile_rows; /* CK_ATT_TILE or CK_ATT_TILE_WIDE */
    int64_t ld_qkv, ld_out;
    std::vector<int32_t> row_seq, row_pos, bt, dec_rows, tile_row0, tile_n;
    std::vector<uint16_t> k_pool, v_pool, out;
    std::vector<float> qkv;
    std::vector<char> check; /* rows compared with the reference */
} host_case;

static int64_t page_row(const host_case &hc, const case_spec *c, int seq, int g, int t) {
    int32_t blk = hc.bt[(size_t)seq * hc.max_blocks + t / c->BS];
    return (((int64_t)blk * c->Hkv + g) * c->BS + t % c->BS) * c->Dh;
}

static void build(const case_spec *c, host_case &hc) {
    const int Dh = c->Dh, Hkv = c->Hkv, BS = c->BS;
    hc.n_seq = c->n_seg;
    hc.n_rows = 0;
    hc.max_blocks = 0;
    int total_blocks = 0;
    for (int i = 0; i < c->n_seg; i++) {
        int nb = (c->seg[i].ctx + BS - 1) / BS;
        hc.max_blocks = std::max(hc.max_blocks, nb + 1); /* +1: an unused (-1) entry */
        total_blocks += nb;
        hc.n_rows += c->seg[i].n;
    }
    hc.NB = total_blocks + 3; /* spare blocks that belong to nobody */
    int longest = 0;
    for (int i = 0; i < c->n_seg; i++)
        longest = std::max(longest, c->seg[i].n);
    hc.tile_rows = c->flags & T64    ? CK_ATT_TILE
                   : c->flags & T128 ? CK_ATT_TILE_WIDE
                                     : ck_attention_tile_rows(longest, c->H, c->Dh, 0);

    /* shuffled physical blocks */
    std::vector<int32_t> perm(hc.NB);
    for (int i = 0; i < hc.NB; i++)
        perm[i] = i;
    for (int i = hc.NB - 1; i > 0; i--)
        std::swap(perm[i], perm[rng_next() % (uint64_t)(i + 1)]);
    hc.bt.assign((size_t)hc.n_seq * hc.max_blocks, -1);
    int next = 0;
    for (int s = 0; s < c->n_seg; s++)
        for (int b = 0; b < (c->seg[s].ctx + BS - 1) / BS; b++)
            hc.bt[(size_t)s * hc.max_blocks + b] = perm[next++];

    /* pools: NaN except each sequence's [0, ctx) */
    size_t pool_elems = (size_t)hc.NB * Hkv * BS * Dh;
    hc.k_pool.assign(pool_elems, ck_nan(c->dt));
    hc.v_pool.assign(pool_elems, ck_nan(c->dt));
    for (int s = 0; s < c->n_seg; s++)
        for (int t = 0; t < c->seg[s].ctx; t++)
            for (int g = 0; g < Hkv; g++) {
                int64_t o = page_row(hc, c, s, g, t);
                for (int d = 0; d < Dh; d++) {
                    hc.k_pool[o + d] = to_ck(c->dt, rng_uniform(-1.0f, 1.0f));
                    hc.v_pool[o + d] = to_ck(c->dt, rng_uniform(-0.5f, 1.5f));
                }
            }

    /* rows, q (k/v columns NaN), padded strides */
    hc.ld_qkv = (int64_t)(c->H + 2 * Hkv) * Dh + 4;
    hc.ld_out = (int64_t)c->H * Dh + 8;
    hc.qkv.assign((size_t)hc.n_rows * hc.ld_qkv, NAN);
    hc.out.assign((size_t)hc.n_rows * hc.ld_out, ck_nan(c->dt));
    hc.row_seq.clear();
    hc.row_pos.clear();
    hc.dec_rows.clear();
    hc.tile_row0.clear();
    hc.tile_n.clear();
    hc.check.clear();
    for (int s = 0; s < c->n_seg; s++) {
        const seg_spec *sg = &c->seg[s];
        int row0 = (int)hc.row_seq.size();
        for (int i = 0; i < sg->n; i++) {
            int r = row0 + i;
            hc.row_seq.push_back(s);
            hc.row_pos.push_back(sg->ctx - sg->n + i);
            if (sg->mode == SEG_DEC)
                hc.dec_rows.push_back(r);
            bool all = sg->n <= 160; /* a whole wide tile and then some */
            hc.check.push_back(all || i < 4 || i >= sg->n - 4 || i % 64 == 0 || i % 64 == 63 ||
                               i % 37 == 0);
            for (int h = 0; h < c->H; h++) {
                float amp = h % 3 == 0 ? 1.0f : h % 3 == 1 ? 4.0f : 8.0f;
                for (int d = 0; d < Dh; d++) /* q is ck on the device: exact values */
                    hc.qkv[(size_t)r * hc.ld_qkv + (size_t)h * Dh + d] =
                        from_ck(c->dt, to_ck(c->dt, rng_uniform(-amp, amp)));
            }
        }
        if (sg->mode == SEG_PRE)
            for (int i = 0; i < sg->n; i += hc.tile_rows) {
                hc.tile_row0.push_back(row0 + i);
                hc.tile_n.push_back(std::min(hc.tile_rows, sg->n - i));
            }
    }
}

/* reference out[r, h] in double; rows of one thread's share */
static void reference_rows(const case_spec *c, const host_case &hc, const std::vector<float> &tab,
                           float scale, const std::vector<int> &rows, int ith, int nth,
                           std::vector<double> &ref) {
    const int Dh = c->Dh, G = c->H / c->Hkv;
    std::vector<double> p, acc(Dh);
    for (size_t k = (size_t)ith; k < rows.size() * (size_t)c->H; k += (size_t)nth) {
        int r = rows[k / c->H], h = (int)(k % c->H), g = h / G;
        int seq = hc.row_seq[r], n_ctx = hc.row_pos[r] + 1;
        const float *q = &hc.qkv[(size_t)r * hc.ld_qkv + (size_t)h * Dh];
        p.assign(n_ctx, 0.0);
        double mx = -INFINITY;
        for (int t = 0; t < n_ctx; t++) {
            const uint16_t *kr = &hc.k_pool[page_row(hc, c, seq, g, t)];
            double dot = 0.0;
            for (int d = 0; d < Dh; d++)
                dot += (double)q[d] * tab[kr[d]];
            p[t] = dot * scale;
            mx = std::max(mx, p[t]);
        }
        double sum = 0.0;
        for (int t = 0; t < n_ctx; t++) {
            p[t] = exp(p[t] - mx);
            sum += p[t];
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int t = 0; t < n_ctx; t++) {
            const uint16_t *vr = &hc.v_pool[page_row(hc, c, seq, g, t)];
            for (int d = 0; d < Dh; d++)
                acc[d] += p[t] * tab[vr[d]];
        }
        for (int d = 0; d < Dh; d++)
            ref[k * Dh + d] = acc[d] / sum;
    }
}

static void launch(const case_spec *c, const ck_attn_args *a, cudaStream_t s) {
    if (c->path == PATH_NAIVE) {
        ck_attention_naive(s, a);
    } else {
        ck_attention_decode(s, a);
        ck_attention_prefill(s, a);
    }
}

/* capture with positions 0, replay at positions - 5 (clamped), then at the
 * real positions, which the caller checks */
static void run_graph(const case_spec *c, const ck_attn_args *a, int32_t *d_pos,
                      const std::vector<int32_t> &pos) {
    cudaStream_t s;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    std::vector<int32_t> p(pos.size(), 0);
    CUDA_OK(cudaStreamCreate(&s));
    CUDA_OK(cudaMemcpy(d_pos, p.data(), p.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    launch(c, a, s);
    CUDA_OK(cudaStreamEndCapture(s, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (size_t i = 0; i < pos.size(); i++)
        p[i] = std::max(0, pos[i] - 5);
    CUDA_OK(cudaMemcpy(d_pos, p.data(), p.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    CUDA_OK(cudaGraphLaunch(exec, s));
    CUDA_OK(cudaMemcpy(d_pos, pos.data(), pos.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    CUDA_OK(cudaGraphLaunch(exec, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    CUDA_OK(cudaStreamDestroy(s));
}

/* runs one case; returns 1 when it fails */
static int run_case(const case_spec *c, void *flush, size_t flush_bytes) {
    if (c->path == PATH_FLASH && (c->flags & T128) &&
        !ck_attention_tile_fits(CK_ATT_TILE_WIDE, c->Dh)) {
        printf("%-32s skipped: the wide tile does not fit this device's shared memory\n",
               c->name);
        return 0;
    }
    host_case hc;
    build(c, hc);
    const int Dh = c->Dh, H = c->H;
    const int split_len = c->split_len ? c->split_len : DEFAULT_SPLIT_LEN;
    const int n_splits = c->n_splits ? c->n_splits : DEFAULT_N_SPLITS;
    const float scale = 1.0f / sqrtf((float)Dh);

    int32_t *d_seq = dev_copy(hc.row_seq), *d_pos = dev_copy(hc.row_pos), *d_bt = dev_copy(hc.bt);
    int32_t *d_dec = hc.dec_rows.empty() ? NULL : dev_copy(hc.dec_rows);
    int32_t *d_t0 = hc.tile_row0.empty() ? NULL : dev_copy(hc.tile_row0);
    int32_t *d_tn = hc.tile_n.empty() ? NULL : dev_copy(hc.tile_n);
    uint16_t *d_k = dev_copy(hc.k_pool), *d_v = dev_copy(hc.v_pool), *d_out = dev_copy(hc.out);
    std::vector<uint16_t> qkv_ck(hc.qkv.size());
    for (size_t i = 0; i < qkv_ck.size(); i++)
        qkv_ck[i] = to_ck(c->dt, hc.qkv[i]); /* exact; NaN padding stays NaN */
    uint16_t *d_qkv = dev_copy(qkv_ck);
    float *d_work = NULL;
    /* decode partials are per decode row, naive scores per row of the step
     * (the naive path and the fallback for other head sizes) */
    int64_t work_floats =
        std::max(ck_attention_work_floats((int)hc.dec_rows.size(), H, Dh, n_splits, 0),
                 ck_attention_work_floats(hc.n_rows, H, Dh, 0, hc.max_blocks * c->BS));
    CUDA_OK(cudaMalloc((void **)&d_work, (size_t)work_floats * sizeof(float)));

    ck_attn_args a;
    memset(&a, 0, sizeof a);
    a.qkv = d_qkv;
    a.ld_qkv = hc.ld_qkv;
    a.out = d_out;
    a.ld_out = hc.ld_out;
    a.k_pool = d_k;
    a.v_pool = d_v;
    a.dt = c->dt;
    a.row_seq = d_seq;
    a.row_pos = d_pos;
    a.block_tables = d_bt;
    a.max_blocks = hc.max_blocks;
    a.n_rows = hc.n_rows;
    a.H = H;
    a.Hkv = c->Hkv;
    a.Dh = Dh;
    a.BS = c->BS;
    a.scale = scale;
    a.dec_rows = d_dec;
    a.n_dec = c->path == PATH_FLASH ? (int)hc.dec_rows.size() : 0;
    a.n_splits = n_splits;
    a.split_len = split_len;
    a.work = d_work;
    a.tile_row0 = d_t0;
    a.tile_n = d_tn;
    a.n_tiles = c->path == PATH_FLASH ? (int)hc.tile_row0.size() : 0;
    a.tile_rows = hc.tile_rows;

    if (c->flags & GRAPH)
        run_graph(c, &a, d_pos, hc.row_pos);
    else
        launch(c, &a, 0);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint16_t> got(hc.out.size());
    CUDA_OK(cudaMemcpy(got.data(), d_out, got.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost));

    /* timing: L2 flushed before each run (the pools of the small models fit
     * in the 50 MB L2 otherwise) */
    double us = 0.0;
    if (c->flags & TIMED) {
        const int reps = 10;
        cudaEvent_t e0, e1;
        CUDA_OK(cudaEventCreate(&e0));
        CUDA_OK(cudaEventCreate(&e1));
        for (int i = 0; i < reps; i++) {
            CUDA_OK(cudaMemsetAsync(flush, i, flush_bytes, 0));
            CUDA_OK(cudaEventRecord(e0, 0));
            launch(c, &a, 0);
            CUDA_OK(cudaEventRecord(e1, 0));
            CUDA_OK(cudaEventSynchronize(e1));
            float ms = 0.0f;
            CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
            us += 1000.0 * ms / reps;
        }
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaEventDestroy(e0));
        CUDA_OK(cudaEventDestroy(e1));
    }

    /* reference for the checked rows, spread over the host's cores */
    std::vector<int> rows;
    for (int r = 0; r < hc.n_rows; r++)
        if (hc.check[r])
            rows.push_back(r);
    std::vector<float> tab = ck_table(c->dt);
    std::vector<double> ref(rows.size() * (size_t)H * Dh);
    int nth = (int)std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
    std::vector<std::thread> th;
    for (int i = 0; i < nth; i++)
        th.emplace_back(reference_rows, c, std::cref(hc), std::cref(tab), scale, std::cref(rows), i,
                        nth, std::ref(ref));
    for (auto &t : th)
        t.join();

    double max_abs = 0.0, max_ref = 0.0;
    for (size_t k = 0; k < rows.size(); k++) {
        int r = rows[k];
        for (int e = 0; e < H * Dh; e++) {
            double g = tab[got[(size_t)r * hc.ld_out + e]], x = ref[k * (size_t)H * Dh + e];
            if (isfinite(g)) {
                max_abs = std::max(max_abs, fabs(g - x));
                max_ref = std::max(max_ref, fabs(x));
            }
        }
    }
    /* every row: all H Dh outputs written and finite, padding untouched */
    int64_t n_bad = 0, n_pad_bad = 0;
    for (int r = 0; r < hc.n_rows; r++) {
        for (int64_t e = 0; e < (int64_t)H * Dh; e++)
            n_bad += !isfinite(tab[got[(size_t)r * hc.ld_out + e]]);
        for (int64_t e = (int64_t)H * Dh; e < hc.ld_out; e++)
            n_pad_bad += got[(size_t)r * hc.ld_out + e] != ck_nan(c->dt);
    }
    double rel = max_ref > 0.0 ? max_abs / max_ref : 0.0;
    int fail = n_bad > 0 || n_pad_bad > 0 || !(rel < TOL);

    char perf[96] = "";
    if (c->flags & TIMED) {
        double kv_bytes = 0.0, flops = 0.0;
        for (int r = 0; r < hc.n_rows; r++) {
            double n_ctx = hc.row_pos[r] + 1.0;
            kv_bytes += n_ctx * c->Hkv * Dh * 2.0 * 2.0;
            flops += n_ctx * H * Dh * 4.0;
        }
        bool dec_only = hc.tile_row0.empty();
        if (dec_only)
            snprintf(perf, sizeof perf, "%9.1f us %7.0f GB/s (%3.0f%%)", us, kv_bytes / us / 1e3,
                     100.0 * kv_bytes / us / 1e3 / PEAK_GBS);
        else
            snprintf(perf, sizeof perf, "%9.1f us %7.1f TFLOPS (causal)", us, flops / us / 1e6);
    }
    char tile[8] = "-"; /* tile rows, where the prefill kernels ran */
    if (a.n_tiles > 0)
        snprintf(tile, sizeof tile, "%d", hc.tile_rows);
    printf("%-32s %-5s %-4s %3d:%-3d %3d %2d %4s %5d %5zu  %9.2e %9.2e  %s", c->name,
           c->path == PATH_NAIVE ? "naive" : "flash", c->dt == CK_BF16 ? "bf16" : "f16", H,
           c->Hkv, Dh, c->BS, tile, hc.n_rows, rows.size(), max_abs, rel, fail ? "FAIL" : "ok  ");
    if (n_bad || n_pad_bad)
        printf(" (%lld non-finite, %lld padding overwritten)", (long long)n_bad,
               (long long)n_pad_bad);
    printf(" %s\n", perf);
    fflush(stdout);

    cudaFree(d_seq);
    cudaFree(d_pos);
    cudaFree(d_bt);
    cudaFree(d_dec);
    cudaFree(d_t0);
    cudaFree(d_tn);
    cudaFree(d_k);
    cudaFree(d_v);
    cudaFree(d_out);
    cudaFree(d_qkv);
    cudaFree(d_work);
    return fail;
}

int main(int argc, char **argv) {
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("SKIP: no CUDA device\n");
        return 0;
    }
    cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    const ck_caps *caps = ck_device_caps();
    printf("device: %s (sm_%d%d), %d SMs, running compute_%d code, %s path, %d KB of "
           "shared memory a block\n",
           prop.name, prop.major, prop.minor, prop.multiProcessorCount, caps->ptx,
           caps->path, caps->smem_block / 1024);
    const char *filter = argc > 1 ? argv[1] : NULL;
    const size_t flush_bytes = (size_t)256 << 20; /* 5x the L2 */
    void *flush = NULL;
    CUDA_OK(cudaMalloc(&flush, flush_bytes));

    printf("%-32s %-5s %-4s %7s %3s %2s %4s %5s %5s  %9s %9s  %s\n", "case", "path", "dt",
           "H:Hkv", "Dh", "BS", "tile", "rows", "chk", "max_abs", "rel", "result / time");
    int n_run = 0, n_fail = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (filter && !strstr(cases[i].name, filter))
            continue;
        n_run++;
        n_fail += run_case(&cases[i], flush, flush_bytes);
    }
    cudaFree(flush);
    printf("%d cases, %d failed (tolerance rel < %.0e)\n", n_run, n_fail, TOL);
    return n_fail ? 1 : 0;
}
