/*
 * llama.h — the forward pass over a backend (see llama.c for the walk-through).
 */
#ifndef HR_MODEL_LLAMA_H
#define HR_MODEL_LLAMA_H

#include "backend/backend.h"
#include "model/model.h"

typedef struct llama llama;

/* Creates the backend's weights, activations (sized by cfg) and KV pool.
 * The model and backend must outlive the result. */
hr_status llama_create(const hr_model *m, hr_backend *be, const be_config *cfg, llama **out,
                       hr_error *err);
void llama_free(llama *lm);

/* Runs one step. logits: (n_out, V) host floats, written when n_out > 0. */
hr_status llama_forward(llama *lm, const hr_step *step, float *logits, hr_error *err);

#endif
