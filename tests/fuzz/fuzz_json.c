/*
 * fuzz_json.c — libFuzzer entry for config.json and generation_config.json.
 *
 * The same bytes go through both parsers, the second on top of what the
 * first produced (or a zeroed info when it failed), as the model loader
 * chains them. A parse must succeed with sane values or fail with a message.
 */
#include "format/hf_config.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hr_model_info info;
    memset(&info, 0, sizeof info);
    hr_error err;
    if (hf_config_parse((const char *)data, size, "config.json", &info, &err) == HR_OK) {
        /* what the rest of the engine relies on */
        if (info.n_embd <= 0 || info.n_layer <= 0 || info.n_head_kv <= 0 ||
            info.n_head % info.n_head_kv != 0 || info.head_dim <= 0 || info.head_dim % 2 ||
            !(info.rms_eps > 0.0f) || info.n_eos < 0 || info.n_eos > 8)
            __builtin_trap();
    }
    hf_generation_config_parse((const char *)data, size, "generation_config.json", &info, &err);
    if (info.n_eos < 0 || info.n_eos > 8)
        __builtin_trap();
    return 0;
}
