/*
 * clock.h — the monotonic clock every timing in headroom reads (steps, time
 * to first token, the thread tuner, upload progress, the server's deadlines).
 */
#ifndef HR_UTIL_CLOCK_H
#define HR_UTIL_CLOCK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

uint64_t hr_now_ns(void);
double hr_now_ms(void);

#ifdef __cplusplus
}
#endif

#endif
