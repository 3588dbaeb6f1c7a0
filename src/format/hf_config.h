/*
 * hf_config.h — Hugging Face config.json / generation_config.json.
 *
 * Fills hr_model_info from a LlamaForCausalLM, MistralForCausalLM or
 * Qwen2ForCausalLM config: hidden_size, num_hidden_layers,
 * num_attention_heads, num_key_value_heads (default: heads), head_dim
 * (default hidden/heads), intermediate_size, rms_norm_eps, rope_theta
 * (default 10000), rope_scaling ({"type"|"rope_type": "linear"|"llama3",
 * "factor", "low_freq_factor", "high_freq_factor",
 * "original_max_position_embeddings"}), tie_word_embeddings,
 * max_position_embeddings, vocab_size, bos_token_id, eos_token_id (int or
 * list). Qwen2 implies q/k/v bias. A quantization_config is refused unless
 * its quant_method is "bitsandbytes" (model_bnb.c reads those tensors). Missing required fields, values out of
 * range (layers <= 0, heads not dividing, ...) and unknown architectures give
 * HR_ERR_FORMAT / HR_ERR_UNSUPPORTED naming the file and the field.
 */
#ifndef HR_FORMAT_HF_CONFIG_H
#define HR_FORMAT_HF_CONFIG_H

#include "headroom.h"

#include <stddef.h>

/* text: the JSON (len bytes, need not be NUL-terminated); name for messages.
 * Overwrites all of *info (fields it does not set are zeroed; bos_id -1 when
 * absent), and only on success. Absent optional fields take the transformers
 * config class defaults: rms_norm_eps 1e-6, max_position_embeddings 2048
 * (llama) / 131072 (mistral) / 32768 (qwen2). Mistral's sliding_window caps
 * n_ctx_train. rope_parameters (transformers 5) is read like rope_scaling. */
hr_status hf_config_parse(const char *text, size_t len, const char *name, hr_model_info *info,
                          hr_error *err);
/* Adds eos ids (merged, no duplicates) and bos from generation_config.json.
 * *info must come from hf_config_parse; it is changed only on success. */
hr_status hf_generation_config_parse(const char *text, size_t len, const char *name,
                                     hr_model_info *info, hr_error *err);

#endif
