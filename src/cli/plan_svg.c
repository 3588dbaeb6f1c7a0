/*
 * plan_svg.c — plans as a picture: one stacked bar per plan (weights, KV
 * cache, activations, workspace, CUDA graphs, runtime, bottom to top)
 * against a dashed budget line (one across all bars when they share a
 * budget, else one over each bar), so "where does the memory go, and how far
 * over the card is it" reads at a glance in any browser.
 *
 * SVG is plain text, so the program writes it itself (no library). Every
 * part is one <rect> whose height is its bytes times one scale shared by all
 * bars; the rect carries data-part and data-bytes, and each bar's <g> carries
 * data-total, data-height, data-budget and data-fits, so a test (tests/sh_plan_svg.sh)
 * reads the figures back and checks the heights against `plan --json`.
 * Heights are written with three decimals: proportional to the bytes within
 * 0.001 px. Labels inside a part only where it is tall enough to hold them;
 * the legend always gives the first bar's bytes, and each rect a <title>
 * (the browser's tooltip) with the exact figure.
 *
 * Layout: the y axis in MiB or GiB at 1-2-5 steps; one slot per bar; the
 * legend on the right. The file goes to PATH.partial and is renamed over
 * PATH when complete, as the GGUF writer does: never a half picture.
 */
#include "cli/plan_svg.h"

#include "cli/cli.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The parts in stacking order; key is the data-part name the test reads. */
static const struct {
    const char *key;
    const char *name;
    size_t offset; /* of the uint64_t in hr_plan */
    const char *color;
} parts[] = {
    {"weights_mapped", "weights", offsetof(hr_plan, weights_mapped), "#4e79a7"},
    {"weights", "weights", offsetof(hr_plan, weights), "#76a5d8"},
    {"kv", "KV cache", offsetof(hr_plan, kv), "#f28e2b"},
    {"activations", "activations", offsetof(hr_plan, activations), "#e15759"},
    {"workspace", "workspace", offsetof(hr_plan, workspace), "#59a14f"},
    {"graphs", "CUDA graphs", offsetof(hr_plan, graphs), "#edc948"},
    {"runtime", "runtime", offsetof(hr_plan, runtime), "#b07aa1"},
};
enum { N_PARTS = (int)(sizeof parts / sizeof parts[0]) };

/* Geometry, px: margins around the plot, plot height, one slot per bar. */
enum { LEFT = 80, RIGHT = 250, TOP = 64, BOTTOM = 64, PLOT_H = 380, SLOT = 120 };

static uint64_t part_bytes(const hr_plan *p, int k) {
    uint64_t v;
    memcpy(&v, (const char *)p + parts[k].offset, sizeof v);
    return v;
}

/* cpu: the matrices are weights_mapped, and weights only the norms and
 * biases (as `plan` prints them) */
static const char *part_name(const hr_plan *p, int k) {
    return k == 1 && p->weights_mapped ? "norms, biases" : parts[k].name;
}

/* text with &, <, > and quotes escaped */
static void put_text(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* The y axis step, at most 8 of them: 1-2-5 MiB steps below a GiB, 1-2-5
 * GiB steps from there (never 1000 MiB: labels stay round). */
static uint64_t axis_step(uint64_t top) {
    static const uint64_t mul[] = {1, 2, 5, 10, 20, 50, 100, 200, 500};
    for (int unit = 20; unit <= 40; unit += 10) /* MiB, then GiB, then TiB */
        for (int m = 0; m < 9; m++)
            if (top / (mul[m] << unit) <= 8)
                return mul[m] << unit;
    return top / 8 + 1;
}

static void axis_label(uint64_t v, uint64_t step, char *buf, size_t cap) {
    if (step >= (1ull << 30))
        snprintf(buf, cap, "%llu GiB", (unsigned long long)(v >> 30));
    else
        snprintf(buf, cap, "%llu MiB", (unsigned long long)(v >> 20));
}

static void write_svg(FILE *f, const char *title, const plan_svg_bar *bars, int n) {
    const hr_plan *p0 = &bars[0].plan;
    uint64_t top = 0;
    int n_fit = 0;
    bool used[N_PARTS] = {false}, one_budget = true;
    for (int i = 0; i < n; i++) {
        const hr_plan *p = &bars[i].plan;
        top = p->total > top ? p->total : top;
        top = p->budget > top ? p->budget : top;
        n_fit += p->fits;
        one_budget = one_budget && p->budget == p0->budget;
        for (int k = 0; k < N_PARTS; k++)
            used[k] = used[k] || part_bytes(&bars[i].plan, k) > 0;
    }
    top += top / 12 + 1; /* room above the tallest bar for its total */
    const double scale = (double)PLOT_H / (double)top;
    const int plot_w = SLOT * n, height = TOP + PLOT_H + BOTTOM;
    /* wide enough for the title at ~9 px a character of 15 px bold */
    const int title_w = LEFT + 9 * (int)strlen(title) + 20;
    int width = LEFT + plot_w + RIGHT;
    width = width < title_w ? title_w : width;
    const int base = TOP + PLOT_H; /* y of zero bytes */
    char b[64];

    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
            "<text x=\"%d\" y=\"24\" font-size=\"15\" font-weight=\"bold\">",
            width, height, width, height, LEFT);
    put_text(f, title);
    if (one_budget)
        fprintf(f, "</text>\n<text x=\"%d\" y=\"44\" fill=\"#555\">budget %s (dashed line): ",
                LEFT, cli_bytes(p0->budget, b, sizeof b));
    else
        fprintf(f, "</text>\n<text x=\"%d\" y=\"44\" fill=\"#555\">each bar's budget dashed: ",
                LEFT);
    if (n == 1)
        fprintf(f, "%s</text>\n", p0->fits ? "fits" : "does not fit");
    else
        fprintf(f, "%d of %d fit</text>\n", n_fit, n);

    /* y axis: grid lines and labels */
    uint64_t step = axis_step(top);
    for (uint64_t v = 0; v <= top; v += step) {
        double y = base - (double)v * scale;
        axis_label(v, step, b, sizeof b);
        fprintf(f,
                "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#555\">%s</text>\n",
                LEFT, LEFT + plot_w, y, y, LEFT - 6, y + 4, b);
    }

    /* the bars, each stacked bottom up */
    for (int i = 0; i < n; i++) {
        const hr_plan *p = &bars[i].plan;
        const double x = LEFT + SLOT * i + SLOT * 0.2, w = SLOT * 0.6, cx = x + w / 2;
        const double h_total = (double)p->total * scale;
        fprintf(f, "<g class=\"bar\" data-label=\"");
        put_text(f, bars[i].label);
        fprintf(f,
                "\" data-total=\"%llu\" data-height=\"%.3f\" data-budget=\"%llu\" "
                "data-fits=\"%s\">\n",
                (unsigned long long)p->total, h_total, (unsigned long long)p->budget,
                p->fits ? "true" : "false");
        double y = base;
        for (int k = 0; k < N_PARTS; k++) {
            uint64_t v = part_bytes(p, k);
            if (v == 0)
                continue;
            double h = (double)v * scale;
            y -= h;
            fprintf(f,
                    "<rect x=\"%.1f\" y=\"%.3f\" width=\"%.1f\" height=\"%.3f\" fill=\"%s\" "
                    "data-part=\"%s\" data-bytes=\"%llu\"><title>%s: %s (%llu bytes)</title>"
                    "</rect>\n",
                    x, y, w, h, parts[k].color, parts[k].key, (unsigned long long)v,
                    part_name(p, k), cli_bytes(v, b, sizeof b), (unsigned long long)v);
            if (h >= 15) /* room for one line of 12 px text */
                fprintf(f,
                        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"white\" "
                        "font-size=\"11\">%s</text>\n",
                        cx, y + h / 2 + 4, cli_bytes(v, b, sizeof b));
        }
        fprintf(f,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-weight=\"bold\">%s"
                "</text>\n",
                cx, base - h_total - 6, cli_bytes(p->total, b, sizeof b));
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">", cx, base + 18);
        put_text(f, bars[i].label);
        fprintf(f, "</text>\n<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"%s\">", cx,
                base + 34, p->fits ? "#2a7d2a" : "#c0392b");
        put_text(f, bars[i].note);
        fprintf(f, "</text>\n</g>\n");
    }

    /* the budget over the bars: one line labelled at its right end, or a
     * line over each bar */
    double yb = base - (double)p0->budget * scale;
    if (one_budget)
        fprintf(f,
                "<line class=\"budget\" data-bytes=\"%llu\" x1=\"%d\" x2=\"%d\" y1=\"%.3f\" "
                "y2=\"%.3f\" stroke=\"#c0392b\" stroke-width=\"2\" stroke-dasharray=\"6 4\"/>\n"
                "<text x=\"%d\" y=\"%.1f\" fill=\"#c0392b\">budget %s</text>\n",
                (unsigned long long)p0->budget, LEFT, LEFT + plot_w, yb, yb, LEFT + plot_w + 6,
                yb + 4, cli_bytes(p0->budget, b, sizeof b));
    for (int i = 0; i < n && !one_budget; i++) {
        double y = base - (double)bars[i].plan.budget * scale;
        fprintf(f,
                "<line class=\"budget\" data-bytes=\"%llu\" x1=\"%d\" x2=\"%d\" y1=\"%.3f\" "
                "y2=\"%.3f\" stroke=\"#c0392b\" stroke-width=\"2\" stroke-dasharray=\"6 4\"/>\n",
                (unsigned long long)bars[i].plan.budget, LEFT + SLOT * i + 6,
                LEFT + SLOT * (i + 1) - 6, y, y);
    }
    fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", LEFT,
            LEFT + plot_w, base, base);

    /* legend: the parts present, top part first as in the bars, with the
     * first bar's bytes */
    int lx = LEFT + plot_w + 30, ly = TOP + 40;
    if (one_budget && yb > ly - 40 && yb < ly + 20 * N_PARTS)
        ly = (int)yb + 40; /* below the budget's label */
    fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#555\">parts of ", lx, ly - 16);
    put_text(f, bars[0].label);
    fprintf(f, ":</text>\n");
    for (int k = N_PARTS - 1; k >= 0; k--) {
        if (!used[k])
            continue;
        fprintf(f,
                "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                "<text x=\"%d\" y=\"%d\">%s %s</text>\n",
                lx, ly - 10, parts[k].color, lx + 18, ly, part_name(p0, k),
                cli_bytes(part_bytes(p0, k), b, sizeof b));
        ly += 20;
    }
    fprintf(f, "</svg>\n");
}

bool plan_svg_write(const char *path, const char *title, const plan_svg_bar *bars, int n_bars,
                    char *msg, size_t msg_cap) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.partial", path) >= (int)sizeof tmp) {
        snprintf(msg, msg_cap, "%s: the path is too long", path);
        return false;
    }
    FILE *f = fopen(tmp, "w");
    if (!f) {
        snprintf(msg, msg_cap, "%s: cannot create it: %s", tmp, strerror(errno));
        return false;
    }
    write_svg(f, title, bars, n_bars);
    bool ok = !ferror(f);
    if (fclose(f) != 0)
        ok = false;
    if (!ok) {
        snprintf(msg, msg_cap, "%s: write failed (disk full?)", tmp);
        remove(tmp);
        return false;
    }
    if (rename(tmp, path) != 0) {
        snprintf(msg, msg_cap, "%s: cannot rename %s over it: %s", path, tmp, strerror(errno));
        remove(tmp);
        return false;
    }
    return true;
}
