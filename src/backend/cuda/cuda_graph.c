/*
 * cuda_graph.c — a step from begin to end: the step's metadata to fixed
 * device addresses, one CUDA graph per decode step, the device sampling,
 * and deferred (and chained) steps.
 *
 * Graphs: a decode step (every segment one token, every row wanting its
 * next token) of B rows is run eagerly the first time (cuBLASLt chooses its
 * algorithms then), captured the second time, and replayed from then on:
 * begin_step copies the step's tokens, positions, slots and block tables to
 * the same device buffers, the ops become no-ops, and end_step fills the
 * sampling parameters (pinned, mapped: the sampler reads them and writes the
 * ids there) and launches the graph. Graphs are keyed by (B, sampling on the
 * device or not).
 */
#include "backend/cuda/cuda_internal.h"

#include "backend/sizes.h"

#include <string.h>

/* ---------------------------------------------------------------- the step */

hr_status cuda_begin_step(hr_backend *b, const hr_step *s, hr_error *err) {
    cuda_backend *c = (cuda_backend *)b;
    if (s->n_rows > c->kv.max_rows || s->n_out > c->kv.max_out)
        return hr_err_set(err, HR_ERR_INVALID, "cuda: step of %d rows (%d outputs) over the "
                                               "planned %d (%d)",
                          s->n_rows, s->n_out, c->kv.max_rows, c->kv.max_out);
    cuda_profile_collect(c->prof); /* drops the marks of a step that failed */
    c->step_status = HR_OK;
    c->n_rows = s->n_rows;
    c->n_out = s->n_out;
    if ((s->defer || s->chained) && !b->chains)
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "cuda: deferred steps are off (profiling)");
    const bool one_row = s->n_rows == 1 && s->n_out == 1 && s->n_seg == 1 &&
                         s->segs[0].n == 1 && s->out_rows[0] == 0 && s->device_sample;
    if ((s->defer || s->chained) && !one_row)
        return hr_err_set(err, HR_ERR_INVALID, "cuda: a deferred or chained step must be one "
                                               "decode row sampled on the device");
    if (s->chained ? !s->defer || c->n_fly != 1 : c->n_fly > 0)
        return hr_err_set(err, HR_ERR_INVALID, "cuda: %s step with %d deferred steps queued",
                          s->chained ? "a chained" : "an unchained", c->n_fly);
    c->defer = s->defer;
    c->chained = s->chained;
    c->greedy = s->device_sample && s->greedy;
    /* a chained step's metadata is made on the device by the step before
     * (ck_chain): the host writes none, and the copy before may still be
     * queued */
    int32_t *m = c->chained ? NULL : c->h_meta;
    const size_t B = (size_t)s->n_rows;
    if (m) {
        memcpy(m + c->o_tok, s->tokens, B * sizeof(int32_t));
        memcpy(m + c->o_pos, s->pos, B * sizeof(int32_t));
        memcpy(m + c->o_slot, s->slot, B * sizeof(int32_t));
        memcpy(m + c->o_out, s->out_rows, (size_t)s->n_out * sizeof(int32_t));
    }
    c->n_dec = c->n_tiles = 0;
    c->decode_only = s->n_out == s->n_rows;
    /* one tile size for the step's prefill segments, from the longest (the
     * kernels' rule); n_tiles stays <= n_rows <= max_rows, the size of the
     * tile lists, whatever the size */
    int32_t longest = 0;
    for (int32_t i = 0; i < s->n_seg; i++)
        longest = s->segs[i].n > longest ? s->segs[i].n : longest;
    const int32_t tile = ck_attention_tile_rows(longest, b->info->n_head, b->info->head_dim,
                                                 c->kv_q8);
    c->tile_rows = tile;
    for (int32_t i = 0; i < s->n_seg; i++) {
        const step_segment *g = &s->segs[i];
        for (int32_t r = 0; r < g->n && m; r++)
            m[c->o_seq + (size_t)(g->row0 + r)] = g->seq;
        if (g->n == 1) {
            if (m)
                m[c->o_dec + (size_t)c->n_dec] = g->row0;
            c->n_dec++;
        } else {
            c->decode_only = false;
            for (int32_t r = 0; r < g->n; r += tile) {
                if (m) {
                    m[c->o_trow + (size_t)c->n_tiles] = g->row0 + r;
                    m[c->o_tn + (size_t)c->n_tiles] = g->n - r < tile ? g->n - r : tile;
                }
                c->n_tiles++;
            }
        }
    }
    for (int32_t i = 0; i < s->n_out && c->decode_only; i++)
        c->decode_only = s->out_rows[i] == i;
    c->chain_count = c->chained ? c->chain_count + 1 : 0;
    if (m) {
        const size_t tables = (size_t)c->kv.n_seq_max * (size_t)c->kv.max_blocks_per_seq;
        memcpy(m + c->o_bt, s->block_tables, tables * sizeof(int32_t));
        m[c->o_chain] = 0;
        HR_CUDA_TRY(cudaMemcpyAsync(c->d_meta, c->h_meta, c->meta_ints * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, c->stream));
    }

    /* a decode step of B rows: eager the first time, captured the second
     * (after the metadata copy above, which stays outside the graph),
     * replayed after that */
    c->pstep = c->pstep_ok && c->decode_only && s->n_rows == 1 && s->n_out == 1 &&
               s->pos[0] < CUDA_PSTEP_MAX_CTX;
    c->n_prog = 0;
    c->pstep_logit_rows = 0;
    c->pstep_norm_weights = false;
    c->pending_norm.on = false;
    c->pending_rope.qkv = NULL;
    c->capturing = c->replaying = false;
    c->graph_key = -1;
    /* keys 3 B + m: m 0 logits to the host, 1 sampled on the device, 2 a
     * greedy persistent step (its argmax folded in: no sampling kernel) */
    if (!c->p.tuning.no_graphs && c->decode_only && s->n_rows > 0)
        c->graph_key = 3 * (c->pstep ? c->kv.max_rows + 1 : s->n_rows) +
                       (s->device_sample && s->n_out > 0 ? (c->pstep && c->greedy ? 2 : 1) : 0);
    if (c->graph_key >= 0 && c->graph_state[c->graph_key] == 2) {
        c->replaying = true;
    } else if (c->graph_key >= 0 && c->graph_state[c->graph_key] == 1 &&
               c->n_graphs < SIZES_CUDA_MAX_GRAPHS) { /* the planner reserved that many */
        cudaError_t e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
        if (e == cudaSuccess)
            c->capturing = true;
        else
            return hr_err_set(err, HR_ERR_DEVICE, "cuda: cannot capture a graph: %s",
                              cudaGetErrorString(e));
    }
    return HR_OK;
}

/* The step metadata's row 0 as the next step's, once the row's token is
 * drawn (ck_chain: a chained step finds it there). */
static ck_chain chain_of(cuda_backend *c) {
    return (ck_chain){.tok = c->d_meta + c->o_tok,
                      .pos = c->d_meta + c->o_pos,
                      .slot = c->d_meta + c->o_slot,
                      .seq = c->d_meta + c->o_seq,
                      .block_tables = c->d_meta + c->o_bt,
                      .count = c->d_meta + c->o_chain,
                      .host_tok = c->d_tok + c->kv.max_out,
                      .max_blocks = c->kv.max_blocks_per_seq,
                      .block_size = c->kv.block_size};
}

/* Enqueues the device sampling of the step's outputs (parameters read from
 * the mapped host buffer when the work runs, so a replayed graph sees new
 * ones; the ids land in host memory, seen once the stream is synchronised). */
static void enqueue_sampling(cuda_backend *c, const be_tensor *logits) {
    cuda_mark(c, "sample", 0, 0);
    /* a step of one row readies the next for a chained step (ck_chain) */
    const ck_chain chain = chain_of(c);
    ck_sample(c->stream, c->d_tok, logits->data, logits->ld, c->n_out, (int)logits->cols,
              c->d_sp, c->sample_work, c->n_rows == 1 && c->n_out == 1 ? &chain : NULL);
    cuda_op_error(c, "sample");
}

hr_status cuda_end_step(hr_backend *b, const be_tensor *logits, float *host_logits,
                        const be_sample *samples, int32_t *host_tokens, hr_error *err) {
    cuda_backend *c = (cuda_backend *)b;
    bool sample = samples != NULL && c->n_out > 0;
    /* a chained step's parameters are the step before's, which may not have
     * read them yet (its draw is offset by the chain count instead) */
    for (int32_t i = 0; sample && !c->chained && i < c->n_out; i++)
        c->h_sp[i] = samples[i];
    if (c->graph_key >= 0 && sample != (c->graph_key % 3 != 0) && c->step_status == HR_OK)
        c->step_status = hr_err_set(&c->step_err, HR_ERR_INVALID,
                                    "cuda: end_step %s samples, begin_step said %s",
                                    sample ? "with" : "without", sample ? "no" : "yes");
    for (int32_t i = 0; sample && c->greedy && i < c->n_out && c->step_status == HR_OK; i++)
        if (!be_sample_is_greedy(samples[i].temperature, samples[i].top_k))
            c->step_status = hr_err_set(&c->step_err, HR_ERR_INVALID,
                                        "cuda: a greedy step with temperature %g",
                                        (double)samples[i].temperature);
    /* a greedy persistent step draws its token itself when it ranks every
     * logit (an lm head with a bias is not ranked) */
    const bool fold = sample && c->greedy && c->pstep && c->n_out == 1 &&
                      c->pstep_logit_rows == c->base.info->n_vocab;
    const ck_chain chain = chain_of(c);
    if (c->step_status == HR_OK && !c->replaying && c->pstep)
        cuda_pstep_run(c, fold ? &chain : NULL);
    if (c->step_status == HR_OK && c->pstep)
        c->n_pstep_steps++;
    const bool traced = c->step_status == HR_OK && c->pstep;
    if (c->step_status == HR_OK && !c->replaying && sample && !fold)
        enqueue_sampling(c, logits);
    if (c->capturing && c->step_status != HR_OK) {
        cudaGraph_t g = NULL;
        cudaStreamEndCapture(c->stream, &g);
        if (g)
            cudaGraphDestroy(g);
        c->capturing = false;
    }
    if (c->capturing) {
        cudaGraph_t g = NULL;
        cudaGraphExec_t exec = NULL;
        HR_CUDA_TRY(cudaStreamEndCapture(c->stream, &g));
        size_t free0 = 0, free1 = 0, total = 0;
        cudaMemGetInfo(&free0, &total);
        cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
        cudaMemGetInfo(&free1, &total);
        cudaGraphDestroy(g);
        HR_CUDA_TRY(e);
        c->graph_bytes += free0 > free1 ? free0 - free1 : 0;
        c->graphs[c->graph_key] = exec;
        c->graph_state[c->graph_key] = 2;
        c->n_graphs++;
        c->capturing = false;
        c->replaying = true;
    }
    if (c->replaying) {
        HR_CUDA_TRY(cudaGraphLaunch(c->graphs[c->graph_key], c->stream));
    } else if (c->graph_key >= 0 && c->graph_state[c->graph_key] == 0) {
        c->graph_state[c->graph_key] = 1; /* eager once; captured next time */
    }
    if (c->defer) { /* queued: cuda_wait_step gives the id */
        c->replaying = false;
        if (c->step_status == HR_OK && !sample)
            c->step_status = hr_err_set(&c->step_err, HR_ERR_INVALID,
                                        "cuda: a deferred step without samples");
        if (c->step_status != HR_OK) {
            if (err)
                *err = c->step_err;
            return c->step_status;
        }
        const int i = (c->fly_head + c->n_fly) % 2;
        HR_CUDA_TRY(cudaEventRecord(c->fly_ev[i], c->stream));
        c->fly_count[i] = c->chain_count;
        c->n_fly++;
        return HR_OK;
    }
    if (c->step_status == HR_OK && !sample && host_logits && c->n_out > 0)
        HR_CUDA_TRY(cudaMemcpy2DAsync(host_logits, (size_t)logits->cols * sizeof(float),
                                      logits->data, (size_t)logits->ld * sizeof(float),
                                      (size_t)logits->cols * sizeof(float), (size_t)c->n_out,
                                      cudaMemcpyDeviceToHost, c->stream));
    cuda_profile_step_end(c->prof, c->stream);
    HR_CUDA_TRY(cudaStreamSynchronize(c->stream));
    cuda_profile_collect(c->prof);
    if (traced)
        cuda_pstep_trace_collect(c);
    c->replaying = false;
    if (c->step_status != HR_OK) {
        if (err)
            *err = c->step_err;
        return c->step_status;
    }
    HR_CUDA_TRY(cudaGetLastError());
    if (sample)
        memcpy(host_tokens, c->h_tok, (size_t)c->n_out * sizeof(int32_t));
    return HR_OK;
}

hr_status cuda_wait_step(hr_backend *b, int32_t *host_tokens, hr_error *err) {
    cuda_backend *c = (cuda_backend *)b;
    if (c->n_fly == 0)
        return hr_err_set(err, HR_ERR_INVALID, "cuda: wait_step with no deferred step");
    const int i = c->fly_head;
    c->fly_head = (i + 1) % 2;
    c->n_fly--;
    HR_CUDA_TRY(cudaEventSynchronize(c->fly_ev[i]));
    HR_CUDA_TRY(cudaGetLastError());
    /* the chained ids alternate between two slots: the step after this one
     * writes the other, and the one after that is queued only once this
     * returns */
    host_tokens[0] = c->h_tok[c->kv.max_out + (c->fly_count[i] & 1)];
    return HR_OK;
}
