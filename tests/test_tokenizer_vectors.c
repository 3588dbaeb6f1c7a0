// ctest-label: numeric
/*
 * test_tokenizer_vectors.c — llama.cpp's tokenizer test vectors
 * (test-tokenizer-0): for each vocab-only GGUF in tests/data/tokenizer-vectors,
 * the .inp file holds the cases separated by "\n__ggml_vocab_test__\n" and the
 * .out file one line of expected ids per case (no BOS). Every case must match
 * exactly, tokenized without BOS and with special-token parsing on.
 */
#include "headroom.h"
#include "test.h"

static void run_file(const char *vocab) {
    char path[1024], inp_path[1100], out_path[1100];
    snprintf(path, sizeof path, "%s/tests/data/tokenizer-vectors/ggml-vocab-%s.gguf", HR_SOURCE_DIR,
             vocab);
    snprintf(inp_path, sizeof inp_path, "%s.inp", path);
    snprintf(out_path, sizeof out_path, "%s.out", path);

    hr_error err;
    hr_tokenizer *tok = NULL;
    CHECK_OK(hr_tokenizer_load(path, &tok, &err), &err);
    if (!tok)
        return;
    size_t inp_len = 0, out_len = 0;
    char *inp = test_read_file(inp_path, &inp_len, 0);
    char *out = test_read_file(out_path, &out_len, 0);
    CHECK(inp && out);
    if (!inp || !out) {
        free(inp);
        free(out);
        hr_tokenizer_free(tok);
        return;
    }

    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t sep_len = sizeof sep - 1;
    char *case_start = inp, *line = out;
    int n_cases = 0, n_ok = 0;
    hr_tokenize_params tp = hr_tokenize_params_default();
    tp.add_bos = 0;
    tp.parse_special = true;
    for (;;) {
        char *end = strstr(case_start, sep);
        if (!end)
            break;
        size_t case_len = (size_t)(end - case_start);
        char *nl = strchr(line, '\n');
        if (!nl) {
            CHECK_MSG(0, "%s: .out has fewer lines than .inp has cases", vocab);
            break;
        }
        *nl = '\0';

        int32_t want[4096];
        size_t n_want = 0;
        for (char *p = line; *p;) {
            char *q;
            long v = strtol(p, &q, 10);
            if (q == p)
                break;
            if (n_want < 4096)
                want[n_want++] = (int32_t)v;
            p = q;
        }
        int32_t got[4096];
        size_t n_got = 0;
        hr_status st = hr_tokenize(tok, case_start, case_len, &tp, got, 4096, &n_got, &err);
        bool ok = st == HR_OK && n_got == n_want && memcmp(got, want, n_want * sizeof *got) == 0;
        n_cases++;
        if (ok) {
            n_ok++;
        } else {
            fprintf(stderr, "%s case %d '%.*s':\n  want:", vocab, n_cases, (int)case_len,
                    case_start);
            for (size_t i = 0; i < n_want; i++)
                fprintf(stderr, " %d", want[i]);
            fprintf(stderr, "\n  got: ");
            for (size_t i = 0; i < n_got && st == HR_OK; i++)
                fprintf(stderr, " %d", got[i]);
            if (st != HR_OK)
                fprintf(stderr, " (%s: %s)", hr_status_name(st), err.msg);
            fprintf(stderr, "\n");
        }
        CHECK(ok);
        case_start = end + sep_len;
        line = nl + 1;
    }
    printf("%-10s %d/%d cases match\n", vocab, n_ok, n_cases);
    CHECK_MSG(n_cases == 46, "%s: %d cases, expected 46", vocab, n_cases);
    free(inp);
    free(out);
    hr_tokenizer_free(tok);
}

int main(void) {
    run_file("llama-spm");
    run_file("phi-3");
    run_file("gpt-2");
    run_file("starcoder");
    TEST_END();
}
