/*
 * test_gguf.c — GGUF reader and writer.
 *
 * - round trip: a sample written by gguf_writer (every metadata type the
 *   writer has, every numeric array type, several tensor dtypes) read back;
 *   scalar types the writer lacks, nested arrays and v2 come from a small
 *   byte builder;
 * - gguf-py agrees: tests/gguf_pyread.py prints files as gguf-py sees them,
 *   describe() prints them as we do, the texts must be equal (our files, the
 *   real vocab files, a file gguf-py wrote); skipped without python3 + gguf;
 * - every truncation of the sample, and each corrupt kind (built in memory
 *   by patching the sample, and the committed copies in
 *   tests/fixtures/corrupt/) fails with the expected code and message;
 * - typed getters' type rules; writer refusals and I/O errors; allocation
 *   failure at every allocation of a parse and of a write.
 *
 * `test_gguf --write-fixtures` regenerates tests/fixtures/corrupt/ and the
 * fuzz seeds in tests/fuzz/corpus/gguf/ from the same code.
 */
#include "format/gguf.h"
#include "test.h"
#include "util/alloc.h"

#include <stdarg.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---------------------------------------------------------------- helpers */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} bb; /* growable byte buffer (test-side: plain malloc) */

static void bb_raw(bb *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p)
            abort();
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void bb_le(bb *b, uint64_t v, int n_bytes) {
    uint8_t le[8];
    for (int i = 0; i < n_bytes; i++)
        le[i] = (uint8_t)(v >> (8 * i));
    bb_raw(b, le, (size_t)n_bytes);
}

static void bb_str(bb *b, const char *s) {
    bb_le(b, strlen(s), 8);
    bb_raw(b, s, strlen(s));
}

static void bb_header(bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    bb_raw(b, "GGUF", 4);
    bb_le(b, version, 4);
    bb_le(b, n_tensors, 8);
    bb_le(b, n_kv, 8);
}

static void bb_key(bb *b, const char *key, gguf_type t) {
    bb_str(b, key);
    bb_le(b, (uint64_t)t, 4);
}

static void bb_fmt(bb *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof tmp)
        abort();
    bb_raw(b, tmp, (size_t)k);
}

static uint64_t rd_le(const uint8_t *p, int n_bytes) {
    uint64_t v = 0;
    for (int i = 0; i < n_bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void wr_le(uint8_t *p, uint64_t v, int n_bytes) {
    for (int i = 0; i < n_bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t fnv1a64(const uint8_t *p, uint64_t n) {
    uint64_t h = 0xcbf29ce484222325u;
    for (uint64_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3u;
    return h;
}

static void tmp_path(char *buf, size_t cap, const char *tag) {
    snprintf(buf, cap, "%s/test_gguf_%d_%s.gguf", HR_BINARY_DIR, (int)getpid(), tag);
}

static bool read_file(const char *path, bb *out) {
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return false;
    uint8_t tmp[65536];
    size_t k;
    while ((k = fread(tmp, 1, sizeof tmp, fp)) > 0)
        bb_raw(out, tmp, k);
    fclose(fp);
    return true;
}

static bool write_file(const char *path, const uint8_t *p, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp)
        return false;
    bool ok = fwrite(p, 1, n, fp) == n;
    return fclose(fp) == 0 && ok;
}

/* ---------------------------------------------------------------- sample */

typedef struct {
    const char *name;
    hr_dtype dtype;
    int32_t n_dims;
    int64_t ne[4];
    uint64_t n_bytes;
} tspec;

/* Several dtypes, 1..4 dims; the last tensor is 32 bytes, so the file has
 * no trailing padding and every truncation cuts real data. */
static const tspec sample_tensors[] = {
    {"tok_embd.weight", HR_DTYPE_F32, 2, {4, 3, 1, 1}, 48},
    {"norm.weight", HR_DTYPE_F16, 1, {8, 1, 1, 1}, 16},
    {"blk.0.bf16", HR_DTYPE_BF16, 3, {2, 2, 2, 1}, 16},
    {"blk.0.q8_0", HR_DTYPE_Q8_0, 1, {64, 1, 1, 1}, 68},
    {"blk.0.q4_0", HR_DTYPE_Q4_0, 2, {32, 2, 1, 1}, 36},
    {"blk.0.q4_k", HR_DTYPE_Q4_K, 1, {256, 1, 1, 1}, 144},
    {"blk.0.i32", HR_DTYPE_I32, 4, {5, 1, 1, 2}, 40},
    {"output.weight", HR_DTYPE_F32, 1, {8, 1, 1, 1}, 32},
};
#define N_SAMPLE_TENSORS (sizeof sample_tensors / sizeof sample_tensors[0])
static uint8_t sample_data[N_SAMPLE_TENSORS][256];

static const char *const sample_strs[] = {"<s>", "</s>", "hello", "\xc3\xa9t\xc3\xa9", ""};
static const char *const sample_strs_len[] = {"a\0b", "xyz"};
static const uint64_t sample_lens[] = {3, 2};

static const uint8_t a_u8[] = {0, 7, 255};
static const int8_t a_i8[] = {-128, 0, 127};
static const uint16_t a_u16[] = {0, 65535};
static const int16_t a_i16[] = {-32768, 32767};
static const uint32_t a_u32[] = {1, 4294967295u};
static const int32_t a_i32[] = {-1, 2147483647, -2147483647 - 1};
static const float a_f32[] = {0.5f, -1.25f, 1e-5f};
static const uint8_t a_bool[] = {1, 0, 1};
static const uint64_t a_u64[] = {0, UINT64_MAX};
static const int64_t a_i64[] = {INT64_MIN, INT64_MAX};
static const double a_f64[] = {0.1, -1e300};

/* Writes the sample with gguf_writer; align 0 keeps the default. */
static hr_status write_sample(const char *path, uint32_t align, hr_error *err) {
    gguf_writer *w = NULL;
    hr_status s = gguf_writer_create(&w, err);
    if (s != HR_OK)
        return s;
    if (align)
        gguf_writer_set_u32(w, "general.alignment", align);
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_u32(w, "x.u32", 4000000000u);
    gguf_writer_set_i32(w, "x.i32", -123456);
    gguf_writer_set_u64(w, "x.u64", UINT64_MAX);
    gguf_writer_set_f32(w, "x.f32", 0.1f);
    gguf_writer_set_bool(w, "x.bool_t", true);
    gguf_writer_set_bool(w, "x.bool_f", false);
    gguf_writer_set_str(w, "x.str", "h\xc3\xa9llo");
    gguf_writer_set_str(w, "x.empty", "");
    gguf_writer_set_arr(w, "a.u8", GGUF_TYPE_UINT8, a_u8, 3);
    gguf_writer_set_arr(w, "a.i8", GGUF_TYPE_INT8, a_i8, 3);
    gguf_writer_set_arr(w, "a.u16", GGUF_TYPE_UINT16, a_u16, 2);
    gguf_writer_set_arr(w, "a.i16", GGUF_TYPE_INT16, a_i16, 2);
    gguf_writer_set_arr(w, "a.u32", GGUF_TYPE_UINT32, a_u32, 2);
    gguf_writer_set_arr(w, "a.i32", GGUF_TYPE_INT32, a_i32, 3);
    gguf_writer_set_arr(w, "a.f32", GGUF_TYPE_FLOAT32, a_f32, 3);
    gguf_writer_set_arr(w, "a.bool", GGUF_TYPE_BOOL, a_bool, 3);
    gguf_writer_set_arr(w, "a.u64", GGUF_TYPE_UINT64, a_u64, 2);
    gguf_writer_set_arr(w, "a.i64", GGUF_TYPE_INT64, a_i64, 2);
    gguf_writer_set_arr(w, "a.f64", GGUF_TYPE_FLOAT64, a_f64, 2);
    gguf_writer_set_arr(w, "a.empty", GGUF_TYPE_UINT32, NULL, 0);
    gguf_writer_set_arr_str(w, "a.str", sample_strs, NULL, 5);
    gguf_writer_set_arr_str(w, "a.str_len", sample_strs_len, sample_lens, 2);
    for (size_t i = 0; i < N_SAMPLE_TENSORS; i++) {
        const tspec *t = &sample_tensors[i];
        gguf_writer_add_tensor(w, t->name, t->dtype, t->n_dims, t->ne, sample_data[i]);
    }
    s = gguf_writer_write(w, path, err);
    gguf_writer_free(w);
    return s;
}

static bool sample_bytes(uint32_t align, bb *out) {
    char path[512];
    tmp_path(path, sizeof path, align ? "sample_al" : "sample");
    hr_error err = {0};
    hr_status s = write_sample(path, align, &err);
    CHECK_OK(s, &err);
    bool ok = s == HR_OK && read_file(path, out);
    remove(path);
    return ok;
}

/* Scalar types the writer has no setter for, nested arrays, and v2. */
static void build_getters_file(bb *b) {
    bb_header(b, 2, 0, 22);
    bb_key(b, "s.u8", GGUF_TYPE_UINT8), bb_le(b, 200, 1);
    bb_key(b, "s.i8", GGUF_TYPE_INT8), bb_le(b, (uint8_t)-5, 1);
    bb_key(b, "s.u16", GGUF_TYPE_UINT16), bb_le(b, 60000, 2);
    bb_key(b, "s.i16", GGUF_TYPE_INT16), bb_le(b, (uint16_t)-300, 2);
    bb_key(b, "s.u32", GGUF_TYPE_UINT32), bb_le(b, 7, 4);
    bb_key(b, "s.i32", GGUF_TYPE_INT32), bb_le(b, (uint32_t)-7, 4);
    bb_key(b, "s.i32pos", GGUF_TYPE_INT32), bb_le(b, 9, 4);
    bb_key(b, "s.u64big", GGUF_TYPE_UINT64), bb_le(b, 1ull << 33, 8);
    bb_key(b, "s.u64huge", GGUF_TYPE_UINT64), bb_le(b, UINT64_MAX, 8);
    bb_key(b, "s.i64", GGUF_TYPE_INT64), bb_le(b, (uint64_t)-(1ll << 40), 8);
    float f = 0.5f;
    uint32_t fb;
    memcpy(&fb, &f, 4);
    bb_key(b, "s.f32", GGUF_TYPE_FLOAT32), bb_le(b, fb, 4);
    double d = 0.25, big = 1e300;
    uint64_t db;
    memcpy(&db, &d, 8);
    bb_key(b, "s.f64", GGUF_TYPE_FLOAT64), bb_le(b, db, 8);
    memcpy(&db, &big, 8);
    bb_key(b, "s.f64big", GGUF_TYPE_FLOAT64), bb_le(b, db, 8);
    bb_key(b, "s.bool", GGUF_TYPE_BOOL), bb_le(b, 1, 1);
    bb_key(b, "s.str", GGUF_TYPE_STRING), bb_str(b, "abc");
    bb_key(b, "a.i32", GGUF_TYPE_ARRAY), bb_le(b, GGUF_TYPE_INT32, 4), bb_le(b, 2, 8);
    bb_le(b, (uint32_t)-1, 4), bb_le(b, 5, 4);
    bb_key(b, "a.f32", GGUF_TYPE_ARRAY), bb_le(b, GGUF_TYPE_FLOAT32, 4), bb_le(b, 1, 8);
    bb_le(b, fb, 4);
    bb_key(b, "a.bool", GGUF_TYPE_ARRAY), bb_le(b, GGUF_TYPE_BOOL, 4), bb_le(b, 1, 8);
    bb_le(b, 1, 1);
    bb_key(b, "a.u64", GGUF_TYPE_ARRAY), bb_le(b, GGUF_TYPE_UINT64, 4), bb_le(b, 2, 8);
    bb_le(b, UINT64_MAX, 8), bb_le(b, 3, 8);
    bb_key(b, "a.str", GGUF_TYPE_ARRAY), bb_le(b, GGUF_TYPE_STRING, 4), bb_le(b, 1, 8);
    bb_str(b, "x");
    /* an array of two arrays: [u32 10, u32 20] and ["hi"] */
    bb_key(b, "a.nest", GGUF_TYPE_ARRAY), bb_le(b, GGUF_TYPE_ARRAY, 4), bb_le(b, 2, 8);
    bb_le(b, GGUF_TYPE_UINT32, 4), bb_le(b, 2, 8), bb_le(b, 10, 4), bb_le(b, 20, 4);
    bb_le(b, GGUF_TYPE_STRING, 4), bb_le(b, 1, 8), bb_str(b, "hi");
    /* 4 levels: the deepest the reader accepts */
    bb_key(b, "a.deep", GGUF_TYPE_ARRAY);
    for (int i = 0; i < 3; i++)
        bb_le(b, GGUF_TYPE_ARRAY, 4), bb_le(b, 1, 8);
    bb_le(b, GGUF_TYPE_UINT8, 4), bb_le(b, 1, 8), bb_le(b, 42, 1);
}

/* ---------------------------------------------------------------- describe */

/* One line per item, the format tests/gguf_pyread.py prints. */
static void describe_scalar(bb *o, gguf_type t, const uint8_t *p) {
    uint64_t u = rd_le(p, (int)gguf_type_size(t));
    switch (t) {
    case GGUF_TYPE_INT8: bb_fmt(o, "%d", (int)(int8_t)u); break;
    case GGUF_TYPE_INT16: bb_fmt(o, "%d", (int)(int16_t)u); break;
    case GGUF_TYPE_INT32: bb_fmt(o, "%" PRId32, (int32_t)u); break;
    case GGUF_TYPE_INT64: bb_fmt(o, "%" PRId64, (int64_t)u); break;
    case GGUF_TYPE_FLOAT32: {
        uint32_t bits = (uint32_t)u;
        float f;
        memcpy(&f, &bits, 4);
        bb_fmt(o, "%.9g", (double)f);
        break;
    }
    case GGUF_TYPE_FLOAT64: {
        double d;
        memcpy(&d, &u, 8);
        bb_fmt(o, "%.17g", d);
        break;
    }
    default: bb_fmt(o, "%" PRIu64, u); break;
    }
}

static void describe_str(bb *o, gguf_str s) {
    for (uint64_t i = 0; i < s.len; i++)
        bb_fmt(o, "%02x", (unsigned)(uint8_t)s.ptr[i]);
}

static void describe(const gguf_file *f, bb *o) {
    bb_fmt(o, "version %" PRIu32 "\n", f->version);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        if (kv->type == GGUF_TYPE_ARRAY) {
            bb_fmt(o, "kv %s array:%s %" PRIu64 " ", kv->key, gguf_type_name(kv->arr_type),
                   kv->arr_n);
            for (uint64_t j = 0; j < kv->arr_n; j++) {
                if (j)
                    bb_raw(o, ",", 1);
                if (kv->arr_type == GGUF_TYPE_STRING)
                    describe_str(o, kv->arr_str[j]);
                else
                    describe_scalar(o, kv->arr_type,
                                    kv->arr_data + j * gguf_type_size(kv->arr_type));
            }
        } else {
            bb_fmt(o, "kv %s %s ", kv->key, gguf_type_name(kv->type));
            if (kv->type == GGUF_TYPE_STRING)
                describe_str(o, kv->v.str);
            else if (kv->type == GGUF_TYPE_FLOAT32)
                bb_fmt(o, "%.9g", kv->v.f64);
            else if (kv->type == GGUF_TYPE_FLOAT64)
                bb_fmt(o, "%.17g", kv->v.f64);
            else if (kv->type == GGUF_TYPE_INT8 || kv->type == GGUF_TYPE_INT16 ||
                     kv->type == GGUF_TYPE_INT32 || kv->type == GGUF_TYPE_INT64)
                bb_fmt(o, "%" PRId64, kv->v.i64);
            else
                bb_fmt(o, "%" PRIu64, kv->v.u64);
        }
        bb_raw(o, "\n", 1);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        bb_fmt(o, "tensor %s %" PRIu32 " ", t->name, t->ggml_type);
        for (int d = 0; d < t->n_dims; d++)
            bb_fmt(o, "%s%" PRId64, d ? "," : "", t->ne[d]);
        bb_fmt(o, " %" PRIu64 " %" PRIu64 " %016" PRIx64 "\n", t->n_bytes,
               f->data_offset + t->offset, fnv1a64(t->data, t->n_bytes));
    }
}

/* ---------------------------------------------------------------- python */

static int py_state; /* 0 unknown, 1 usable, -1 not available */

/* Runs gguf_pyread.py; returns its exit status (-1: could not run). */
static int run_py(const char *mode, const char *path, bb *out) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "python3 '%s' %s '%s' 2>&1", TEST_PATH("tests/gguf_pyread.py"),
             mode, path);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    char tmp[65536];
    size_t k;
    while ((k = fread(tmp, 1, sizeof tmp, p)) > 0)
        bb_raw(out, tmp, k);
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static bool py_available(void) {
    if (py_state == 0) {
        bb out = {0};
        int rc = run_py("read", "/nonexistent", &out);
        /* the script exits 77 without the gguf package, 127 without python */
        py_state = (rc == 77 || rc == 127 || rc < 0) ? -1 : 1;
        if (py_state < 0)
            printf("NOTE: python3 with the gguf package is not available: gguf-py "
                   "cross-checks skipped\n");
        free(out.p);
    }
    return py_state > 0;
}

static void report_first_diff(const bb *a, const bb *b) {
    size_t i = 0, line = 1, start = 0;
    while (i < a->n && i < b->n && a->p[i] == b->p[i]) {
        if (a->p[i] == '\n')
            line++, start = i + 1;
        i++;
    }
    int show = 160;
    fprintf(stderr, "  first difference on line %zu:\n  ours: %.*s\n  gguf-py: %.*s\n", line,
            (int)(a->n - start < (size_t)show ? a->n - start : (size_t)show),
            (const char *)a->p + start,
            (int)(b->n - start < (size_t)show ? b->n - start : (size_t)show),
            (const char *)b->p + start);
}

/* Parses path with our reader and gguf-py; the descriptions must match. */
static void check_same_as_py(const char *path) {
    if (!py_available())
        return;
    gguf_file *f = NULL;
    hr_error err = {0};
    CHECK_OK(gguf_open(path, &f, &err), &err);
    if (!f)
        return;
    bb ours = {0}, theirs = {0};
    describe(f, &ours);
    gguf_free(f);
    int rc = run_py("read", path, &theirs);
    CHECK_MSG(rc == 0, "gguf_pyread.py read %s exited %d: %.*s", path, rc,
              (int)(theirs.n < 2000 ? theirs.n : 2000), (const char *)theirs.p);
    bool same = rc == 0 && ours.n == theirs.n && memcmp(ours.p, theirs.p, ours.n) == 0;
    CHECK_MSG(same, "%s: our reader and gguf-py disagree", path);
    if (!same && rc == 0)
        report_first_diff(&ours, &theirs);
    free(ours.p);
    free(theirs.p);
}

/* ---------------------------------------------------------------- tests */

static void test_types(void) {
    CHECK(strcmp(gguf_type_name(GGUF_TYPE_FLOAT32), "float32") == 0);
    CHECK(strcmp(gguf_type_name(GGUF_TYPE_ARRAY), "array") == 0);
    CHECK(strcmp(gguf_type_name(GGUF_TYPE_COUNT), "invalid") == 0);
    CHECK_EQ_I64(gguf_type_size(GGUF_TYPE_UINT16), 2);
    CHECK_EQ_I64(gguf_type_size(GGUF_TYPE_BOOL), 1);
    CHECK_EQ_I64(gguf_type_size(GGUF_TYPE_FLOAT64), 8);
    CHECK_EQ_I64(gguf_type_size(GGUF_TYPE_STRING), 0);
    CHECK_EQ_I64(gguf_type_size(GGUF_TYPE_ARRAY), 0);
}

static void check_arr_i64(const gguf_file *f, const char *key, const int64_t *want, uint64_t n) {
    const gguf_kv *kv = gguf_find(f, key);
    CHECK_MSG(kv && kv->type == GGUF_TYPE_ARRAY && kv->arr_n == n, "%s", key);
    for (uint64_t i = 0; kv && i < n; i++) {
        int64_t v = 0;
        CHECK_MSG(gguf_arr_i64(kv, i, &v) && v == want[i], "%s[%" PRIu64 "]", key, i);
    }
}

static void test_roundtrip(uint32_t align) {
    char path[512];
    tmp_path(path, sizeof path, "roundtrip");
    hr_error err = {0};
    CHECK_OK(write_sample(path, align, &err), &err);
    gguf_file *f = NULL;
    CHECK_OK(gguf_open(path, &f, &err), &err);
    if (!f)
        return;
    uint64_t want_align = align ? align : 32;
    CHECK_EQ_I64(f->version, 3);
    CHECK_EQ_I64(f->alignment, want_align);
    CHECK_EQ_I64(f->n_kv, align ? 24 : 23);
    CHECK_EQ_I64(f->n_tensors, N_SAMPLE_TENSORS);
    CHECK_EQ_I64(f->data_offset % want_align, 0);
    CHECK(align ? gguf_find(f, "general.alignment") != NULL
                : gguf_find(f, "general.alignment") == NULL);
    /* insertion order */
    CHECK(strcmp(f->kv[align ? 1 : 0].key, "general.architecture") == 0);
    CHECK(strcmp(f->kv[f->n_kv - 1].key, "a.str_len") == 0);

    gguf_str s;
    uint32_t u32 = 0;
    int64_t i64 = 0;
    float f32 = 0;
    bool b = false;
    CHECK(gguf_get_str(f, "general.architecture", &s) && s.len == 5 &&
          memcmp(s.ptr, "llama", 5) == 0);
    CHECK(gguf_get_u32(f, "x.u32", &u32) && u32 == 4000000000u);
    CHECK(gguf_get_i64(f, "x.i32", &i64) && i64 == -123456);
    const gguf_kv *kv = gguf_find(f, "x.u64");
    CHECK(kv && kv->type == GGUF_TYPE_UINT64 && kv->v.u64 == UINT64_MAX);
    CHECK(gguf_get_f32(f, "x.f32", &f32) && f32 == 0.1f);
    CHECK(gguf_get_bool(f, "x.bool_t", &b) && b);
    CHECK(gguf_get_bool(f, "x.bool_f", &b) && !b);
    CHECK(gguf_get_str(f, "x.str", &s) && s.len == 6 && memcmp(s.ptr, "h\xc3\xa9llo", 6) == 0);
    CHECK(gguf_get_str(f, "x.empty", &s) && s.len == 0);

    check_arr_i64(f, "a.u8", (const int64_t[]){0, 7, 255}, 3);
    check_arr_i64(f, "a.i8", (const int64_t[]){-128, 0, 127}, 3);
    check_arr_i64(f, "a.u16", (const int64_t[]){0, 65535}, 2);
    check_arr_i64(f, "a.i16", (const int64_t[]){-32768, 32767}, 2);
    check_arr_i64(f, "a.u32", (const int64_t[]){1, 4294967295}, 2);
    check_arr_i64(f, "a.i32", (const int64_t[]){-1, 2147483647, -2147483648}, 3);
    check_arr_i64(f, "a.i64", a_i64, 2);
    kv = gguf_find(f, "a.f32");
    double d = 0;
    CHECK(kv && kv->arr_type == GGUF_TYPE_FLOAT32 && kv->arr_n == 3);
    for (uint64_t i = 0; kv && i < 3; i++)
        CHECK(gguf_arr_f64(kv, i, &d) && d == (double)a_f32[i]);
    kv = gguf_find(f, "a.f64");
    CHECK(kv && gguf_arr_f64(kv, 0, &d) && d == 0.1 && gguf_arr_f64(kv, 1, &d) && d == -1e300);
    kv = gguf_find(f, "a.bool");
    CHECK(kv && kv->arr_type == GGUF_TYPE_BOOL && kv->arr_n == 3 &&
          memcmp(kv->arr_data, a_bool, 3) == 0);
    kv = gguf_find(f, "a.u64");
    CHECK(kv && kv->arr_n == 2 && rd_le(kv->arr_data + 8, 8) == UINT64_MAX);
    kv = gguf_find(f, "a.empty");
    CHECK(kv && kv->arr_type == GGUF_TYPE_UINT32 && kv->arr_n == 0);
    kv = gguf_find(f, "a.str");
    CHECK(kv && kv->arr_type == GGUF_TYPE_STRING && kv->arr_n == 5 && kv->arr_data == NULL);
    for (uint64_t i = 0; kv && i < 5; i++)
        CHECK_MSG(kv->arr_str[i].len == strlen(sample_strs[i]) &&
                      memcmp(kv->arr_str[i].ptr, sample_strs[i], kv->arr_str[i].len) == 0,
                  "a.str[%" PRIu64 "]", i);
    kv = gguf_find(f, "a.str_len");
    CHECK(kv && kv->arr_n == 2 && kv->arr_str[0].len == 3 &&
          memcmp(kv->arr_str[0].ptr, "a\0b", 3) == 0 && kv->arr_str[1].len == 2 &&
          memcmp(kv->arr_str[1].ptr, "xy", 2) == 0);

    for (size_t i = 0; i < N_SAMPLE_TENSORS; i++) {
        const tspec *want = &sample_tensors[i];
        const gguf_tensor *t = gguf_find_tensor(f, want->name);
        CHECK_MSG(t == &f->tensors[i], "tensor %s in order", want->name);
        if (!t)
            continue;
        CHECK_MSG(t->dtype == want->dtype && t->n_dims == want->n_dims &&
                      memcmp(t->ne, want->ne, sizeof t->ne) == 0 &&
                      t->n_bytes == want->n_bytes &&
                      t->ggml_type == (uint32_t)hr_dtype_table[want->dtype].ggml_type,
                  "tensor %s description", want->name);
        CHECK_MSG(t->offset % want_align == 0, "tensor %s offset %" PRIu64, want->name,
                  t->offset);
        CHECK_MSG(memcmp(t->data, sample_data[i], t->n_bytes) == 0, "tensor %s data",
                  want->name);
        /* zero padding up to the next tensor */
        uint64_t end = t->offset + t->n_bytes;
        uint64_t next = i + 1 < N_SAMPLE_TENSORS ? f->tensors[i + 1].offset : end;
        for (uint64_t p = end; p < next; p++)
            CHECK_MSG(f->buf[f->data_offset + p] == 0, "padding byte %" PRIu64, p);
    }
    /* the file ends with the last tensor padded to the alignment; with the
     * default 32 the last tensor needs no pad (what the truncation test needs) */
    const gguf_tensor *last = &f->tensors[N_SAMPLE_TENSORS - 1];
    uint64_t padded = (last->n_bytes + want_align - 1) / want_align * want_align;
    CHECK_EQ_I64(f->data_offset + last->offset + padded, f->size);
    CHECK(align || padded == last->n_bytes);
    gguf_free(f);
    check_same_as_py(path);
    remove(path);
}

static void test_getters(void) {
    bb b = {0};
    build_getters_file(&b);
    gguf_file *f = NULL;
    hr_error err = {0};
    CHECK_OK(gguf_parse(b.p, b.n, "getters.gguf", &f, &err), &err);
    if (!f) {
        free(b.p);
        return;
    }
    CHECK_EQ_I64(f->version, 2);
    uint32_t u = 0;
    int64_t i = 0;
    float fl = 0;
    bool bo = false;
    gguf_str s;
    /* u32: any integer type whose value fits */
    CHECK(gguf_get_u32(f, "s.u8", &u) && u == 200);
    CHECK(gguf_get_u32(f, "s.u16", &u) && u == 60000);
    CHECK(gguf_get_u32(f, "s.u32", &u) && u == 7);
    CHECK(gguf_get_u32(f, "s.i32pos", &u) && u == 9);
    CHECK(!gguf_get_u32(f, "s.i8", &u));
    CHECK(!gguf_get_u32(f, "s.i32", &u));
    CHECK(!gguf_get_u32(f, "s.u64big", &u));
    CHECK(!gguf_get_u32(f, "s.f32", &u));
    CHECK(!gguf_get_u32(f, "s.bool", &u));
    CHECK(!gguf_get_u32(f, "s.str", &u));
    CHECK(!gguf_get_u32(f, "a.i32", &u));
    CHECK(!gguf_get_u32(f, "missing", &u));
    /* i64 */
    CHECK(gguf_get_i64(f, "s.i8", &i) && i == -5);
    CHECK(gguf_get_i64(f, "s.i16", &i) && i == -300);
    CHECK(gguf_get_i64(f, "s.i32", &i) && i == -7);
    CHECK(gguf_get_i64(f, "s.i64", &i) && i == -(1ll << 40));
    CHECK(gguf_get_i64(f, "s.u64big", &i) && i == 1ll << 33);
    CHECK(!gguf_get_i64(f, "s.u64huge", &i));
    CHECK(!gguf_get_i64(f, "s.f64", &i));
    CHECK(!gguf_get_i64(f, "s.bool", &i));
    /* f32: float32, or float64 in float range; never integers */
    CHECK(gguf_get_f32(f, "s.f32", &fl) && fl == 0.5f);
    CHECK(gguf_get_f32(f, "s.f64", &fl) && fl == 0.25f);
    CHECK(!gguf_get_f32(f, "s.f64big", &fl));
    CHECK(!gguf_get_f32(f, "s.u32", &fl));
    CHECK(!gguf_get_f32(f, "missing", &fl));
    /* bool and string: exact type only */
    CHECK(gguf_get_bool(f, "s.bool", &bo) && bo);
    CHECK(!gguf_get_bool(f, "s.u8", &bo));
    CHECK(gguf_get_str(f, "s.str", &s) && s.len == 3 && memcmp(s.ptr, "abc", 3) == 0);
    CHECK(!gguf_get_str(f, "s.u32", &s));
    CHECK(!gguf_get_str(f, "a.str", &s));
    /* array elements */
    const gguf_kv *ai = gguf_find(f, "a.i32"), *af = gguf_find(f, "a.f32");
    const gguf_kv *ab = gguf_find(f, "a.bool"), *au = gguf_find(f, "a.u64");
    const gguf_kv *as = gguf_find(f, "a.str"), *su = gguf_find(f, "s.u32");
    double d = 0;
    CHECK(gguf_arr_i64(ai, 0, &i) && i == -1);
    CHECK(gguf_arr_i64(ai, 1, &i) && i == 5);
    CHECK(!gguf_arr_i64(ai, 2, &i));
    CHECK(gguf_arr_f64(ai, 0, &d) && d == -1.0);
    CHECK(gguf_arr_f64(af, 0, &d) && d == 0.5);
    CHECK(!gguf_arr_i64(af, 0, &i));
    CHECK(!gguf_arr_i64(ab, 0, &i));
    CHECK(!gguf_arr_f64(ab, 0, &d));
    CHECK(!gguf_arr_i64(au, 0, &i));
    CHECK(gguf_arr_i64(au, 1, &i) && i == 3);
    CHECK(gguf_arr_f64(au, 0, &d) && d == 18446744073709551615.0);
    CHECK(!gguf_arr_i64(as, 0, &i));
    CHECK(!gguf_arr_f64(as, 0, &d));
    CHECK(!gguf_arr_i64(su, 0, &i));
    /* nested arrays: counted, skipped */
    const gguf_kv *nest = gguf_find(f, "a.nest"), *deep = gguf_find(f, "a.deep");
    CHECK(nest && nest->arr_type == GGUF_TYPE_ARRAY && nest->arr_n == 2 && !nest->arr_data &&
          !nest->arr_str);
    CHECK(nest && !gguf_arr_i64(nest, 0, &i));
    CHECK(deep && deep->arr_type == GGUF_TYPE_ARRAY && deep->arr_n == 1);
    gguf_free(f);
    free(b.p);
}

static void test_real_vocab(void) {
    static const struct {
        const char *file, *model;
        uint64_t n_kv, n_tokens;
        bool has_scores, has_merges;
        bool py; /* cross-check with gguf-py (about 2 s a file: two cover both kinds) */
    } cases[] = {
        {"ggml-vocab-gpt-2.gguf", "gpt2", 16, 50257, false, true, true},
        {"ggml-vocab-llama-spm.gguf", "llama", 22, 32000, true, false, true},
        {"ggml-vocab-phi-3.gguf", "llama", 26, 32064, true, false, false},
        {"ggml-vocab-starcoder.gguf", "gpt2", 19, 49152, false, true, false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", TEST_PATH("tests/data/tokenizer-vectors"),
                 cases[c].file);
        gguf_file *f = NULL;
        hr_error err = {0};
        CHECK_OK(gguf_open(path, &f, &err), &err);
        if (!f)
            continue;
        CHECK_EQ_I64(f->version, 3);
        CHECK_EQ_I64(f->n_kv, cases[c].n_kv);
        CHECK_EQ_I64(f->n_tensors, 0);
        gguf_str model;
        CHECK_MSG(gguf_get_str(f, "tokenizer.ggml.model", &model) &&
                      model.len == strlen(cases[c].model) &&
                      memcmp(model.ptr, cases[c].model, model.len) == 0,
                  "%s: tokenizer.ggml.model", cases[c].file);
        const gguf_kv *tok = gguf_find(f, "tokenizer.ggml.tokens");
        CHECK_MSG(tok && tok->type == GGUF_TYPE_ARRAY && tok->arr_type == GGUF_TYPE_STRING &&
                      tok->arr_n == cases[c].n_tokens && tok->arr_str,
                  "%s: tokens", cases[c].file);
        const gguf_kv *tt = gguf_find(f, "tokenizer.ggml.token_type");
        int64_t ty = 0;
        CHECK(tt && tt->arr_type == GGUF_TYPE_INT32 && tt->arr_n == cases[c].n_tokens &&
              gguf_arr_i64(tt, 0, &ty));
        const gguf_kv *sc = gguf_find(f, "tokenizer.ggml.scores");
        CHECK(cases[c].has_scores ? sc && sc->arr_type == GGUF_TYPE_FLOAT32 &&
                                        sc->arr_n == cases[c].n_tokens
                                  : sc == NULL);
        const gguf_kv *mg = gguf_find(f, "tokenizer.ggml.merges");
        CHECK(cases[c].has_merges ? mg && mg->arr_type == GGUF_TYPE_STRING : mg == NULL);
        uint32_t bos = 0;
        CHECK(tok && gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &bos) && bos < tok->arr_n);
        if (strcmp(cases[c].model, "llama") == 0 && tok)
            CHECK(tok->arr_str[1].len == 3 && memcmp(tok->arr_str[1].ptr, "<s>", 3) == 0);
        gguf_free(f);
        if (cases[c].py)
            check_same_as_py(path);
    }
}

static void test_python_written(void) {
    if (!py_available())
        return;
    char path[512];
    tmp_path(path, sizeof path, "pywritten");
    bb out = {0};
    int rc = run_py("write", path, &out);
    CHECK_MSG(rc == 0, "gguf_pyread.py write: %.*s", (int)out.n, (const char *)out.p);
    free(out.p);
    out = (bb){0};
    if (rc != 0)
        return;
    gguf_file *f = NULL;
    hr_error err = {0};
    CHECK_OK(gguf_open(path, &f, &err), &err);
    if (f) {
        const gguf_tensor *t = gguf_find_tensor(f, "blk.0.attn_q.weight");
        CHECK(t && t->dtype == HR_DTYPE_Q8_0 && t->ne[0] == 32 && t->ne[1] == 2 &&
              t->n_bytes == 68);
        t = gguf_find_tensor(f, "tok_embd.weight");
        CHECK(t && t->dtype == HR_DTYPE_F32 && t->ne[0] == 8 && t->ne[1] == 3);
        gguf_free(f);
    }
    check_same_as_py(path);

    /* a real big-endian file, as gguf-py writes one */
    rc = run_py("write-be", path, &out);
    CHECK(rc == 0);
    free(out.p);
    f = NULL;
    hr_status s = gguf_open(path, &f, &err);
    CHECK_MSG(s == HR_ERR_UNSUPPORTED && strstr(err.msg, "big-endian"), "%s: %s",
              hr_status_name(s), err.msg);
    gguf_free(f);
    remove(path);
}

/* ---------------------------------------------------------------- corrupt */

/* Offset just past "u64 length + name" in b: where a key's type or a tensor
 * info's n_dims starts. */
static size_t after_name(const bb *b, const char *name) {
    uint8_t needle[300];
    size_t len = strlen(name);
    wr_le(needle, len, 8);
    memcpy(needle + 8, name, len);
    for (size_t i = 0; i + 8 + len <= b->n; i++) {
        if (memcmp(b->p + i, needle, 8 + len) == 0)
            return i + 8 + len;
    }
    fprintf(stderr, "test bug: '%s' not found in the sample\n", name);
    abort();
}

/* Tensor info fields of tensor `name` in the sample. */
static size_t t_ndims(const bb *b, const char *name) { return after_name(b, name); }

static size_t t_ne(const bb *b, const char *name, int d) {
    return after_name(b, name) + 4 + 8 * (size_t)d;
}

static size_t t_type(const bb *b, const char *name) {
    size_t at = after_name(b, name);
    return at + 4 + 8 * rd_le(b->p + at, 4);
}

static size_t t_offset(const bb *b, const char *name) { return t_type(b, name) + 4; }

/* Replaces n_old bytes at `at` with the given bytes. */
static void splice(bb *b, size_t at, size_t n_old, const void *p, size_t n_new) {
    bb tail = {0};
    bb_raw(&tail, b->p + at + n_old, b->n - at - n_old);
    b->n = at;
    bb_raw(b, p, n_new);
    bb_raw(b, tail.p, tail.n);
    free(tail.p);
}

static void m_truncated(bb *b) { b->n = b->n / 2; }
static void m_bad_magic(bb *b) { b->p[3] = 'X'; }
static void m_version_1(bb *b) { wr_le(b->p + 4, 1, 4); }
static void m_big_endian(bb *b) { wr_le(b->p + 4, 0x03000000u, 4); }
static void m_version_9(bb *b) { wr_le(b->p + 4, 9, 4); }
static void m_huge_n_tensors(bb *b) { wr_le(b->p + 8, 1ull << 62, 8); }
static void m_huge_n_kv(bb *b) { wr_le(b->p + 16, UINT64_MAX, 8); }
static void m_huge_key(bb *b) { wr_le(b->p + 24, 1ull << 40, 8); }
static void m_huge_string(bb *b) { wr_le(b->p + after_name(b, "x.str") + 4, 1ull << 62, 8); }
static void m_huge_array(bb *b) { wr_le(b->p + after_name(b, "a.u16") + 8, 1ull << 60, 8); }
static void m_huge_str_array(bb *b) {
    wr_le(b->p + after_name(b, "a.str") + 8, 1ull << 59, 8);
}
static void m_bad_value_type(bb *b) { wr_le(b->p + after_name(b, "x.u32"), 13, 4); }
static void m_bad_array_type(bb *b) { wr_le(b->p + after_name(b, "a.u8") + 4, 99, 4); }
static void m_bad_bool(bb *b) { b->p[after_name(b, "x.bool_t") + 4] = 2; }
static void m_bad_bool_array(bb *b) { b->p[after_name(b, "a.bool") + 16] = 7; }
static void m_key_nul(bb *b) { b->p[after_name(b, "x.str") - 2] = 0; }
static void m_duplicate_key(bb *b) { b->p[after_name(b, "x.bool_f") - 1] = 't'; }
static void m_duplicate_tensor(bb *b) {
    memcpy(b->p + after_name(b, "blk.0.q4_k") - 4, "q8_0", 4);
}
static void m_long_tensor_name(bb *b) {
    size_t end = after_name(b, "norm.weight");
    uint8_t name[8 + 300];
    wr_le(name, 300, 8);
    memset(name + 8, 'n', 300);
    splice(b, end - 8 - strlen("norm.weight"), 8 + strlen("norm.weight"), name, sizeof name);
}
static void m_empty_tensor_name(bb *b) {
    size_t end = after_name(b, "norm.weight");
    uint8_t name[8] = {0};
    splice(b, end - 8 - strlen("norm.weight"), 8 + strlen("norm.weight"), name, sizeof name);
}
static void m_unknown_dtype(bb *b) { wr_le(b->p + t_type(b, "blk.0.bf16"), 1234, 4); }
static void m_dtype_minus_one(bb *b) { wr_le(b->p + t_type(b, "blk.0.bf16"), UINT32_MAX, 4); }
static void m_misaligned(bb *b) {
    size_t at = t_offset(b, "norm.weight");
    wr_le(b->p + at, rd_le(b->p + at, 8) + 4, 8);
}
static void m_out_of_file(bb *b) { wr_le(b->p + t_offset(b, "output.weight"), 1u << 20, 8); }
static void m_offset_wraps(bb *b) {
    wr_le(b->p + t_offset(b, "output.weight"), UINT64_MAX - 31, 8);
}
static void m_overlap(bb *b) { wr_le(b->p + t_offset(b, "norm.weight"), 32, 8); }
static void m_zero_dim(bb *b) { wr_le(b->p + t_ne(b, "tok_embd.weight", 1), 0, 8); }
static void m_dims_overflow(bb *b) {
    wr_le(b->p + t_ne(b, "tok_embd.weight", 0), 1ull << 32, 8);
    wr_le(b->p + t_ne(b, "tok_embd.weight", 1), 1ull << 32, 8);
}
static void m_dim_negative(bb *b) { wr_le(b->p + t_ne(b, "norm.weight", 0), UINT64_MAX, 8); }
static void m_too_many_dims(bb *b) { wr_le(b->p + t_ndims(b, "blk.0.i32"), 5, 4); }
static void m_zero_dims(bb *b) { wr_le(b->p + t_ndims(b, "blk.0.i32"), 0, 4); }
static void m_block_size(bb *b) {
    /* ne = {16, 4}: still 64 elements, but rows split q4_0 blocks */
    wr_le(b->p + t_ne(b, "blk.0.q4_0", 0), 16, 8);
    wr_le(b->p + t_ne(b, "blk.0.q4_0", 1), 4, 8);
}
static void m_data_section_cut(bb *b) {
    /* the header whole, the padding before the data section cut short */
    gguf_file *f = NULL;
    if (gguf_parse(b->p, b->n, "sample", &f, NULL) != HR_OK)
        abort();
    b->n = (size_t)f->data_offset - 1;
    gguf_free(f);
}
static void m_bad_alignment(bb *b) { wr_le(b->p + after_name(b, "general.alignment") + 4, 24, 4); }
static void m_zero_alignment(bb *b) { wr_le(b->p + after_name(b, "general.alignment") + 4, 0, 4); }
static void m_alignment_type(bb *b) {
    wr_le(b->p + after_name(b, "general.alignment"), GGUF_TYPE_INT32, 4);
}
static void m_deep_nesting(bb *b) {
    b->n = 0;
    bb_header(b, 3, 0, 1);
    bb_key(b, "a.deep", GGUF_TYPE_ARRAY);
    for (int i = 0; i < 4; i++)
        bb_le(b, GGUF_TYPE_ARRAY, 4), bb_le(b, 1, 8);
    bb_le(b, GGUF_TYPE_UINT8, 4), bb_le(b, 1, 8), bb_le(b, 42, 1);
}

typedef struct {
    const char *file; /* name in tests/fixtures/corrupt/, NULL: in-memory only */
    bool align64;     /* patch the sample written with general.alignment = 64 */
    void (*mutate)(bb *b);
    hr_status code;
    const char *says; /* expected in the message */
} corrupt_case;

static const corrupt_case corrupt_cases[] = {
    {"truncated.gguf", false, m_truncated, HR_ERR_FORMAT, "truncated"},
    {"bad-magic.gguf", false, m_bad_magic, HR_ERR_FORMAT, "not a GGUF file"},
    {"version-1.gguf", false, m_version_1, HR_ERR_UNSUPPORTED, "version 1"},
    {"big-endian.gguf", false, m_big_endian, HR_ERR_UNSUPPORTED, "big-endian"},
    {NULL, false, m_version_9, HR_ERR_UNSUPPORTED, "version 9"},
    {"huge-n-tensors.gguf", false, m_huge_n_tensors, HR_ERR_FORMAT, "cannot hold them"},
    {"huge-n-kv.gguf", false, m_huge_n_kv, HR_ERR_FORMAT, "cannot hold them"},
    {"huge-key.gguf", false, m_huge_key, HR_ERR_FORMAT, "65535 allowed"},
    {"huge-string.gguf", false, m_huge_string, HR_ERR_FORMAT, "allowed"},
    {"huge-array.gguf", false, m_huge_array, HR_ERR_FORMAT, "bytes remain"},
    {NULL, false, m_huge_str_array, HR_ERR_FORMAT, "bytes remain"},
    {"bad-value-type.gguf", false, m_bad_value_type, HR_ERR_FORMAT, "not a GGUF value type"},
    {NULL, false, m_bad_array_type, HR_ERR_FORMAT, "array element type 99"},
    {"bad-bool.gguf", false, m_bad_bool, HR_ERR_FORMAT, "expected 0 or 1"},
    {NULL, false, m_bad_bool_array, HR_ERR_FORMAT, "expected 0 or 1"},
    {NULL, false, m_key_nul, HR_ERR_FORMAT, "NUL byte"},
    {"duplicate-key.gguf", false, m_duplicate_key, HR_ERR_FORMAT, "duplicate key 'x.bool_t'"},
    {"duplicate-tensor.gguf", false, m_duplicate_tensor, HR_ERR_FORMAT,
     "duplicate tensor name 'blk.0.q8_0'"},
    {"long-tensor-name.gguf", false, m_long_tensor_name, HR_ERR_FORMAT, "256 allowed"},
    {NULL, false, m_empty_tensor_name, HR_ERR_FORMAT, "empty tensor name"},
    {"unknown-dtype.gguf", false, m_unknown_dtype, HR_ERR_UNSUPPORTED,
     "'blk.0.bf16' has ggml type 1234"},
    {NULL, false, m_dtype_minus_one, HR_ERR_UNSUPPORTED, "ggml type 4294967295"},
    {"misaligned-offset.gguf", false, m_misaligned, HR_ERR_FORMAT,
     "not a multiple of the alignment 32"},
    {"tensor-out-of-file.gguf", false, m_out_of_file, HR_ERR_FORMAT,
     "'output.weight' (32 bytes at data offset 1048576) ends past the end"},
    {NULL, false, m_offset_wraps, HR_ERR_FORMAT, "ends past the end"},
    {"overlapping-tensors.gguf", false, m_overlap, HR_ERR_FORMAT, "overlap"},
    {"zero-dim.gguf", false, m_zero_dim, HR_ERR_FORMAT, "ne[1] = 0"},
    {"dims-overflow.gguf", false, m_dims_overflow, HR_ERR_FORMAT, "overflows int64"},
    {NULL, false, m_dim_negative, HR_ERR_FORMAT, "expected 1..2^63-1"},
    {"too-many-dims.gguf", false, m_too_many_dims, HR_ERR_FORMAT, "5 dimensions"},
    {NULL, false, m_zero_dims, HR_ERR_FORMAT, "0 dimensions"},
    {"block-size.gguf", false, m_block_size, HR_ERR_FORMAT, "not a multiple of the block size"},
    {"data-section-cut.gguf", false, m_data_section_cut, HR_ERR_FORMAT, "data section starts"},
    {"bad-alignment.gguf", true, m_bad_alignment, HR_ERR_FORMAT, "power of two"},
    {NULL, true, m_zero_alignment, HR_ERR_FORMAT, "general.alignment is 0"},
    {NULL, true, m_alignment_type, HR_ERR_FORMAT, "expected uint32"},
    {"deep-nesting.gguf", false, m_deep_nesting, HR_ERR_FORMAT, "nested more than 4 deep"},
};
#define N_CORRUPT (sizeof corrupt_cases / sizeof corrupt_cases[0])

static void check_failure(hr_status s, const hr_error *err, const corrupt_case *c,
                          const char *name) {
    CHECK_MSG(s == c->code && strstr(err->msg, c->says) && strstr(err->msg, name),
              "%s: got %s '%s', expected %s with '%s'", name, hr_status_name(s), err->msg,
              hr_status_name(c->code), c->says);
}

static void make_corrupt(const corrupt_case *c, const bb *sample, const bb *sample64, bb *out) {
    out->n = 0;
    const bb *base = c->align64 ? sample64 : sample;
    bb_raw(out, base->p, base->n);
    c->mutate(out);
}

static void test_corrupt(const bb *sample, const bb *sample64) {
    for (size_t i = 0; i < N_CORRUPT; i++) {
        const corrupt_case *c = &corrupt_cases[i];
        bb b = {0};
        make_corrupt(c, sample, sample64, &b);
        char name[128];
        snprintf(name, sizeof name, "corrupt-%zu.gguf", i);
        gguf_file *f = NULL;
        hr_error err = {0};
        int64_t n_alloc = hr_alloc_count();
        hr_status s = gguf_parse(b.p, b.n, name, &f, &err);
        check_failure(s, &err, c, name);
        CHECK(f == NULL);
        if (c->mutate == m_huge_n_tensors || c->mutate == m_huge_n_kv)
            CHECK_MSG(hr_alloc_count() - n_alloc <= 2, "%s: allocated before the count check",
                      name);
        free(b.p);
        if (!c->file)
            continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", TEST_PATH("tests/fixtures/corrupt"), c->file);
        s = gguf_open(path, &f, &err);
        check_failure(s, &err, c, c->file);
        bb onfile = {0};
        CHECK_MSG(read_file(path, &onfile) && onfile.n < 4096, "%s: missing or over 4 KB",
                  c->file);
        free(onfile.p);
    }
}

static void test_truncations(const bb *sample) {
    int n_bad = 0;
    for (size_t cut = 0; cut < sample->n; cut++) {
        /* a fresh heap copy of exactly cut bytes, so ASan sees any over-read */
        uint8_t *p = malloc(cut ? cut : 1);
        memcpy(p, sample->p, cut);
        gguf_file *f = NULL;
        hr_error err = {0};
        hr_status s = gguf_parse(cut ? p : NULL, cut, "cut.gguf", &f, &err);
        if (s != HR_ERR_FORMAT || f || !strstr(err.msg, "cut.gguf")) {
            if (n_bad++ < 5)
                fprintf(stderr, "FAIL cut at %zu: %s '%s'\n", cut, hr_status_name(s), err.msg);
        }
        gguf_free(f);
        free(p);
    }
    CHECK_MSG(n_bad == 0, "%d of %zu truncations did not fail with HR_ERR_FORMAT", n_bad,
              sample->n);
    gguf_file *f = NULL;
    hr_error err = {0};
    CHECK_OK(gguf_parse(sample->p, sample->n, "whole.gguf", &f, &err), &err);
    gguf_free(f);
}

static void test_open_errors(void) {
    gguf_file *f = NULL;
    hr_error err = {0};
    hr_status s = gguf_open("/nonexistent/x.gguf", &f, &err);
    CHECK(s == HR_ERR_IO && strstr(err.msg, "/nonexistent/x.gguf"));
    char path[512];
    tmp_path(path, sizeof path, "empty");
    CHECK(write_file(path, (const uint8_t *)"", 0));
    s = gguf_open(path, &f, &err);
    CHECK_MSG(s == HR_ERR_FORMAT && strstr(err.msg, "truncated"), "%s", err.msg);
    remove(path);
    /* header only: no keys, no tensors, no data section needed */
    bb b = {0};
    bb_header(&b, 3, 0, 0);
    CHECK_OK(gguf_parse(b.p, b.n, "header-only.gguf", &f, &err), &err);
    CHECK(f && f->n_kv == 0 && f->n_tensors == 0 && f->alignment == 32);
    gguf_free(f);
    free(b.p);
}

/* ---------------------------------------------------------------- writer */

static void expect_invalid(hr_status s, const char *what) {
    CHECK_MSG(s == HR_ERR_INVALID, "expected HR_ERR_INVALID for %s, got %s", what,
              hr_status_name(s));
}

static void test_writer_refusals(void) {
    static const uint8_t data[4096];
    const int64_t ne8[1] = {8}, ne16[1] = {16}, ne0[2] = {4, 0}, ne_big[2] = {INT64_MAX, 2};
    const uint8_t bad_bools[2] = {1, 2};
    char long_name[GGUF_MAX_NAME_BYTES + 2];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';

    gguf_writer *w = NULL;
    hr_error err = {0};
    CHECK_OK(gguf_writer_create(&w, &err), &err);
    CHECK_OK(gguf_writer_set_u32(w, "k", 1), &err);
    expect_invalid(gguf_writer_set_i32(w, "k", 2), "duplicate key");
    expect_invalid(gguf_writer_set_u32(w, "", 2), "empty key");
    expect_invalid(gguf_writer_set_str(w, "s", NULL), "NULL string");
    expect_invalid(gguf_writer_set_u32(w, "general.alignment", 24), "alignment 24");
    expect_invalid(gguf_writer_set_u32(w, "general.alignment", 0), "alignment 0");
    expect_invalid(gguf_writer_set_u64(w, "general.alignment", 64), "alignment u64");
    expect_invalid(gguf_writer_set_arr(w, "a", GGUF_TYPE_STRING, data, 1), "string arr");
    expect_invalid(gguf_writer_set_arr(w, "a", GGUF_TYPE_ARRAY, data, 1), "nested arr");
    expect_invalid(gguf_writer_set_arr(w, "a", GGUF_TYPE_BOOL, bad_bools, 2), "bool 2");
    expect_invalid(gguf_writer_set_arr(w, "a", GGUF_TYPE_UINT8, NULL, 2), "NULL data");
    expect_invalid(gguf_writer_set_arr_str(w, "a", NULL, NULL, 2), "NULL strs");
    CHECK_OK(gguf_writer_add_tensor(w, "t", HR_DTYPE_F32, 1, ne8, data), &err);
    expect_invalid(gguf_writer_add_tensor(w, "t", HR_DTYPE_F16, 1, ne8, data), "dup name");
    expect_invalid(gguf_writer_add_tensor(w, "", HR_DTYPE_F16, 1, ne8, data), "no name");
    expect_invalid(gguf_writer_add_tensor(w, long_name, HR_DTYPE_F16, 1, ne8, data), "long name");
    expect_invalid(gguf_writer_add_tensor(w, "u", HR_DTYPE_U8, 1, ne8, data), "u8");
    expect_invalid(gguf_writer_add_tensor(w, "u", HR_DTYPE_COUNT, 1, ne8, data), "dtype");
    expect_invalid(gguf_writer_add_tensor(w, "u", HR_DTYPE_F32, 0, ne8, data), "0 dims");
    expect_invalid(gguf_writer_add_tensor(w, "u", HR_DTYPE_F32, 5, ne8, data), "5 dims");
    expect_invalid(gguf_writer_add_tensor(w, "u", HR_DTYPE_F32, 2, ne0, data), "ne 0");
    expect_invalid(gguf_writer_add_tensor(w, "u", HR_DTYPE_F32, 2, ne_big, data), "ovf");
    expect_invalid(gguf_writer_add_tensor(w, "u", HR_DTYPE_Q4_0, 1, ne16, data), "block");
    expect_invalid(gguf_writer_add_tensor(w, "u", HR_DTYPE_F32, 1, ne8, NULL), "NULL");
    /* the first refusal comes back from write, naming the path */
    char path[512];
    tmp_path(path, sizeof path, "refused");
    hr_status s = gguf_writer_write(w, path, &err);
    CHECK_MSG(s == HR_ERR_INVALID && strstr(err.msg, path) &&
                  strstr(err.msg, "duplicate key 'k'"),
              "%s: %s", hr_status_name(s), err.msg);
    CHECK(!hr_path_exists(path));
    gguf_writer_free(w);

    /* limits at their edge are accepted and read back */
    char key[GGUF_MAX_KEY_BYTES + 1];
    memset(key, 'k', GGUF_MAX_KEY_BYTES);
    key[GGUF_MAX_KEY_BYTES] = '\0';
    long_name[GGUF_MAX_NAME_BYTES] = '\0';
    CHECK_OK(gguf_writer_create(&w, &err), &err);
    CHECK_OK(gguf_writer_set_u32(w, key, 5), &err);
    CHECK_OK(gguf_writer_add_tensor(w, long_name, HR_DTYPE_F32, 1, ne8, data), &err);
    CHECK_OK(gguf_writer_write(w, path, &err), &err);
    gguf_writer_free(w);
    gguf_file *f = NULL;
    CHECK_OK(gguf_open(path, &f, &err), &err);
    uint32_t v = 0;
    CHECK(f && gguf_get_u32(f, key, &v) && v == 5 && gguf_find_tensor(f, long_name));
    gguf_free(f);
    remove(path);
}

static void test_writer_io(void) {
    static const uint8_t data[1 << 16];
    const int64_t ne[1] = {1 << 14};
    hr_error err = {0};
    gguf_writer *w = NULL;
    CHECK_OK(gguf_writer_create(&w, &err), &err);
    CHECK_OK(gguf_writer_set_str(w, "general.architecture", "llama"), &err);
    CHECK_OK(gguf_writer_add_tensor(w, "t", HR_DTYPE_F32, 1, ne, data), &err);
    hr_status s = gguf_writer_write(w, "/nonexistent-dir/out.gguf", &err);
    CHECK_MSG(s == HR_ERR_IO && strstr(err.msg, "/nonexistent-dir/out.gguf") &&
                  strstr(err.msg, "cannot create"),
              "%s: %s", hr_status_name(s), err.msg);
    if (hr_path_exists("/dev/full")) {
        s = gguf_writer_write(w, "/dev/full", &err);
        CHECK_MSG(s == HR_ERR_IO && strstr(err.msg, "/dev/full") &&
                      strstr(err.msg, "write failed"),
                  "%s: %s", hr_status_name(s), err.msg);
        CHECK(hr_path_exists("/dev/full"));
    }

    /* a write that fails halfway (the file-size limit: EFBIG) leaves the
     * file of that name as it was and no partial file beside it */
    char path[512], partial[600];
    tmp_path(path, sizeof path, "keep");
    snprintf(partial, sizeof partial, "%s.partial-%ld", path, (long)getpid());
    FILE *fp = fopen(path, "wb");
    CHECK(fp && fputs("the old model", fp) >= 0 && fclose(fp) == 0);
    struct rlimit old_lim, lim;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    if (getrlimit(RLIMIT_FSIZE, &old_lim) == 0) {
        lim = old_lim;
        lim.rlim_cur = 4096;
        CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
        s = gguf_writer_write(w, path, &err);
        CHECK(setrlimit(RLIMIT_FSIZE, &old_lim) == 0);
        CHECK_MSG(s == HR_ERR_IO && strstr(err.msg, "write failed"), "%s: %s",
                  hr_status_name(s), err.msg);
        size_t n = 0;
        char *kept = test_read_file(path, &n, 0);
        CHECK(kept && n == 13 && memcmp(kept, "the old model", 13) == 0);
        free(kept);
        CHECK(!hr_path_exists(partial));
    }
    signal(SIGXFSZ, old_handler);
    /* a complete write replaces it */
    CHECK_OK(gguf_writer_write(w, path, &err), &err);
    gguf_file *f = NULL;
    CHECK_OK(gguf_open(path, &f, &err), &err);
    CHECK(f && gguf_find_tensor(f, "t"));
    gguf_free(f);
    CHECK(!hr_path_exists(partial));
    remove(path);
    gguf_writer_free(w);
}

/* The Nth allocation fails, for N = 1.. until a run succeeds: each failure
 * must be a clean HR_ERR_NOMEM (ASan checks that nothing leaks). */
static void test_alloc_faults(const bb *sample) {
    int n_runs = 0;
    for (int64_t n = 1; n < 10000; n++) {
        gguf_file *f = NULL;
        hr_error err = {0};
        hr_alloc_fail_at(n);
        hr_status s = gguf_parse(sample->p, sample->n, "faults.gguf", &f, &err);
        bool fired = hr_alloc_fault_fired();
        hr_alloc_fail_at(0);
        n_runs++;
        if (!fired) {
            CHECK_OK(s, &err);
            gguf_free(f);
            break;
        }
        CHECK_MSG(s == HR_ERR_NOMEM && !f, "parse, allocation %" PRId64 ": %s %s", n,
                  hr_status_name(s), err.msg);
    }
    CHECK(n_runs > 5);

    char path[512];
    tmp_path(path, sizeof path, "faults");
    n_runs = 0;
    for (int64_t n = 1; n < 10000; n++) {
        hr_error err = {0};
        hr_alloc_fail_at(n);
        hr_status s = write_sample(path, 0, &err);
        bool fired = hr_alloc_fault_fired();
        hr_alloc_fail_at(0);
        n_runs++;
        if (!fired) {
            CHECK_OK(s, &err);
            break;
        }
        CHECK_MSG(s == HR_ERR_NOMEM, "write, allocation %" PRId64 ": %s %s", n,
                  hr_status_name(s), err.msg);
    }
    CHECK(n_runs > 20);
    remove(path);
}

/* ---------------------------------------------------------------- fixtures */

static int write_fixtures(const bb *sample, const bb *sample64) {
    int n = 0;
    char path[512];
    for (size_t i = 0; i < N_CORRUPT; i++) {
        const corrupt_case *c = &corrupt_cases[i];
        if (!c->file)
            continue;
        bb b = {0};
        make_corrupt(c, sample, sample64, &b);
        snprintf(path, sizeof path, "%s/%s", TEST_PATH("tests/fixtures/corrupt"), c->file);
        if (b.n >= 4096 || !write_file(path, b.p, b.n)) {
            fprintf(stderr, "cannot write %s (%zu bytes)\n", path, b.n);
            return 1;
        }
        free(b.p);
        n++;
    }
    bb getters = {0}, header = {0};
    build_getters_file(&getters);
    bb_header(&header, 3, 0, 0);
    const struct {
        const char *name;
        const bb *b;
    } seeds[] = {{"sample.gguf", sample},
                 {"sample-align64.gguf", sample64},
                 {"getters-v2.gguf", &getters},
                 {"header-only.gguf", &header}};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", TEST_PATH("tests/fuzz/corpus/gguf"), seeds[i].name);
        if (!write_file(path, seeds[i].b->p, seeds[i].b->n)) {
            fprintf(stderr, "cannot write %s\n", path);
            return 1;
        }
        n++;
    }
    free(getters.p);
    free(header.p);
    printf("wrote %d files\n", n);
    return 0;
}

int main(int argc, char **argv) {
    for (size_t i = 0; i < N_SAMPLE_TENSORS; i++)
        for (size_t j = 0; j < sizeof sample_data[i]; j++)
            sample_data[i][j] = (uint8_t)(j * 37 + i * 11 + 1);
    bb sample = {0}, sample64 = {0};
    if (!sample_bytes(0, &sample) || !sample_bytes(64, &sample64))
        TEST_END();
    if (argc > 1 && strcmp(argv[1], "--write-fixtures") == 0)
        return write_fixtures(&sample, &sample64);

    test_types();
    test_roundtrip(0);
    test_roundtrip(64);
    test_getters();
    test_real_vocab();
    test_python_written();
    test_truncations(&sample);
    test_corrupt(&sample, &sample64);
    test_open_errors();
    test_writer_refusals();
    test_writer_io();
    test_alloc_faults(&sample);
    free(sample.p);
    free(sample64.p);
    TEST_END();
}
