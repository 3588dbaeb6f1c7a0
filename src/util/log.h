/* log.h — library diagnostics, routed through the hr_log_set() callback. */
#ifndef HR_UTIL_LOG_H
#define HR_UTIL_LOG_H

#include "util/error.h"

void hr_log(hr_log_level level, const char *fmt, ...) HR_PRINTF(2, 3);

#define HR_LOG_W(...) hr_log(HR_LOG_WARN, __VA_ARGS__)
#define HR_LOG_I(...) hr_log(HR_LOG_INFO, __VA_ARGS__)
#define HR_LOG_D(...) hr_log(HR_LOG_DEBUG, __VA_ARGS__)

#endif
