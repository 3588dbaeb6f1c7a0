/*
 * bench_tokenizer.c — tokenizer throughput: 1 MiB of tinyshakespeare through
 * Llama 2's SentencePiece vocabulary (tokenizer.model) and GPT-2's byte-level
 * BPE (the vocab-only GGUF), one hr_tokenize call per run, best of 5 runs.
 *
 *     bench_tokenizer [repo-root]      (default: HR_SOURCE_DIR, else ".")
 *
 * Prints one line per tokenizer: tokens, seconds, MB/s. Tokenizing should
 * never be a bottleneck next to prefill; the target is well over 5 MB/s.
 */
#define _POSIX_C_SOURCE 200809L
#include "headroom.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef HR_SOURCE_DIR
#define HR_SOURCE_DIR "."
#endif

#define TEXT_BYTES ((size_t)1 << 20)
#define RUNS 5

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int bench(const char *label, const char *path, const char *text, size_t len) {
    hr_error err;
    hr_tokenizer *tok = NULL;
    double t0 = now_s();
    if (hr_tokenizer_load(path, &tok, &err) != HR_OK) {
        fprintf(stderr, "%s: %s\n", label, err.msg);
        return 1;
    }
    double t_load = now_s() - t0;
    size_t cap = len + 16;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) {
        hr_tokenizer_free(tok);
        return 1;
    }
    hr_tokenize_params tp = hr_tokenize_params_default();
    double best = 1e30;
    size_t n = 0;
    for (int r = 0; r < RUNS; r++) {
        t0 = now_s();
        if (hr_tokenize(tok, text, len, &tp, ids, cap, &n, &err) != HR_OK) {
            fprintf(stderr, "%s: %s\n", label, err.msg);
            free(ids);
            hr_tokenizer_free(tok);
            return 1;
        }
        double dt = now_s() - t0;
        if (dt < best)
            best = dt;
    }
    printf("%-22s %8zu tokens  %7.4f s  %7.2f MB/s  (load %.3f s)\n", label, n, best,
           (double)len / 1e6 / best, t_load);
    free(ids);
    hr_tokenizer_free(tok);
    return 0;
}

int main(int argc, char **argv) {
    const char *root = argc > 1 ? argv[1] : HR_SOURCE_DIR;
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/corpus/tinyshakespeare.txt", root);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return 1;
    }
    char *text = malloc(TEXT_BYTES);
    size_t len = text ? fread(text, 1, TEXT_BYTES, f) : 0;
    fclose(f);
    if (len == 0) {
        free(text);
        return 1;
    }
    int rc = 0;
    snprintf(path, sizeof path, "%s/tests/data/llama2-tokenizer/tokenizer.model", root);
    rc |= bench("llama2 spm (.model)", path, text, len);
    snprintf(path, sizeof path, "%s/tests/data/tokenizer-vectors/ggml-vocab-llama-spm.gguf", root);
    rc |= bench("llama2 spm (gguf)", path, text, len);
    snprintf(path, sizeof path, "%s/tests/data/tokenizer-vectors/ggml-vocab-gpt-2.gguf", root);
    rc |= bench("gpt-2 bpe (gguf)", path, text, len);
    free(text);
    return rc;
}
