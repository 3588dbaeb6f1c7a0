/*
 * test_hf_config.c — config.json / generation_config.json against published
 * model configs, and against every way a field can be missing or wrong.
 *
 * tests/fixtures/hf_configs/ holds the configs of real checkpoints (values
 * as published on the Hugging Face hub) plus three written by transformers 5
 * (rope_parameters instead of rope_theta/rope_scaling); each is checked
 * field by field. Field-level corruption is generated here from the
 * TinyLlama config with cJSON, so one table covers each field and each bad
 * kind of value; tests/fixtures/corrupt/config-*.json are the same kinds as
 * files, for the fuzz corpus and the CLI.
 */
#include "format/hf_config.h"
#include "util/alloc.h"
#include "test.h"

#include <cjson/cJSON.h>
#include <stdbool.h>

#define CFG_DIR "tests/fixtures/hf_configs/"

static hr_status parse_file(const char *rel, hr_model_info *m, hr_error *err) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", HR_SOURCE_DIR, rel);
    size_t len;
    char *t = test_read_file(path, &len, 1);
    const char *base = strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel;
    hr_status s = hf_config_parse(t, len, base, m, err);
    free(t);
    return s;
}

static hr_status parse_gen_file(const char *rel, hr_model_info *m, hr_error *err) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", HR_SOURCE_DIR, rel);
    size_t len;
    char *t = test_read_file(path, &len, 1);
    hr_status s = hf_generation_config_parse(t, len, "generation_config.json", m, err);
    free(t);
    return s;
}

/* ---------------------------------------------------------------- real configs */

typedef struct {
    const char *model; /* fixture base name */
    bool has_gen;      /* a .generation_config.json exists */
    const char *arch, *name;
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx_train;
    double rms_eps, rope_theta;
    hr_rope_scaling scaling;
    double factor, low, high;
    int32_t orig_ctx;
    bool tie, qkv_bias;
    int32_t bos, n_eos, eos[8];             /* from config.json */
    int32_t gen_bos, gen_n_eos, gen_eos[8]; /* after generation_config.json */
} expect;

static const expect expects[] = {
    {"Llama-2-7b-hf", true, "llama", "meta-llama/Llama-2-7b-hf", 32000, 4096, 32, 32, 32, 128,
     11008, 4096, 1e-5, 10000, HR_ROPE_SCALING_NONE, 0, 0, 0, 0, false, false, 1, 1, {2}, 1, 1,
     {2}},
    /* generation_config adds 128001 to config.json's 128009 */
    {"Meta-Llama-3-8B-Instruct", true, "llama", "", 128256, 4096, 32, 32, 8, 128, 14336, 8192,
     1e-5, 500000, HR_ROPE_SCALING_NONE, 0, 0, 0, 0, false, false, 128000, 1, {128009}, 128000,
     2, {128009, 128001}},
    {"Llama-3.1-8B-Instruct", true, "llama", "", 128256, 4096, 32, 32, 8, 128, 14336, 131072,
     1e-5, 500000, HR_ROPE_SCALING_LLAMA3, 8, 1, 4, 8192, false, false, 128000, 3,
     {128001, 128008, 128009}, 128000, 3, {128001, 128008, 128009}},
    {"Llama-3.2-1B", true, "llama", "", 128256, 2048, 16, 32, 8, 64, 8192, 131072, 1e-5, 500000,
     HR_ROPE_SCALING_LLAMA3, 32, 1, 4, 8192, true, false, 128000, 1, {128001}, 128000, 1,
     {128001}},
    /* sliding_window 4096 caps the 32768 of max_position_embeddings */
    {"Mistral-7B-v0.1", true, "mistral", "", 32000, 4096, 32, 32, 8, 128, 14336, 4096, 1e-5,
     10000, HR_ROPE_SCALING_NONE, 0, 0, 0, 0, false, false, 1, 1, {2}, 1, 1, {2}},
    {"Qwen2-7B", true, "qwen2", "", 152064, 3584, 28, 28, 4, 128, 18944, 131072, 1e-6, 1e6,
     HR_ROPE_SCALING_NONE, 0, 0, 0, 0, false, true, 151643, 1, {151643}, 151643, 1, {151643}},
    {"Qwen2.5-0.5B", true, "qwen2", "", 151936, 896, 24, 14, 2, 64, 4864, 32768, 1e-6, 1e6,
     HR_ROPE_SCALING_NONE, 0, 0, 0, 0, true, true, 151643, 1, {151643}, 151643, 1, {151643}},
    {"Qwen2.5-0.5B-Instruct", true, "qwen2", "", 151936, 896, 24, 14, 2, 64, 4864, 32768, 1e-6,
     1e6, HR_ROPE_SCALING_NONE, 0, 0, 0, 0, true, true, 151643, 1, {151645}, 151643, 2,
     {151645, 151643}},
    {"TinyLlama-1.1B-Chat-v1.0", true, "llama", "", 32000, 2048, 22, 32, 4, 64, 5632, 2048, 1e-5,
     10000, HR_ROPE_SCALING_NONE, 0, 0, 0, 0, false, false, 1, 1, {2}, 1, 1, {2}},
    {"SmolLM2-135M", true, "llama", "", 49152, 576, 30, 9, 3, 64, 1536, 8192, 1e-5, 100000,
     HR_ROPE_SCALING_NONE, 0, 0, 0, 0, true, false, 0, 1, {0}, 0, 1, {0}},
    {"vicuna-7b-v1.5-16k", true, "llama", "vicuna-7b-v1.5-16k", 32000, 4096, 32, 32, 32, 128,
     11008, 4096, 1e-5, 10000, HR_ROPE_SCALING_LINEAR, 4, 0, 0, 0, false, false, 1, 1, {2}, 1,
     1, {2}},
    {"tiny-llama3-transformers5", false, "llama", "", 320, 64, 2, 4, 2, 16, 176, 1024, 1e-5,
     500000, HR_ROPE_SCALING_LLAMA3, 8, 1, 4, 256, true, false, 1, 2, {2, 3}, 0, 0, {0}},
    /* head_dim 32 given explicitly (4 heads x 32 != hidden 64); window caps ctx */
    {"tiny-mistral-linear-transformers5", false, "mistral", "", 320, 64, 2, 4, 1, 32, 176, 4096,
     1e-6, 10000, HR_ROPE_SCALING_LINEAR, 2, 0, 0, 0, false, false, 1, 1, {2}, 0, 0, {0}},
    /* bos/eos null; defaults for rms_norm_eps; layer_types all full_attention */
    {"tiny-qwen2-transformers5", false, "qwen2", "", 320, 64, 3, 4, 2, 16, 176, 512, 1e-6, 10000,
     HR_ROPE_SCALING_NONE, 0, 0, 0, 0, true, true, -1, 0, {0}, 0, 0, {0}},
};

static void check_ids(const char *model, const char *what, const hr_model_info *m, int32_t bos,
                      int32_t n_eos, const int32_t *eos) {
    CHECK_MSG(m->bos_id == bos, "%s %s: bos %d != %d", model, what, m->bos_id, bos);
    CHECK_MSG(m->n_eos == n_eos, "%s %s: n_eos %d != %d", model, what, m->n_eos, n_eos);
    for (int32_t i = 0; i < n_eos && i < m->n_eos; i++)
        CHECK_MSG(m->eos_ids[i] == eos[i], "%s %s: eos[%d] %d != %d", model, what, i,
                  m->eos_ids[i], eos[i]);
}

static void test_real_configs(void) {
    for (size_t i = 0; i < sizeof expects / sizeof expects[0]; i++) {
        const expect *e = &expects[i];
        char rel[256];
        snprintf(rel, sizeof rel, CFG_DIR "%s.config.json", e->model);
        hr_model_info m;
        memset(&m, 0x5a, sizeof m);
        hr_error err = {0};
        hr_status s = parse_file(rel, &m, &err);
        CHECK_MSG(s == HR_OK, "%s: %s %s", e->model, hr_status_name(s), err.msg);
        if (s != HR_OK)
            continue;
#define FIELD(f, v) CHECK_MSG(m.f == (v), "%s: " #f " %lld != %lld", e->model, (long long)m.f, \
                              (long long)(v))
#define FFIELD(f, v) CHECK_MSG(m.f == (float)(v), "%s: " #f " %g != %g", e->model, (double)m.f, \
                               (double)(v))
        CHECK_MSG(strcmp(m.arch, e->arch) == 0, "%s: arch %s", e->model, m.arch);
        CHECK_MSG(strcmp(m.name, e->name) == 0, "%s: name '%s'", e->model, m.name);
        FIELD(n_vocab, e->n_vocab);
        FIELD(n_embd, e->n_embd);
        FIELD(n_layer, e->n_layer);
        FIELD(n_head, e->n_head);
        FIELD(n_head_kv, e->n_head_kv);
        FIELD(head_dim, e->head_dim);
        FIELD(n_ff, e->n_ff);
        FIELD(n_ctx_train, e->n_ctx_train);
        FFIELD(rms_eps, e->rms_eps);
        FFIELD(rope_theta, e->rope_theta);
        FIELD(rope_scaling, e->scaling);
        FFIELD(rope_factor, e->factor);
        FFIELD(rope_low_freq_factor, e->low);
        FFIELD(rope_high_freq_factor, e->high);
        FIELD(rope_orig_ctx, e->orig_ctx);
        FIELD(tie_embeddings, e->tie);
        FIELD(qkv_bias, e->qkv_bias);
        /* left for the model loader, zeroed here */
        FIELD(n_params, 0);
        FIELD(weight_bytes, 0);
        FIELD(n_tensors, 0);
        CHECK(m.format[0] == '\0');
#undef FIELD
#undef FFIELD
        check_ids(e->model, "config", &m, e->bos, e->n_eos, e->eos);
        if (!e->has_gen)
            continue;
        snprintf(rel, sizeof rel, CFG_DIR "%s.generation_config.json", e->model);
        hr_model_info before = m;
        s = parse_gen_file(rel, &m, &err);
        CHECK_MSG(s == HR_OK, "%s generation: %s %s", e->model, hr_status_name(s), err.msg);
        check_ids(e->model, "generation", &m, e->gen_bos, e->gen_n_eos, e->gen_eos);
        /* nothing else changes */
        before.bos_id = m.bos_id;
        before.n_eos = m.n_eos;
        memcpy(before.eos_ids, m.eos_ids, sizeof m.eos_ids);
        CHECK(memcmp(&before, &m, sizeof m) == 0);
    }
}

/* ---------------------------------------------------------------- corrupt files */

typedef struct {
    const char *file;
    hr_status want;
    const char *msg;
} bad_file;

static void test_corrupt_files(void) {
    static const bad_file cases[] = {
        {"config-missing-hidden.json", HR_ERR_FORMAT, "required field 'hidden_size' is missing"},
        {"config-bad-heads.json", HR_ERR_FORMAT,
         "'num_attention_heads' (32) is not a multiple of 'num_key_value_heads' (5)"},
        {"config-not-json.json", HR_ERR_FORMAT, "not valid JSON (line 5"},
        {"config-bad-arch.json", HR_ERR_UNSUPPORTED, "architecture 'GPT2LMHeadModel'"},
        {"config-rope-yarn.json", HR_ERR_UNSUPPORTED, "RoPE scaling type 'yarn'"},
        {"config-rope-dynamic.json", HR_ERR_UNSUPPORTED, "type 'dynamic'"},
        {"config-llama3-missing-field.json", HR_ERR_FORMAT,
         "'rope_scaling.low_freq_factor' is missing"},
        {"config-zero-layers.json", HR_ERR_FORMAT, "'num_hidden_layers' is 0"},
        {"config-bad-eps.json", HR_ERR_FORMAT, "'rms_norm_eps'"},
        {"config-eos-too-many.json", HR_ERR_UNSUPPORTED, "'eos_token_id'"},
        {"config-eos-out-of-range.json", HR_ERR_FORMAT, "'eos_token_id' has id 32000"},
        {"config-hidden-string.json", HR_ERR_FORMAT,
         "'hidden_size' must be an integer; found a string"},
        {"config-head-dim-indivisible.json", HR_ERR_FORMAT,
         "'hidden_size' (2050) is not a multiple of 'num_attention_heads' (32)"},
        {"config-quantized.json", HR_ERR_UNSUPPORTED, "method 'gptq'"},
        {"config-gelu.json", HR_ERR_UNSUPPORTED, "'hidden_act' is 'gelu'"},
        {"config-no-arch.json", HR_ERR_FORMAT, "neither 'architectures' nor 'model_type'"},
        {"config-dup-key.json", HR_ERR_FORMAT, "'hidden_size' appears twice"},
        {"config-top-array.json", HR_ERR_FORMAT, "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "tests/fixtures/corrupt/%s", cases[i].file);
        hr_model_info m, keep;
        memset(&m, 0x5a, sizeof m);
        keep = m;
        hr_error err = {0};
        hr_status s = parse_file(rel, &m, &err);
        CHECK_MSG(s == cases[i].want, "%s: want %s, got %s (%s)", cases[i].file,
                  hr_status_name(cases[i].want), hr_status_name(s), err.msg);
        CHECK_MSG(strstr(err.msg, cases[i].msg) && strstr(err.msg, cases[i].file),
                  "%s: message '%s' lacks '%s'", cases[i].file, err.msg, cases[i].msg);
        CHECK_MSG(memcmp(&m, &keep, sizeof m) == 0, "%s: info written on failure",
                  cases[i].file);
    }
}

/* ---------------------------------------------------------------- generated */

static cJSON *base_config(void) {
    size_t len;
    char *t = test_read_file(HR_SOURCE_DIR "/" CFG_DIR "TinyLlama-1.1B-Chat-v1.0.config.json", &len, 1);
    cJSON *j = cJSON_Parse(t);
    free(t);
    if (!j) {
        fprintf(stderr, "base config does not parse\n");
        exit(1);
    }
    return j;
}

/* Parses the base config with key set to the JSON text value ("" deletes
 * it); up to two edits. */
static hr_status parse_edit(const char *k1, const char *v1, const char *k2, const char *v2,
                            hr_model_info *m, hr_error *err) {
    cJSON *j = base_config();
    const char *keys[2] = {k1, k2}, *vals[2] = {v1, v2};
    for (int i = 0; i < 2; i++) {
        if (!keys[i])
            continue;
        cJSON_DeleteItemFromObjectCaseSensitive(j, keys[i]);
        if (vals[i][0]) {
            cJSON *v = cJSON_Parse(vals[i]);
            if (!v) {
                fprintf(stderr, "bad test value %s\n", vals[i]);
                exit(1);
            }
            cJSON_AddItemToObject(j, keys[i], v);
        }
    }
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    hr_status s = hf_config_parse(text, strlen(text), "config.json", m, err);
    free(text);
    return s;
}

typedef struct {
    const char *key;
    const char *value; /* JSON text; "" removes the key */
    hr_status want;
    const char *msg; /* for failures: substring of the message */
} edit_case;

static void test_field_edits(void) {
    static const edit_case cases[] = {
        /* required fields */
        {"hidden_size", "", HR_ERR_FORMAT, "'hidden_size' is missing"},
        {"num_hidden_layers", "", HR_ERR_FORMAT, "'num_hidden_layers' is missing"},
        {"num_attention_heads", "", HR_ERR_FORMAT, "'num_attention_heads' is missing"},
        {"intermediate_size", "", HR_ERR_FORMAT, "'intermediate_size' is missing"},
        {"vocab_size", "", HR_ERR_FORMAT, "'vocab_size' is missing"},
        {"hidden_size", "null", HR_ERR_FORMAT, "'hidden_size' is missing"},
        /* optional fields take the class defaults */
        {"num_key_value_heads", "", HR_OK, ""},
        {"num_key_value_heads", "null", HR_OK, ""},
        {"max_position_embeddings", "", HR_OK, ""},
        {"rms_norm_eps", "", HR_OK, ""},
        {"rope_theta", "", HR_OK, ""},
        {"tie_word_embeddings", "", HR_OK, ""},
        {"bos_token_id", "null", HR_OK, ""},
        {"eos_token_id", "", HR_OK, ""},
        {"hidden_act", "", HR_OK, ""},
        {"architectures", "[]", HR_OK, ""}, /* falls back to model_type */
        /* wrong integers */
        {"hidden_size", "0", HR_ERR_FORMAT, "'hidden_size' is 0"},
        {"hidden_size", "-2048", HR_ERR_FORMAT, "'hidden_size' is -2048"},
        {"hidden_size", "2048.5", HR_ERR_FORMAT, "'hidden_size' is 2048.5"},
        {"hidden_size", "1e12", HR_ERR_FORMAT, "'hidden_size' is 1000000000000"},
        {"hidden_size", "1e400", HR_ERR_FORMAT, "'hidden_size'"},
        {"hidden_size", "true", HR_ERR_FORMAT, "'hidden_size' must be an integer"},
        {"hidden_size", "[2048]", HR_ERR_FORMAT, "'hidden_size' must be an integer"},
        {"num_hidden_layers", "-1", HR_ERR_FORMAT, "'num_hidden_layers'"},
        {"num_hidden_layers", "100000", HR_ERR_FORMAT, "'num_hidden_layers'"},
        {"num_attention_heads", "0", HR_ERR_FORMAT, "'num_attention_heads'"},
        {"num_attention_heads", "3", HR_ERR_FORMAT,
         "'num_attention_heads' (3) is not a multiple of 'num_key_value_heads' (4)"},
        {"num_attention_heads", "4096", HR_ERR_FORMAT, "'hidden_size' (2048) is not a multiple"},
        {"num_attention_heads", "2048", HR_ERR_FORMAT, "head_dim 1 is odd"},
        {"num_key_value_heads", "0", HR_ERR_FORMAT, "'num_key_value_heads'"},
        {"num_key_value_heads", "64", HR_ERR_FORMAT, "'num_key_value_heads' (64)"},
        {"num_key_value_heads", "3", HR_ERR_FORMAT, "'num_key_value_heads' (3)"},
        {"intermediate_size", "0", HR_ERR_FORMAT, "'intermediate_size'"},
        {"vocab_size", "0", HR_ERR_FORMAT, "'vocab_size'"},
        {"vocab_size", "\"32000\"", HR_ERR_FORMAT,
         "'vocab_size' must be an integer; found a string"},
        {"max_position_embeddings", "0", HR_ERR_FORMAT, "'max_position_embeddings'"},
        {"head_dim", "63", HR_ERR_FORMAT, "head_dim 63 is odd"},
        {"head_dim", "0", HR_ERR_FORMAT, "'head_dim'"},
        {"head_dim", "4096", HR_ERR_FORMAT, "'head_dim'"},
        {"head_dim", "null", HR_OK, ""},
        /* wrong floats and bools */
        {"rms_norm_eps", "0", HR_ERR_FORMAT, "'rms_norm_eps' is 0; expected a number in (0, 1]"},
        {"rms_norm_eps", "-1e-5", HR_ERR_FORMAT, "'rms_norm_eps'"},
        {"rms_norm_eps", "2", HR_ERR_FORMAT, "'rms_norm_eps'"},
        {"rms_norm_eps", "1e-55", HR_ERR_FORMAT, "'rms_norm_eps' is 1e-55"},
        {"rms_norm_eps", "\"1e-5\"", HR_ERR_FORMAT,
         "'rms_norm_eps' must be a number; found a string"},
        {"rope_theta", "0", HR_ERR_FORMAT, "'rope_theta'"},
        {"rope_theta", "1e50", HR_ERR_FORMAT, "'rope_theta'"},
        {"tie_word_embeddings", "1", HR_ERR_FORMAT, "'tie_word_embeddings' must be true or false"},
        /* architecture */
        {"architectures", "\"LlamaForCausalLM\"", HR_ERR_FORMAT, "'architectures' must be a list"},
        {"architectures", "[7]", HR_ERR_FORMAT, "'architectures[0]' must be a string"},
        {"architectures", "[\"MixtralForCausalLM\"]", HR_ERR_UNSUPPORTED, "'MixtralForCausalLM'"},
        {"architectures", "[\"llama\"]", HR_ERR_UNSUPPORTED, "architecture 'llama'"},
        {"model_type", "5", HR_ERR_FORMAT, "'model_type' must be a string"},
        {"hidden_act", "\"gelu_pytorch_tanh\"", HR_ERR_UNSUPPORTED, "'gelu_pytorch_tanh'"},
        {"attention_bias", "true", HR_ERR_UNSUPPORTED, "'attention_bias' is true"},
        {"attention_bias", "\"no\"", HR_ERR_FORMAT, "'attention_bias' must be true or false"},
        {"mlp_bias", "true", HR_ERR_UNSUPPORTED, "'mlp_bias'"},
        {"use_sliding_window", "true", HR_ERR_UNSUPPORTED, "'use_sliding_window'"},
        {"layer_types", "[\"full_attention\", \"sliding_attention\"]", HR_ERR_UNSUPPORTED,
         "'layer_types[1]' is 'sliding_attention'"},
        {"layer_types", "[\"full_attention\", 1]", HR_ERR_FORMAT, "'layer_types[1]'"},
        {"layer_types", "{}", HR_ERR_FORMAT, "'layer_types' must be a list"},
        {"quantization_config", "{\"quant_method\": \"awq\"}", HR_ERR_UNSUPPORTED, "'awq'"},
        {"quantization_config", "[]", HR_ERR_UNSUPPORTED, "quantization_config"},
        /* rope */
        {"rope_scaling", "{\"type\": \"linear\"}", HR_ERR_FORMAT,
         "'rope_scaling.factor' is missing"},
        {"rope_scaling", "{\"rope_type\": \"linear\", \"factor\": 0}", HR_ERR_FORMAT,
         "'rope_scaling.factor'"},
        {"rope_scaling", "{\"factor\": 2.0}", HR_ERR_FORMAT, "'rope_scaling.rope_type' is missing"},
        {"rope_scaling", "{\"type\": 2, \"factor\": 2.0}", HR_ERR_FORMAT,
         "'rope_scaling.type' must be a string"},
        {"rope_scaling", "\"linear\"", HR_ERR_FORMAT, "'rope_scaling' must be an object"},
        {"rope_scaling", "{\"rope_type\": \"longrope\", \"factor\": 2.0}", HR_ERR_UNSUPPORTED,
         "'longrope'"},
        {"rope_scaling", "{\"rope_type\": \"default\"}", HR_OK, ""},
        {"rope_scaling",
         "{\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 4, "
         "\"high_freq_factor\": 4, \"original_max_position_embeddings\": 1024}",
         HR_ERR_FORMAT, "'rope_scaling.high_freq_factor' (4) must be greater"},
        {"rope_scaling",
         "{\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1, "
         "\"high_freq_factor\": 4, \"original_max_position_embeddings\": 8192}",
         HR_ERR_FORMAT, "original_max_position_embeddings (8192) exceeds"},
        {"rope_scaling",
         "{\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1, "
         "\"high_freq_factor\": 4, \"original_max_position_embeddings\": 1.5}",
         HR_ERR_FORMAT, "'rope_scaling.original_max_position_embeddings'"},
        {"rope_scaling",
         "{\"rope_type\": \"llama3\", \"rope_type\": \"linear\", \"factor\": 8}", HR_ERR_FORMAT,
         "'rope_scaling.rope_type' appears twice"},
        {"rope_parameters", "{\"rope_theta\": 0, \"rope_type\": \"default\"}", HR_ERR_FORMAT,
         "'rope_parameters.rope_theta'"},
        {"rope_parameters", "{\"rope_theta\": 1e4}", HR_ERR_FORMAT,
         "'rope_parameters.rope_type' is missing"},
        {"rope_parameters", "{\"rope_type\": \"yarn\", \"factor\": 4}", HR_ERR_UNSUPPORTED,
         "'yarn' ('rope_parameters.rope_type')"},
        {"rope_parameters", "5", HR_ERR_FORMAT, "'rope_parameters' must be an object"},
        /* token ids */
        {"eos_token_id", "[]", HR_OK, ""},
        {"eos_token_id", "-1", HR_ERR_FORMAT, "'eos_token_id' has id -1"},
        {"eos_token_id", "2.5", HR_ERR_FORMAT, "'eos_token_id' has id 2.5"},
        {"eos_token_id", "\"</s>\"", HR_ERR_FORMAT, "'eos_token_id' must be an integer or a list"},
        {"eos_token_id", "[2, \"x\"]", HR_ERR_FORMAT, "'eos_token_id' list holds a non-number"},
        {"eos_token_id", "[1,2,3,4,5,6,7,8,9]", HR_ERR_UNSUPPORTED, "more than 8 distinct"},
        {"bos_token_id", "32000", HR_ERR_FORMAT, "'bos_token_id' has id 32000"},
        {"bos_token_id", "[1]", HR_ERR_FORMAT, "'bos_token_id' must be an integer"},
        {"_name_or_path", "3", HR_ERR_FORMAT, "'_name_or_path' must be a string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const edit_case *c = &cases[i];
        hr_model_info m, keep;
        memset(&m, 0x5a, sizeof m);
        keep = m;
        hr_error err = {0};
        hr_status s = parse_edit(c->key, c->value, NULL, NULL, &m, &err);
        CHECK_MSG(s == c->want, "edit %zu %s=%s: want %s, got %s (%s)", i, c->key, c->value,
                  hr_status_name(c->want), hr_status_name(s), err.msg);
        if (c->want != HR_OK) {
            CHECK_MSG(strstr(err.msg, c->msg) && strstr(err.msg, "config.json"),
                      "edit %zu: message '%s' lacks '%s'", i, err.msg, c->msg);
            CHECK_MSG(memcmp(&m, &keep, sizeof m) == 0, "edit %zu: info written on failure", i);
        }
    }
}

static void test_defaults_and_variants(void) {
    hr_model_info m;
    hr_error err = {0};

    /* defaults as the transformers config classes set them */
    CHECK_OK(parse_edit("num_key_value_heads", "", "rms_norm_eps", "", &m, &err), &err);
    CHECK(m.n_head_kv == 32 && m.rms_eps == 1e-6f);
    CHECK_OK(parse_edit("rope_theta", "", "max_position_embeddings", "", &m, &err), &err);
    CHECK(m.rope_theta == 10000.0f && m.n_ctx_train == 2048);
    CHECK_OK(parse_edit("eos_token_id", "", "bos_token_id", "", &m, &err), &err);
    CHECK(m.n_eos == 0 && m.bos_id == -1);
    CHECK_OK(parse_edit("eos_token_id", "[2, 2, 0, 2]", NULL, NULL, &m, &err), &err);
    CHECK(m.n_eos == 2 && m.eos_ids[0] == 2 && m.eos_ids[1] == 0);
    CHECK(parse_edit("num_attention_heads", "3", "num_key_value_heads", "3", &m, &err) ==
              HR_ERR_FORMAT &&
          strstr(err.msg, "'hidden_size' (2048) is not a multiple of 'num_attention_heads' (3) "
                          "and no 'head_dim' is given"));
    CHECK(parse_edit("num_attention_heads", "1", "num_key_value_heads", "1", &m, &err) ==
              HR_ERR_FORMAT &&
          strstr(err.msg, "1024"));
    CHECK_OK(parse_edit("head_dim", "128", NULL, NULL, &m, &err), &err);
    CHECK(m.head_dim == 128 && m.n_embd == 2048);

    /* model_type when architectures is absent; qwen2 brings q/k/v bias */
    CHECK_OK(parse_edit("architectures", "", "model_type", "\"qwen2\"", &m, &err), &err);
    CHECK(strcmp(m.arch, "qwen2") == 0 && m.qkv_bias && m.n_ctx_train == 2048);
    CHECK_OK(parse_edit("architectures", "null", "model_type", "\"mistral\"", &m, &err), &err);
    CHECK(strcmp(m.arch, "mistral") == 0 && !m.qkv_bias);
    CHECK(parse_edit("architectures", "", "model_type", "\"gemma\"", &m, &err) ==
              HR_ERR_UNSUPPORTED &&
          strstr(err.msg, "model_type 'gemma'"));
    /* architectures wins over model_type */
    CHECK_OK(parse_edit("architectures", "[\"Qwen2ForCausalLM\", \"X\"]", "model_type",
                        "\"llama\"", &m, &err),
             &err);
    CHECK(strcmp(m.arch, "qwen2") == 0);
    /* per-class max_position_embeddings defaults */
    CHECK_OK(parse_edit("architectures", "[\"MistralForCausalLM\"]", "max_position_embeddings", "",
                        &m, &err),
             &err);
    CHECK(m.n_ctx_train == 131072);
    CHECK_OK(parse_edit("architectures", "[\"Qwen2ForCausalLM\"]", "max_position_embeddings", "",
                        &m, &err),
             &err);
    CHECK(m.n_ctx_train == 32768);
    /* Qwen2 declares attention_bias nowhere, but true there is not o_proj bias */
    CHECK_OK(parse_edit("architectures", "[\"Qwen2ForCausalLM\"]", "attention_bias", "true", &m,
                        &err),
             &err);

    /* Mistral's window caps the context only when it is smaller */
    CHECK_OK(parse_edit("architectures", "[\"MistralForCausalLM\"]", "sliding_window", "null", &m,
                        &err),
             &err);
    CHECK(m.n_ctx_train == 2048);
    CHECK_OK(parse_edit("architectures", "[\"MistralForCausalLM\"]", "sliding_window", "1000", &m,
                        &err),
             &err);
    CHECK(m.n_ctx_train == 1000);
    CHECK_OK(parse_edit("architectures", "[\"MistralForCausalLM\"]", "sliding_window", "9999", &m,
                        &err),
             &err);
    CHECK(m.n_ctx_train == 2048);
    CHECK(parse_edit("architectures", "[\"MistralForCausalLM\"]", "sliding_window", "-4", &m,
                     &err) == HR_ERR_FORMAT &&
          strstr(err.msg, "'sliding_window'"));
    /* other architectures ignore sliding_window (Qwen2: use_sliding_window false) */
    CHECK_OK(parse_edit("sliding_window", "16", NULL, NULL, &m, &err), &err);
    CHECK(m.n_ctx_train == 2048);

    /* rope spellings: 4.x "type", 4.x "rope_type", 5.x rope_parameters */
    CHECK_OK(parse_edit("rope_scaling", "{\"type\": \"linear\", \"factor\": 2}", NULL, NULL, &m,
                        &err),
             &err);
    CHECK(m.rope_scaling == HR_ROPE_SCALING_LINEAR && m.rope_factor == 2.0f);
    CHECK_OK(parse_edit("rope_scaling", "{\"type\": \"dynamic\", \"rope_type\": \"linear\", "
                                        "\"factor\": 3}",
                        NULL, NULL, &m, &err),
             &err);
    CHECK(m.rope_scaling == HR_ROPE_SCALING_LINEAR && m.rope_factor == 3.0f);
    CHECK_OK(parse_edit("rope_parameters", "{\"rope_theta\": 250000, \"rope_type\": \"default\"}",
                        "rope_theta", "", &m, &err),
             &err);
    CHECK(m.rope_theta == 250000.0f && m.rope_scaling == HR_ROPE_SCALING_NONE);
    /* rope_parameters takes precedence over rope_scaling */
    CHECK_OK(parse_edit("rope_parameters", "{\"rope_type\": \"linear\", \"factor\": 5}",
                        "rope_scaling", "{\"rope_type\": \"yarn\"}", &m, &err),
             &err);
    CHECK(m.rope_scaling == HR_ROPE_SCALING_LINEAR && m.rope_factor == 5.0f &&
          m.rope_theta == 10000.0f);

    /* a long name is cut to fit, NUL-terminated */
    char longname[400];
    memset(longname, 'a', sizeof longname);
    longname[0] = '"';
    longname[sizeof longname - 2] = '"';
    longname[sizeof longname - 1] = '\0';
    CHECK_OK(parse_edit("_name_or_path", longname, NULL, NULL, &m, &err), &err);
    CHECK(strlen(m.name) == sizeof m.name - 1);
}

static void test_text_handling(void) {
    size_t len;
    char *t = test_read_file(HR_SOURCE_DIR "/" CFG_DIR "Llama-3.2-1B.config.json", &len, 1);
    hr_model_info m;
    hr_error err = {0};

    /* not NUL-terminated: bytes past len are never looked at */
    char *padded = malloc(len + 8);
    memcpy(padded, t, len);
    memcpy(padded + len, "garbage!", 8);
    CHECK_OK(hf_config_parse(padded, len, "config.json", &m, &err), &err);
    CHECK(m.n_layer == 16);
    /* ... but inside len they are */
    CHECK(hf_config_parse(padded, len + 8, "config.json", &m, &err) == HR_ERR_FORMAT &&
          strstr(err.msg, "after the JSON"));
    free(padded);
    /* trailing whitespace is fine */
    char *spaced = malloc(len + 4);
    memcpy(spaced, t, len);
    memcpy(spaced + len, " \n\t\r", 4);
    CHECK_OK(hf_config_parse(spaced, len + 4, "config.json", &m, &err), &err);
    free(spaced);
    /* empty input */
    CHECK(hf_config_parse("", 0, "config.json", &m, &err) == HR_ERR_FORMAT);
    CHECK(hf_config_parse(NULL == t ? "" : t, 0, "config.json", &m, &err) == HR_ERR_FORMAT);

    /* every prefix fails cleanly without touching info */
    int bad = 0;
    for (size_t n = 0; n < len; n++) {
        hr_model_info u, keep;
        memset(&u, 0x33, sizeof u);
        keep = u;
        char *cut = malloc(n ? n : 1);
        memcpy(cut, t, n);
        hr_status s = hf_config_parse(cut, n, "config.json", &u, &err);
        /* a prefix ending right after the closing brace is the whole file */
        bool complete = n >= len - 1 && t[len - 1] == '\n';
        if (!complete && (s != HR_ERR_FORMAT || memcmp(&u, &keep, sizeof u) != 0))
            bad++;
        free(cut);
    }
    CHECK_EQ_I64(bad, 0);

    /* the allocation inside fails cleanly */
    hr_alloc_fail_at(1);
    hr_status s = hf_config_parse(t, len, "config.json", &m, &err);
    hr_alloc_fail_at(0);
    CHECK(s == HR_ERR_NOMEM);
    free(t);
}

static void test_generation_config(void) {
    hr_model_info m, keep;
    hr_error err = {0};
    CHECK_OK(parse_file(CFG_DIR "Meta-Llama-3-8B-Instruct.config.json", &m, &err), &err);
    keep = m;
    static const struct {
        const char *text;
        hr_status want;
        const char *msg;
    } cases[] = {
        {"{}", HR_OK, ""},
        {"{\"eos_token_id\": null, \"bos_token_id\": null}", HR_OK, ""},
        {"[]", HR_ERR_FORMAT, "not a JSON object"},
        {"{\"eos_token_id\": [1, ", HR_ERR_FORMAT, "not valid JSON"},
        {"{\"eos_token_id\": 128256}", HR_ERR_FORMAT, "'eos_token_id' has id 128256"},
        {"{\"eos_token_id\": [128001, 1, 2, 3, 4, 5, 6, 7]}", HR_ERR_UNSUPPORTED,
         "more than 8 distinct"},
        {"{\"bos_token_id\": \"<s>\"}", HR_ERR_FORMAT, "'bos_token_id' must be an integer"},
        {"{\"eos_token_id\": 1, \"eos_token_id\": 2}", HR_ERR_FORMAT, "appears twice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        m = keep;
        hr_status s = hf_generation_config_parse(cases[i].text, strlen(cases[i].text),
                                                 "generation_config.json", &m, &err);
        CHECK_MSG(s == cases[i].want, "gen %zu: want %s got %s (%s)", i,
                  hr_status_name(cases[i].want), hr_status_name(s), err.msg);
        if (cases[i].want != HR_OK)
            CHECK_MSG(strstr(err.msg, cases[i].msg) &&
                          strstr(err.msg, "generation_config.json"),
                      "gen %zu: '%s' lacks '%s'", i, err.msg, cases[i].msg);
        CHECK(memcmp(&m, &keep, sizeof m) == 0); /* no-op or failure: unchanged */
    }
    /* merge to exactly 8 works; bos replaced */
    m = keep;
    const char *eight = "{\"bos_token_id\": 5, \"eos_token_id\": [128009, 1, 2, 3, 4, 5, 6, 7]}";
    CHECK_OK(hf_generation_config_parse(eight, strlen(eight), "g", &m, &err), &err);
    CHECK(m.n_eos == 8 && m.eos_ids[0] == 128009 && m.eos_ids[7] == 7 && m.bos_id == 5);
    /* a second, disjoint id no longer fits */
    CHECK(hf_generation_config_parse("{\"eos_token_id\": 9}", 19, "g", &m, &err) ==
          HR_ERR_UNSUPPORTED);
    /* an info that did not come from hf_config_parse */
    m.n_eos = 99;
    CHECK(hf_generation_config_parse("{}", 2, "g", &m, &err) == HR_ERR_INVALID);
}

int main(void) {
    test_real_configs();
    test_corrupt_files();
    test_field_edits();
    test_defaults_and_variants();
    test_text_handling();
    test_generation_config();
    TEST_END();
}
