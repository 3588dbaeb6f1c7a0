/* vec_avx512.c — vec.h at the AVX-512 level: 16 floats a step, masked
 * loads for the tail so odd head sizes need no scalar loop. */
#include "backend/cpu/vec.h"

#include <immintrin.h>

/* The lanes of a 16-float step that lie before the end of the vector. */
static inline __mmask16 tail_mask(int64_t left) {
    return (__mmask16)(left >= 16 ? 0xffffu : (1u << left) - 1u);
}

float cpu_dot_avx512(const float *a, const float *b, int64_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i),
                             s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

void cpu_axpy_avx512(float *y, float a, const float *x, int64_t n) {
    __m512 va = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i),
                                                         _mm512_maskz_loadu_ps(m, y + i)));
    }
}
