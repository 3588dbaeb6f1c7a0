/* util.c — option parsing and printing helpers shared by the commands. */
#include "cli/cli.h"
#include "util/env.h"
#include "util/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *cli_default_model(void) {
    const char *env = hr_env_get()->model;
    return env ? env : HR_SOURCE_DIR "/models/tiny-shakespeare";
}

void cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("headroom: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

bool cli_value(int argc, char **argv, int *i, const char **out) {
    if (*i + 1 >= argc) {
        cli_error("%s needs a value", argv[*i]);
        return false;
    }
    *out = argv[++*i];
    return true;
}

bool cli_int(int argc, char **argv, int *i, int64_t lo, int64_t hi, int64_t *out) {
    const char *opt = argv[*i], *v;
    if (!cli_value(argc, argv, i, &v))
        return false;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        cli_error("%s: '%s' is not an integer in [%lld, %lld]", opt, v, (long long)lo,
                  (long long)hi);
        return false;
    }
    *out = x;
    return true;
}

bool cli_float(int argc, char **argv, int *i, double lo, double hi, double *out) {
    const char *opt = argv[*i], *v;
    if (!cli_value(argc, argv, i, &v))
        return false;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi)) {
        cli_error("%s: '%s' is not a number in [%g, %g]", opt, v, lo, hi);
        return false;
    }
    *out = x;
    return true;
}

const char *cli_bytes(uint64_t n, char *buf, size_t cap) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%llu B", (unsigned long long)n);
    else
        snprintf(buf, cap, "%.2f %s", v, units[u]);
    return buf;
}

hr_status cli_tokenize(const hr_tokenizer *tok, const char *text, size_t len,
                       const hr_tokenize_params *tp, int32_t **ids, size_t *n, hr_error *err) {
    size_t cap = len + 16; /* most text: an id per byte or fewer */
    for (int attempt = 0;; attempt++) {
        int32_t *buf = malloc(cap * sizeof *buf);
        if (!buf)
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory for %zu token ids", cap);
        hr_status s = hr_tokenize(tok, text, len, tp, buf, cap, n, err);
        if (s == HR_OK) {
            *ids = buf;
            return HR_OK;
        }
        free(buf);
        /* too short a buffer: hr_tokenize said how many ids there are */
        if (s != HR_ERR_INVALID || *n <= cap || attempt > 0)
            return s;
        cap = *n;
    }
}

char *cli_read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    for (;;) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, stdin);
        n += got;
        if (got == 0)
            break;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}
