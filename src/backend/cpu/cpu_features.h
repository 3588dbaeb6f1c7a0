/*
 * cpu_features.h — which SIMD level the CPU kernels run at.
 *
 * Kernels come in three levels, each a separate file compiled for its ISA
 * (matmul_ref.c: plain C; *_avx2.c: AVX2+FMA+F16C; *_avx512.c: AVX-512
 * F/BW/VL/DQ/VNNI). One binary runs everywhere: the level is chosen at
 * run time from __builtin_cpu_supports, which also checks that the OS saves
 * the wider registers (XCR0). A level is "supported" only when every ISA its
 * file is compiled with is present, since the compiler may use any of them.
 *
 * The environment variable HEADROOM_CPU=ref|avx2|avx512 lowers the level (never
 * above what the CPU supports), so tests and users can exercise and compare
 * the slower paths; cpu_level_set() does the same from code (tests).
 */
#ifndef HR_BACKEND_CPU_FEATURES_H
#define HR_BACKEND_CPU_FEATURES_H

#include <stdbool.h>

typedef enum {
    CPU_LEVEL_REF = 0,    /* portable C, the oracle */
    CPU_LEVEL_AVX2 = 1,   /* AVX2 + FMA + F16C (Haswell, Zen 1 and later) */
    CPU_LEVEL_AVX512 = 2, /* AVX-512 F/BW/VL/DQ/VNNI (Ice Lake, Zen 4 and later) */
    CPU_LEVEL_COUNT
} cpu_level;

/* Highest level this CPU and OS can run. Thread-safe. */
cpu_level cpu_level_supported(void);

/* Whether the AVX-512 level may also run its AVX512-BF16 kernels (Zen 4,
 * Sapphire Rapids; not Ice Lake). Those kernels carry their own target
 * attribute, outside the level's flags. Thread-safe. */
bool cpu_has_avx512_bf16(void);

/* Level the kernels use now: the supported level, lowered by HEADROOM_CPU
 * (read once, at the first call) or by cpu_level_set. Thread-safe. */
cpu_level cpu_level_active(void);

/* Forces the active level to min(want, supported) and returns the level in
 * effect. Meant for tests and benchmarks: do not call while kernels run on
 * other threads (a running matmul keeps the level it started with). */
cpu_level cpu_level_set(cpu_level want);

/* "ref", "avx2", "avx512". */
const char *cpu_level_name(cpu_level level);

/* Parses a name as cpu_level_name prints it; false for anything else. */
bool cpu_level_from_name(const char *name, cpu_level *out);

#endif
