/*
 * cli.h — shared helpers of the command-line front end: one file per
 * command (cmd_*.c), each `int cmd_x(int argc, char **argv)` returning the
 * exit status (0 ok, 1 bad usage or bad input, 2 "does not fit" for plan).
 */
#ifndef HR_CLI_CLI_H
#define HR_CLI_CLI_H

#include "headroom.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* The embedded default model, used when -m is not given. */
const char *cli_default_model(void);

/* Option parsing: argv[*i] is the option; the value is argv[*i + 1].
 * Prints "headroom CMD: OPTION needs a value" and returns false on error. */
bool cli_value(int argc, char **argv, int *i, const char **out);
bool cli_int(int argc, char **argv, int *i, int64_t lo, int64_t hi, int64_t *out);
bool cli_float(int argc, char **argv, int *i, double lo, double hi, double *out);

/* Prints "headroom: <msg>" to stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "1.23 GiB"-style size into buf. */
const char *cli_bytes(uint64_t n, char *buf, size_t cap);

/* Reads all of stdin (NUL-terminated, caller frees with free()). */
char *cli_read_stdin(size_t *len);

/* The ids of text (any bytes), in a buffer the caller frees with free();
 * sized from what hr_tokenize asks for when the first guess is short. */
hr_status cli_tokenize(const hr_tokenizer *tok, const char *text, size_t len,
                       const hr_tokenize_params *tp, int32_t **ids, size_t *n, hr_error *err);

/* The engine commands, as masks: which options each one takes. */
enum {
    CLI_RUN = 1, CLI_PERPLEXITY = 2, CLI_BENCH = 4, CLI_PLAN = 8, CLI_CHAT = 16, CLI_SERVE = 32
};

/* The sampling options (run, chat): 1 consumed, 0 not one, -1 bad value. */
int cli_sampling_option(int argc, char **argv, int *i, hr_sampling_params *sp);
void cli_sampling_help(FILE *f);

/* Options the engine commands share: the model (-m or --synthetic with
 * --weights), --device, --threads, --ctx, --kv-dtype, --exact, ... (each
 * applies to some of the commands: engine_opts.c's table says which). */
typedef struct {
    unsigned cmd;          /* CLI_RUN, ...: the command parsing them */
    const char *model;     /* path; NULL with synthetic */
    const char *synthetic; /* shape name */
    hr_dtype weights;      /* synthetic weight type */
    bool weights_given;    /* --weights was on the command line */
    const char *weights_name; /* its text: a real model is quantized to it at load */
    bool dtype_given;      /* --dtype was on the command line */
    hr_engine_params ep;
    bool mem_report;       /* --mem-report */
    const char *mem;       /* --mem, parsed by cli_budget into ep.mem_budget */
} cli_engine_opts;

/* Turns --mem into ep.mem_budget (a share needs the device's size). */
bool cli_budget(cli_engine_opts *o);

/* The memory planned and held by part, on stderr ("after load", ...). */
void cli_memory_report(const hr_engine *e, const char *when);
/* One line on stderr: the device and the kernels' path ("cuda on NVIDIA
 * H200, hopper path"; hr_engine_device_path); and cli_dtype_note's. */
void cli_device_line(const hr_engine *e, const cli_engine_opts *o);

void cli_engine_opts_init(cli_engine_opts *o, unsigned cmd);
/* Consumes an engine option at argv[*i]: 1 consumed, 0 not one, -1 bad value
 * or an option of another command (with a message). */
int cli_engine_option(int argc, char **argv, int *i, cli_engine_opts *o);
/* Help lines for the engine options that command cmd takes. */
void cli_engine_help(FILE *f, unsigned cmd);
/* A note on stderr when --dtype was given but the device is the cpu. */
void cli_dtype_note(const cli_engine_opts *o, hr_device device);
/* Loads the model (file or synthetic). shapes_only: a synthetic model gets
 * its shapes and tokenizer but no weight memory (a file is mapped anyway). */
hr_status cli_load_model(const cli_engine_opts *o, bool shapes_only, hr_model **m,
                         hr_error *err);

int cmd_tokenize(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_serve(int argc, char **argv);

#endif
