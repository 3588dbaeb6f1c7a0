/*
 * model_load.h — the two sources of a model description. Each fills
 * m->info, m->tensors (canonical names), m->tok, m->chat_template and the
 * rope style; model.c then binds and validates the tensors.
 */
#ifndef HR_MODEL_MODEL_LOAD_H
#define HR_MODEL_MODEL_LOAD_H

#include "model/model.h"

hr_status model_load_gguf(hr_model *m, const char *path, const hr_model_params *p,
                          hr_error *err);
hr_status model_load_hf_dir(hr_model *m, const char *dir, const hr_model_params *p,
                            hr_error *err);

/* model_bnb.c: when config (len bytes of config.json, named path) has a
 * bitsandbytes quantization_config, repacks the quantized tensors of m (read
 * by model_load_hf_dir) into m->converted_data as NF4/FP4 (4-bit) or Q8_0
 * (8-bit) and points the tensors there; otherwise does nothing. */
hr_status model_bnb_repack(hr_model *m, const char *config, size_t len, const char *path,
                           hr_error *err);

/* model_quantize.c: the layers' seven matrices re-stored as `type` (a
 * quantized dtype name, or "int8" for LLM.int8 rows in Q8_0 blocks) in
 * m->converted_data; the embedding and output head stay as stored. */
hr_status model_quantize_matrices(hr_model *m, const char *type, hr_error *err);

/* A model around a bare safetensors set (taking ownership of st): one tensor
 * per entry under its file name, no hyper-parameters or layers. For the
 * tests and fuzzers of model_bnb_repack. */
hr_status model_wrap_st(st_set *st, hr_model **out, hr_error *err);

/* Range checks shared by both loaders: positive sizes, heads dividing,
 * finite eps and theta, sane rope scaling. */
hr_status model_check_hparams(const hr_model_info *in, const char *path, hr_error *err);

/* Adds id to info->eos_ids unless present or full. */
void model_add_eos(hr_model_info *in, int32_t id);

#endif
