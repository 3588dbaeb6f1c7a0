/*
 * unicode.h — the UTF-8 and code-point helpers the tokenizers share.
 *
 * Text reaching a tokenizer is first made well-formed: every ill-formed
 * subsequence becomes one U+FFFD, following the Unicode "maximal subpart"
 * rule (Unicode 15, section 3.9, table 3-8), which is what Python's
 * bytes.decode("utf-8", "replace") does. After that every function here may
 * assume well-formed UTF-8.
 *
 * The GPT-2 byte-level map sends each byte to a printable code point (the
 * printable Latin-1 bytes to themselves, the other 68 bytes to U+0100..U+0143
 * in byte order), so that byte-level BPE vocabularies are valid Unicode.
 *
 * White_Space here is Unicode's property (U+0009..U+000D, U+0085 and the
 * Z categories), which is what Hugging Face tokenizers (Rust's
 * char::is_whitespace, Oniguruma's \s) use.
 */
#ifndef HR_TOKENIZER_UNICODE_H
#define HR_TOKENIZER_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define UNI_REPLACEMENT 0xFFFDu

/* Length in bytes of the sequence starting with lead byte b (1 for bytes that
 * cannot start a sequence). Only meaningful on well-formed text. */
static inline size_t uni_seq_len(uint8_t b) {
    return b < 0x80 ? 1 : b < 0xE0 ? (b < 0xC0 ? 1 : 2) : b < 0xF0 ? 3 : 4;
}

/* Decodes the well-formed sequence at s (n > 0 bytes available) and returns
 * its length; on an ill-formed sequence returns -(length of the maximal
 * subpart), always at least 1 byte, and *cp is U+FFFD. */
int uni_decode(const uint8_t *s, size_t n, uint32_t *cp);

/* Decodes one code point of well-formed text; returns its length. */
size_t uni_next(const char *s, size_t n, uint32_t *cp);

/* Writes cp as UTF-8 (1..4 bytes) and returns the length. */
size_t uni_encode(uint32_t cp, char *out);

/* Whether n bytes at s are well-formed UTF-8. */
bool uni_valid(const char *s, size_t n);

/* Bytes needed by uni_sanitize's output for n input bytes (3 per byte). */
static inline size_t uni_sanitize_bound(size_t n) { return n * 3; }

/* Copies s to out (capacity >= uni_sanitize_bound(n)) replacing every
 * maximal ill-formed subpart with U+FFFD; returns the bytes written. */
size_t uni_sanitize(const char *s, size_t n, char *out);

/* Unicode White_Space. */
bool uni_is_space(uint32_t cp);

/* GPT-2 byte-level map: byte -> code point, and back (-1 when cp is not in
 * the map). */
uint32_t uni_byte_to_cp(uint8_t b);
int uni_cp_to_byte(uint32_t cp);

#endif
