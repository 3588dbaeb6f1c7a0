/*
 * json.h — cJSON set up to allocate through hr_malloc/hr_free, so JSON
 * parsing is counted and fault-injected like every other allocation.
 * Call hr_json_init() before any cJSON call (cheap after the first).
 */
#ifndef HR_UTIL_JSON_H
#define HR_UTIL_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

void hr_json_init(void);

/* Parses len bytes (no NUL needed). On failure returns NULL with *nomem set
 * when an allocation failed (rather than the text being bad JSON); *end (may
 * be NULL) is where parsing stopped. */
cJSON *hr_json_parse(const char *text, size_t len, const char **end, bool *nomem);

#endif
