/*
 * fuzz_safetensors.c — libFuzzer entry for the safetensors parser.
 *
 * The input is a whole file image: st_parse must either accept it or fail
 * with a message, never read outside [data, data + size) or leak. An
 * accepted set is walked so that every tensor's bytes are touched: a wrong
 * bound would show up as an ASan report here rather than in a kernel.
 * Then the set goes through bitsandbytes' repacking (model_bnb.c), as a
 * 4-bit and as an 8-bit checkpoint: companions, quant_state JSON and shapes
 * all come from the input.
 */
#include "format/safetensors.h"
#include "model/model_load.h"

#include <string.h>

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hr_error err;
    st_set *s = NULL;
    if (st_parse(data, size, "fuzz.safetensors", &s, &err) != HR_OK)
        return 0;
    volatile uint8_t sink = 0;
    for (int32_t i = 0; i < s->n_tensors; i++) {
        const st_tensor *t = &s->tensors[i];
        if (t->n_bytes)
            sink ^= (uint8_t)(t->data[0] ^ t->data[t->n_bytes - 1]);
        if (st_find(s, t->name) == NULL)
            __builtin_trap(); /* the name index must find every tensor */
    }
    (void)sink;
    st_free(s);
    static const char *const configs[] = {
        "{\"quantization_config\": {\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true}}",
        "{\"quantization_config\": {\"quant_method\": \"bitsandbytes\", \"load_in_8bit\": true}}",
    };
    for (int c = 0; c < 2; c++) {
        hr_model *m = NULL;
        if (st_parse(data, size, "fuzz.safetensors", &s, &err) != HR_OK ||
            model_wrap_st(s, &m, &err) != HR_OK)
            continue;
        model_bnb_repack(m, configs[c], strlen(configs[c]), "fuzz", &err);
        hr_model_free(m);
    }
    return 0;
}
