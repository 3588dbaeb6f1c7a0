/*
 * main.c — the headroom command line. One file per command; this file only
 * dispatches. It is the one place in the project that calls exit().
 */
#include "build_commit.h" /* HR_BUILD_COMMIT: generated at every build (cmake/) */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"run", cmd_run, "generate text from a prompt"},
    {"chat", cmd_chat, "talk with an instruction model (its own chat template)"},
    {"serve", cmd_serve, "an OpenAI-compatible HTTP server (continuous batching)"},
    {"perplexity", cmd_perplexity, "score a text file"},
    {"bench", cmd_bench, "time to first token, prefill and decode speed, peak memory"},
    {"tokenize", cmd_tokenize, "print the token ids of stdin"},
    {"plan", cmd_plan, "the memory a model needs, by part, and whether it fits"},
    {"inspect", cmd_inspect, "print a model's architecture, tensors and memory needs"},
    {"convert", cmd_convert, "write a model as a GGUF file (f16, bf16, q8_0, ...)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: headroom <command> [options]   (headroom <command> --help for more)\n"
               "       headroom --version\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
        printf("headroom %s (commit %s)\n", HR_VERSION,
               HR_BUILD_COMMIT[0] ? HR_BUILD_COMMIT : "unknown");
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    cli_error("unknown command '%s'", argv[1]);
    usage(stderr);
    return 1;
}
