/*
 * cpu_features.c — run-time SIMD level detection (see cpu_features.h).
 *
 * Detection runs once (pthread_once); the active level is an atomic int so
 * that every matmul reads a consistent value without locking. On non-x86
 * builds only the reference level exists.
 */
#include "backend/cpu/cpu_features.h"

#include "util/env.h"
#include "util/log.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static const char *const level_names[CPU_LEVEL_COUNT] = {
    [CPU_LEVEL_REF] = "ref",
    [CPU_LEVEL_AVX2] = "avx2",
    [CPU_LEVEL_AVX512] = "avx512",
};

static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static cpu_level level_supported = CPU_LEVEL_REF;
static bool bf16_supported;
static atomic_int level_active = CPU_LEVEL_REF;

#if defined(__x86_64__) || defined(__i386__)
/* F16C (CPUID leaf 1, ECX bit 29) is read directly: clang before 15 does not
 * know the name in __builtin_cpu_supports. The OS support for the wider
 * registers is checked by the avx2 / avx512f tests. */
static bool has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && ((c >> 29) & 1u);
}

/* AVX512-BF16: CPUID leaf 7, sub-leaf 1, EAX bit 5 (read directly for the
 * same reason) */
static bool has_avx512_bf16(void) {
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1u);
}
#endif

static cpu_level detect(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    /* Every flag the level's file is compiled with (CMakeLists.txt). */
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        !has_f16c())
        return CPU_LEVEL_REF;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vnni"))
        return CPU_LEVEL_AVX512;
    return CPU_LEVEL_AVX2;
#else
    return CPU_LEVEL_REF;
#endif
}

static void detect_init(void) {
    level_supported = detect();
#if defined(__x86_64__) || defined(__i386__)
    bf16_supported = level_supported == CPU_LEVEL_AVX512 && has_avx512_bf16();
#endif
    cpu_level active = level_supported;
    const char *env = hr_env_get()->cpu;
    if (env != NULL) {
        cpu_level want;
        if (!cpu_level_from_name(env, &want)) {
            HR_LOG_W("HEADROOM_CPU=%s is not one of ref, avx2, avx512; using %s", env,
                     level_names[active]);
        } else if (want > level_supported) {
            HR_LOG_W("HEADROOM_CPU=%s: this CPU supports only %s; using %s", env,
                     level_names[level_supported], level_names[level_supported]);
        } else {
            active = want;
        }
    }
    atomic_store(&level_active, (int)active);
}

cpu_level cpu_level_supported(void) {
    pthread_once(&detect_once, detect_init);
    return level_supported;
}

bool cpu_has_avx512_bf16(void) {
    pthread_once(&detect_once, detect_init);
    return bf16_supported;
}

cpu_level cpu_level_active(void) {
    pthread_once(&detect_once, detect_init);
    return (cpu_level)atomic_load_explicit(&level_active, memory_order_relaxed);
}

cpu_level cpu_level_set(cpu_level want) {
    pthread_once(&detect_once, detect_init);
    cpu_level l = want < level_supported ? want : level_supported;
    if (l < CPU_LEVEL_REF)
        l = CPU_LEVEL_REF;
    atomic_store(&level_active, (int)l);
    return l;
}

const char *cpu_level_name(cpu_level level) {
    if ((unsigned)level >= CPU_LEVEL_COUNT)
        return "invalid";
    return level_names[level];
}

bool cpu_level_from_name(const char *name, cpu_level *out) {
    for (int l = 0; l < CPU_LEVEL_COUNT; l++) {
        if (strcmp(name, level_names[l]) == 0) {
            *out = (cpu_level)l;
            return true;
        }
    }
    return false;
}
