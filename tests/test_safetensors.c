/*
 * test_safetensors.c — the safetensors reader on valid, truncated, corrupt
 * and sharded inputs.
 *
 * Valid files come from two writers: a tiny one here (so each case is one
 * readable header string) and the Python safetensors package
 * (tests/fixtures/st-small.safetensors, st-sharded/), so the reader is held
 * to what the reference writer actually emits. Every prefix of a valid file
 * must fail cleanly; each corrupt kind must give its status and a message
 * naming the file and the tensor; allocation failures are walked one by one.
 */
#include "format/safetensors.h"
#include "util/alloc.h"
#include "util/fp16.h"
#include "test.h"

#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#define TMP_DIR HR_BINARY_DIR "/test_safetensors_tmp"

/* u64 LE header length, header, then n_data bytes of data (zeros when NULL). */
static uint8_t *make_st(const char *header, const void *data, size_t n_data, size_t *size) {
    size_t hl = strlen(header);
    *size = 8 + hl + n_data;
    uint8_t *b = calloc(1, *size);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    if (data)
        memcpy(b + 8 + hl, data, n_data);
    return b;
}

static void write_file(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fwrite(buf, 1, n, f);
    fclose(f);
}

static void write_st(const char *path, const char *header, size_t n_data) {
    size_t size;
    uint8_t *b = make_st(header, NULL, n_data, &size);
    write_file(path, b, size);
    free(b);
}

static void make_dir(const char *path) {
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "cannot mkdir %s\n", path);
        exit(1);
    }
}

/* Removes the files named and then the folder (the test made all of them). */
static void remove_dir(const char *dir, const char *const *names, int n) {
    char p[1024];
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

/* ---------------------------------------------------------------- valid */

static void test_valid_buffer(void) {
    /* w: F32 [2, 3]; b: BF16 [4]; s: F16 scalar; z: I8 [0, 5] at the end;
     * metadata skipped; trailing spaces after the JSON are padding. */
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"},"
                    "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                    "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
                    "\"s\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[32,34]},"
                    "\"z\":{\"dtype\":\"I8\",\"shape\":[0,5],\"data_offsets\":[34,34]}}    ";
    uint8_t data[34];
    for (int i = 0; i < 34; i++)
        data[i] = (uint8_t)i;
    size_t size;
    uint8_t *buf = make_st(h, data, sizeof data, &size);
    hr_error err = {0};
    st_set *s = NULL;
    CHECK_OK(st_parse(buf, size, "mem.safetensors", &s, &err), &err);
    if (!s) {
        free(buf);
        return;
    }
    CHECK_EQ_I64(s->n_tensors, 4);
    CHECK_EQ_I64(s->n_files, 0);
    /* header order is kept */
    CHECK(strcmp(s->tensors[0].name, "w") == 0 && strcmp(s->tensors[3].name, "z") == 0);
    const st_tensor *w = st_find(s, "w");
    CHECK(w && w->dtype == HR_DTYPE_F32 && w->n_dims == 2);
    if (w) {
        CHECK_EQ_I64(w->shape[0], 2);
        CHECK_EQ_I64(w->shape[1], 3);
        CHECK_EQ_I64(w->ne[0], 3);
        CHECK_EQ_I64(w->ne[1], 2);
        CHECK_EQ_I64(w->n_bytes, 24);
        CHECK(w->data == buf + size - 34);
        CHECK_EQ_I64(w->file_index, 0);
    }
    const st_tensor *b = st_find(s, "b");
    CHECK(b && b->dtype == HR_DTYPE_BF16 && b->n_bytes == 8 && b->data == buf + size - 10);
    const st_tensor *sc = st_find(s, "s");
    CHECK(sc && sc->dtype == HR_DTYPE_F16 && sc->n_dims == 0 && sc->n_bytes == 2);
    const st_tensor *z = st_find(s, "z");
    CHECK(z && z->dtype == HR_DTYPE_I8 && z->n_dims == 2 && z->n_bytes == 0);
    if (z)
        CHECK(z->shape[0] == 0 && z->shape[1] == 5 && z->ne[0] == 5);
    CHECK(st_find(s, "__metadata__") == NULL);
    CHECK(st_find(s, "W") == NULL);
    CHECK(st_find(s, "") == NULL);
    st_free(s);

    /* every proper prefix fails with HR_ERR_FORMAT and leaves *out alone */
    int bad = 0;
    for (size_t n = 0; n < size; n++) {
        st_set *t = (st_set *)&bad;
        hr_status r = st_parse(buf, n, "mem.safetensors", &t, &err);
        if (r != HR_ERR_FORMAT || t != (st_set *)&bad) {
            bad++;
            fprintf(stderr, "prefix %zu: %s %s\n", n, hr_status_name(r), err.msg);
            if (r == HR_OK)
                st_free(t);
        }
    }
    CHECK_EQ_I64(bad, 0);
    free(buf);
}

static void test_edge_valid(void) {
    static const char *const ok[] = {
        "{}",
        " {\"__metadata__\":{}} \n",
        /* adjacent tensors; zero-size tensors inside another's bytes own none */
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]},"
        "\"e\":{\"dtype\":\"F32\",\"shape\":[3,0],\"data_offsets\":[2,2]},"
        "\"f\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[2,2]}}",
        /* unknown fields are ignored; holes between tensors are allowed */
        "{\"a\":{\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[6,8],\"x\":[1]}}",
        /* numbers written with exponent or fraction zero are integers */
        "{\"a\":{\"dtype\":\"F64\",\"shape\":[1.0],\"data_offsets\":[0,8e0]}}",
        "{\"a\":{\"dtype\":\"I32\",\"shape\":[1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        size_t size;
        uint8_t *buf = make_st(ok[i], NULL, 8, &size);
        hr_error err = {0};
        st_set *s = NULL;
        hr_status r = st_parse(buf, size, "edge", &s, &err);
        CHECK_MSG(r == HR_OK, "case %zu: %s %s", i, hr_status_name(r), err.msg);
        st_free(s);
        free(buf);
    }
    st_free(NULL);
    CHECK(st_find(NULL, "x") == NULL);
}

/* ---------------------------------------------------------------- corrupt */

typedef struct {
    const char *header;
    size_t n_data;
    hr_status want;
    const char *msg; /* substring the message must hold */
} bad_case;

static void test_corrupt_buffers(void) {
    static const bad_case cases[] = {
        {"", 0, HR_ERR_FORMAT, "not valid JSON"},
        {"{\"a\":", 0, HR_ERR_FORMAT, "not valid JSON"},
        {"[]", 0, HR_ERR_FORMAT, "not an object"},
        {"{} {}", 0, HR_ERR_FORMAT, "after the JSON"},
        {"{}\x01", 0, HR_ERR_FORMAT, "after the JSON"},
        {"{\"w\":[1]}", 4, HR_ERR_FORMAT, "'w': entry is not an object"},
        {"{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, HR_ERR_FORMAT,
         "'w': missing field 'dtype'"},
        {"{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, HR_ERR_FORMAT,
         "'w': missing field 'shape'"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, HR_ERR_FORMAT,
         "'w': missing field 'data_offsets'"},
        {"{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         HR_ERR_FORMAT, "'dtype' appears twice"},
        {"{\"w\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, HR_ERR_FORMAT,
         "'w': 'dtype' is not a string"},
        {"{\"w\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
         HR_ERR_UNSUPPORTED, "tensor 'w': dtype 'I64'"},
        {"{\"w\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
         HR_ERR_UNSUPPORTED, "dtype 'BOOL'"},
        {"{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
         HR_ERR_UNSUPPORTED, "dtype 'F8_E4M3'"},
        {"{\"w\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         HR_ERR_UNSUPPORTED, "dtype 'f32'"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,16]}}", 16, HR_ERR_FORMAT,
         "'shape' is not an array"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, HR_ERR_FORMAT,
         "shape[0] is not a non-negative integer"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2,1.5],\"data_offsets\":[0,12]}}", 12,
         HR_ERR_FORMAT, "shape[1]"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8,
         HR_ERR_FORMAT, "shape[0]"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,8]}}", 8,
         HR_ERR_FORMAT, "shape[0]"},
        {"{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
         HR_ERR_UNSUPPORTED, "'w' has 9 dimensions"},
        {"{\"w\":{\"dtype\":\"U8\",\"shape\":[9007199254740992,9007199254740992],"
         "\"data_offsets\":[0,0]}}",
         0, HR_ERR_FORMAT, "element count of the shape overflows"},
        {"{\"w\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}", 0,
         HR_ERR_FORMAT, "shape[0]"},
        {"{\"w\":{\"dtype\":\"F64\",\"shape\":[2251799813685248,1024],\"data_offsets\":[0,0]}}",
         0, HR_ERR_FORMAT, "byte size of the shape overflows"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, HR_ERR_FORMAT,
         "'data_offsets' must be [begin, end]"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8, HR_ERR_FORMAT,
         "'data_offsets' must be"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{\"a\":0}}}", 4,
         HR_ERR_FORMAT, "'data_offsets' must be"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4, HR_ERR_FORMAT,
         "'data_offsets' must be"},
        {"{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4, HR_ERR_FORMAT,
         "'w': data_offsets [4, 0] end before they begin"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, HR_ERR_FORMAT,
         "'w' ends at byte 16 of the data section, which has 8 bytes"},
        {"{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[9,9]}}", 8, HR_ERR_FORMAT,
         "ends at byte 9"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,16]}}", 24,
         HR_ERR_FORMAT, "'w': data_offsets span 16 bytes but shape [2, 3] of F32 needs 24"},
        {"{\"w\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, HR_ERR_FORMAT,
         "needs 4"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         12, HR_ERR_FORMAT, "'a' [0, 8) and 'b' [4, 12) overlap"},
        /* overlap found past a zero-size tensor and out of header order */
        {"{\"c\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[6,8]},"
         "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[5,5]},"
         "\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}",
         8, HR_ERR_FORMAT, "overlap"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}",
         8, HR_ERR_FORMAT, "tensor 'a' appears twice"},
        {"{\"__metadata__\":[1],\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
         1, HR_ERR_FORMAT, "'__metadata__' must be an object"},
        {"{\"__metadata__\":{\"format\":null}}", 0, HR_ERR_FORMAT,
         "'__metadata__' entry 'format' is not a string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bad_case *c = &cases[i];
        size_t size;
        uint8_t *buf = make_st(c->header, NULL, c->n_data, &size);
        hr_error err = {0};
        st_set *s = NULL;
        hr_status r = st_parse(buf, size, "bad.safetensors", &s, &err);
        CHECK_MSG(r == c->want && s == NULL, "case %zu: want %s, got %s (%s)", i,
                  hr_status_name(c->want), hr_status_name(r), err.msg);
        CHECK_MSG(strstr(err.msg, c->msg) && strstr(err.msg, "bad.safetensors"),
                  "case %zu: message '%s' lacks '%s'", i, err.msg, c->msg);
        if (r == HR_OK)
            st_free(s);
        free(buf);
    }

    /* header length against the file and the 100 MB cap */
    uint8_t hdr[16] = {0};
    hr_error err = {0};
    st_set *s = NULL;
    hdr[0] = 9; /* 9 bytes of header claimed, 8 present */
    CHECK(st_parse(hdr, 16, "h.safetensors", &s, &err) == HR_ERR_FORMAT &&
          strstr(err.msg, "only 8 bytes follow"));
    memset(hdr, 0xff, 8);
    CHECK(st_parse(hdr, 16, "h.safetensors", &s, &err) == HR_ERR_FORMAT &&
          strstr(err.msg, "100 MB"));
    memset(hdr, 0, 8);
    hdr[3] = 0x06; /* 100663296 bytes: just over the cap */
    CHECK(st_parse(hdr, 16, "h.safetensors", &s, &err) == HR_ERR_FORMAT &&
          strstr(err.msg, "100 MB"));
    memcpy(hdr, "GGUF\3\0\0\0", 8);
    CHECK(st_parse(hdr, 16, "h.gguf", &s, &err) == HR_ERR_FORMAT &&
          strstr(err.msg, "h.gguf: this is a GGUF file"));
    CHECK(st_parse(hdr, 7, "h.safetensors", &s, &err) == HR_ERR_FORMAT &&
          strstr(err.msg, "too short"));
    CHECK(s == NULL);
}

typedef struct {
    const char *file;
    hr_status want;
    const char *msg;
} fixture_case;

static void test_corrupt_fixtures(void) {
    static const fixture_case cases[] = {
        {"st-truncated.safetensors", HR_ERR_FORMAT, "truncated download"},
        {"st-header-too-long.safetensors", HR_ERR_FORMAT, "header length 1000"},
        {"st-header-huge.safetensors", HR_ERR_FORMAT, "100 MB"},
        {"st-short.safetensors", HR_ERR_FORMAT, "too short"},
        {"st-not-json.safetensors", HR_ERR_FORMAT, "not valid JSON"},
        {"st-trailing-garbage.safetensors", HR_ERR_FORMAT, "after the JSON"},
        {"st-root-array.safetensors", HR_ERR_FORMAT, "not an object"},
        {"st-offsets-outside.safetensors", HR_ERR_FORMAT, "'w' ends at byte 16"},
        {"st-shape-mismatch.safetensors", HR_ERR_FORMAT, "'w': data_offsets span 16"},
        {"st-bad-dtype.safetensors", HR_ERR_UNSUPPORTED, "'w': dtype 'I64'"},
        {"st-overlap.safetensors", HR_ERR_FORMAT, "'w1' [0, 8) and 'w2' [4, 12) overlap"},
        {"st-dup-name.safetensors", HR_ERR_FORMAT, "'w' appears twice"},
        {"st-negative-dim.safetensors", HR_ERR_FORMAT, "'w': shape[0]"},
        {"st-missing-offsets.safetensors", HR_ERR_FORMAT, "'w': missing field 'data_offsets'"},
        {"st-offsets-reversed.safetensors", HR_ERR_FORMAT, "end before they begin"},
        {"st-elem-overflow.safetensors", HR_ERR_FORMAT, "overflows"},
        {"st-metadata-bad.safetensors", HR_ERR_FORMAT, "'__metadata__' entry 'format'"},
        {"st-too-many-dims.safetensors", HR_ERR_UNSUPPORTED, "9 dimensions"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", TEST_PATH("tests/fixtures/corrupt"), cases[i].file);
        hr_error err = {0};
        st_set *s = NULL;
        hr_status r = st_open_file(path, &s, &err);
        CHECK_MSG(r == cases[i].want && s == NULL, "%s: want %s, got %s (%s)", cases[i].file,
                  hr_status_name(cases[i].want), hr_status_name(r), err.msg);
        CHECK_MSG(strstr(err.msg, cases[i].msg) && strstr(err.msg, cases[i].file),
                  "%s: message '%s' lacks '%s'", cases[i].file, err.msg, cases[i].msg);
        if (r == HR_OK)
            st_free(s);
    }
}

/* ---------------------------------------------------------------- Python-written */

static void test_python_file(void) {
    const char *path = TEST_PATH("tests/fixtures/st-small.safetensors");
    hr_error err = {0};
    st_set *s = NULL;
    CHECK_OK(st_open_file(path, &s, &err), &err);
    if (!s)
        return;
    CHECK_EQ_I64(s->n_files, 1);
    CHECK_EQ_I64(s->n_tensors, 10);

    const st_tensor *t = st_find(s, "a.f32");
    CHECK(t && t->dtype == HR_DTYPE_F32 && t->n_dims == 2 && t->shape[0] == 2 &&
          t->shape[1] == 3 && t->n_bytes == 24);
    if (t) {
        float v[6];
        memcpy(v, t->data, sizeof v);
        for (int i = 0; i < 6; i++)
            CHECK(v[i] == 0.5f * (float)i);
    }
    t = st_find(s, "b.f16");
    CHECK(t && t->dtype == HR_DTYPE_F16 && t->n_bytes == 6);
    if (t) {
        uint16_t h[3];
        memcpy(h, t->data, sizeof h);
        CHECK(hr_f16_to_f32(h[0]) == 1.0f && hr_f16_to_f32(h[1]) == -2.0f &&
              hr_f16_to_f32(h[2]) == 0.5f);
    }
    t = st_find(s, "c.bf16");
    CHECK(t && t->dtype == HR_DTYPE_BF16 && t->ne[0] == 2 && t->ne[1] == 2);
    if (t) {
        uint16_t h[4];
        memcpy(h, t->data, sizeof h);
        CHECK(hr_bf16_to_f32(h[0]) == 1.0f && hr_bf16_to_f32(h[3]) == -4.0f);
    }
    t = st_find(s, "d.f64");
    CHECK(t && t->dtype == HR_DTYPE_F64 && t->n_bytes == 16);
    if (t) {
        double d[2];
        memcpy(d, t->data, sizeof d);
        CHECK(d[0] == 1.5 && d[1] == -2.25);
    }
    t = st_find(s, "e.i8");
    CHECK(t && t->dtype == HR_DTYPE_I8 && t->n_bytes == 4 && (int8_t)t->data[2] == -3);
    t = st_find(s, "f.u8");
    CHECK(t && t->dtype == HR_DTYPE_U8 && t->n_bytes == 3 && t->data[2] == 255);
    t = st_find(s, "g.i16");
    CHECK(t && t->dtype == HR_DTYPE_I16 && t->n_bytes == 4);
    if (t) {
        int16_t v[2];
        memcpy(v, t->data, sizeof v);
        CHECK(v[0] == -300 && v[1] == 300);
    }
    t = st_find(s, "h.i32");
    CHECK(t && t->dtype == HR_DTYPE_I32 && t->n_bytes == 8);
    if (t) {
        int32_t v[2];
        memcpy(v, t->data, sizeof v);
        CHECK(v[0] == -70000 && v[1] == 70000);
    }
    t = st_find(s, "i.empty");
    CHECK(t && t->n_bytes == 0 && t->n_dims == 2 && t->shape[0] == 0 && t->shape[1] == 4);
    t = st_find(s, "j.scalar");
    CHECK(t && t->n_dims == 0 && t->n_bytes == 4);
    if (t) {
        float v;
        memcpy(&v, t->data, sizeof v);
        CHECK(v == 3.25f);
    }
    st_free(s);

    /* every truncation of the reference writer's file fails cleanly */
    size_t size;
    uint8_t *buf = (uint8_t *)test_read_file(path, &size, 1);
    int bad = 0;
    for (size_t n = 0; n < size; n++) {
        st_set *u = NULL;
        if (st_parse(buf, n, "st-small", &u, &err) != HR_ERR_FORMAT || u) {
            bad++;
            st_free(u);
        }
    }
    CHECK_EQ_I64(bad, 0);
    /* and every single-byte change of the header either parses or fails
     * cleanly (ASan is the judge here) */
    uint64_t hl = 0;
    memcpy(&hl, buf, 8);
    for (size_t i = 8; i < 8 + hl && i < size; i++) {
        uint8_t keep = buf[i];
        static const uint8_t subs[] = {'"', '}', '9', '-', ',', '[', 0, 0xff};
        for (size_t k = 0; k < sizeof subs; k++) {
            buf[i] = subs[k];
            st_set *u = NULL;
            hr_status r = st_parse(buf, size, "st-small", &u, &err);
            CHECK_MSG(r == HR_OK || (u == NULL && err.msg[0] != '\0'), "byte %zu", i);
            st_free(u);
        }
        buf[i] = keep;
    }
    free(buf);
}

/* ---------------------------------------------------------------- folders */

static void test_sharded_fixture(void) {
    hr_error err = {0};
    st_set *s = NULL;
    CHECK_OK(st_open_dir(TEST_PATH("tests/fixtures/st-sharded"), &s, &err), &err);
    if (!s)
        return;
    CHECK_EQ_I64(s->n_files, 2);
    CHECK_EQ_I64(s->n_tensors, 3);
    CHECK(strstr(s->files[0].path, "model-00001-of-00002.safetensors") != NULL);
    const st_tensor *e = st_find(s, "model.embed_tokens.weight");
    const st_tensor *n = st_find(s, "model.norm.weight");
    const st_tensor *h = st_find(s, "lm_head.weight");
    CHECK(e && e->file_index == 0 && e->dtype == HR_DTYPE_BF16 && e->shape[0] == 4 &&
          e->shape[1] == 2);
    CHECK(n && n->file_index == 0 && n->dtype == HR_DTYPE_F32 && n->n_bytes == 8);
    CHECK(h && h->file_index == 1 && h->n_bytes == 16);
    if (e && h) {
        uint16_t a[8], b[8];
        memcpy(a, e->data, sizeof a);
        memcpy(b, h->data, sizeof b);
        for (int i = 0; i < 8; i++)
            CHECK(hr_bf16_to_f32(a[i]) == (float)i && hr_bf16_to_f32(b[i]) == -(float)i);
        CHECK(e->data >= s->files[0].data && e->data < s->files[0].data + s->files[0].size);
        CHECK(h->data >= s->files[1].data && h->data < s->files[1].data + s->files[1].size);
    }
    st_free(s);

    /* the same shard opened alone */
    CHECK_OK(st_open_file(TEST_PATH("tests/fixtures/st-sharded/model-00002-of-00002.safetensors"),
                          &s, &err),
             &err);
    CHECK(s && s->n_tensors == 1 && s->n_files == 1);
    st_free(s);
}

typedef struct {
    const char *index;
    hr_status want;
    const char *msg;
} index_case;

static const char *const shard_a =
    "{\"x\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
    "\"y\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]}}";
static const char *const shard_b =
    "{\"z\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}";

static void test_index_errors(void) {
    const char *dir = TMP_DIR "/idx";
    make_dir(TMP_DIR);
    make_dir(dir);
    write_st(TMP_DIR "/idx/a.safetensors", shard_a, 6);
    write_st(TMP_DIR "/idx/b.safetensors", shard_b, 4);
    write_st(TMP_DIR "/idx/dup.safetensors", shard_b, 4); /* holds z too */
    write_file(TMP_DIR "/outside.safetensors", "", 0);

    static const index_case cases[] = {
        {"{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"a.safetensors\","
         "\"z\":\"b.safetensors\"}}",
         HR_OK, ""},
        /* extra keys (metadata) and tensors the map leaves out are fine */
        {"{\"metadata\":{\"total_size\":10},\"weight_map\":{\"x\":\"a.safetensors\"}}", HR_OK,
         ""},
        {"{\"weight_map\":{\"x\":\"a.safetensors\",\"w\":\"a.safetensors\"}}", HR_ERR_FORMAT,
         "tensor 'w' is mapped to a.safetensors, which does not contain it"},
        {"{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"b.safetensors\"}}",
         HR_ERR_FORMAT, "tensor 'y' is mapped to b.safetensors but found in a.safetensors"},
        {"{\"weight_map\":{\"x\":\"../outside.safetensors\"}}", HR_ERR_FORMAT,
         "'../outside.safetensors', which is not a plain file name"},
        {"{\"weight_map\":{\"x\":\"/etc/passwd\"}}", HR_ERR_FORMAT, "not a plain file name"},
        {"{\"weight_map\":{\"x\":\"sub/a.safetensors\"}}", HR_ERR_FORMAT, "not a plain"},
        {"{\"weight_map\":{\"x\":\"..\"}}", HR_ERR_FORMAT, "not a plain"},
        {"{\"weight_map\":{\"x\":\"\"}}", HR_ERR_FORMAT, "not a plain"},
        {"{\"weight_map\":{\"x\":\"missing.safetensors\"}}", HR_ERR_IO, "missing.safetensors"},
        {"{\"weight_map\":{\"x\":3}}", HR_ERR_FORMAT, "entry for tensor 'x' is not a file name"},
        {"{\"weight_map\":{}}", HR_ERR_FORMAT, "'weight_map' is empty"},
        {"{\"weight_map\":[]}", HR_ERR_FORMAT, "'weight_map' is not an object"},
        {"{\"metadata\":{}}", HR_ERR_FORMAT, "'weight_map' is missing"},
        {"{\"weight_map\":{\"x\":\"a.safetensors\"},\"weight_map\":{}}", HR_ERR_FORMAT,
         "'weight_map' appears twice"},
        {"{\"weight_map\":{\"x\":\"a.safetensors\",\"x\":\"a.safetensors\"}}", HR_ERR_FORMAT,
         "tensor 'x' appears twice in weight_map"},
        {"{\"weight_map\":", HR_ERR_FORMAT, "index is not valid JSON"},
        /* z in both b and dup: names must be unique across shards */
        {"{\"weight_map\":{\"z\":\"b.safetensors\",\"q\":\"dup.safetensors\"}}", HR_ERR_FORMAT,
         "tensor 'z' appears in both"},
    };
    const char *index_path = TMP_DIR "/idx/model.safetensors.index.json";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_file(index_path, cases[i].index, strlen(cases[i].index));
        hr_error err = {0};
        st_set *s = NULL;
        hr_status r = st_open_dir(dir, &s, &err);
        CHECK_MSG(r == cases[i].want, "index case %zu: want %s, got %s (%s)", i,
                  hr_status_name(cases[i].want), hr_status_name(r), err.msg);
        if (r == HR_OK) {
            CHECK(s != NULL);
            st_free(s);
        } else {
            CHECK(s == NULL);
            CHECK_MSG(strstr(err.msg, cases[i].msg) != NULL, "index case %zu: '%s' lacks '%s'",
                      i, err.msg, cases[i].msg);
        }
    }

    /* a good index: shards opened once each, in name order */
    const char *good = "{\"weight_map\":{\"z\":\"b.safetensors\",\"x\":\"a.safetensors\","
                       "\"y\":\"a.safetensors\"}}";
    write_file(index_path, good, strlen(good));
    hr_error err = {0};
    st_set *s = NULL;
    CHECK_OK(st_open_dir(dir, &s, &err), &err);
    if (s) {
        CHECK_EQ_I64(s->n_files, 2);
        const st_tensor *z = st_find(s, "z"), *y = st_find(s, "y");
        CHECK(z && z->file_index == 1 && y && y->file_index == 0 && y->n_bytes == 2);
        st_free(s);
    }

    /* allocation failures, one at a time, until the open succeeds */
    int64_t n_fail = 0;
    for (int64_t n = 1; n < 1000; n++) {
        hr_alloc_fail_at(n);
        s = NULL;
        hr_status r = st_open_dir(dir, &s, &err);
        int fired = hr_alloc_fault_fired();
        hr_alloc_fail_at(0);
        if (!fired) {
            CHECK_OK(r, &err);
            st_free(s);
            break;
        }
        n_fail++;
        CHECK_MSG(r == HR_ERR_NOMEM && s == NULL, "fail at %lld: %s %s", (long long)n,
                  hr_status_name(r), err.msg);
        if (r == HR_OK)
            st_free(s);
    }
    CHECK(n_fail > 5);

    static const char *const files[] = {"a.safetensors", "b.safetensors", "dup.safetensors",
                                        "model.safetensors.index.json"};
    remove_dir(dir, files, 4);
    unlink(TMP_DIR "/outside.safetensors");
}

static void test_dir_without_index(void) {
    hr_error err = {0};
    st_set *s = NULL;

    /* all *.safetensors, sorted by name; hidden and other files skipped */
    const char *d1 = TMP_DIR "/multi";
    make_dir(TMP_DIR);
    make_dir(d1);
    write_st(TMP_DIR "/multi/b.safetensors", shard_b, 4);
    write_st(TMP_DIR "/multi/a.safetensors", shard_a, 6);
    write_file(TMP_DIR "/multi/._a.safetensors", "junk", 4);
    write_file(TMP_DIR "/multi/notes.txt", "hi", 2);
    CHECK_OK(st_open_dir(d1, &s, &err), &err);
    if (s) {
        CHECK_EQ_I64(s->n_files, 2);
        CHECK(strstr(s->files[0].path, "/a.safetensors") && strstr(s->files[1].path, "/b."));
        CHECK(st_find(s, "z") && st_find(s, "z")->file_index == 1);
        st_free(s);
    }
    /* with model.safetensors present, only it is read */
    write_st(TMP_DIR "/multi/model.safetensors", shard_b, 4);
    CHECK_OK(st_open_dir(d1, &s, &err), &err);
    if (s) {
        CHECK_EQ_I64(s->n_files, 1);
        CHECK(strstr(s->files[0].path, "model.safetensors") != NULL);
        st_free(s);
    }
    s = NULL;
    /* two files holding the same tensor */
    unlink(TMP_DIR "/multi/model.safetensors");
    write_st(TMP_DIR "/multi/c.safetensors", shard_b, 4);
    CHECK(st_open_dir(d1, &s, &err) == HR_ERR_FORMAT && strstr(err.msg, "'z' appears in both"));
    static const char *const files[] = {"a.safetensors", "b.safetensors", "c.safetensors",
                                        "._a.safetensors", "notes.txt"};
    remove_dir(d1, files, 5);

    /* an empty folder, a missing folder, a missing file */
    const char *d2 = TMP_DIR "/empty";
    make_dir(d2);
    CHECK(st_open_dir(d2, &s, &err) == HR_ERR_IO && strstr(err.msg, "no .safetensors"));
    rmdir(d2);
    CHECK(st_open_dir(TMP_DIR "/nope", &s, &err) == HR_ERR_IO);
    CHECK(st_open_file(TMP_DIR "/nope.safetensors", &s, &err) == HR_ERR_IO &&
          strstr(err.msg, "nope.safetensors"));
    CHECK(s == NULL);
    rmdir(TMP_DIR);
}

int main(void) {
    test_valid_buffer();
    test_edge_valid();
    test_corrupt_buffers();
    test_corrupt_fixtures();
    test_python_file();
    test_sharded_fixture();
    test_index_errors();
    test_dir_without_index();
    TEST_END();
}
