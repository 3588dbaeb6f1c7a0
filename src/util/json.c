/* json.c — route cJSON's allocations through util/alloc (see json.h). */
#include "util/json.h"

#include "util/alloc.h"

#include <pthread.h>

static pthread_once_t json_once = PTHREAD_ONCE_INIT;

static void json_hooks(void) {
    cJSON_Hooks hooks = {.malloc_fn = hr_malloc, .free_fn = hr_free};
    cJSON_InitHooks(&hooks);
}

void hr_json_init(void) { pthread_once(&json_once, json_hooks); }

cJSON *hr_json_parse(const char *text, size_t len, const char **end, bool *nomem) {
    hr_json_init();
    hr_alloc_failed_reset();
    const char *stop = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &stop, false);
    if (end)
        *end = stop;
    *nomem = !root && hr_alloc_failed();
    return root;
}
