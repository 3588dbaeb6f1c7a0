/*
 * embed.c — x (B, D) = rows of the token embedding for the step's tokens,
 * dequantized from whatever type the table is stored in.
 */
#include "backend/cpu/cpu_backend.h"
#include "quant/quant.h"

void cpu_embed(hr_backend *b, be_tensor *x, const be_weight *tok_embd) {
    cpu_backend *c = (cpu_backend *)b;
    const cpu_mat *m = &tok_embd->parts[0];
    size_t row_bytes = hr_dtype_row_bytes(m->dtype, tok_embd->k);
    for (int32_t r = 0; r < c->step->n_rows; r++) {
        int32_t tok = c->step->tokens[r]; /* range-checked by the engine */
        const uint8_t *row = (const uint8_t *)m->data + (size_t)tok * row_bytes;
        quant_dequantize_row(m->dtype, row, (float *)x->data + (int64_t)r * x->ld, tok_embd->k);
    }
}
