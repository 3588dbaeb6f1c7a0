/*
 * plan_svg.h — `headroom plan --svg FILE`: plans drawn as stacked bars
 * against the budget line (plan_svg.c says how).
 */
#ifndef HR_CLI_PLAN_SVG_H
#define HR_CLI_PLAN_SVG_H

#include "headroom.h"

#include <stdbool.h>

/* One bar: a plan and the two lines written under it ("asked" and
 * "--ctx 4096", or "--ctx 4096" and "fits" in a sweep). */
typedef struct {
    hr_plan plan;
    char label[48];
    char note[48];
} plan_svg_bar;

/* Writes bars[0..n_bars) side by side, each stacked by part, with the
 * budget of bars[0] as a line, to path (through path.partial, renamed when
 * complete). title heads the picture. Returns false with a message in msg
 * when the file cannot be written. */
bool plan_svg_write(const char *path, const char *title, const plan_svg_bar *bars, int n_bars,
                    char *msg, size_t msg_cap);

#endif
