/* cmd_tokenize.c — `headroom tokenize -m PATH [--no-bos]`: ids of stdin. */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(FILE *f) {
    fprintf(f, "usage: headroom tokenize [-m PATH] [--no-bos] [--no-special] < text\n\n"
               "Reads all of stdin as UTF-8 text and prints its token ids on one line.\n"
               "  -m PATH        model folder, tokenizer.json, tokenizer.model or .gguf\n"
               "                 (default: the embedded model)\n"
               "  --no-bos       leave out the BOS token the tokenizer would add\n"
               "  --no-special   treat text like <s> as plain text, not special tokens\n");
}

int cmd_tokenize(int argc, char **argv) {
    const char *path = cli_default_model();
    hr_tokenize_params tp = hr_tokenize_params_default();
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            help(stdout);
            return 0;
        } else if (strcmp(argv[i], "-m") == 0 || strcmp(argv[i], "--model") == 0) {
            if (!cli_value(argc, argv, &i, &path))
                return 1;
        } else if (strcmp(argv[i], "--no-bos") == 0) {
            tp.add_bos = 0;
        } else if (strcmp(argv[i], "--no-special") == 0) {
            tp.parse_special = false;
        } else {
            cli_error("tokenize: unknown option '%s'", argv[i]);
            help(stderr);
            return 1;
        }
    }
    hr_error err;
    hr_tokenizer *tok;
    if (hr_tokenizer_load(path, &tok, &err) != HR_OK) {
        cli_error("%s", err.msg);
        return 1;
    }
    size_t len;
    char *text = cli_read_stdin(&len);
    int rc = 1;
    int32_t *ids = NULL;
    if (!text) {
        cli_error("tokenize: out of memory reading stdin");
        goto done;
    }
    size_t n = 0;
    if (cli_tokenize(tok, text, len, &tp, &ids, &n, &err) != HR_OK) {
        cli_error("tokenize: %s", err.msg);
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    rc = 0;
done:
    free(ids);
    free(text);
    hr_tokenizer_free(tok);
    return rc;
}
