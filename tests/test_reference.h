/*
 * test_reference.h — reading reference.bin/.json, the transformers results
 * that tools/make_reference.py (via tools/refio.py) writes beside a fixture
 * model: tokens, full logits at a few positions, every next-token nll, the
 * perplexity, the greedy continuation and the text.
 */
#ifndef HR_TESTS_TEST_REFERENCE_H
#define HR_TESTS_TEST_REFERENCE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint32_t T, V, n_full;
    int32_t *tokens;
    uint32_t *full_pos;
    float *logits;  /* (n_full, V) */
    float *nll;     /* (T - 1) */
    double ppl;
    uint32_t n_greedy;
    int32_t *greedy;
    char text[512];
} reference;

static inline bool read_exact(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n; }

static inline bool load_reference(const char *dir, reference *r) {
    char path[1100]; /* dir is at most 1024 bytes */
    snprintf(path, sizeof path, "%s/reference.bin", dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    char magic[8];
    uint32_t hdr[4];
    bool ok = read_exact(f, magic, 8) && memcmp(magic, "HRREF001", 8) == 0 &&
              read_exact(f, hdr, sizeof hdr) && hdr[0] == 1;
    if (ok) {
        r->T = hdr[1];
        r->V = hdr[2];
        r->n_full = hdr[3];
        r->tokens = malloc(r->T * sizeof(int32_t));
        r->full_pos = malloc(r->n_full * sizeof(uint32_t));
        r->logits = malloc((size_t)r->n_full * r->V * sizeof(float));
        r->nll = malloc((r->T - 1) * sizeof(float));
        ok = read_exact(f, r->tokens, r->T * 4) && read_exact(f, r->full_pos, r->n_full * 4) &&
             read_exact(f, r->logits, (size_t)r->n_full * r->V * 4) &&
             read_exact(f, r->nll, (r->T - 1) * 4) && read_exact(f, &r->ppl, 8) &&
             read_exact(f, &r->n_greedy, 4);
        if (ok) {
            r->greedy = malloc(r->n_greedy * sizeof(int32_t));
            ok = read_exact(f, r->greedy, r->n_greedy * 4);
        }
    }
    fclose(f);
    /* the text, from reference.json ("text": "...") */
    snprintf(path, sizeof path, "%s/reference.json", dir);
    f = fopen(path, "rb");
    if (f) {
        char buf[4096];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = '\0';
        char *t = strstr(buf, "\"text\": \"");
        if (t) {
            t += 9;
            char *e = strchr(t, '"');
            if (e && (size_t)(e - t) < sizeof r->text)
                memcpy(r->text, t, (size_t)(e - t));
        }
        fclose(f);
    }
    return ok;
}

static inline void free_reference(reference *r) {
    free(r->tokens);
    free(r->full_pos);
    free(r->logits);
    free(r->nll);
    free(r->greedy);
}

#endif
