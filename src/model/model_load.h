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

/* Range checks shared by both loaders: positive sizes, heads dividing,
 * finite eps and theta, sane rope scaling. */
hr_status model_check_hparams(const hr_model_info *in, const char *path, hr_error *err);

/* Adds id to info->eos_ids unless present or full. */
void model_add_eos(hr_model_info *in, int32_t id);

#endif
