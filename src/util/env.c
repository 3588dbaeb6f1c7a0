/* env.c — the one place headroom reads its environment (env.h). */
#include "util/env.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static hr_env env;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static const char *text(const char *name) {
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

static bool is_zero(const char *v) { return v && strcmp(v, "0") == 0; }

static void env_read(void) {
    env.model = text("HEADROOM_MODEL");
    env.cpu = text("HEADROOM_CPU");
    env.cuda_pstep_off = is_zero(text("HEADROOM_CUDA_PSTEP"));
    const char *fill = text("HEADROOM_CUDA_DEC_FILL");
    env.cuda_dec_fill = fill ? atoi(fill) : -1;
    env.cuda_pstep_trace = text("HEADROOM_CUDA_PSTEP_TRACE") != NULL;
    env.cuda_pstep_timeline = text("HEADROOM_CUDA_PSTEP_TIMELINE");
    const char *prof = text("HEADROOM_CUDA_PROFILE");
    env.cuda_profile = prof && !is_zero(prof);
    env.cuda_pdl_off = is_zero(text("HEADROOM_CUDA_PDL"));
    env.cuda_wgmma_off = is_zero(text("HEADROOM_CUDA_WGMMA"));
    const char *fb = text("HEADROOM_CUDA_ARCH_FALLBACK");
    env.cuda_arch_fallback = fb ? atoi(fb) : 0;
    const char *mma = text("HEADROOM_CUDA_PACKED_MMA_ROWS");
    env.cuda_packed_mma_rows = mma ? atoi(mma) : -1;
}

const hr_env *hr_env_get(void) {
    (void)pthread_once(&env_once, env_read);
    return &env;
}

hr_tuning hr_tuning_default(void) {
    const hr_env *e = hr_env_get();
    return (hr_tuning){.no_pstep = e->cuda_pstep_off,
                       .dec_fill = e->cuda_dec_fill < 0    ? 0
                                   : e->cuda_dec_fill == 0 ? -1
                                                           : e->cuda_dec_fill};
}
