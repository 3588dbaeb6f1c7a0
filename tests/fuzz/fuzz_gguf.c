/*
 * fuzz_gguf.c — libFuzzer entry for the GGUF reader.
 *
 * The input is a whole file image: gguf_parse must either accept it or fail
 * with a message, never read outside [data, data + size), allocate beyond
 * what the input justifies, or leak. An accepted file is walked the way the
 * loaders will walk it: every key looked up and read through the getters,
 * the first and last element of every array and every tensor's first and
 * last byte touched, so a wrong bound shows up here as an ASan report; the
 * invariants the loaders rely on are asserted with a trap.
 */
#include "format/gguf.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t touch_str(gguf_str s) {
    return s.len ? (uint8_t)(s.ptr[0] ^ s.ptr[s.len - 1]) : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hr_error err;
    gguf_file *f = NULL;
    if (gguf_parse(data, size, "fuzz.gguf", &f, &err) != HR_OK)
        return 0;
    volatile uint8_t sink = 0;
    if (f->alignment == 0 || (f->alignment & (f->alignment - 1)) != 0 ||
        f->data_offset % f->alignment != 0)
        __builtin_trap();
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        if (gguf_find(f, kv->key) != kv)
            __builtin_trap(); /* keys are unique */
        uint32_t u32;
        int64_t i64;
        float f32;
        bool b;
        gguf_str s;
        sink ^= (uint8_t)gguf_get_u32(f, kv->key, &u32);
        sink ^= (uint8_t)gguf_get_i64(f, kv->key, &i64);
        sink ^= (uint8_t)gguf_get_f32(f, kv->key, &f32);
        sink ^= (uint8_t)gguf_get_bool(f, kv->key, &b);
        if (gguf_get_str(f, kv->key, &s))
            sink ^= touch_str(s);
        if (kv->type != GGUF_TYPE_ARRAY || kv->arr_n == 0)
            continue;
        if (kv->arr_type == GGUF_TYPE_STRING) {
            sink ^= touch_str(kv->arr_str[0]);
            sink ^= touch_str(kv->arr_str[kv->arr_n - 1]);
        } else {
            double d;
            sink ^= (uint8_t)gguf_arr_i64(kv, kv->arr_n - 1, &i64);
            sink ^= (uint8_t)gguf_arr_f64(kv, kv->arr_n - 1, &d);
            if (gguf_arr_i64(kv, kv->arr_n, &i64))
                __builtin_trap(); /* one past the end must be refused */
        }
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (gguf_find_tensor(f, t->name) != t || t->n_dims < 1 || t->n_dims > 4 ||
            t->offset % f->alignment != 0 || t->n_bytes == 0 ||
            t->data < data || (uint64_t)(t->data - data) + t->n_bytes > size)
            __builtin_trap();
        sink ^= (uint8_t)(t->data[0] ^ t->data[t->n_bytes - 1]);
    }
    (void)sink;
    gguf_free(f);
    return 0;
}
