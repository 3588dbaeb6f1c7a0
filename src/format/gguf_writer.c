/*
 * gguf_writer.c — GGUF v3 writer, used by `headroom convert`.
 *
 * Metadata values are encoded to little-endian bytes when they are set (one
 * owned blob per key: the scalar, the string, or array type + count +
 * elements), so writing them is a copy. Tensors keep only the caller's data
 * pointer; gguf_writer_write assigns offsets (each aligned to
 * general.alignment, 32 unless set) and streams header, zero padding and
 * data through one buffered FILE. Keys and tensors keep insertion order.
 * Every tensor, the last included, is followed by padding to the alignment,
 * as llama.cpp's and gguf-py's writers do: readers that load the data
 * section whole expect its padded size.
 *
 * The writer refuses what its reader would refuse (duplicate keys or names,
 * bad dims, ne[0] not a multiple of the block, names over the limits), so a
 * convert never produces a file that then fails to load.
 * The file is written beside its final name (NAME.partial-PID) and renamed
 * over it only once complete, so a failed or interrupted write never leaves
 * a half model under the name, and the file being replaced (the model being
 * converted, still mapped) stays whole until the rename. A target that is not
 * a regular file (/dev/full in the tests, a pipe) is written in place.
 * Rejected: building the file in memory (models are tens of GB).
 */
/* realpath() is XSI, beyond the POSIX level the library builds at */
#define _XOPEN_SOURCE 700

#include "format/gguf.h"

#include "util/alloc.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    char *key;
    gguf_type type;
    uint8_t *blob; /* the encoded value that follows the type */
    size_t blob_bytes;
} wkv;

typedef struct {
    char *name;
    hr_dtype dtype;
    int32_t n_dims;
    int64_t ne[4];
    uint64_t n_bytes;
    uint64_t offset; /* assigned by gguf_writer_write */
    const void *data; /* borrowed from the caller */
} wtensor;

struct gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *tensors;
    size_t n_tensors, cap_tensors;
    /* tensor-name hash set (open addressing, linear probing): index + 1,
     * 0 = empty; models have thousands of tensors, so no pairwise checks */
    size_t *slots;
    size_t n_slots;
    uint64_t alignment;
    hr_error err; /* the first failure, returned again by gguf_writer_write */
};

/* Records the first failure with its message; returns code. */
static hr_status fail(gguf_writer *w, hr_status code, const char *fmt, ...) HR_PRINTF(3, 4);

static hr_status fail(gguf_writer *w, hr_status code, const char *fmt, ...) {
    if (w->err.code == HR_OK) {
        char msg[sizeof w->err.msg];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        hr_err_set(&w->err, code, "gguf writer: %s", msg);
    }
    return code;
}

hr_status gguf_writer_create(gguf_writer **out, hr_error *err) {
    gguf_writer *w = hr_calloc(1, sizeof *w);
    if (!w)
        return hr_err_set(err, HR_ERR_NOMEM, "gguf writer: out of memory");
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    *out = w;
    return HR_OK;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        hr_free(w->kv[i].key);
        hr_free(w->kv[i].blob);
    }
    hr_free(w->kv);
    for (size_t i = 0; i < w->n_tensors; i++)
        hr_free(w->tensors[i].name);
    hr_free(w->tensors);
    hr_free(w->slots);
    hr_free(w);
}

/* ---------------------------------------------------------------- blobs */

typedef struct {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} bytes;

static void put(bytes *b, const void *src, size_t n) {
    if (b->oom)
        return;
    if (n > b->cap - b->n) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->n < n) {
            if (cap > SIZE_MAX / 2) {
                b->oom = true;
                return;
            }
            cap *= 2;
        }
        uint8_t *p = hr_realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_le(bytes *b, uint64_t v, int n_bytes) {
    uint8_t le[8];
    for (int i = 0; i < n_bytes; i++)
        le[i] = (uint8_t)(v >> (8 * i));
    put(b, le, (size_t)n_bytes);
}

static hr_status check_key(gguf_writer *w, const char *key) {
    if (!key || !key[0])
        return fail(w, HR_ERR_INVALID, "empty key");
    size_t len = strlen(key);
    if (len > GGUF_MAX_KEY_BYTES)
        return fail(w, HR_ERR_INVALID, "key '%.64s...' is %zu bytes, more than the %u allowed",
                    key, len, GGUF_MAX_KEY_BYTES);
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0)
            return fail(w, HR_ERR_INVALID, "duplicate key '%s'", key);
    }
    return HR_OK;
}

/* Appends a key with its encoded value; takes the blob's buffer. */
static hr_status add_kv(gguf_writer *w, const char *key, gguf_type type, bytes *b) {
    hr_status s = check_key(w, key);
    if (s != HR_OK)
        goto fail;
    if (b->oom) {
        s = fail(w, HR_ERR_NOMEM, "out of memory encoding key '%s'", key);
        goto fail;
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        wkv *kv = hr_realloc(w->kv, cap * sizeof *kv);
        if (!kv) {
            s = fail(w, HR_ERR_NOMEM, "out of memory adding key '%s'", key);
            goto fail;
        }
        w->kv = kv;
        w->cap_kv = cap;
    }
    char *k = hr_strdup(key);
    if (!k) {
        s = fail(w, HR_ERR_NOMEM, "out of memory adding key '%s'", key);
        goto fail;
    }
    w->kv[w->n_kv++] = (wkv){.key = k, .type = type, .blob = b->p, .blob_bytes = b->n};
    return HR_OK;
fail:
    hr_free(b->p);
    return s;
}

static hr_status set_scalar(gguf_writer *w, const char *key, gguf_type type, uint64_t bits) {
    if (key && strcmp(key, "general.alignment") == 0 && type != GGUF_TYPE_UINT32)
        return fail(w, HR_ERR_INVALID, "general.alignment must be a uint32, not a %s",
                    gguf_type_name(type));
    bytes b = {0};
    put_le(&b, bits, (int)gguf_type_size(type));
    return add_kv(w, key, type, &b);
}

hr_status gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) {
    bool is_align = key && strcmp(key, "general.alignment") == 0;
    if (is_align && (v == 0 || (v & (v - 1)) != 0))
        return fail(w, HR_ERR_INVALID, "general.alignment %" PRIu32
                    " is not a power of two", v);
    hr_status s = set_scalar(w, key, GGUF_TYPE_UINT32, v);
    if (s == HR_OK && is_align)
        w->alignment = v;
    return s;
}

hr_status gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v) {
    return set_scalar(w, key, GGUF_TYPE_INT32, (uint32_t)v);
}

hr_status gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v) {
    return set_scalar(w, key, GGUF_TYPE_UINT64, v);
}

hr_status gguf_writer_set_f32(gguf_writer *w, const char *key, float v) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return set_scalar(w, key, GGUF_TYPE_FLOAT32, bits);
}

hr_status gguf_writer_set_bool(gguf_writer *w, const char *key, bool v) {
    return set_scalar(w, key, GGUF_TYPE_BOOL, v ? 1 : 0);
}

hr_status gguf_writer_set_str(gguf_writer *w, const char *key, const char *v) {
    if (!v)
        return fail(w, HR_ERR_INVALID, "NULL string for key '%s'", key ? key : "");
    size_t len = strlen(v);
    if (len > GGUF_MAX_STR_BYTES)
        return fail(w, HR_ERR_INVALID, "string for key '%s' is %zu bytes, more than %u",
                    key ? key : "", len, GGUF_MAX_STR_BYTES);
    bytes b = {0};
    put_le(&b, len, 8);
    put(&b, v, len);
    return add_kv(w, key, GGUF_TYPE_STRING, &b);
}

hr_status gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_type type,
                              const void *data, uint64_t n) {
    const char *k = key ? key : "";
    uint64_t size = gguf_type_size(type);
    if (size == 0)
        return fail(w, HR_ERR_INVALID, "key '%s': %s is not a numeric array element type",
                    k, gguf_type_name(type));
    if (n > (SIZE_MAX - 12) / size)
        return fail(w, HR_ERR_INVALID, "key '%s': array of %" PRIu64 " elements is too big",
                    k, n);
    if (n > 0 && !data)
        return fail(w, HR_ERR_INVALID, "key '%s': NULL array data", k);
    const uint8_t *src = data;
    if (type == GGUF_TYPE_BOOL) {
        for (uint64_t i = 0; i < n; i++) {
            if (src[i] > 1)
                return fail(w, HR_ERR_INVALID, "key '%s': bool element %" PRIu64
                            " is %u, expected 0 or 1", k, i, (unsigned)src[i]);
        }
    }
    bytes b = {0};
    put_le(&b, (uint64_t)type, 4);
    put_le(&b, n, 8);
    /* elements are host values: re-encode each as little-endian */
    for (uint64_t i = 0; i < n && !b.oom; i++) {
        const uint8_t *p = src + i * size;
        uint64_t v = 0;
        if (size == 1) {
            v = p[0];
        } else if (size == 2) {
            uint16_t x;
            memcpy(&x, p, 2);
            v = x;
        } else if (size == 4) {
            uint32_t x;
            memcpy(&x, p, 4);
            v = x;
        } else {
            memcpy(&v, p, 8);
        }
        put_le(&b, v, (int)size);
    }
    return add_kv(w, key, GGUF_TYPE_ARRAY, &b);
}

hr_status gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs,
                                  const uint64_t *lens, uint64_t n) {
    const char *k = key ? key : "";
    if (n > 0 && !strs)
        return fail(w, HR_ERR_INVALID, "key '%s': NULL string array", k);
    bytes b = {0};
    put_le(&b, GGUF_TYPE_STRING, 4);
    put_le(&b, n, 8);
    for (uint64_t i = 0; i < n && !b.oom; i++) {
        if (!strs[i]) {
            hr_free(b.p);
            return fail(w, HR_ERR_INVALID, "key '%s': string %" PRIu64 " is NULL", k, i);
        }
        uint64_t len = lens ? lens[i] : strlen(strs[i]);
        if (len > GGUF_MAX_STR_BYTES) {
            hr_free(b.p);
            return fail(w, HR_ERR_INVALID, "key '%s': string %" PRIu64 " is %" PRIu64
                        " bytes, more than %u", k, i, len, GGUF_MAX_STR_BYTES);
        }
        put_le(&b, len, 8);
        put(&b, strs[i], (size_t)len);
    }
    return add_kv(w, key, GGUF_TYPE_ARRAY, &b);
}

/* ---------------------------------------------------------------- tensors */

static uint64_t hash_name(const char *s) {
    uint64_t h = 0xcbf29ce484222325u; /* FNV-1a 64 offset basis and prime */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3u;
    return h;
}

/* The slot holding name, or the empty slot where it would go. */
static size_t find_slot(const gguf_writer *w, const char *name) {
    size_t mask = w->n_slots - 1;
    size_t i = (size_t)hash_name(name) & mask;
    while (w->slots[i] && strcmp(w->tensors[w->slots[i] - 1].name, name) != 0)
        i = (i + 1) & mask;
    return i;
}

/* Keeps the set at most half full (power-of-two size) so probes stay short. */
static bool grow_slots(gguf_writer *w) {
    if (w->n_slots && 2 * (w->n_tensors + 1) <= w->n_slots)
        return true;
    size_t n = w->n_slots ? 2 * w->n_slots : 64;
    size_t *slots = hr_calloc(n, sizeof *slots);
    if (!slots)
        return false;
    hr_free(w->slots);
    w->slots = slots;
    w->n_slots = n;
    for (size_t t = 0; t < w->n_tensors; t++)
        w->slots[find_slot(w, w->tensors[t].name)] = t + 1;
    return true;
}

hr_status gguf_writer_add_tensor(gguf_writer *w, const char *name, hr_dtype dtype,
                                 int32_t n_dims, const int64_t *ne, const void *data) {
    if (!name || !name[0])
        return fail(w, HR_ERR_INVALID, "empty tensor name");
    size_t len = strlen(name);
    if (len > GGUF_MAX_NAME_BYTES)
        return fail(w, HR_ERR_INVALID, "tensor name '%.64s...' is %zu bytes, more than %u",
                    name, len, GGUF_MAX_NAME_BYTES);
    if ((unsigned)dtype >= HR_DTYPE_COUNT || hr_dtype_table[dtype].ggml_type < 0)
        return fail(w, HR_ERR_INVALID, "tensor '%s': dtype %s has no GGUF type id", name,
                    hr_dtype_name(dtype));
    if (n_dims < 1 || n_dims > 4 || !ne)
        return fail(w, HR_ERR_INVALID, "tensor '%s': %d dimensions, expected 1..4", name,
                    (int)n_dims);
    wtensor t = {.dtype = dtype, .n_dims = n_dims, .ne = {1, 1, 1, 1}, .data = data};
    int64_t n_elem = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] < 1 || n_elem > INT64_MAX / ne[d])
            return fail(w, HR_ERR_INVALID, "tensor '%s': ne[%d] = %" PRId64
                        " is not positive or the element count overflows", name, d, ne[d]);
        t.ne[d] = ne[d];
        n_elem *= ne[d];
    }
    int64_t block = hr_dtype_table[dtype].block_elems;
    if (t.ne[0] % block != 0)
        return fail(w, HR_ERR_INVALID, "tensor '%s' (%s): ne[0] = %" PRId64
                    " is not a multiple of the block size %" PRId64, name,
                    hr_dtype_name(dtype), t.ne[0], block);
    if (!hr_dtype_bytes_checked(dtype, n_elem, &t.n_bytes) || t.n_bytes > SIZE_MAX)
        return fail(w, HR_ERR_INVALID, "tensor '%s': byte size overflows", name);
    if (!data)
        return fail(w, HR_ERR_INVALID, "tensor '%s': NULL data", name);
    if (!grow_slots(w))
        return fail(w, HR_ERR_NOMEM, "out of memory adding tensor '%s'", name);
    size_t slot = find_slot(w, name);
    if (w->slots[slot])
        return fail(w, HR_ERR_INVALID, "duplicate tensor name '%s'", name);
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? 2 * w->cap_tensors : 64;
        wtensor *ts = hr_realloc(w->tensors, cap * sizeof *ts);
        if (!ts)
            return fail(w, HR_ERR_NOMEM, "out of memory adding tensor '%s'", name);
        w->tensors = ts;
        w->cap_tensors = cap;
    }
    t.name = hr_strdup(name);
    if (!t.name)
        return fail(w, HR_ERR_NOMEM, "out of memory adding tensor '%s'", name);
    w->tensors[w->n_tensors++] = t;
    w->slots[slot] = w->n_tensors;
    return HR_OK;
}

/* ---------------------------------------------------------------- output */

typedef struct {
    FILE *fp;
    const char *path;
    uint64_t pos; /* bytes written so far */
    hr_error *err;
} out_file;

static hr_status out_write(out_file *o, const void *p, size_t n, const char *what) {
    if (n == 0)
        return HR_OK;
    errno = 0;
    size_t put_n = fwrite(p, 1, n, o->fp);
    if (put_n != n)
        return hr_err_set(o->err, HR_ERR_IO,
                          "%s: write failed at byte %" PRIu64 " (%s): %s", o->path,
                          o->pos + put_n, what, errno ? strerror(errno) : "short write");
    o->pos += n;
    return HR_OK;
}

static hr_status out_le(out_file *o, uint64_t v, int n_bytes, const char *what) {
    uint8_t le[8];
    for (int i = 0; i < n_bytes; i++)
        le[i] = (uint8_t)(v >> (8 * i));
    return out_write(o, le, (size_t)n_bytes, what);
}

static hr_status out_pad(out_file *o, uint64_t alignment) {
    static const uint8_t zeros[4096];
    uint64_t pad = (alignment - o->pos % alignment) % alignment;
    while (pad > 0) {
        size_t n = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
        HR_TRY(out_write(o, zeros, n, "padding"));
        pad -= n;
    }
    return HR_OK;
}

static hr_status write_all(const gguf_writer *w, out_file *o) {
    HR_TRY(out_write(o, "GGUF", 4, "magic"));
    HR_TRY(out_le(o, 3, 4, "version"));
    HR_TRY(out_le(o, w->n_tensors, 8, "tensor count"));
    HR_TRY(out_le(o, w->n_kv, 8, "key/value count"));
    for (size_t i = 0; i < w->n_kv; i++) {
        const wkv *kv = &w->kv[i];
        size_t len = strlen(kv->key);
        HR_TRY(out_le(o, len, 8, "key"));
        HR_TRY(out_write(o, kv->key, len, "key"));
        HR_TRY(out_le(o, (uint64_t)kv->type, 4, "value type"));
        HR_TRY(out_write(o, kv->blob, kv->blob_bytes, "value"));
    }
    for (size_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        size_t len = strlen(t->name);
        HR_TRY(out_le(o, len, 8, "tensor name"));
        HR_TRY(out_write(o, t->name, len, "tensor name"));
        HR_TRY(out_le(o, (uint64_t)t->n_dims, 4, "tensor info"));
        for (int d = 0; d < t->n_dims; d++)
            HR_TRY(out_le(o, (uint64_t)t->ne[d], 8, "tensor info"));
        HR_TRY(out_le(o, (uint64_t)hr_dtype_table[t->dtype].ggml_type, 4, "tensor info"));
        HR_TRY(out_le(o, t->offset, 8, "tensor info"));
    }
    HR_TRY(out_pad(o, w->alignment));
    uint64_t data_offset = o->pos;
    for (size_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        HR_ASSERT(o->pos - data_offset == t->offset);
        char what[300];
        snprintf(what, sizeof what, "data of tensor '%s'", t->name);
        HR_TRY(out_write(o, t->data, (size_t)t->n_bytes, what));
        HR_TRY(out_pad(o, w->alignment));
    }
    return HR_OK;
}

hr_status gguf_writer_write(gguf_writer *w, const char *path, hr_error *err) {
    if (w->err.code != HR_OK) {
        hr_err_set(err, w->err.code, "%s: %s", path, w->err.msg);
        return w->err.code;
    }
    /* offsets from the data section start, each padded to the alignment */
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        wtensor *t = &w->tensors[i];
        t->offset = off;
        uint64_t pad = (w->alignment - t->n_bytes % w->alignment) % w->alignment;
        if (t->n_bytes > UINT64_MAX - pad || off > UINT64_MAX - pad - t->n_bytes)
            return hr_err_set(err, HR_ERR_INVALID, "%s: tensor data exceeds 2^64 bytes", path);
        off += t->n_bytes + pad;
    }

    struct stat st;
    bool exists = stat(path, &st) == 0, in_place = exists && !S_ISREG(st.st_mode);
    /* a link is written through, as fopen would: the file it names is replaced */
    char *real = exists && !in_place ? realpath(path, NULL) : NULL;
    const char *user_path = path;
    if (real)
        path = real;
    char tmp[4096];
    if (!in_place && snprintf(tmp, sizeof tmp, "%s.partial-%ld", path, (long)getpid()) >=
                         (int)sizeof tmp) {
        free(real);
        return hr_err_set(err, HR_ERR_INVALID, "%s: the path is too long", user_path);
    }
    const char *target = in_place ? path : tmp;
    /* O_EXCL: never write through a stale file or link of that name; mode
     * 0666 less the umask, as the final file should be */
    int fd = in_place ? open(path, O_WRONLY | O_TRUNC)
                      : open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
    FILE *fp = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!fp) {
        hr_status s = hr_err_set(err, HR_ERR_IO, "%s: cannot create: %s", target,
                                 strerror(errno));
        if (fd >= 0) {
            close(fd);
            if (!in_place)
                unlink(tmp);
        }
        free(real);
        return s;
    }
    out_file o = {.fp = fp, .path = target, .err = err};
    hr_status s = write_all(w, &o);
    if (s == HR_OK && fflush(fp) != 0)
        s = hr_err_set(err, HR_ERR_IO, "%s: write failed at byte %" PRIu64 " (flush): %s",
                       target, o.pos, strerror(errno));
    if (s == HR_OK && !in_place && fsync(fileno(fp)) != 0)
        s = hr_err_set(err, HR_ERR_IO, "%s: fsync failed: %s", target, strerror(errno));
    if (fclose(fp) != 0 && s == HR_OK)
        s = hr_err_set(err, HR_ERR_IO, "%s: close failed: %s", target, strerror(errno));
    if (!in_place && s == HR_OK && rename(tmp, path) != 0)
        s = hr_err_set(err, HR_ERR_IO, "%s: cannot rename %s over it: %s", path, tmp,
                       strerror(errno));
    if (!in_place && s != HR_OK)
        unlink(tmp); /* never a half model left behind */
    free(real);
    return s;
}
