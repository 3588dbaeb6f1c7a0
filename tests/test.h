/*
 * test.h — the smallest test harness that does the job.
 *
 * CHECK* record a failure with file:line and continue; TEST_END prints the
 * closing line "N passed, N failed" that CI reads and returns the exit code.
 * Tests that cannot run here (no device, no network) exit 77, which CTest
 * reports as skipped.
 */
#ifndef HR_TEST_H
#define HR_TEST_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_passed, test_failed;

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (cond) {                                                        \
            test_passed++;                                                 \
        } else {                                                           \
            test_failed++;                                                 \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                  \
    } while (0)

#define CHECK_MSG(cond, ...)                                          \
    do {                                                              \
        if (cond) {                                                   \
            test_passed++;                                            \
        } else {                                                      \
            test_failed++;                                            \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                             \
            fputc('\n', stderr);                                      \
        }                                                             \
    } while (0)

#define CHECK_EQ_I64(a, b)                                                           \
    do {                                                                             \
        long long ta_ = (long long)(a), tb_ = (long long)(b);                        \
        CHECK_MSG(ta_ == tb_, "%lld != %lld", ta_, tb_);                              \
    } while (0)

#define CHECK_OK(expr, errp)                                                          \
    do {                                                                              \
        hr_status ts_ = (expr);                                                       \
        CHECK_MSG(ts_ == HR_OK, "%s: %s", hr_status_name(ts_), (errp)->msg);           \
    } while (0)

#define TEST_SKIP(...)                        \
    do {                                      \
        printf("SKIP: ");                     \
        printf(__VA_ARGS__);                  \
        printf("\n");                         \
        exit(77);                             \
    } while (0)

#define TEST_END()                                                  \
    do {                                                            \
        printf("%d passed, %d failed\n", test_passed, test_failed); \
        return test_failed ? 1 : 0;                                 \
    } while (0)

/* Path under the source tree, e.g. TEST_PATH("tests/data/x"). */
#define TEST_PATH(rel) HR_SOURCE_DIR "/" rel

#endif
