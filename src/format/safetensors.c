/*
 * safetensors.c — parse and validate .safetensors files, single or sharded.
 *
 * A file is u64 LE header length N, N bytes of JSON, then the data section;
 * tensor offsets count from the data section's first byte. Parsing is in
 * three passes per file: (1) bound N by the file and a 100 MB cap, copy the
 * header NUL-terminated and hand it to cJSON; (2) walk the entries in header
 * order, checking every field's type, dtype, shape, element count, byte
 * count and [begin, end) against the data section; (3) sort the file's
 * tensors by offset and reject overlaps. When every file is in, one sorted
 * name index serves both the uniqueness check and st_find.
 *
 * Tensors point into the caller's buffer or our mapping; nothing is copied
 * but the names. The header copy costs at most the header size and means
 * cJSON never reads past a terminator we did not write.
 *
 * Rejected: trusting cJSON's length-limited parse on a mapping that ends
 * exactly at the header (one bug there would read past the map), and a
 * hash table for names (a sorted array is smaller and also gives the
 * duplicate check for free).
 */
#include "format/safetensors.h"

#include "util/alloc.h"

#include "util/json.h"
#include <dirent.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Real headers are ~100 KB for 70B models; the Python/Rust reader uses the
 * same 100 MB cap, so anything larger is not a safetensors file. */
#define ST_MAX_HEADER_BYTES ((uint64_t)100 * 1000 * 1000)
/* Index files list one line per tensor (~20 MB would be ~300k tensors). */
#define ST_MAX_INDEX_BYTES ((size_t)64 * 1024 * 1024)
/* JSON numbers are doubles: integers above 2^53 are not exact. */
#define ST_MAX_JSON_INT ((uint64_t)1 << 53)
#define ST_MAX_FILES 65536

typedef struct {
    const char *name; /* the tensor's own string */
    int32_t index;    /* into tensors[] */
} st_name_ref;

/* The public st_set first, so st_set * and st_set_priv * convert freely. */
typedef struct {
    st_set pub;
    int32_t cap_tensors;
    st_name_ref *by_name; /* (n_tensors) sorted by name */
} st_set_priv;

/* safetensors dtype strings headroom maps; any other string (I64, BOOL, U16,
 * F8_E4M3, ... and future additions) is valid safetensors we cannot run. */
static const struct {
    const char *name;
    hr_dtype dtype;
} st_dtypes[] = {
    {"F32", HR_DTYPE_F32}, {"F16", HR_DTYPE_F16}, {"BF16", HR_DTYPE_BF16},
    {"F64", HR_DTYPE_F64}, {"I8", HR_DTYPE_I8},   {"U8", HR_DTYPE_U8},
    {"I16", HR_DTYPE_I16}, {"I32", HR_DTYPE_I32},
};

static uint64_t read_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static bool json_is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* A non-negative integer that a double holds exactly. */
static bool json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= 0.0 && d <= (double)ST_MAX_JSON_INT))
        return false;
    uint64_t u = (uint64_t)d;
    if ((double)u != d)
        return false;
    *out = u;
    return true;
}

/* "[4096, 11008]" for messages; truncated safely when long. */
static void shape_str(char *buf, size_t cap, const int64_t *shape, int32_t n_dims) {
    size_t len = 0;
    int n = snprintf(buf, cap, "[");
    len = n > 0 ? (size_t)n : 0;
    for (int32_t i = 0; i < n_dims && len < cap; i++) {
        n = snprintf(buf + len, cap - len, "%s%" PRId64, i ? ", " : "", shape[i]);
        len += n > 0 ? (size_t)n : 0;
    }
    if (len < cap)
        snprintf(buf + len, cap - len, "]");
}

/* Parses text[0, len) (a NUL at text[len]) as one JSON object with only
 * whitespace after it. what names the document in messages. */
static hr_status parse_json_object(const char *text, size_t len, const char *file,
                                   const char *what, cJSON **out, hr_error *err) {
    const char *end = NULL;
    bool nomem;
    cJSON *root = hr_json_parse(text, len, &end, &nomem);
    if (!root && nomem)
        return hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory parsing %s", file, what);
    if (!root) {
        size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        return hr_err_set(err, HR_ERR_FORMAT, "%s: %s is not valid JSON (error near byte %zu)",
                          file, what, at);
    }
    for (const char *p = end; p < text + len; p++) {
        if (!json_is_space(*p)) {
            cJSON_Delete(root);
            return hr_err_set(err, HR_ERR_FORMAT,
                              "%s: %s has unexpected bytes after the JSON (at byte %zu)", file,
                              what, (size_t)(p - text));
        }
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return hr_err_set(err, HR_ERR_FORMAT, "%s: %s is JSON but not an object", file, what);
    }
    *out = root;
    return HR_OK;
}

static hr_status set_create(st_set_priv **out, hr_error *err) {
    st_set_priv *p = hr_calloc(1, sizeof *p);
    if (!p)
        return hr_err_set(err, HR_ERR_NOMEM, "safetensors: out of memory");
    *out = p;
    return HR_OK;
}

static hr_status reserve_tensors(st_set_priv *p, int64_t n_more, const char *file,
                                 hr_error *err) {
    int64_t need = (int64_t)p->pub.n_tensors + n_more;
    if (need > INT32_MAX)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: more than %d tensors in all", file,
                          INT32_MAX);
    if (need <= p->cap_tensors)
        return HR_OK;
    st_tensor *t = hr_realloc(p->pub.tensors, (size_t)need * sizeof *t);
    if (!t)
        return hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory for %" PRId64 " tensors", file,
                          need);
    p->pub.tensors = t;
    p->cap_tensors = (int32_t)need;
    return HR_OK;
}

static hr_status check_metadata(const cJSON *m, const char *file, hr_error *err) {
    if (!cJSON_IsObject(m))
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: '__metadata__' must be an object of strings", file);
    for (const cJSON *e = m->child; e; e = e->next) {
        if (!cJSON_IsString(e))
            return hr_err_set(err, HR_ERR_FORMAT,
                              "%s: '__metadata__' entry '%s' is not a string", file, e->string);
    }
    return HR_OK;
}

/* Fills t from one header entry; *begin_out is its offset in the data
 * section. t->name is left to the caller. */
static hr_status parse_entry(const cJSON *e, const char *file, const uint8_t *data,
                             uint64_t data_bytes, int32_t file_index, st_tensor *t,
                             uint64_t *begin_out, hr_error *err) {
    const char *tn = e->string;
    if (!cJSON_IsObject(e))
        return hr_err_set(err, HR_ERR_FORMAT, "%s: tensor '%s': entry is not an object", file,
                          tn);
    const cJSON *jd = NULL, *js = NULL, *jo = NULL;
    for (const cJSON *f = e->child; f; f = f->next) {
        const cJSON **slot = strcmp(f->string, "dtype") == 0          ? &jd
                             : strcmp(f->string, "shape") == 0        ? &js
                             : strcmp(f->string, "data_offsets") == 0 ? &jo
                                                                      : NULL;
        if (!slot)
            continue; /* unknown fields are ignored, as the reference reader does */
        if (*slot)
            return hr_err_set(err, HR_ERR_FORMAT, "%s: tensor '%s': field '%s' appears twice",
                              file, tn, f->string);
        *slot = f;
    }
    if (!jd || !js || !jo)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: tensor '%s': missing field '%s'", file, tn,
                          !jd ? "dtype" : !js ? "shape" : "data_offsets");

    /* dtype */
    if (!cJSON_IsString(jd))
        return hr_err_set(err, HR_ERR_FORMAT, "%s: tensor '%s': 'dtype' is not a string", file,
                          tn);
    bool known = false;
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++) {
        if (strcmp(jd->valuestring, st_dtypes[i].name) == 0) {
            t->dtype = st_dtypes[i].dtype;
            known = true;
            break;
        }
    }
    if (!known)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "%s: tensor '%s': dtype '%.32s' is not supported (headroom reads F32 "
                          "F16 BF16 F64 I8 U8 I16 I32)",
                          file, tn, jd->valuestring);

    /* shape: dims >= 0; zero-size tensors are legal */
    if (!cJSON_IsArray(js))
        return hr_err_set(err, HR_ERR_FORMAT, "%s: tensor '%s': 'shape' is not an array", file,
                          tn);
    int n_dims = cJSON_GetArraySize(js);
    if (n_dims > ST_MAX_DIMS)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "%s: tensor '%s' has %d dimensions; headroom reads at most %d", file,
                          tn, n_dims, ST_MAX_DIMS);
    t->n_dims = (int32_t)n_dims;
    int64_t n_elem = 1;
    int32_t d = 0;
    for (const cJSON *v = js->child; v; v = v->next, d++) {
        uint64_t dim;
        if (!json_uint(v, &dim))
            return hr_err_set(err, HR_ERR_FORMAT,
                              "%s: tensor '%s': shape[%d] is not a non-negative integer", file,
                              tn, (int)d);
        t->shape[d] = (int64_t)dim;
        if (dim != 0 && n_elem > INT64_MAX / (int64_t)dim)
            return hr_err_set(err, HR_ERR_FORMAT,
                              "%s: tensor '%s': element count of the shape overflows", file, tn);
        n_elem *= (int64_t)dim;
    }
    for (int32_t i = 0; i < t->n_dims; i++)
        t->ne[i] = t->shape[t->n_dims - 1 - i];
    uint64_t want_bytes;
    if (!hr_dtype_bytes_checked(t->dtype, n_elem, &want_bytes))
        return hr_err_set(err, HR_ERR_FORMAT, "%s: tensor '%s': byte size of the shape overflows",
                          file, tn);

    /* data_offsets: [begin, end) inside the data section, sized by the shape */
    uint64_t begin, end;
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 || !json_uint(jo->child, &begin) ||
        !json_uint(jo->child->next, &end))
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: tensor '%s': 'data_offsets' must be [begin, end] with "
                          "non-negative integers",
                          file, tn);
    if (begin > end)
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                          "] end before they begin",
                          file, tn, begin, end);
    if (end > data_bytes)
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: tensor '%s' ends at byte %" PRIu64 " of the data section, which "
                          "has %" PRIu64 " bytes (truncated download?)",
                          file, tn, end, data_bytes);
    if (end - begin != want_bytes) {
        char sh[128];
        shape_str(sh, sizeof sh, t->shape, t->n_dims);
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: tensor '%s': data_offsets span %" PRIu64 " bytes but shape %s "
                          "of %s needs %" PRIu64,
                          file, tn, end - begin, sh, jd->valuestring, want_bytes);
    }
    t->n_bytes = want_bytes;
    t->data = data + begin;
    t->file_index = file_index;
    *begin_out = begin;
    return HR_OK;
}

typedef struct {
    uint64_t begin, end;
    int32_t index;
} st_span;

static int cmp_span(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Tensors [first, first + n) of one file must not share bytes. Zero-size
 * tensors own no bytes, so they may sit anywhere. */
static hr_status check_overlaps(const st_set *s, int32_t first, const uint64_t *begins, int32_t n,
                                const char *file, hr_error *err) {
    if (n < 2)
        return HR_OK;
    st_span *sp = hr_malloc((size_t)n * sizeof *sp);
    if (!sp)
        return hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", file);
    for (int32_t i = 0; i < n; i++)
        sp[i] = (st_span){begins[i], begins[i] + s->tensors[first + i].n_bytes, first + i};
    qsort(sp, (size_t)n, sizeof *sp, cmp_span);
    hr_status st = HR_OK;
    const st_span *last = NULL; /* the non-empty tensor reaching furthest so far */
    for (int32_t i = 0; i < n; i++) {
        if (sp[i].begin == sp[i].end)
            continue;
        if (last && sp[i].begin < last->end) {
            st = hr_err_set(err, HR_ERR_FORMAT,
                            "%s: tensors '%s' [%" PRIu64 ", %" PRIu64 ") and '%s' [%" PRIu64
                            ", %" PRIu64 ") overlap",
                            file, s->tensors[last->index].name, last->begin, last->end,
                            s->tensors[sp[i].index].name, sp[i].begin, sp[i].end);
            break;
        }
        if (!last || sp[i].end > last->end)
            last = &sp[i];
    }
    hr_free(sp);
    return st;
}

/* Appends the tensors of one file (buf, size) to p. */
static hr_status parse_file(st_set_priv *p, const uint8_t *buf, uint64_t size, const char *file,
                            int32_t file_index, hr_error *err) {
    if (size < 8)
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: %" PRIu64 " bytes, too short for the 8-byte header length "
                          "(truncated?)",
                          file, size);
    if (memcmp(buf, "GGUF", 4) == 0)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: this is a GGUF file, not safetensors", file);
    uint64_t n_header = read_le64(buf);
    if (n_header > ST_MAX_HEADER_BYTES)
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: header length %" PRIu64 " is over the 100 MB limit (not a "
                          "safetensors file?)",
                          file, n_header);
    if (n_header > size - 8)
        return hr_err_set(err, HR_ERR_FORMAT,
                          "%s: header length %" PRIu64 " but only %" PRIu64
                          " bytes follow (truncated?)",
                          file, n_header, size - 8);
    const uint8_t *data = buf + 8 + n_header;
    uint64_t data_bytes = size - 8 - n_header;

    hr_status st = HR_OK;
    cJSON *root = NULL;
    uint64_t *begins = NULL;
    int32_t first = p->pub.n_tensors, n_here = 0, n_entries;
    char *text = hr_strndup((const char *)buf + 8, (size_t)n_header);
    if (!text) {
        st = hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory for a %" PRIu64 "-byte header",
                        file, n_header);
        goto fail;
    }
    st = parse_json_object(text, (size_t)n_header, file, "header", &root, err);
    if (st != HR_OK)
        goto fail;

    n_entries = (int32_t)cJSON_GetArraySize(root);
    st = reserve_tensors(p, n_entries, file, err);
    if (st != HR_OK)
        goto fail;
    begins = hr_malloc((size_t)(n_entries > 0 ? n_entries : 1) * sizeof *begins);
    if (!begins) {
        st = hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", file);
        goto fail;
    }
    for (const cJSON *e = root->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            st = check_metadata(e, file, err);
            if (st != HR_OK)
                goto fail;
            continue;
        }
        st_tensor *t = &p->pub.tensors[first + n_here];
        memset(t, 0, sizeof *t);
        st = parse_entry(e, file, data, data_bytes, file_index, t, &begins[n_here], err);
        if (st != HR_OK)
            goto fail;
        t->name = hr_strdup(e->string);
        if (!t->name) {
            st = hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", file);
            goto fail;
        }
        n_here++;
        p->pub.n_tensors++; /* counted only once complete, so st_free sees whole entries */
    }
    st = check_overlaps(&p->pub, first, begins, n_here, file, err);

fail:
    hr_free(begins);
    cJSON_Delete(root);
    hr_free(text);
    return st;
}

static int cmp_name_ref(const void *a, const void *b) {
    return strcmp(((const st_name_ref *)a)->name, ((const st_name_ref *)b)->name);
}

/* Builds the name index over all files and rejects duplicate names. */
static hr_status index_names(st_set_priv *p, const char *what, hr_error *err) {
    int32_t n = p->pub.n_tensors;
    if (n == 0)
        return HR_OK;
    st_name_ref *r = hr_malloc((size_t)n * sizeof *r);
    if (!r)
        return hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", what);
    for (int32_t i = 0; i < n; i++)
        r[i] = (st_name_ref){p->pub.tensors[i].name, i};
    qsort(r, (size_t)n, sizeof *r, cmp_name_ref);
    for (int32_t i = 1; i < n; i++) {
        if (strcmp(r[i - 1].name, r[i].name) != 0)
            continue;
        const st_tensor *a = &p->pub.tensors[r[i - 1].index], *b = &p->pub.tensors[r[i].index];
        hr_status st;
        if (a->file_index != b->file_index && p->pub.n_files > 0)
            st = hr_err_set(err, HR_ERR_FORMAT, "%s: tensor '%s' appears in both %s and %s",
                            what, a->name, p->pub.files[a->file_index].path,
                            p->pub.files[b->file_index].path);
        else
            st = hr_err_set(err, HR_ERR_FORMAT, "%s: tensor '%s' appears twice",
                            p->pub.n_files > 0 ? p->pub.files[a->file_index].path : what,
                            a->name);
        hr_free(r);
        return st;
    }
    p->by_name = r;
    return HR_OK;
}

void st_free(st_set *s) {
    if (!s)
        return;
    st_set_priv *p = (st_set_priv *)s;
    for (int32_t i = 0; i < s->n_tensors; i++)
        hr_free(s->tensors[i].name);
    hr_free(s->tensors);
    for (int32_t i = 0; i < s->n_files; i++)
        hr_file_unmap(&s->files[i]);
    hr_free(s->files);
    hr_free(p->by_name);
    hr_free(p);
}

const st_tensor *st_find(const st_set *s, const char *name) {
    if (!s || s->n_tensors == 0)
        return NULL;
    const st_set_priv *p = (const st_set_priv *)s;
    st_name_ref key = {name, 0};
    const st_name_ref *r =
        bsearch(&key, p->by_name, (size_t)s->n_tensors, sizeof key, cmp_name_ref);
    return r ? &s->tensors[r->index] : NULL;
}

hr_status st_parse(const uint8_t *buf, uint64_t size, const char *name, st_set **out,
                   hr_error *err) {
    st_set_priv *p = NULL;
    hr_status st = set_create(&p, err);
    if (st != HR_OK)
        return st;
    st = parse_file(p, buf, size, name, 0, err);
    if (st == HR_OK)
        st = index_names(p, name, err);
    if (st != HR_OK) {
        st_free(&p->pub);
        return st;
    }
    *out = &p->pub;
    return HR_OK;
}

/* Maps and parses each path in turn, as file_index 0, 1, ... */
static hr_status open_files(const char *const *paths, int32_t n, const char *what,
                            st_set **out, hr_error *err) {
    st_set_priv *p = NULL;
    hr_status st = set_create(&p, err);
    if (st != HR_OK)
        return st;
    p->pub.files = hr_calloc((size_t)n, sizeof *p->pub.files);
    if (!p->pub.files) {
        st = hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", what);
        goto fail;
    }
    for (int32_t i = 0; i < n; i++) {
        st = hr_file_map(paths[i], &p->pub.files[i], err);
        if (st != HR_OK)
            goto fail;
        p->pub.n_files++;
        const hr_mapped_file *f = &p->pub.files[i];
        st = parse_file(p, f->data, f->size, f->path, i, err);
        if (st != HR_OK)
            goto fail;
    }
    st = index_names(p, what, err);
    if (st != HR_OK)
        goto fail;
    *out = &p->pub;
    return HR_OK;
fail:
    st_free(&p->pub);
    return st;
}

hr_status st_open_file(const char *path, st_set **out, hr_error *err) {
    return open_files(&path, 1, path, out, err);
}

/* ---------------------------------------------------------------- folders */

typedef struct {
    const char *tensor;
    const char *shard;
} st_map_entry;

static int cmp_map_entry(const void *a, const void *b) {
    return strcmp(((const st_map_entry *)a)->tensor, ((const st_map_entry *)b)->tensor);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Shard names are plain file names in the same folder: a '/' or '..' could
 * make a downloaded index open any file on the machine. */
static bool shard_name_ok(const char *s) {
    return s[0] != '\0' && !strchr(s, '/') && !strchr(s, '\\') && !strstr(s, "..");
}

static hr_status join_all(const char *dir, const char *const *names, int32_t n, char ***out,
                          hr_error *err) {
    char **paths = hr_calloc((size_t)n, sizeof *paths);
    if (!paths)
        return hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", dir);
    for (int32_t i = 0; i < n; i++) {
        size_t len = strlen(dir) + 1 + strlen(names[i]) + 1;
        paths[i] = hr_malloc(len);
        if (!paths[i] || !hr_path_join(paths[i], len, dir, names[i])) {
            for (int32_t j = 0; j <= i; j++)
                hr_free(paths[j]);
            hr_free(paths);
            return hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", dir);
        }
    }
    *out = paths;
    return HR_OK;
}

static void free_paths(char **paths, int32_t n) {
    if (!paths)
        return;
    for (int32_t i = 0; i < n; i++)
        hr_free(paths[i]);
    hr_free(paths);
}

static hr_status open_with_index(const char *dir, const char *index_path, st_set **out,
                                 hr_error *err) {
    char *text = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    st_map_entry *map = NULL;
    const char **shards = NULL;
    char **paths = NULL;
    int32_t n_shards = 0, n_map = 0, i;
    const cJSON *wm = NULL;
    st_set *s = NULL;
    hr_status st = hr_file_read_all(index_path, ST_MAX_INDEX_BYTES, &text, &len, err);
    if (st != HR_OK)
        return st;
    st = parse_json_object(text, len, index_path, "index", &root, err);
    if (st != HR_OK)
        goto fail;

    for (const cJSON *e = root->child; e; e = e->next) {
        if (strcmp(e->string, "weight_map") != 0)
            continue;
        if (wm) {
            st = hr_err_set(err, HR_ERR_FORMAT, "%s: 'weight_map' appears twice", index_path);
            goto fail;
        }
        wm = e;
    }
    if (!wm || !cJSON_IsObject(wm) || !wm->child) {
        st = hr_err_set(err, HR_ERR_FORMAT, "%s: 'weight_map' is %s", index_path,
                        !wm ? "missing" : !cJSON_IsObject(wm) ? "not an object" : "empty");
        goto fail;
    }

    /* The weight map: string values, safe shard names, unique tensor names. */
    n_map = (int32_t)cJSON_GetArraySize(wm);
    map = hr_malloc((size_t)n_map * sizeof *map);
    shards = hr_malloc((size_t)n_map * sizeof *shards);
    if (!map || !shards) {
        st = hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", index_path);
        goto fail;
    }
    i = 0;
    for (const cJSON *e = wm->child; e; e = e->next, i++) {
        if (!cJSON_IsString(e)) {
            st = hr_err_set(err, HR_ERR_FORMAT,
                            "%s: weight_map entry for tensor '%s' is not a file name", index_path,
                            e->string);
            goto fail;
        }
        if (!shard_name_ok(e->valuestring)) {
            st = hr_err_set(err, HR_ERR_FORMAT,
                            "%s: tensor '%s' names shard '%.200s', which is not a plain file "
                            "name in the folder ('/' and '..' are refused)",
                            index_path, e->string, e->valuestring);
            goto fail;
        }
        map[i] = (st_map_entry){e->string, e->valuestring};
        shards[i] = e->valuestring;
    }
    qsort(map, (size_t)n_map, sizeof *map, cmp_map_entry);
    for (i = 1; i < n_map; i++) {
        if (strcmp(map[i - 1].tensor, map[i].tensor) == 0) {
            st = hr_err_set(err, HR_ERR_FORMAT, "%s: tensor '%s' appears twice in weight_map",
                            index_path, map[i].tensor);
            goto fail;
        }
    }

    /* Distinct shards, each opened once, in name order. */
    qsort(shards, (size_t)n_map, sizeof *shards, cmp_str);
    for (i = 0; i < n_map; i++) {
        if (n_shards == 0 || strcmp(shards[n_shards - 1], shards[i]) != 0)
            shards[n_shards++] = shards[i];
    }
    if (n_shards > ST_MAX_FILES) {
        st = hr_err_set(err, HR_ERR_UNSUPPORTED, "%s: %d shards (at most %d are read)",
                        index_path, (int)n_shards, ST_MAX_FILES);
        goto fail;
    }
    st = join_all(dir, shards, n_shards, &paths, err);
    if (st != HR_OK)
        goto fail;
    st = open_files((const char *const *)paths, n_shards, index_path, &s, err);
    if (st != HR_OK)
        goto fail;

    /* Every tensor of the map must be in the shard the map names. */
    for (i = 0; i < n_map; i++) {
        const st_tensor *t = st_find(s, map[i].tensor);
        const char **want = bsearch(&map[i].shard, shards, (size_t)n_shards, sizeof *shards,
                                    cmp_str);
        HR_ASSERT(want != NULL);
        if (!t) {
            st = hr_err_set(err, HR_ERR_FORMAT,
                            "%s: tensor '%s' is mapped to %s, which does not contain it "
                            "(incomplete download or stale index?)",
                            index_path, map[i].tensor, map[i].shard);
            goto fail;
        }
        if (t->file_index != (int32_t)(want - shards)) {
            st = hr_err_set(err, HR_ERR_FORMAT,
                            "%s: tensor '%s' is mapped to %s but found in %s", index_path,
                            map[i].tensor, map[i].shard, shards[t->file_index]);
            goto fail;
        }
    }
    *out = s;
    s = NULL;

fail:
    st_free(s);
    free_paths(paths, n_shards);
    hr_free(shards);
    hr_free(map);
    cJSON_Delete(root);
    hr_free(text);
    return st;
}

/* No index: model.safetensors alone when present (a folder may also hold
 * other exports such as consolidated.safetensors), else every *.safetensors
 * sorted by name. Hidden files ("._model.safetensors" from macOS) are not
 * weights. */
static hr_status open_without_index(const char *dir, st_set **out, hr_error *err) {
    DIR *d = opendir(dir);
    if (!d)
        return hr_err_set(err, HR_ERR_IO, "%s: cannot read the folder", dir);
    char **names = NULL, **paths = NULL;
    int32_t n = 0, cap = 0, n_open = 0;
    bool has_model = false;
    hr_status st = HR_OK;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        if (de->d_name[0] == '.' || !hr_path_has_suffix(de->d_name, ".safetensors"))
            continue;
        if (strcmp(de->d_name, "model.safetensors") == 0)
            has_model = true;
        if (n == cap) {
            if (cap >= ST_MAX_FILES) {
                st = hr_err_set(err, HR_ERR_UNSUPPORTED,
                                "%s: more than %d .safetensors files", dir, ST_MAX_FILES);
                goto fail;
            }
            int32_t ncap = cap ? cap * 2 : 8;
            char **nn = hr_realloc(names, (size_t)ncap * sizeof *nn);
            if (!nn) {
                st = hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", dir);
                goto fail;
            }
            names = nn;
            cap = ncap;
        }
        names[n] = hr_strdup(de->d_name);
        if (!names[n]) {
            st = hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", dir);
            goto fail;
        }
        n++;
    }
    if (n == 0) {
        st = hr_err_set(err, HR_ERR_IO,
                        "%s: no model.safetensors.index.json and no .safetensors file", dir);
        goto fail;
    }
    static const char *const only_model[1] = {"model.safetensors"};
    n_open = has_model ? 1 : n;
    if (!has_model)
        qsort(names, (size_t)n, sizeof *names, cmp_str);
    st = join_all(dir, has_model ? only_model : (const char *const *)names, n_open, &paths, err);
    if (st != HR_OK) {
        n_open = 0; /* join_all frees its own partial work */
        goto fail;
    }
    st = open_files((const char *const *)paths, n_open, dir, out, err);
fail:
    free_paths(paths, n_open);
    closedir(d);
    free_paths(names, n);
    return st;
}

hr_status st_open_dir(const char *dir, st_set **out, hr_error *err) {
    size_t len = strlen(dir) + sizeof "/model.safetensors.index.json";
    char *index_path = hr_malloc(len);
    if (!index_path)
        return hr_err_set(err, HR_ERR_NOMEM, "%s: out of memory", dir);
    hr_path_join(index_path, len, dir, "model.safetensors.index.json");
    hr_status st = hr_path_exists(index_path) ? open_with_index(dir, index_path, out, err)
                                              : open_without_index(dir, out, err);
    hr_free(index_path);
    return st;
}
