/* utf8.h — well-formed UTF-8, as Unicode defines it (no overlongs, no
 * surrogates, nothing past U+10FFFF): the check every parser of user text
 * shares (chat templates and messages, the server's request bodies). */
#ifndef HR_UTIL_UTF8_H
#define HR_UTIL_UTF8_H

#include <stddef.h>

/* The length of the longest well-formed prefix of s[0, n): n when all of it
 * is, else the offset of the first byte that is not. */
size_t hr_utf8_valid_prefix(const char *s, size_t n);

#endif
