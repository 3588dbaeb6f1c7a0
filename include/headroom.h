/*
 * headroom.h — the public C API of libheadroom.
 *
 * headroom runs Llama-family language models on a person's own GPU or CPU.
 * Everything here is plain C17: opaque handles, params structs with defaults,
 * status codes with a message. The library never exits the process and never
 * prints to stdout; diagnostics go through hr_log_set().
 *
 * Conventions
 *   - Every fallible call returns hr_status and, when it fails, fills the
 *     caller-owned hr_error (may be NULL) with a message that names the file or
 *     object and the problem. *out parameters are written only on success.
 *   - Pairs: _load/_create allocate, _free releases; _free(NULL) is a no-op.
 *   - "borrowed" results stay valid until the owner named beside them is freed.
 *   - Handles are not thread-safe unless a function says so; different handles
 *     may be used from different threads.
 *
 * Example usage
 *
 *     hr_error err;
 *     hr_tokenizer *tok;
 *     if (hr_tokenizer_load("models/tiny", &tok, &err) != HR_OK) {
 *         fprintf(stderr, "%s\n", err.msg);
 *         return 1;
 *     }
 *     int32_t ids[256];
 *     size_t n;
 *     hr_tokenize_params tp = hr_tokenize_params_default();
 *     if (hr_tokenize(tok, "Hello", 5, &tp, ids, 256, &n, &err) == HR_OK)
 *         for (size_t i = 0; i < n; i++) printf("%d ", ids[i]);
 *     hr_tokenizer_free(tok);
 */
#ifndef HEADROOM_H
#define HEADROOM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- status */

typedef enum {
    HR_OK = 0,
    HR_ERR_IO = -1,          /* a file could not be opened, read or mapped */
    HR_ERR_FORMAT = -2,      /* a file is malformed, truncated or inconsistent */
    HR_ERR_UNSUPPORTED = -3, /* valid input that headroom does not handle (yet) */
    HR_ERR_NO_FIT = -4,      /* the planned memory exceeds the budget */
    HR_ERR_NOMEM = -5,       /* an allocation failed */
    HR_ERR_INVALID = -6,     /* a bad argument or bad user input */
    HR_ERR_DEVICE = -7,      /* the accelerator reported an error */
    HR_ERR_CANCELLED = -8,   /* a callback asked to stop */
    HR_ERR_NUMERIC = -9,     /* the model's arithmetic gave NaN or infinity (damaged weights,
                                an overflow): the output would be garbage */
} hr_status;

typedef struct {
    hr_status code;
    char msg[512];
} hr_error;

/* "HR_OK", "HR_ERR_FORMAT", ... */
const char *hr_status_name(hr_status s);

/* ---------------------------------------------------------------- logging */

typedef enum {
    HR_LOG_ERROR = 0,
    HR_LOG_WARN = 1,
    HR_LOG_INFO = 2,
    HR_LOG_DEBUG = 3,
} hr_log_level;

typedef void (*hr_log_fn)(hr_log_level level, const char *msg, void *user_data);

/* Route library messages. Default: WARN and ERROR to stderr. fn NULL silences.
 * Not thread-safe with concurrent library calls: set it once at start. */
void hr_log_set(hr_log_fn fn, void *user_data);
void hr_log_set_level(hr_log_level max_level);

/* ---------------------------------------------------------------- dtypes */

/* Element and block types of tensors. GGUF block types keep ggml's layouts. */
typedef enum {
    HR_DTYPE_F32 = 0,
    HR_DTYPE_F16,
    HR_DTYPE_BF16,
    HR_DTYPE_Q8_0,
    HR_DTYPE_Q4_0,
    HR_DTYPE_Q4_1,
    HR_DTYPE_Q5_0,
    HR_DTYPE_Q5_1,
    HR_DTYPE_Q2_K,
    HR_DTYPE_Q3_K,
    HR_DTYPE_Q4_K,
    HR_DTYPE_Q5_K,
    HR_DTYPE_Q6_K,
    HR_DTYPE_Q8_K,
    HR_DTYPE_I8,
    HR_DTYPE_U8,
    HR_DTYPE_I16,
    HR_DTYPE_I32,
    HR_DTYPE_F64,
    HR_DTYPE_NF4, /* bitsandbytes' 4-bit NormalFloat, blocks of 64 (no GGUF id) */
    HR_DTYPE_FP4, /* bitsandbytes' 4-bit float, blocks of 64 (no GGUF id) */
    HR_DTYPE_COUNT
} hr_dtype;

const char *hr_dtype_name(hr_dtype t);             /* "bf16", "q4_k", ... */
bool hr_dtype_from_name(const char *name, hr_dtype *out); /* case-insensitive */
/* Bytes taken by n_elem elements (n_elem a multiple of the block size). */
size_t hr_dtype_row_bytes(hr_dtype t, int64_t n_elem);
int64_t hr_dtype_block_elems(hr_dtype t);

/* ---------------------------------------------------------------- tokenizer */

typedef struct hr_tokenizer hr_tokenizer;

/* Loads a tokenizer from a model folder (tokenizer.json, else tokenizer.model,
 * plus tokenizer_config.json / config.json for BOS/EOS and legacy), a
 * tokenizer.json, a tokenizer.model (SentencePiece protobuf) or a .gguf file. */
hr_status hr_tokenizer_load(const char *path, hr_tokenizer **out, hr_error *err);
void hr_tokenizer_free(hr_tokenizer *tok);

typedef struct {
    int add_bos;        /* -1: the special tokens the tokenizer's config adds (BOS, EOS);
                           0: none; 1: BOS (and no EOS) */
    bool parse_special; /* text like "<|im_start|>" becomes its special token */
} hr_tokenize_params;

hr_tokenize_params hr_tokenize_params_default(void); /* add_bos -1, parse_special true */

/* Encodes text (len bytes; invalid UTF-8 is handled as U+FFFD) into ids.
 * Thread-safe: several threads may tokenize with one tokenizer at once.
 * When more than cap ids result, returns HR_ERR_INVALID with *n_out set to the
 * number needed, so the caller can retry with a larger buffer. */
hr_status hr_tokenize(const hr_tokenizer *tok, const char *text, size_t len,
                      const hr_tokenize_params *params, int32_t *ids, size_t cap,
                      size_t *n_out, hr_error *err);

int32_t hr_tokenizer_n_vocab(const hr_tokenizer *tok);
int32_t hr_tokenizer_bos(const hr_tokenizer *tok); /* -1 when none */
int32_t hr_tokenizer_eos(const hr_tokenizer *tok); /* -1 when none */
bool hr_tokenizer_is_eog(const hr_tokenizer *tok, int32_t id); /* end of generation */

/* The bytes that token id contributes to decoded text, written to buf (not
 * NUL-terminated). Special/control tokens give their text only when
 * render_special. Returns the byte count, or -(needed) if cap is too small. */
int32_t hr_token_to_piece(const hr_tokenizer *tok, int32_t id, bool render_special,
                          char *buf, int32_t cap);

/* Streaming detokenizer: push ids one at a time, get back only bytes that form
 * complete UTF-8 (a character split across tokens is held until complete;
 * invalid sequences come out as U+FFFD). Handles the SentencePiece leading
 * space of the first token. */
typedef struct hr_detok hr_detok;
hr_status hr_detok_create(const hr_tokenizer *tok, hr_detok **out, hr_error *err);
void hr_detok_free(hr_detok *d);
/* Appends the text completed by id to buf; returns bytes written (<= cap) or
 * -(needed). 3 * (the longest token's length + 3) always suffices (invalid
 * bytes become 3-byte U+FFFD). */
int32_t hr_detok_push(hr_detok *d, int32_t id, char *buf, int32_t cap);
/* Emits whatever is held back (incomplete UTF-8 becomes U+FFFD). */
int32_t hr_detok_flush(hr_detok *d, char *buf, int32_t cap);

/* ---------------------------------------------------------------- model */

typedef struct hr_model hr_model;

typedef struct {
    const char *tokenizer_path; /* NULL: the tokenizer inside the model */
    bool vocab_only;            /* read hyper-parameters and tokenizer only */
    const char *quantize;       /* NULL: the weights as the file stores them; else the
                                   layers' matrices are quantized at load to this type
                                   ("q8_0", "q4_0", "q4_k", "q6_k", "nf4", ...; "int8":
                                   LLM.int8 rows, kept as Q8_0); embedding and output
                                   head stay as stored */
} hr_model_params;

hr_model_params hr_model_params_default(void);

/* A model of a named shape ("tinyllama-1.1b", "llama2-7b", "llama2-13b",
 * "llama3-8b", "llama2-70b", "smollm2-135m") with random weights of the given
 * type, made in memory (no file): for benchmarks and planning. With
 * params->vocab_only, only shapes are made (no weight memory). It has a
 * tokenizer only when params->tokenizer_path names one. */
hr_status hr_model_synthetic(const char *shape, hr_dtype weights, const hr_model_params *params,
                             hr_model **out, hr_error *err);
/* The names hr_model_synthetic knows, NULL-terminated. */
const char *const *hr_model_synthetic_shapes(void);

/* path: a Hugging Face folder (config.json + safetensors [+ index]) or a .gguf
 * file. Files are memory-mapped; nothing is copied. Shapes are validated
 * against the hyper-parameters. */
hr_status hr_model_load(const char *path, const hr_model_params *params, hr_model **out,
                        hr_error *err);
void hr_model_free(hr_model *model);

typedef enum {
    HR_ROPE_SCALING_NONE = 0,
    HR_ROPE_SCALING_LINEAR,
    HR_ROPE_SCALING_LLAMA3,
} hr_rope_scaling;

typedef struct {
    char arch[32];          /* "llama", "mistral", "qwen2" */
    char name[128];         /* general.name or the folder name */
    int32_t n_vocab;
    int32_t n_embd;         /* hidden size */
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;
    int32_t n_ff;           /* intermediate size */
    int32_t n_ctx_train;    /* max_position_embeddings */
    float rms_eps;
    float rope_theta;
    hr_rope_scaling rope_scaling;
    float rope_factor;
    float rope_low_freq_factor;  /* llama3 */
    float rope_high_freq_factor; /* llama3 */
    int32_t rope_orig_ctx;       /* llama3: original_max_position_embeddings */
    bool tie_embeddings;
    bool qkv_bias;
    int32_t bos_id;
    int32_t n_eos;
    int32_t eos_ids[8];
    int64_t n_params;
    uint64_t weight_bytes;  /* as stored */
    int32_t n_tensors;
    char format[16];        /* "gguf", "safetensors" */
} hr_model_info;

void hr_model_get_info(const hr_model *model, hr_model_info *out);

typedef struct {
    const char *name;  /* canonical name, GGUF style: "blk.0.attn_q.weight" */
    hr_dtype dtype;
    int32_t n_dim;
    int64_t ne[4];     /* ne[0] is the contiguous (innermost) dimension */
    uint64_t n_bytes;
} hr_tensor_desc;

/* i in [0, info.n_tensors). Strings borrowed until hr_model_free. */
hr_status hr_model_tensor(const hr_model *model, int32_t i, hr_tensor_desc *out);

/* Bytes the weights would take if every matrix were stored as dtype (norms and
 * biases stay f32); false when a matrix's rows do not divide into its blocks. */
bool hr_model_weight_bytes_as(const hr_model *model, hr_dtype dtype, uint64_t *out);

/* Writes the model as a GGUF file (llama.cpp's layout and key names, so
 * llama.cpp-compatible readers load it): matrices as dtype (f32, f16, bf16,
 * q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q6_k), norms f32, the tokenizer and chat
 * template included. */
hr_status hr_model_convert(const hr_model *model, const char *path, hr_dtype dtype,
                           hr_error *err);

/* borrowed until hr_model_free; NULL when vocab could not be loaded */
const hr_tokenizer *hr_model_tokenizer(const hr_model *model);
/* borrowed until hr_model_free; NULL when the model has none */
const char *hr_model_chat_template(const hr_model *model);

/* ---------------------------------------------------------------- engine */

typedef enum {
    HR_DEVICE_AUTO = 0, /* cuda when a GPU is present and built in, else cpu */
    HR_DEVICE_CPU,
    HR_DEVICE_CUDA,
} hr_device;

typedef struct hr_engine hr_engine;

typedef struct {
    hr_device device;
    int32_t n_threads;     /* cpu worker threads; 0 = every core this process may run on (its
                              affinity mask); more than that is clamped, with a warning */
    bool adapt_threads;    /* cpu, with n_threads 0: decode steps use as many of the threads
                              as run fastest beside what else the machine runs (now and then
                              a few steps are timed with one thread fewer or more); a given
                              n_threads is always used whole. Default true */
    int32_t n_ctx;         /* tokens per sequence, prompt included; 0 = the model's */
    int32_t n_seq_max;     /* sequences decoded together */
    int32_t n_batch;       /* rows per step at most (prompt chunk size) */
    int32_t kv_block_size; /* tokens per KV block */
    hr_dtype kv_dtype;     /* the K cache's type: f32, f16, bf16, or on the cpu q8_0 and
                              q4_0 (each row of head_dim values as GGUF blocks of 32, as
                              llama.cpp's cache: head_dim must be a multiple of 32);
                              HR_DTYPE_COUNT: the device's default (f32 on the cpu, the
                              compute type on cuda) */
    hr_dtype kv_dtype_v;   /* the V cache's type, the same choices; HR_DTYPE_COUNT: the
                              same as kv_dtype. cuda keeps K and V in one type */
    hr_dtype dtype;        /* cuda: compute type, and storage type of 16-bit weights: bf16
                              or f16 */
    bool expand_weights;   /* cuda: quantized weights (GGUF Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
                              Q4_K, Q5_K, Q6_K) expanded to the compute type at upload
                              instead of kept packed (2-4x the memory) */
    bool exact_matmul;     /* cpu: f32 activations for quantized, F16 and BF16 weights too */
    bool use_mmap;         /* cpu: read the weight matrices from the file mapping instead of
                              copying them into huge-page memory (faster load, slower
                              decode: a TLB miss every 4 KiB of weights) */
    bool logits_all;       /* keep logits of every prompt row (perplexity) */
    bool progress;         /* show weight-upload progress on a terminal */
    uint64_t mem_budget;   /* bytes the engine may hold on its device; 0: the device's free
                              memory less a reserve (hr_device_budget) */
    bool truncate_prompt;  /* a prompt longer than the context keeps its most recent tokens
                              (with a warning) instead of being refused */
    bool prefix_cache;     /* a prompt whose first whole KV blocks another request already
                              computed (same tokens from position 0) takes them instead of
                              prefilling them; idle cached blocks are evicted least
                              recently used first when the pool needs room (default on) */
    const struct hr_tuning *tuning; /* NULL: benchmarks and checks set switches that change
                                       how the engine runs, never what it computes */
} hr_engine_params;

/* auto device, all cores, the model's context, 1 sequence, 512-row steps,
 * 16-token blocks, the device's KV type, bf16 on cuda. */
hr_engine_params hr_engine_params_default(void);

/* ---- the memory planner */

typedef struct {
    hr_device device;     /* the device planned for (cpu or cuda) */
    int32_t n_ctx;        /* tokens per sequence */
    int32_t n_seq_max;    /* sequences */
    /* bytes, by part */
    uint64_t weights;     /* as the device stores them (cpu: the norms and biases in f32;
                             the matrices are weights_mapped) */
    uint64_t weights_mapped; /* cpu: the weights as stored in the file, which the backend
                                copies (or, with use_mmap, reads in the mapping) */
    uint64_t kv;          /* the KV pool: n_seq_max sequences of n_ctx tokens */
    uint64_t kv_per_token;   /* one token, all layers, K and V */
    hr_dtype kv_dtype, kv_dtype_v; /* the K and V cache types, as the engine resolves them */
    uint64_t kv_per_seq;     /* one sequence of n_ctx tokens */
    uint64_t activations; /* step tensors, sized by the largest step */
    uint64_t workspace;   /* matmul, attention and sampling workspaces, step metadata */
    uint64_t graphs;      /* captured decode graphs (cuda) */
    uint64_t runtime;     /* the runtime's own overhead: CUDA context and cuBLASLt (a figure
                             measured on the H200), or the host library's tables (cpu) */
    uint64_t total;       /* the sum of the parts (cpu: mapped weights included) */
    uint64_t budget;
    bool fits;            /* total <= budget */
    /* what would fit (0 when nothing does), computed when it does not */
    int32_t fit_max_ctx;      /* the largest n_ctx at this n_seq_max */
    int32_t fit_max_parallel; /* the largest n_seq_max at this n_ctx */
    hr_dtype fit_kv_dtype;    /* a smaller KV type that fits, or HR_DTYPE_COUNT */
    uint64_t fit_kv_total;    /* the total with it */
    hr_dtype fit_weights;     /* cpu: a quantized weight type that fits, or HR_DTYPE_COUNT */
    uint64_t fit_weights_total;
} hr_plan;

/* The bytes an engine with these parameters would hold, by part, and
 * whether they fit the budget (params->mem_budget, or the device's free
 * memory less a reserve). Loads no weight: the model may be a shapes-only
 * one (hr_model_params.vocab_only is not enough: it needs the tensors'
 * shapes, which loading a file reads without touching the weights). With
 * params->n_ctx 0, plans the largest context that fits, up to the model's. */
hr_status hr_plan_compute(const hr_model *model, const hr_engine_params *params, hr_plan *out,
                          hr_error *err);

/* Free and total memory of a device (cuda: cudaMemGetInfo; cpu: MemAvailable
 * and MemTotal). The default budget is free less 2% of total (at least
 * 256 MiB): room for the runtime's own growth and other programs. */
hr_status hr_device_memory(hr_device device, uint64_t *free_bytes, uint64_t *total_bytes,
                           hr_error *err);

/* How fast the device moves memory, bytes a second, timed on buffers much
 * larger than its cache: copies (read plus written, as copy-bandwidth
 * figures count them) and reads alone (what a decode step does: it reads
 * every weight once). cuda only: HR_ERR_UNSUPPORTED on the cpu. Takes up to
 * 2 GiB of free device memory for ~50 ms; hr_engine_create after. */
typedef struct {
    double copy_bytes_per_s;
    double read_bytes_per_s;
} hr_bandwidth;
hr_status hr_device_bandwidth(hr_device device, hr_bandwidth *out, hr_error *err);

/* Parses "8GiB", "12GB", "512MiB", "1e9", or "90%" (of total) into bytes. */
hr_status hr_parse_size(const char *text, uint64_t total, uint64_t *out, hr_error *err);

/* Allocates everything the engine will use, once: weights on the device,
 * activations, the KV pool and workspaces. The model must outlive it. */
hr_status hr_engine_create(const hr_model *model, const hr_engine_params *params,
                           hr_engine **out, hr_error *err);
void hr_engine_free(hr_engine *engine);
/* The context (tokens per sequence) the engine was created with. */
int32_t hr_engine_n_ctx(const hr_engine *engine);
/* "cpu" or "cuda" */
const char *hr_engine_device_name(const hr_engine *engine);
/* The device's name as its driver reports it ("NVIDIA H200"), or the CPU's. */
const char *hr_engine_device_desc(const hr_engine *engine);
/* The kernels' path: on cuda "hopper" (compute capability 9.0 and later:
 * the persistent decode step, programmatic dependent launch, wgmma
 * attention) or "generic" (op by op, as on Ampere and Ada GPUs; forced on
 * any GPU by HEADROOM_CUDA_ARCH_FALLBACK=1); on the cpu the SIMD level of
 * its kernels ("avx512", "avx2", "ref"). */
const char *hr_engine_device_path(const hr_engine *engine);

typedef struct {
    uint64_t weights, kv, activations, workspace, graphs, runtime; /* bytes held, by part */
    uint64_t total;        /* their sum */
    uint64_t device_total, device_free; /* the device's own counters (0 on the cpu) */
    uint64_t host_rss;     /* resident memory of the process */
    double upload_seconds; /* weights to the device (cuda) */
    uint64_t upload_bytes;
} hr_memory_report;

/* The plan the engine was created from (its budget, parts, context). */
void hr_engine_plan(const hr_engine *engine, hr_plan *out);

/* What the engine holds now, by part (device memory on cuda). */
void hr_engine_memory(const hr_engine *engine, hr_memory_report *out);

typedef struct {
    float temperature;     /* <= 0: greedy */
    int32_t top_k;         /* 0: off */
    float top_p;           /* 1: off */
    float min_p;           /* 0: off */
    float repeat_penalty;  /* 1: off (CTRL-style: divide positive logits, multiply negative) */
    int32_t repeat_last_n; /* window of recent tokens the penalty looks at */
    uint64_t seed;
    int32_t max_tokens;    /* new tokens at most; -1: until the context is full */
    const char *const *stop; /* stop strings (not included in the output) */
    int32_t n_stop;
    bool ignore_eos;
} hr_sampling_params;

/* The defaults (those of `headroom run`): temperature 0.8, top_k 40, top_p
 * 0.95, min_p 0.05, no repetition penalty, seed 0, max_tokens 256. */
hr_sampling_params hr_sampling_params_default(void);
/* The same with temperature 0 (the argmax) and the filters off: greedy
 * decoding, reproducible without a seed (tests, benchmarks, references). */
hr_sampling_params hr_sampling_params_greedy(void);

typedef enum {
    HR_FINISH_NONE = 0, /* still running */
    HR_FINISH_EOS,      /* the model produced an end-of-generation token */
    HR_FINISH_LENGTH,   /* max_tokens reached */
    HR_FINISH_STOP,     /* a stop string appeared */
    HR_FINISH_CONTEXT,  /* the sequence filled its context */
    HR_FINISH_CANCELLED,
    HR_FINISH_ERROR,
} hr_finish_reason;

const char *hr_finish_reason_name(hr_finish_reason r); /* "eos", "length", ... */

/* ---- many requests (continuous batching): add, step, read events */

/* Queues a request. Its prompt is copied. HR_ERR_NO_FIT when the prompt
 * alone cannot fit in one sequence's context. *id is >= 0. */
hr_status hr_engine_add(hr_engine *engine, const int32_t *prompt, int32_t n_prompt,
                        const hr_sampling_params *params, int32_t *id, hr_error *err);

typedef struct {
    int32_t id;              /* request */
    int32_t token;           /* -1 when the event only reports the finish */
    const char *text;        /* UTF-8 completed by this token (text that may begin a stop
                                string is held back); valid until the next step */
    int32_t text_len;
    hr_finish_reason finish; /* HR_FINISH_NONE while it runs */
    const char *error;       /* with HR_FINISH_ERROR: why, naming the step (NaN logits at
                                position P, ...); NULL otherwise; valid until the next step */
} hr_event;

/* Runs one step: decodes one token for every running request and feeds
 * prompt chunks of waiting ones, up to n_batch rows. Writes up to cap events
 * (one per request that produced a token or finished). Returns HR_OK with
 * *n_events 0 when there is nothing to do. A request whose logits hold NaN
 * or infinity finishes with HR_FINISH_ERROR and event.error saying where;
 * the others go on. */
hr_status hr_engine_step(hr_engine *engine, hr_event *events, int32_t cap, int32_t *n_events,
                         hr_error *err);
/* Finishes a request at the next step with HR_FINISH_CANCELLED. */
void hr_engine_cancel(hr_engine *engine, int32_t id);
/* Requests queued or running. */
int32_t hr_engine_n_active(const hr_engine *engine);

typedef struct {
    uint64_t prompt_tokens;     /* prompt tokens of the requests admitted so far */
    uint64_t prefix_hit_tokens; /* of those, found in the prefix cache (not prefilled) */
    int32_t kv_blocks;          /* the pool's blocks */
    int32_t kv_blocks_free;     /* holding nothing */
    int32_t kv_blocks_cached;   /* held by no request, kept for later prefix hits */
    int32_t kv_block_size;      /* tokens a block */
} hr_engine_stats;

/* Counters since the engine was created, and the KV pool now. */
void hr_engine_get_stats(const hr_engine *engine, hr_engine_stats *out);

/* ---- one request, start to end */

typedef struct {
    int32_t n_prompt, n_gen;
    double prompt_ms;      /* prefill time */
    double gen_ms;         /* decode time after the first token */
    double first_token_ms; /* from the call to the first new token */
    hr_finish_reason finish;
} hr_generation_stats;

/* Called with each piece of text as it completes (never a broken UTF-8
 * sequence). Return false to stop (finish HR_FINISH_CANCELLED). */
typedef bool (*hr_text_fn)(const char *text, size_t len, int32_t token, void *user_data);

/* Tokenizes prompt (with BOS as the tokenizer says), generates, streams text.
 * The engine must have no other requests. */
hr_status hr_generate(hr_engine *engine, const char *prompt, size_t len,
                      const hr_sampling_params *params, hr_text_fn on_text, void *user_data,
                      hr_generation_stats *stats, hr_error *err);

/* ---- chat: a conversation rendered with the model's own template */

typedef struct hr_chat hr_chat;

typedef enum {
    HR_CONTEXT_WINDOW = 0, /* leave out the oldest turns (the system prompt stays) */
    HR_CONTEXT_SUMMARIZE,  /* the model summarises the oldest turns into the system prompt */
    HR_CONTEXT_ERROR,      /* refuse the message */
} hr_context_policy;

typedef struct {
    const char *system;        /* the system prompt, pinned; NULL: none */
    hr_context_policy policy;  /* when the conversation outgrows the context */
    int32_t max_turns;         /* turns (a user message and its reply) kept; 0: all that fit */
    const char *chat_template; /* Jinja source; NULL: the model's (tokenizer_config.json or
                                  GGUF tokenizer.chat_template) */
    int64_t now_unix;          /* the date templates print (strftime_now); 0: now */
} hr_chat_params;

/* No system prompt, window, no turn cap, the model's template. */
hr_chat_params hr_chat_params_default(void);

/* A conversation on engine (which must outlive it and have no other
 * requests while it replies). HR_ERR_UNSUPPORTED when the model has no chat
 * template and none is given; the template's errors name line:col. */
hr_status hr_chat_create(hr_engine *engine, const hr_chat_params *params, hr_chat **out,
                         hr_error *err);
void hr_chat_free(hr_chat *chat);

typedef struct {
    int32_t n_prompt;        /* tokens of the conversation sent (template applied) */
    int32_t n_prefilled;     /* of those, computed this turn: the rest were in the KV cache */
    int32_t n_gen;           /* tokens of the reply */
    int32_t turns_kept;      /* earlier turns sent with this message */
    int32_t turns_dropped;   /* turns left out this time (window, max_turns) */
    int32_t turns_summarized; /* turns folded into the summary this time */
    double prompt_ms, gen_ms, first_token_ms;
    hr_finish_reason finish;
} hr_chat_stats;

/* Sends a user message: renders the conversation, fits it into the context
 * by the policy, generates the assistant's reply and streams its text
 * through on_text (which may stop it: the reply so far is kept). The
 * earlier turns' KV is reused through the engine's prefix cache, so only
 * the new turn is prefilled. On error the message is not kept. */
hr_status hr_chat_send(hr_chat *chat, const char *text, const hr_sampling_params *params,
                       hr_text_fn on_text, void *user_data, hr_chat_stats *stats,
                       hr_error *err);
/* Forgets every turn (the system prompt stays). */
void hr_chat_reset(hr_chat *chat);
/* Replaces the system prompt (NULL: none); the turns stay. */
hr_status hr_chat_set_system(hr_chat *chat, const char *system, hr_error *err);
/* The turns' messages, oldest first ("user", "assistant"), and the system
 * prompt (with the summary of turns left out, if any); borrowed until the
 * next call that changes the conversation. */
int32_t hr_chat_n_messages(const hr_chat *chat);
void hr_chat_message(const hr_chat *chat, int32_t i, const char **role, const char **content);
const char *hr_chat_system(const hr_chat *chat);
/* The conversation as JSON ({"system": ..., "summary": ..., "first_kept": N,
 * "messages": [{"role", "content"}...]}), and back. */
hr_status hr_chat_save(const hr_chat *chat, const char *path, hr_error *err);
hr_status hr_chat_load(hr_chat *chat, const char *path, hr_error *err);

/* Negative log-likelihood of tokens[i + 1] given tokens[0..i], for i in
 * [0, n - 1): nll has n - 1 entries. When logits is not NULL it receives the
 * (n - 1, n_vocab) logits of those rows. n <= n_ctx. Needs logits_all. */
hr_status hr_engine_score(hr_engine *engine, const int32_t *tokens, int32_t n, double *nll,
                          float *logits, hr_error *err);

/* Perplexity of tokens (normally BOS + a text's tokens): consecutive windows
 * of `window` tokens (the last may be shorter), each scored from its second
 * token given the tokens before it in the window; exp of the mean nll.
 * window <= n_ctx. progress (may be NULL) is called after each window. */
hr_status hr_engine_perplexity(hr_engine *engine, const int32_t *tokens, int64_t n,
                               int32_t window, double *ppl,
                               void (*progress)(int64_t done, int64_t total, double ppl,
                                                void *user),
                               void *user, hr_error *err);

#ifdef __cplusplus
}
#endif

#endif /* HEADROOM_H */
