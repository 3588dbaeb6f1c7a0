/*
 * gguf.h — GGUF v2/v3 reader and writer (spec: ggml docs/gguf.md).
 *
 * Layout: magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, then n_kv
 * key/value pairs, then n_tensors tensor infos (name, n_dims, ne[], ggml type,
 * u64 offset), padding to general.alignment (default 32), then the data.
 * All integers little-endian. Strings are u64 length + bytes (no NUL).
 *
 * The reader treats the file as hostile: every count, length and offset is
 * checked against the bytes that remain before it is used, so a corrupt file
 * gives HR_ERR_FORMAT naming the file and the problem and never a crash or an
 * allocation larger than the file itself could justify.
 *
 * Strings and numeric arrays point into the buffer (not NUL-terminated);
 * keys and tensor names are copied NUL-terminated. A gguf_file owns its
 * mapping when opened with gguf_open, and borrows the buffer with gguf_parse.
 */
#ifndef HR_FORMAT_GGUF_H
#define HR_FORMAT_GGUF_H

#include "util/dtype.h"
#include "util/error.h"
#include "util/file.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
} gguf_type;

typedef struct {
    const char *ptr; /* into the buffer; not NUL-terminated */
    uint64_t len;
} gguf_str;

typedef struct {
    char *key;       /* owned, NUL-terminated */
    gguf_type type;
    union {
        uint64_t u64; /* all unsigned types, and bool (0/1) */
        int64_t i64;  /* all signed types */
        double f64;   /* float32 and float64 */
        gguf_str str;
    } v;
    /* arrays: element type, count, and the raw little-endian elements (for
     * numeric arrays) or a table of strings (owned) for string arrays.
     * Nested arrays are accepted and skipped: arr_n counts them, data NULL. */
    gguf_type arr_type;
    uint64_t arr_n;
    const uint8_t *arr_data;
    gguf_str *arr_str;
} gguf_kv;

typedef struct {
    char *name;        /* owned, NUL-terminated */
    hr_dtype dtype;
    uint32_t ggml_type;
    int32_t n_dims;    /* 1..4 */
    int64_t ne[4];     /* ne[0] contiguous; unused dims are 1 */
    uint64_t offset;   /* from the start of the data section */
    uint64_t n_bytes;
    const uint8_t *data;
} gguf_tensor;

typedef struct gguf_file {
    hr_mapped_file map;   /* empty when parsing a borrowed buffer */
    const uint8_t *buf;
    uint64_t size;
    char *name;           /* the path, for messages (owned) */
    uint32_t version;
    uint64_t n_kv;
    gguf_kv *kv;
    uint64_t n_tensors;
    gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_offset; /* absolute offset of the data section */
} gguf_file;

hr_status gguf_open(const char *path, gguf_file **out, hr_error *err);
/* Parses a buffer the caller keeps alive; name is used in messages. */
hr_status gguf_parse(const uint8_t *buf, uint64_t size, const char *name, gguf_file **out,
                     hr_error *err);
void gguf_free(gguf_file *f);

const gguf_kv *gguf_find(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters: false when the key is absent or of an incompatible type.
 * Integer getters accept any integer type whose value fits. */
bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
bool gguf_get_f32(const gguf_file *f, const char *key, float *out);
bool gguf_get_bool(const gguf_file *f, const char *key, bool *out);
bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);
/* Array element access (numeric): converts to int64/double; false on type
 * mismatch or index out of range. */
bool gguf_arr_i64(const gguf_kv *kv, uint64_t i, int64_t *out);
bool gguf_arr_f64(const gguf_kv *kv, uint64_t i, double *out);

const char *gguf_type_name(gguf_type t);
/* Bytes of one element of a scalar type; 0 for STRING, ARRAY and ids out of
 * range. Lets callers walk arr_data without a private table. */
uint64_t gguf_type_size(gguf_type t);

/* Limits shared by the reader and the writer, so the writer never produces a
 * file its reader refuses. The spec caps keys at 65535 bytes; tensor names
 * are short in every known model (ggml allows 63), 256 leaves room; string
 * values (chat templates reach tens of KiB) get a cap that only absurd
 * values hit. */
#define GGUF_MAX_KEY_BYTES 65535u
#define GGUF_MAX_NAME_BYTES 256u
#define GGUF_MAX_STR_BYTES (16u << 20)
#define GGUF_DEFAULT_ALIGNMENT 32u

/* ---------------------------------------------------------------- writer */

/* Builds a GGUF v3 file: add metadata and tensor descriptions first, then
 * gguf_writer_write streams the header and every tensor's bytes (read from
 * the pointers given, which must stay valid until then).
 * The setters return HR_ERR_INVALID (duplicate key or name, bad type, dims,
 * sizes) or HR_ERR_NOMEM; the first such error is kept with its message and
 * gguf_writer_write returns it again, so a caller may check only there. */
typedef struct gguf_writer gguf_writer;

hr_status gguf_writer_create(gguf_writer **out, hr_error *err);
void gguf_writer_free(gguf_writer *w);
hr_status gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
hr_status gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
hr_status gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
hr_status gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
hr_status gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
hr_status gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
/* Arrays of numbers (type one of the numeric gguf types; raw elements copied)
 * and of strings (lens may be NULL for NUL-terminated strings). */
hr_status gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_type type,
                              const void *data, uint64_t n);
hr_status gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs,
                                  const uint64_t *lens, uint64_t n);
/* ne[0] contiguous. data is n_bytes of already-encoded dtype blocks. */
hr_status gguf_writer_add_tensor(gguf_writer *w, const char *name, hr_dtype dtype,
                                 int32_t n_dims, const int64_t *ne, const void *data);
hr_status gguf_writer_write(gguf_writer *w, const char *path, hr_error *err);

#endif
