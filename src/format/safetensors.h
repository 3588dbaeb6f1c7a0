/*
 * safetensors.h — safetensors reader, single file and sharded.
 *
 * Layout: u64 little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "BF16", "shape": [out, in], "data_offsets": [b, e]},
 *  "__metadata__": {...}}, then the data; offsets are relative to the byte
 * after the header. Sharded checkpoints add model.safetensors.index.json with
 * {"weight_map": {"name": "model-00001-of-00002.safetensors", ...}}.
 *
 * Hostile input: header length bounded by the file size (and 100 MB), every
 * tensor's [begin, end) inside the data section, end - begin equal to the
 * product of the shape times the dtype size, names unique, dtype known.
 * Shapes are kept in file order (outermost first, as PyTorch), and also
 * reversed into ne[] (innermost first, as GGUF) for the model description.
 */
#ifndef HR_FORMAT_SAFETENSORS_H
#define HR_FORMAT_SAFETENSORS_H

#include "util/dtype.h"
#include "util/error.h"
#include "util/file.h"

#include <stdint.h>

#define ST_MAX_DIMS 8

typedef struct {
    char *name;     /* owned */
    hr_dtype dtype; /* F32 F16 BF16 I8 U8 I16 I32 F64 */
    int32_t n_dims;
    int64_t shape[ST_MAX_DIMS]; /* file order: shape[0] outermost */
    int64_t ne[ST_MAX_DIMS];    /* reversed: ne[0] innermost (GGUF order) */
    uint64_t n_bytes;
    const uint8_t *data;
    int32_t file_index; /* which shard */
} st_tensor;

typedef struct st_set {
    int32_t n_files;
    hr_mapped_file *files; /* owned mappings (none when parsed from a buffer) */
    int32_t n_tensors;
    st_tensor *tensors;
} st_set;

/* Every opener writes *out only on success; tensors keep header order,
 * file by file. Messages name the file and the tensor. */

/* One .safetensors file. */
hr_status st_open_file(const char *path, st_set **out, hr_error *err);
/* A folder: model.safetensors.index.json when present (each shard opened
 * once, every tensor of the weight map checked against the shard it names),
 * else model.safetensors, else every *.safetensors file sorted by name. */
hr_status st_open_dir(const char *dir, st_set **out, hr_error *err);
/* A buffer the caller keeps alive (fuzzing, tests). */
hr_status st_parse(const uint8_t *buf, uint64_t size, const char *name, st_set **out,
                   hr_error *err);
void st_free(st_set *s);

/* NULL when absent. O(log n): names are indexed at open. */
const st_tensor *st_find(const st_set *s, const char *name);

#endif
