/* log.c — default sink writes warnings and errors to stderr. */
#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>

static void log_stderr(hr_log_level level, const char *msg, void *user_data) {
    (void)user_data;
    static const char *const names[] = {"error", "warning", "info", "debug"};
    fprintf(stderr, "headroom: %s: %s\n", names[level], msg);
}

static hr_log_fn log_fn = log_stderr;
static void *log_user;
static hr_log_level log_max = HR_LOG_WARN;

void hr_log_set(hr_log_fn fn, void *user_data) {
    log_fn = fn;
    log_user = user_data;
}

void hr_log_set_level(hr_log_level max_level) { log_max = max_level; }

void hr_log(hr_log_level level, const char *fmt, ...) {
    if (!log_fn || level > log_max)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_fn(level, msg, log_user);
}
