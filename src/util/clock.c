/* clock.c — CLOCK_MONOTONIC, immune to changes of the wall clock. */
#include "util/clock.h"

#include <time.h>

uint64_t hr_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double hr_now_ms(void) {
    return (double)hr_now_ns() / 1e6;
}
