/*
 * error.h — the one error convention: a status code plus a message.
 *
 * Library functions fill a caller-owned hr_error (may be NULL) and return the
 * status. hr_err_set() formats the message and returns the code, so a failure
 * is one line:   return hr_err_set(err, HR_ERR_FORMAT, "%s: bad magic", path);
 * HR_ASSERT is only for programmer errors that no input can reach.
 */
#ifndef HR_UTIL_ERROR_H
#define HR_UTIL_ERROR_H

#include "headroom.h"

#include <stdio.h>
#include <stdlib.h>

#if defined(__GNUC__)
#define HR_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define HR_PRINTF(a, b)
#endif

hr_status hr_err_set(hr_error *err, hr_status code, const char *fmt, ...) HR_PRINTF(3, 4);

/* Prefixes an existing message with more context ("loading x.gguf: ..."). */
hr_status hr_err_prefix(hr_error *err, const char *fmt, ...) HR_PRINTF(2, 3);

void hr_err_clear(hr_error *err);

#define HR_ASSERT(cond)                                                                \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "headroom: internal error: %s (%s:%d)\n", #cond, __FILE__, \
                    __LINE__);                                                         \
            abort();                                                                   \
        }                                                                              \
    } while (0)

/* Evaluate a status expression; return it when it is not HR_OK. */
#define HR_TRY(expr)                 \
    do {                             \
        hr_status hr_try_s_ = (expr); \
        if (hr_try_s_ != HR_OK)      \
            return hr_try_s_;        \
    } while (0)

#endif
