/*
 * unicode_norm.h — the tables behind NFC/NFD (unicode_norm_data.c, generated
 * by tools/make_tokenizer_fixtures.py --unicode-tables; the counts below are
 * rewritten by that tool).
 */
#ifndef HR_TOKENIZER_UNICODE_NORM_H
#define HR_TOKENIZER_UNICODE_NORM_H

#include <stdint.h>

#define UNI_N_CCC 382
#define UNI_N_DECOMP 2061
#define UNI_N_COMP 941

typedef struct {
    uint32_t first, last;
    uint32_t ccc;
} uni_ccc_run;

extern const uni_ccc_run uni_ccc[UNI_N_CCC];
extern const uint32_t uni_decomp[UNI_N_DECOMP][3];
extern const uint32_t uni_comp[UNI_N_COMP][3];

#endif
