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

/* Options every engine command takes: the model (-m or --synthetic with
 * --weights), --device, --threads, --ctx, --kv-dtype, --exact. */
typedef struct {
    const char *model;     /* path; NULL with synthetic */
    const char *synthetic; /* shape name */
    hr_dtype weights;      /* synthetic weight type */
    bool weights_given;    /* --weights was on the command line */
    hr_engine_params ep;
    bool mem_report;       /* --mem-report */
    const char *mem;       /* --mem, parsed by cli_budget into ep.mem_budget */
    bool dtype_list;       /* bench parses --dtype itself (a list) */
} cli_engine_opts;

/* Turns --mem into ep.mem_budget (a share needs the device's size). */
bool cli_budget(cli_engine_opts *o);

/* The memory planned and held by part, on stderr ("after load", ...). */
void cli_memory_report(const hr_engine *e, const char *when);

void cli_engine_opts_init(cli_engine_opts *o);
/* Consumes an engine option at argv[*i]: 1 consumed, 0 not one, -1 bad value. */
int cli_engine_option(int argc, char **argv, int *i, cli_engine_opts *o);
/* Help lines for the options above. */
void cli_engine_help(FILE *f);
/* Loads the model (file or synthetic). shapes_only: a synthetic model gets
 * its shapes and tokenizer but no weight memory (a file is mapped anyway). */
hr_status cli_load_model(const cli_engine_opts *o, bool shapes_only, hr_model **m,
                         hr_error *err);

int cmd_tokenize(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_plan(int argc, char **argv);

#endif
