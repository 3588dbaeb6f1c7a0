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

/* The whole file, NUL-terminated (malloc; the caller frees), its size in
 * *len; NULL when it cannot be read (with required: a message and exit 1,
 * for fixtures the test cannot go on without). */
static inline char *test_read_file(const char *path, size_t *len, int required) {
    FILE *f = fopen(path, "rb");
    char *b = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0)
        b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (f)
        fclose(f);
    if (!b) {
        if (required) {
            fprintf(stderr, "cannot read %s\n", path);
            exit(1);
        }
        return NULL;
    }
    b[n] = '\0';
    *len = (size_t)n;
    return b;
}

/* Readers of the binary fixture files (little-endian u32, LEB128 varint):
 * the value in *v and the next byte, or NULL past end (or after a NULL p). */
static inline const uint8_t *test_rd_u32(const uint8_t *p, const uint8_t *end, uint32_t *v) {
    if (!p || end - p < 4)
        return NULL;
    *v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    return p + 4;
}

static inline const uint8_t *test_rd_varint(const uint8_t *p, const uint8_t *end, uint32_t *v) {
    uint64_t x = 0;
    for (int i = 0; p && i < 5; i++) {
        if (p >= end)
            return NULL;
        uint8_t b = *p++;
        x |= (uint64_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            *v = (uint32_t)x;
            return p;
        }
    }
    return NULL;
}

#endif
