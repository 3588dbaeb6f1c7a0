/*
 * llama.h — the forward pass over a backend (see llama.c for the walk-through).
 */
#ifndef HR_MODEL_LLAMA_H
#define HR_MODEL_LLAMA_H

#include "backend/backend.h"
#include "backend/sizes.h"
#include "model/model.h"

typedef struct llama llama;

/* Creates the backend's weights, activations (sized by cfg) and KV pool.
 * The model and backend must outlive the result. */
hr_status llama_create(const hr_model *m, hr_backend *be, const be_config *cfg, llama **out,
                       hr_error *err);
void llama_free(llama *lm);

/* The bytes of the matrices llama_create passes to weight_create, as the
 * CPU backend copies them (sizes_weight_copy): its be_params.weight_copy_bytes. */
uint64_t llama_weight_copy_bytes(const hr_model *m);

/* Whether the GPU stores some weight of m packed under bp (sizes_cuda_runs):
 * its be_params.packed. */
bool llama_packed_weights(const hr_model *m, const be_params *bp);

/* The bytes llama_create would have the backend allocate, by part
 * (weights, kv, activations, workspace), without allocating anything: the
 * same list of weights and tensors, sized by backend/sizes.h. m may be a
 * shapes-only model (vocab_only synthetic, or tensors without data). */
void llama_plan(const hr_model *m, sizes_device d, const be_params *bp, const be_config *cfg,
                be_memory *out);

/* Runs one step. With samples (n_out entries) on a backend that samples on
 * the device, the chosen tokens go to tokens; otherwise logits (n_out, V)
 * host floats are written when n_out > 0. */
hr_status llama_forward(llama *lm, const hr_step *step, float *logits, const be_sample *samples,
                        int32_t *tokens, hr_error *err);

#endif
