/*
 * fp16.h — scalar conversions between float and the 16-bit float formats.
 *
 * bf16 is the top half of an IEEE float; rounding to it is round-to-nearest-
 * even (as PyTorch does), NaN kept quiet. f16 conversions are exact bit
 * manipulations (no F16C needed), so the portable paths agree with the SIMD
 * paths bit for bit.
 */
#ifndef HR_UTIL_FP16_H
#define HR_UTIL_FP16_H

#include <stdint.h>
#include <string.h>

static inline float hr_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t hr_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a quiet NaN */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

static inline float hr_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (mant == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while ((mant & 0x400u) == 0) {
                mant <<= 1;
                exp--;
            }
            mant &= 0x3ffu;
            u = sign | (exp << 23) | (mant << 13);
        }
    } else if (exp == 0x1f) {
        u = sign | 0x7f800000u | (mant << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t hr_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) /* NaN */
        return (uint16_t)(sign | 0x7e00u);
    if (absu >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (absu < 0x38800000u) { /* below the smallest normal f16: subnormal or zero */
        if (absu < 0x33000000u) /* below half the smallest subnormal */
            return (uint16_t)sign;
        /* value = mant * 2^(exp-150) and the f16 subnormal unit is 2^-24, so the
         * f16 mantissa is mant >> (126 - exp), rounded to nearest even. A carry
         * into bit 10 correctly yields the smallest normal. */
        uint32_t exp = absu >> 23;
        uint32_t mant = (absu & 0x7fffffu) | 0x800000u;
        uint32_t sh = 126 - exp; /* 14..24 */
        uint32_t r = mant >> sh;
        uint32_t rem = mant & ((1u << sh) - 1u);
        uint32_t half = 1u << (sh - 1);
        if (rem > half || (rem == half && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
    /* normal: rebias exponent, round mantissa to 10 bits (nearest even) */
    uint32_t r = absu - ((127u - 15u) << 23);
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

#endif
