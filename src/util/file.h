/*
 * file.h — read-only memory maps and whole-file reads.
 *
 * Model tensors point into a mapping (the CPU backend may copy the matrices
 * into huge-page memory and drop the mapped pages: hr_file_drop_pages).
 * Small text files (JSON configs) are read whole, with a size cap so a
 * hostile file cannot make us allocate gigabytes.
 */
#ifndef HR_UTIL_FILE_H
#define HR_UTIL_FILE_H

#include "util/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const uint8_t *data; /* (size) bytes, read-only */
    size_t size;
    char *path;          /* owned copy, for messages */
} hr_mapped_file;

hr_status hr_file_map(const char *path, hr_mapped_file *out, hr_error *err);
void hr_file_unmap(hr_mapped_file *f);
/* Drops the whole pages inside [p, p + n_bytes) of a mapping made by
 * hr_file_map from this process's memory; the page cache keeps them and a
 * later read faults them back in, unchanged. For data copied elsewhere. */
void hr_file_drop_pages(const void *p, size_t n_bytes);

/* Reads the file into a NUL-terminated buffer (owned by caller, hr_free).
 * Files larger than max_bytes are refused with HR_ERR_FORMAT. */
hr_status hr_file_read_all(const char *path, size_t max_bytes, char **out, size_t *out_len,
                           hr_error *err);

bool hr_path_is_dir(const char *path);
bool hr_path_exists(const char *path);
/* dir + "/" + name into buf; false when it does not fit. */
bool hr_path_join(char *buf, size_t cap, const char *dir, const char *name);
/* Whether path ends with suffix (case-insensitive). */
bool hr_path_has_suffix(const char *path, const char *suffix);

#endif
