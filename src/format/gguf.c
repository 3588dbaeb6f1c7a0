/*
 * gguf.c — GGUF v2/v3 reader: parse, validate and index a file or buffer.
 *
 * One forward pass with a bounds-checked cursor reads the header, the n_kv
 * key/values and the n_tensors tensor infos; then the checks that need the
 * whole table run: unique keys and names, general.alignment, every tensor's
 * bytes inside the file, no two tensors overlapping.
 *
 * Hostile input: every count is compared with what the remaining bytes could
 * hold before anything is allocated (a key/value needs >= 14 bytes, a tensor
 * info >= 33, a string 8, a nested array 12), so whatever the header claims,
 * a parse allocates at most a small multiple of the file size; every loop
 * consumes input, so time is linear in the file (duplicates are found by
 * sorting, n log n, not by comparing all pairs).
 *
 * Values are not copied: strings and numeric arrays point into the buffer and
 * are decoded byte by byte on access, so host alignment does not matter; only
 * keys, tensor names and string-array tables are allocated.
 * Rejected: reading through stdio (a copy of every byte, and the fuzzer needs
 * a buffer API), and reading big-endian files (no writer we meet produces
 * them; we detect one and say so).
 */
#include "format/gguf.h"

#include "util/alloc.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

/* Smallest encodings, used to bound counts before allocating: a key/value is
 * u64 key length + >= 1 key byte + u32 type + >= 1 value byte; a tensor info
 * is u64 name length + >= 1 name byte + u32 n_dims + one u64 dim + u32 type +
 * u64 offset; a nested array element is its u32 type + u64 count. */
#define MIN_KV_BYTES 14u
#define MIN_TENSOR_INFO_BYTES 33u
#define MIN_NESTED_ARRAY_BYTES 12u
/* No writer we know nests arrays at all; a few levels keep the recursion
 * that skips them shallow. */
#define MAX_ARRAY_DEPTH 4

typedef struct {
    const uint8_t *buf;
    uint64_t size;
    uint64_t pos;
    const char *name; /* file name for messages */
    char where[320];  /* "key 'x'", "tensor 'y'"...: where we are, for messages */
    hr_error *err;
} cursor;

static const char *const type_names[GGUF_TYPE_COUNT] = {
    [GGUF_TYPE_UINT8] = "uint8",     [GGUF_TYPE_INT8] = "int8",
    [GGUF_TYPE_UINT16] = "uint16",   [GGUF_TYPE_INT16] = "int16",
    [GGUF_TYPE_UINT32] = "uint32",   [GGUF_TYPE_INT32] = "int32",
    [GGUF_TYPE_FLOAT32] = "float32", [GGUF_TYPE_BOOL] = "bool",
    [GGUF_TYPE_STRING] = "string",   [GGUF_TYPE_ARRAY] = "array",
    [GGUF_TYPE_UINT64] = "uint64",   [GGUF_TYPE_INT64] = "int64",
    [GGUF_TYPE_FLOAT64] = "float64",
};

static const uint8_t type_sizes[GGUF_TYPE_COUNT] = {
    [GGUF_TYPE_UINT8] = 1,   [GGUF_TYPE_INT8] = 1,    [GGUF_TYPE_UINT16] = 2,
    [GGUF_TYPE_INT16] = 2,   [GGUF_TYPE_UINT32] = 4,  [GGUF_TYPE_INT32] = 4,
    [GGUF_TYPE_FLOAT32] = 4, [GGUF_TYPE_BOOL] = 1,    [GGUF_TYPE_UINT64] = 8,
    [GGUF_TYPE_INT64] = 8,   [GGUF_TYPE_FLOAT64] = 8,
};

const char *gguf_type_name(gguf_type t) {
    return (unsigned)t < GGUF_TYPE_COUNT ? type_names[t] : "invalid";
}

uint64_t gguf_type_size(gguf_type t) {
    return (unsigned)t < GGUF_TYPE_COUNT ? type_sizes[t] : 0;
}

/* ---------------------------------------------------------------- decoding */

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p) {
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static bool is_uint(gguf_type t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 ||
           t == GGUF_TYPE_UINT64;
}

static bool is_sint(gguf_type t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}

static bool is_float(gguf_type t) {
    return t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64;
}

/* A little-endian scalar of type t: unsigned types and bool into *u, signed
 * into *s, floats into *d; the other two views are zeroed. */
static void decode_scalar(gguf_type t, const uint8_t *p, uint64_t *u, int64_t *s, double *d) {
    *u = 0;
    *s = 0;
    *d = 0;
    uint64_t bits = 0;
    for (uint64_t i = 0; i < type_sizes[t]; i++)
        bits |= (uint64_t)p[i] << (8 * i);
    switch (t) {
    case GGUF_TYPE_INT8: *s = (int8_t)bits; break;
    case GGUF_TYPE_INT16: *s = (int16_t)bits; break;
    case GGUF_TYPE_INT32: *s = (int32_t)bits; break;
    case GGUF_TYPE_INT64: *s = (int64_t)bits; break;
    case GGUF_TYPE_FLOAT32: {
        uint32_t b32 = (uint32_t)bits;
        float f;
        memcpy(&f, &b32, sizeof f);
        *d = f;
        break;
    }
    case GGUF_TYPE_FLOAT64: memcpy(d, &bits, sizeof *d); break;
    default: *u = bits; break;
    }
}

/* ---------------------------------------------------------------- cursor */

static uint64_t left(const cursor *c) {
    return c->size - c->pos;
}

static hr_status need(cursor *c, uint64_t n, const char *what) {
    if (n <= left(c))
        return HR_OK;
    return hr_err_set(c->err, HR_ERR_FORMAT,
                      "%s: truncated in %s: %s at byte %" PRIu64 " needs %" PRIu64
                      " bytes but only %" PRIu64 " remain (file has %" PRIu64
                      " bytes; incomplete download?)",
                      c->name, c->where, what, c->pos, n, left(c), c->size);
}

static hr_status rd_u32(cursor *c, uint32_t *out, const char *what) {
    HR_TRY(need(c, 4, what));
    *out = le32(c->buf + c->pos);
    c->pos += 4;
    return HR_OK;
}

static hr_status rd_u64(cursor *c, uint64_t *out, const char *what) {
    HR_TRY(need(c, 8, what));
    *out = le64(c->buf + c->pos);
    c->pos += 8;
    return HR_OK;
}

/* A GGUF string: u64 length, then the bytes; max_bytes caps the length. */
static hr_status rd_str(cursor *c, uint64_t max_bytes, const char *what, gguf_str *out) {
    uint64_t len = 0;
    uint64_t at = c->pos;
    HR_TRY(rd_u64(c, &len, what));
    if (len > max_bytes)
        return hr_err_set(c->err, HR_ERR_FORMAT,
                          "%s: %s: %s at byte %" PRIu64 " claims %" PRIu64
                          " bytes, more than the %" PRIu64 " allowed (corrupt file?)",
                          c->name, c->where, what, at, len, max_bytes);
    HR_TRY(need(c, len, what));
    out->ptr = (const char *)(c->buf + c->pos);
    out->len = len;
    c->pos += len;
    return HR_OK;
}

/* Keys and tensor names become C strings: refuse empty ones and embedded
 * NULs, which would make two different names compare equal. */
static hr_status copy_name(cursor *c, const gguf_str *s, const char *what, char **out) {
    if (s->len == 0)
        return hr_err_set(c->err, HR_ERR_FORMAT, "%s: %s: empty %s", c->name, c->where, what);
    if (memchr(s->ptr, '\0', (size_t)s->len))
        return hr_err_set(c->err, HR_ERR_FORMAT, "%s: %s: %s contains a NUL byte", c->name,
                          c->where, what);
    *out = hr_strndup(s->ptr, (size_t)s->len);
    if (!*out)
        return hr_err_set(c->err, HR_ERR_NOMEM, "%s: out of memory copying a %s", c->name, what);
    return HR_OK;
}

/* ---------------------------------------------------------------- values */

static hr_status check_type(cursor *c, uint32_t t, const char *what) {
    if (t < GGUF_TYPE_COUNT)
        return HR_OK;
    return hr_err_set(c->err, HR_ERR_FORMAT,
                      "%s: %s: %s %" PRIu32 " is not a GGUF value type (expected 0..%d)",
                      c->name, c->where, what, t, GGUF_TYPE_COUNT - 1);
}

static hr_status check_bools(cursor *c, const uint8_t *p, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        if (p[i] > 1)
            return hr_err_set(c->err, HR_ERR_FORMAT,
                              "%s: %s: bool at byte %" PRIu64 " is %u, expected 0 or 1",
                              c->name, c->where, (uint64_t)(p + i - c->buf), (unsigned)p[i]);
    }
    return HR_OK;
}

/* Bounds an array count by the remaining bytes before anything walks or
 * allocates for it. */
static hr_status check_count(cursor *c, uint64_t n, uint64_t min_elem_bytes, gguf_type t) {
    if (n <= left(c) / min_elem_bytes)
        return HR_OK;
    return hr_err_set(c->err, HR_ERR_FORMAT,
                      "%s: %s: array of %" PRIu64 " %s needs at least %" PRIu64
                      " bytes per element but only %" PRIu64 " bytes remain (corrupt file?)",
                      c->name, c->where, n, gguf_type_name(t), min_elem_bytes, left(c));
}

/* Walks over one array value (type, count, elements) without keeping it:
 * used for nested arrays, which nothing in headroom reads. */
static hr_status skip_array(cursor *c, int depth) {
    if (depth > MAX_ARRAY_DEPTH)
        return hr_err_set(c->err, HR_ERR_FORMAT,
                          "%s: %s: arrays nested more than %d deep at byte %" PRIu64,
                          c->name, c->where, MAX_ARRAY_DEPTH, c->pos);
    uint32_t t = 0;
    uint64_t n = 0;
    HR_TRY(rd_u32(c, &t, "array element type"));
    HR_TRY(check_type(c, t, "array element type"));
    HR_TRY(rd_u64(c, &n, "array length"));
    if (t == GGUF_TYPE_STRING) {
        HR_TRY(check_count(c, n, 8, (gguf_type)t));
        for (uint64_t i = 0; i < n; i++) {
            gguf_str s;
            HR_TRY(rd_str(c, GGUF_MAX_STR_BYTES, "array string", &s));
        }
    } else if (t == GGUF_TYPE_ARRAY) {
        HR_TRY(check_count(c, n, MIN_NESTED_ARRAY_BYTES, (gguf_type)t));
        for (uint64_t i = 0; i < n; i++)
            HR_TRY(skip_array(c, depth + 1));
    } else {
        HR_TRY(check_count(c, n, type_sizes[t], (gguf_type)t));
        if (t == GGUF_TYPE_BOOL)
            HR_TRY(check_bools(c, c->buf + c->pos, n));
        c->pos += n * type_sizes[t];
    }
    return HR_OK;
}

static hr_status rd_array(cursor *c, gguf_kv *kv) {
    uint32_t t = 0;
    uint64_t n = 0;
    HR_TRY(rd_u32(c, &t, "array element type"));
    HR_TRY(check_type(c, t, "array element type"));
    HR_TRY(rd_u64(c, &n, "array length"));
    kv->arr_type = (gguf_type)t;
    if (t == GGUF_TYPE_STRING) {
        HR_TRY(check_count(c, n, 8, kv->arr_type));
        if (n > 0) {
            /* n <= remaining / 8, so this table is at most 2x the file */
            kv->arr_str = hr_calloc((size_t)n, sizeof *kv->arr_str);
            if (!kv->arr_str)
                return hr_err_set(c->err, HR_ERR_NOMEM,
                                  "%s: %s: out of memory for %" PRIu64 " strings", c->name,
                                  c->where, n);
        }
        kv->arr_n = n;
        for (uint64_t i = 0; i < n; i++)
            HR_TRY(rd_str(c, GGUF_MAX_STR_BYTES, "array string", &kv->arr_str[i]));
    } else if (t == GGUF_TYPE_ARRAY) {
        HR_TRY(check_count(c, n, MIN_NESTED_ARRAY_BYTES, kv->arr_type));
        kv->arr_n = n;
        for (uint64_t i = 0; i < n; i++)
            HR_TRY(skip_array(c, 2));
    } else {
        HR_TRY(check_count(c, n, type_sizes[t], kv->arr_type));
        kv->arr_n = n;
        kv->arr_data = c->buf + c->pos;
        if (t == GGUF_TYPE_BOOL)
            HR_TRY(check_bools(c, kv->arr_data, n));
        c->pos += n * type_sizes[t];
    }
    return HR_OK;
}

static hr_status rd_value(cursor *c, gguf_kv *kv) {
    if (kv->type == GGUF_TYPE_STRING)
        return rd_str(c, GGUF_MAX_STR_BYTES, "string value", &kv->v.str);
    if (kv->type == GGUF_TYPE_ARRAY)
        return rd_array(c, kv);
    uint64_t n_bytes = type_sizes[kv->type];
    HR_TRY(need(c, n_bytes, "value"));
    const uint8_t *p = c->buf + c->pos;
    if (kv->type == GGUF_TYPE_BOOL)
        HR_TRY(check_bools(c, p, 1));
    c->pos += n_bytes;
    uint64_t u;
    int64_t i;
    double d;
    decode_scalar(kv->type, p, &u, &i, &d);
    if (is_sint(kv->type))
        kv->v.i64 = i;
    else if (is_float(kv->type))
        kv->v.f64 = d;
    else
        kv->v.u64 = u;
    return HR_OK;
}

/* ---------------------------------------------------------------- header */

static uint32_t bswap32(uint32_t v) {
    return (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
}

static hr_status rd_header(cursor *c, gguf_file *f) {
    snprintf(c->where, sizeof c->where, "the header");
    HR_TRY(need(c, 4, "magic"));
    if (memcmp(c->buf, "GGUF", 4) != 0) {
        const uint8_t *m = c->buf;
        return hr_err_set(c->err, HR_ERR_FORMAT,
                          "%s: not a GGUF file: magic is %02x %02x %02x %02x, expected "
                          "47 47 55 46 (\"GGUF\")",
                          c->name, m[0], m[1], m[2], m[3]);
    }
    c->pos = 4;
    uint32_t version = 0;
    HR_TRY(rd_u32(c, &version, "version"));
    if (version == 1)
        return hr_err_set(c->err, HR_ERR_UNSUPPORTED,
                          "%s: GGUF version 1 (32-bit counts, 2023 pre-release) is not "
                          "supported, expected 2 or 3: re-convert the model with a current "
                          "llama.cpp",
                          c->name);
    if ((version & 0xffffu) == 0 && bswap32(version) >= 1 && bswap32(version) <= 3)
        return hr_err_set(c->err, HR_ERR_UNSUPPORTED,
                          "%s: big-endian GGUF (version field 0x%08" PRIx32
                          " is version %" PRIu32 " byte-swapped): headroom reads "
                          "little-endian files only; convert the model without --bigendian",
                          c->name, version, bswap32(version));
    if (version == 0 || version > 3)
        return hr_err_set(c->err, version > 3 ? HR_ERR_UNSUPPORTED : HR_ERR_FORMAT,
                          "%s: GGUF version %" PRIu32 ", expected 2 or 3", c->name, version);
    f->version = version;
    uint64_t n_tensors = 0, n_kv = 0;
    HR_TRY(rd_u64(c, &n_tensors, "tensor count"));
    HR_TRY(rd_u64(c, &n_kv, "key/value count"));
    /* Bound both counts before the tables are allocated. */
    uint64_t room = left(c);
    if (n_kv > room / MIN_KV_BYTES ||
        n_tensors > (room - n_kv * MIN_KV_BYTES) / MIN_TENSOR_INFO_BYTES)
        return hr_err_set(c->err, HR_ERR_FORMAT,
                          "%s: header claims %" PRIu64 " key/values and %" PRIu64
                          " tensors, but the %" PRIu64 " bytes after the header cannot hold "
                          "them (a key/value takes at least %u bytes, a tensor info %u; "
                          "truncated or corrupt file?)",
                          c->name, n_kv, n_tensors, room, MIN_KV_BYTES, MIN_TENSOR_INFO_BYTES);
    if (n_kv > 0) {
        f->kv = hr_calloc((size_t)n_kv, sizeof *f->kv);
        if (!f->kv)
            return hr_err_set(c->err, HR_ERR_NOMEM, "%s: out of memory for %" PRIu64
                              " key/values", c->name, n_kv);
    }
    f->n_kv = n_kv;
    if (n_tensors > 0) {
        f->tensors = hr_calloc((size_t)n_tensors, sizeof *f->tensors);
        if (!f->tensors)
            return hr_err_set(c->err, HR_ERR_NOMEM, "%s: out of memory for %" PRIu64
                              " tensors", c->name, n_tensors);
    }
    f->n_tensors = n_tensors;
    return HR_OK;
}

/* ---------------------------------------------------------------- tables */

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorts names (a scratch table of n pointers) and reports the first name
 * that repeats. */
static hr_status check_unique(cursor *c, char **names, uint64_t n, const char *what) {
    if (n < 2)
        return HR_OK;
    qsort(names, (size_t)n, sizeof *names, cmp_str_ptr);
    for (uint64_t i = 1; i < n; i++) {
        if (strcmp(names[i - 1], names[i]) == 0)
            return hr_err_set(c->err, HR_ERR_FORMAT, "%s: duplicate %s '%s'", c->name, what,
                              names[i]);
    }
    return HR_OK;
}

static hr_status rd_kvs(cursor *c, gguf_file *f) {
    for (uint64_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        gguf_str key;
        snprintf(c->where, sizeof c->where, "key/value %" PRIu64, i);
        HR_TRY(rd_str(c, GGUF_MAX_KEY_BYTES, "key", &key));
        HR_TRY(copy_name(c, &key, "key", &kv->key));
        snprintf(c->where, sizeof c->where, "key '%.200s'", kv->key);
        uint32_t t = 0;
        HR_TRY(rd_u32(c, &t, "value type"));
        HR_TRY(check_type(c, t, "value type"));
        kv->type = (gguf_type)t;
        HR_TRY(rd_value(c, kv));
    }
    char **keys = NULL;
    if (f->n_kv >= 2) {
        keys = hr_malloc((size_t)f->n_kv * sizeof *keys);
        if (!keys)
            return hr_err_set(c->err, HR_ERR_NOMEM, "%s: out of memory", c->name);
        for (uint64_t i = 0; i < f->n_kv; i++)
            keys[i] = f->kv[i].key;
    }
    hr_status s = check_unique(c, keys, f->n_kv, "key");
    hr_free(keys);
    HR_TRY(s);

    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *a = gguf_find(f, "general.alignment");
    if (a) {
        if (a->type != GGUF_TYPE_UINT32)
            return hr_err_set(c->err, HR_ERR_FORMAT,
                              "%s: general.alignment is a %s, expected uint32", c->name,
                              gguf_type_name(a->type));
        if (a->v.u64 == 0 || (a->v.u64 & (a->v.u64 - 1)) != 0)
            return hr_err_set(c->err, HR_ERR_FORMAT,
                              "%s: general.alignment is %" PRIu64
                              ", expected a power of two (default 32)",
                              c->name, a->v.u64);
        f->alignment = a->v.u64;
    }
    return HR_OK;
}

static hr_status unsupported_type(cursor *c, const char *name, uint32_t ggml_type) {
    char list[256] = "";
    size_t used = 0;
    for (int t = 0; t < HR_DTYPE_COUNT; t++) {
        if (hr_dtype_table[t].ggml_type < 0)
            continue;
        int k = snprintf(list + used, sizeof list - used, "%s%s", used ? " " : "",
                         hr_dtype_table[t].name);
        if (k < 0 || (size_t)k >= sizeof list - used)
            break;
        used += (size_t)k;
    }
    return hr_err_set(c->err, HR_ERR_UNSUPPORTED,
                      "%s: tensor '%s' has ggml type %" PRIu32
                      ", which headroom does not support (supported: %s)",
                      c->name, name, ggml_type, list);
}

static hr_status rd_tensor_info(cursor *c, const gguf_file *f, uint64_t i, gguf_tensor *t) {
    gguf_str name;
    snprintf(c->where, sizeof c->where, "tensor info %" PRIu64, i);
    HR_TRY(rd_str(c, GGUF_MAX_NAME_BYTES, "tensor name", &name));
    HR_TRY(copy_name(c, &name, "tensor name", &t->name));
    snprintf(c->where, sizeof c->where, "tensor '%s'", t->name);

    uint32_t n_dims = 0;
    HR_TRY(rd_u32(c, &n_dims, "n_dims"));
    if (n_dims < 1 || n_dims > 4)
        return hr_err_set(c->err, HR_ERR_FORMAT, "%s: tensor '%s' has %" PRIu32
                          " dimensions, expected 1..4", c->name, t->name, n_dims);
    t->n_dims = (int32_t)n_dims;
    int64_t n_elem = 1;
    for (int d = 0; d < 4; d++) {
        t->ne[d] = 1;
        if (d >= t->n_dims)
            continue;
        uint64_t ne = 0;
        HR_TRY(rd_u64(c, &ne, "dimension"));
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return hr_err_set(c->err, HR_ERR_FORMAT,
                              "%s: tensor '%s' has ne[%d] = %" PRIu64
                              ", expected 1..2^63-1", c->name, t->name, d, ne);
        t->ne[d] = (int64_t)ne;
        if (n_elem > INT64_MAX / t->ne[d])
            return hr_err_set(c->err, HR_ERR_FORMAT,
                              "%s: tensor '%s': the product of its dimensions overflows "
                              "int64", c->name, t->name);
        n_elem *= t->ne[d];
    }

    HR_TRY(rd_u32(c, &t->ggml_type, "ggml type"));
    /* ids above INT32_MAX would alias the table's -1 ("no GGUF id") entries */
    if (t->ggml_type > (uint32_t)INT32_MAX || !hr_dtype_from_ggml(t->ggml_type, &t->dtype))
        return unsupported_type(c, t->name, t->ggml_type);
    int64_t block = hr_dtype_table[t->dtype].block_elems;
    if (t->ne[0] % block != 0)
        return hr_err_set(c->err, HR_ERR_FORMAT,
                          "%s: tensor '%s' (%s) has ne[0] = %" PRId64
                          ", not a multiple of the block size %" PRId64,
                          c->name, t->name, hr_dtype_name(t->dtype), t->ne[0], block);
    if (!hr_dtype_bytes_checked(t->dtype, n_elem, &t->n_bytes))
        return hr_err_set(c->err, HR_ERR_FORMAT, "%s: tensor '%s': byte size overflows",
                          c->name, t->name);

    HR_TRY(rd_u64(c, &t->offset, "data offset"));
    if (t->offset % f->alignment != 0)
        return hr_err_set(c->err, HR_ERR_FORMAT,
                          "%s: tensor '%s' has data offset %" PRIu64
                          ", not a multiple of the alignment %" PRIu64,
                          c->name, t->name, t->offset, f->alignment);
    return HR_OK;
}

typedef struct {
    uint64_t begin, end;
    uint64_t idx;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Every tensor inside the data section and no two sharing a byte. */
static hr_status check_layout(cursor *c, gguf_file *f) {
    if (f->n_tensors == 0)
        return HR_OK;
    if (f->data_offset > f->size)
        return hr_err_set(c->err, HR_ERR_FORMAT,
                          "%s: truncated: the data section starts at byte %" PRIu64
                          " but the file has %" PRIu64 " bytes (incomplete download?)",
                          c->name, f->data_offset, f->size);
    uint64_t data_bytes = f->size - f->data_offset;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (t->offset > data_bytes || t->n_bytes > data_bytes - t->offset)
            return hr_err_set(c->err, HR_ERR_FORMAT,
                              "%s: tensor '%s' (%" PRIu64 " bytes at data offset %" PRIu64
                              ") ends past the end of the file: the data section holds %"
                              PRIu64 " bytes from byte %" PRIu64
                              " (truncated download?)",
                              c->name, t->name, t->n_bytes, t->offset, data_bytes,
                              f->data_offset);
        t->data = f->buf + f->data_offset + t->offset;
    }
    span *spans = hr_malloc((size_t)f->n_tensors * sizeof *spans);
    if (!spans)
        return hr_err_set(c->err, HR_ERR_NOMEM, "%s: out of memory", c->name);
    for (uint64_t i = 0; i < f->n_tensors; i++)
        spans[i] = (span){f->tensors[i].offset, f->tensors[i].offset + f->tensors[i].n_bytes, i};
    qsort(spans, (size_t)f->n_tensors, sizeof *spans, cmp_span);
    hr_status s = HR_OK;
    for (uint64_t i = 1; i < f->n_tensors; i++) {
        const span *a = &spans[i - 1], *b = &spans[i];
        if (b->begin < a->end) {
            s = hr_err_set(c->err, HR_ERR_FORMAT,
                           "%s: tensors '%s' (data bytes %" PRIu64 "..%" PRIu64
                           ") and '%s' (from %" PRIu64 ") overlap",
                           c->name, f->tensors[a->idx].name, a->begin, a->end,
                           f->tensors[b->idx].name, b->begin);
            break;
        }
    }
    hr_free(spans);
    return s;
}

static hr_status parse(cursor *c, gguf_file *f) {
    HR_TRY(rd_header(c, f));
    HR_TRY(rd_kvs(c, f));
    for (uint64_t i = 0; i < f->n_tensors; i++)
        HR_TRY(rd_tensor_info(c, f, i, &f->tensors[i]));

    char **names = NULL;
    if (f->n_tensors >= 2) {
        names = hr_malloc((size_t)f->n_tensors * sizeof *names);
        if (!names)
            return hr_err_set(c->err, HR_ERR_NOMEM, "%s: out of memory", c->name);
        for (uint64_t i = 0; i < f->n_tensors; i++)
            names[i] = f->tensors[i].name;
    }
    hr_status s = check_unique(c, names, f->n_tensors, "tensor name");
    hr_free(names);
    HR_TRY(s);

    /* the data section starts at the header end rounded up to the alignment */
    uint64_t pad = (f->alignment - c->pos % f->alignment) % f->alignment;
    if (c->pos > UINT64_MAX - pad)
        return hr_err_set(c->err, HR_ERR_FORMAT, "%s: data offset overflows", c->name);
    f->data_offset = c->pos + pad;
    return check_layout(c, f);
}

hr_status gguf_parse(const uint8_t *buf, uint64_t size, const char *name, gguf_file **out,
                     hr_error *err) {
    if (!name)
        name = "<buffer>";
    if (!buf)
        size = 0;
    gguf_file *f = hr_calloc(1, sizeof *f);
    if (!f)
        return hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", name);
    hr_status s = HR_OK;
    f->name = hr_strdup(name);
    if (!f->name) {
        s = hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", name);
        goto fail;
    }
    f->buf = buf;
    f->size = size;
    cursor c = {.buf = buf, .size = size, .name = f->name, .err = err};
    s = parse(&c, f);
    if (s != HR_OK)
        goto fail;
    *out = f;
    return HR_OK;
fail:
    gguf_free(f);
    return s;
}

hr_status gguf_open(const char *path, gguf_file **out, hr_error *err) {
    hr_mapped_file map = {0};
    HR_TRY(hr_file_map(path, &map, err));
    gguf_file *f = NULL;
    hr_status s = gguf_parse(map.data, map.size, path, &f, err);
    if (s != HR_OK) {
        hr_file_unmap(&map);
        return s;
    }
    f->map = map;
    *out = f;
    return HR_OK;
}

void gguf_free(gguf_file *f) {
    if (!f)
        return;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        hr_free(f->kv[i].key);
        hr_free(f->kv[i].arr_str);
    }
    hr_free(f->kv);
    for (uint64_t i = 0; i < f->n_tensors; i++)
        hr_free(f->tensors[i].name);
    hr_free(f->tensors);
    hr_free(f->name);
    hr_file_unmap(&f->map);
    hr_free(f);
}

/* ---------------------------------------------------------------- lookup */

const gguf_kv *gguf_find(const gguf_file *f, const char *key) {
    for (uint64_t i = 0; i < f->n_kv; i++) {
        if (strcmp(f->kv[i].key, key) == 0)
            return &f->kv[i];
    }
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    }
    return NULL;
}

/* An integer of any width and signedness as int64, when it fits. */
static bool int_fits_i64(gguf_type t, uint64_t u, int64_t i, int64_t *out) {
    if (is_sint(t)) {
        *out = i;
        return true;
    }
    if (is_uint(t) && u <= (uint64_t)INT64_MAX) {
        *out = (int64_t)u;
        return true;
    }
    return false;
}

bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv)
        return false;
    if (is_uint(kv->type) && kv->v.u64 <= UINT32_MAX) {
        *out = (uint32_t)kv->v.u64;
        return true;
    }
    if (is_sint(kv->type) && kv->v.i64 >= 0 && kv->v.i64 <= (int64_t)UINT32_MAX) {
        *out = (uint32_t)kv->v.i64;
        return true;
    }
    return false;
}

bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    const gguf_kv *kv = gguf_find(f, key);
    return kv && int_fits_i64(kv->type, kv->v.u64, kv->v.i64, out);
}

/* float32 values, and float64 values that a float can hold (out-of-range
 * finite values are refused rather than turned into infinities). */
bool gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv || !is_float(kv->type))
        return false;
    double v = kv->v.f64;
    if (isfinite(v) && fabs(v) > FLT_MAX)
        return false;
    *out = (float)v;
    return true;
}

bool gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv || kv->type != GGUF_TYPE_BOOL)
        return false;
    *out = kv->v.u64 != 0;
    return true;
}

bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv || kv->type != GGUF_TYPE_STRING)
        return false;
    *out = kv->v.str;
    return true;
}

/* Element i of a numeric array in the three views. */
static bool arr_elem(const gguf_kv *kv, uint64_t i, uint64_t *u, int64_t *s, double *d) {
    if (kv->type != GGUF_TYPE_ARRAY || !kv->arr_data || i >= kv->arr_n)
        return false;
    decode_scalar(kv->arr_type, kv->arr_data + i * type_sizes[kv->arr_type], u, s, d);
    return true;
}

/* Integer element types only (as the scalar getters: bool and floats are not
 * integers); uint64 values above INT64_MAX do not fit. */
bool gguf_arr_i64(const gguf_kv *kv, uint64_t i, int64_t *out) {
    uint64_t u;
    int64_t s;
    double d;
    if (!arr_elem(kv, i, &u, &s, &d))
        return false;
    return int_fits_i64(kv->arr_type, u, s, out);
}

/* Integer and float element types; bool is refused as in gguf_get_f32. */
bool gguf_arr_f64(const gguf_kv *kv, uint64_t i, double *out) {
    uint64_t u;
    int64_t s;
    double d;
    if (!arr_elem(kv, i, &u, &s, &d))
        return false;
    if (is_float(kv->arr_type))
        *out = d;
    else if (is_uint(kv->arr_type))
        *out = (double)u;
    else if (is_sint(kv->arr_type))
        *out = (double)s;
    else
        return false;
    return true;
}
