/* sampling_opts.c — the sampling options that run and chat share. */
#include "cli/cli.h"

#include <string.h>

void cli_sampling_help(FILE *f) {
    fprintf(f, "  --temp T              temperature (default 0.8; 0 = greedy)\n"
               "  --top-k K             keep the K most likely tokens (default 40; 0 = off)\n"
               "  --top-p P             nucleus sampling (default 0.95; 1 = off)\n"
               "  --min-p P             drop tokens below P x the top probability\n"
               "                        (default 0.05; 0 = off)\n"
               "  --repeat-penalty R    penalise recent tokens (default 1 = off)\n"
               "  --repeat-last-n N     how many recent tokens (default 64)\n"
               "  --seed S              random seed (default: from the clock)\n");
}

int cli_sampling_option(int argc, char **argv, int *i, hr_sampling_params *sp) {
    const char *a = argv[*i];
    int64_t n;
    double x;
    if (strcmp(a, "--temp") == 0) {
        if (!cli_float(argc, argv, i, 0.0, 100.0, &x))
            return -1;
        sp->temperature = (float)x;
    } else if (strcmp(a, "--top-k") == 0) {
        if (!cli_int(argc, argv, i, 0, 1 << 24, &n))
            return -1;
        sp->top_k = (int32_t)n;
    } else if (strcmp(a, "--top-p") == 0) {
        if (!cli_float(argc, argv, i, 1e-6, 1.0, &x))
            return -1;
        sp->top_p = (float)x;
    } else if (strcmp(a, "--min-p") == 0) {
        if (!cli_float(argc, argv, i, 0.0, 1.0, &x))
            return -1;
        sp->min_p = (float)x;
    } else if (strcmp(a, "--repeat-penalty") == 0) {
        if (!cli_float(argc, argv, i, 1e-3, 100.0, &x))
            return -1;
        sp->repeat_penalty = (float)x;
    } else if (strcmp(a, "--repeat-last-n") == 0) {
        if (!cli_int(argc, argv, i, 0, 1 << 20, &n))
            return -1;
        sp->repeat_last_n = (int32_t)n;
    } else if (strcmp(a, "--seed") == 0) {
        if (!cli_int(argc, argv, i, 0, INT64_MAX, &n))
            return -1;
        sp->seed = (uint64_t)n;
    } else {
        return 0;
    }
    return 1;
}
