/* error.c — formatting of hr_error messages and status names. */
#include "util/error.h"

#include <stdarg.h>
#include <string.h>

const char *hr_status_name(hr_status s) {
    switch (s) {
    case HR_OK: return "HR_OK";
    case HR_ERR_IO: return "HR_ERR_IO";
    case HR_ERR_FORMAT: return "HR_ERR_FORMAT";
    case HR_ERR_UNSUPPORTED: return "HR_ERR_UNSUPPORTED";
    case HR_ERR_NO_FIT: return "HR_ERR_NO_FIT";
    case HR_ERR_NOMEM: return "HR_ERR_NOMEM";
    case HR_ERR_INVALID: return "HR_ERR_INVALID";
    case HR_ERR_DEVICE: return "HR_ERR_DEVICE";
    case HR_ERR_CANCELLED: return "HR_ERR_CANCELLED";
    case HR_ERR_NUMERIC: return "HR_ERR_NUMERIC";
    }
    return "HR_ERR_UNKNOWN";
}

hr_status hr_err_set(hr_error *err, hr_status code, const char *fmt, ...) {
    if (err) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

hr_status hr_err_prefix(hr_error *err, const char *fmt, ...) {
    if (!err)
        return HR_OK;
    char prefix[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    size_t cap = sizeof err->msg - 1;
    size_t pl = strlen(prefix), ol = strnlen(err->msg, cap);
    if (pl > cap)
        pl = cap;
    if (pl + ol > cap)
        ol = cap - pl;
    memmove(err->msg + pl, err->msg, ol);
    memcpy(err->msg, prefix, pl);
    err->msg[pl + ol] = '\0';
    return err->code;
}

void hr_err_clear(hr_error *err) {
    if (err) {
        err->code = HR_OK;
        err->msg[0] = '\0';
    }
}
