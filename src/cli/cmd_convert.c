/*
 * cmd_convert.c — `headroom convert -m DIR -o FILE.gguf --type TYPE`: write a
 * model (Hugging Face folder or GGUF) as a GGUF file llama.cpp can load.
 */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

static void help(FILE *f) {
    fprintf(f, "usage: headroom convert [-m PATH] -o FILE.gguf [--type TYPE]\n"
               "       headroom convert --synthetic SHAPE --tokenizer PATH -o FILE.gguf\n\n"
               "Writes the model as GGUF (llama.cpp's layout and key names) with its\n"
               "tokenizer and chat template.\n"
               "  -m PATH       model folder or .gguf (default: the embedded model)\n"
               "  --synthetic SHAPE   random weights of a named shape instead (for\n"
               "                side-by-side benchmarks with other engines)\n"
               "  --tokenizer PATH    the tokenizer to write (needed with --synthetic)\n"
               "  -o FILE       the GGUF file to write\n"
               "  --type TYPE   matrices as f16 (default), bf16, f32, q8_0, q4_0, q4_1,\n"
               "                q5_0, q5_1, q2_k, q3_k, q4_k, q5_k or q6_k; norms stay\n"
               "                f32 (nf4 and int8 have no GGUF type: load with --weights)\n");
}

int cmd_convert(int argc, char **argv) {
    const char *path = cli_default_model(), *out = NULL, *type_name = "f16";
    const char *synthetic = NULL, *tokenizer = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            help(stdout);
            return 0;
        } else if (strcmp(argv[i], "-m") == 0 || strcmp(argv[i], "--model") == 0) {
            if (!cli_value(argc, argv, &i, &path))
                return 1;
        } else if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) {
            if (!cli_value(argc, argv, &i, &out))
                return 1;
        } else if (strcmp(argv[i], "--synthetic") == 0) {
            if (!cli_value(argc, argv, &i, &synthetic))
                return 1;
        } else if (strcmp(argv[i], "--tokenizer") == 0) {
            if (!cli_value(argc, argv, &i, &tokenizer))
                return 1;
        } else if (strcmp(argv[i], "--type") == 0) {
            if (!cli_value(argc, argv, &i, &type_name))
                return 1;
        } else {
            cli_error("convert: unknown option '%s'", argv[i]);
            help(stderr);
            return 1;
        }
    }
    hr_dtype type;
    if (!out) {
        cli_error("convert: an output file is needed (-o FILE.gguf)");
        return 1;
    }
    if (!hr_dtype_from_name(type_name, &type)) {
        cli_error("convert: unknown type '%s'", type_name);
        return 1;
    }
    hr_error err;
    hr_model *m;
    hr_model_params mp = hr_model_params_default();
    mp.tokenizer_path = tokenizer;
    /* a synthetic model is made directly in the type asked for */
    hr_status s = synthetic ? hr_model_synthetic(synthetic, type, &mp, &m, &err)
                            : hr_model_load(path, &mp, &m, &err);
    if (s != HR_OK) {
        cli_error("%s", err.msg);
        return 1;
    }
    int rc = 0;
    if (hr_model_convert(m, out, type, &err) != HR_OK) {
        cli_error("%s", err.msg);
        rc = 1;
    } else {
        fprintf(stderr, "wrote %s (%s)\n", out, hr_dtype_name(type));
    }
    hr_model_free(m);
    return rc;
}
