/*
 * test_chat_template.c — src/chat/, the Jinja subset of chat templates.
 *
 * 1. Every JSON file of tests/fixtures/chat (tools/make_chat_fixtures.py): real
 *    templates of the model families, and one-construct templates, rendered
 *    by transformers' apply_chat_template. Each case must render byte for
 *    byte the same, or fail where transformers failed (with the template's
 *    own message for raise_exception).
 * 2. Bad input: syntax errors name the problem and line:col; unsupported
 *    features are named; the limits (nesting, steps, output, memory, macro
 *    recursion) give errors, not crashes.
 * 3. Mutated real templates: parse and render must return a status, never
 *    crash (ASan/UBSan builds make this strict).
 * 4. Allocation faults: every failing allocation gives a clean HR_ERR_NOMEM.
 */
#include "chat/template.h"
#include "util/alloc.h"
#include "util/json.h"

#include "test.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>

/* ---------------------------------------------------------------- helpers */

/* Seconds since the epoch of "YYYY-MM-DDTHH:MM:SS" read as UTC
 * (days-from-civil, so no timegm is needed). */
static int64_t iso_to_unix(const char *s) {
    int y, mo, d, h, mi, se;
    if (!s || sscanf(s, "%d-%d-%dT%d:%d:%d", &y, &mo, &d, &h, &mi, &se) != 6)
        return 0;
    y -= mo <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    int64_t days = era * 146097 + doe - 719468;
    return days * 86400 + h * 3600 + mi * 60 + se;
}

static const char *jstr(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Parses and renders; the result (hr_malloc'd) or NULL with *st and err. */
static char *render(const char *tmpl, const chat_message *m, int n, const chat_render_opts *o,
                    hr_status *st, hr_error *err, size_t *len) {
    chat_template *t = NULL;
    char *out = NULL;
    *st = chat_template_parse(tmpl, &t, err);
    if (*st == HR_OK)
        *st = chat_template_render(t, m, n, o, &out, len, err);
    chat_template_free(t);
    return out;
}

static const chat_message k_msgs[] = {{"system", "sys"}, {"user", "hi"}, {"assistant", "yo"}};

/* Renders with k_msgs and checks the text. */
static void expect_text(const char *tmpl, const char *want) {
    hr_error err = {0};
    hr_status st;
    size_t n = 0;
    chat_render_opts o = {.bos_token = "<s>", .eos_token = "</s>", .now_unix = 1700000000};
    char *out = render(tmpl, k_msgs, 3, &o, &st, &err, &n);
    CHECK_MSG(st == HR_OK && out && n == strlen(want) && memcmp(out, want, n) == 0,
              "template %.60s: got %s %s [%s], want [%s]", tmpl, hr_status_name(st), err.msg,
              out ? out : "", want);
    hr_free(out);
}

/* Parse or render fails with status want_st and a message containing each
 * of the (up to two) strings. */
static void expect_error(const char *tmpl, hr_status want_st, const char *has1, const char *has2) {
    hr_error err = {0};
    hr_status st;
    size_t n = 0;
    chat_render_opts o = {.bos_token = "<s>", .eos_token = "</s>"};
    char *out = render(tmpl, k_msgs, 3, &o, &st, &err, &n);
    CHECK_MSG(st == want_st && !out, "template %.60s: got %s (%s), want %s", tmpl,
              hr_status_name(st), err.msg, hr_status_name(want_st));
    CHECK_MSG(!has1 || strstr(err.msg, has1), "message '%s' lacks '%s'", err.msg, has1);
    CHECK_MSG(!has2 || strstr(err.msg, has2), "message '%s' lacks '%s'", err.msg, has2);
    hr_free(out);
}

/* ---------------------------------------------------------------- fixtures */

/* The first differing byte, shown with some context either side. */
static void show_diff(const char *family, const char *name, const char *got, size_t got_n,
                      const char *want, size_t want_n) {
    size_t i = 0;
    while (i < got_n && i < want_n && got[i] == want[i])
        i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "  %s/%s: differs at byte %zu (got %zu bytes, want %zu)\n", family, name, i,
            got_n, want_n);
    fprintf(stderr, "    got:  [%.*s]\n", (int)((got_n - from) < 80 ? got_n - from : 80),
            got + from);
    fprintf(stderr, "    want: [%.*s]\n", (int)((want_n - from) < 80 ? want_n - from : 80),
            want + from);
}

static int run_fixture(const char *path, int *n_cases) {
    size_t len;
    char *text = test_read_file(path, &len, 1);
    bool nomem;
    cJSON *doc = hr_json_parse(text, len, NULL, &nomem);
    free(text);
    CHECK_MSG(doc != NULL, "%s: not JSON", path);
    if (!doc)
        return 1;
    const char *family = jstr(doc, "family") ? jstr(doc, "family") : path;
    chat_render_opts o = {.bos_token = jstr(doc, "bos_token"),
                          .eos_token = jstr(doc, "eos_token"),
                          .now_unix = iso_to_unix(jstr(doc, "now"))};
    const char *shared = jstr(doc, "template");
    chat_template *t = NULL;
    hr_error err = {0};
    if (shared) {
        hr_status st = chat_template_parse(shared, &t, &err);
        CHECK_MSG(st == HR_OK, "%s: parse: %s", family, err.msg);
        if (st != HR_OK) {
            cJSON_Delete(doc);
            return 1;
        }
    }
    int failed = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(doc, "cases")) {
        const char *name = jstr(c, "name");
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(c, "messages");
        int n = cJSON_GetArraySize(msgs);
        chat_message m[32];
        if (n > 32)
            n = 32;
        for (int k = 0; k < n; k++) {
            const cJSON *x = cJSON_GetArrayItem(msgs, k);
            m[k] = (chat_message){jstr(x, "role"), jstr(x, "content")};
        }
        o.add_generation_prompt =
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt"));
        const char *own = jstr(c, "template");
        const char *want = jstr(c, "expected"), *want_err = jstr(c, "error");
        const char *err_type = jstr(c, "error_type");
        char *out = NULL;
        size_t out_n = 0;
        hr_status st;
        memset(&err, 0, sizeof err);
        if (own) {
            out = render(own, m, n, &o, &st, &err, &out_n);
        } else {
            st = chat_template_render(t, m, n, &o, &out, &out_n, &err);
        }
        bool ok;
        if (want) {
            size_t want_n = strlen(want);
            ok = st == HR_OK && out_n == want_n && memcmp(out, want, want_n) == 0;
            if (!ok && st == HR_OK)
                show_diff(family, name, out, out_n, want, want_n);
            else if (!ok)
                fprintf(stderr, "  %s/%s: %s %s\n", family, name, hr_status_name(st), err.msg);
        } else {
            /* transformers failed: so must we; raise_exception with its message */
            ok = st != HR_OK;
            if (ok && err_type && !strcmp(err_type, "TemplateError") && want_err)
                ok = strstr(err.msg, want_err) != NULL;
            if (!ok)
                fprintf(stderr, "  %s/%s: want error %s '%s', got %s '%s'\n", family, name,
                        err_type ? err_type : "", want_err ? want_err : "", hr_status_name(st),
                        st == HR_OK ? out : err.msg);
        }
        CHECK(ok);
        failed += !ok;
        ++*n_cases;
        hr_free(out);
    }
    chat_template_free(t);
    cJSON_Delete(doc);
    return failed;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void test_fixtures(void) {
    const char *dir = TEST_PATH("tests/fixtures/chat");
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open %s", dir);
    if (!d)
        return;
    char *names[128];
    int n_files = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n_files < 128) {
        size_t l = strlen(e->d_name);
        if (l > 5 && !strcmp(e->d_name + l - 5, ".json"))
            names[n_files++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n_files, sizeof *names, cmp_str);
    CHECK(n_files >= 20);
    int total = 0;
    for (int k = 0; k < n_files; k++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        int n_cases = 0, failed = run_fixture(path, &n_cases);
        printf("  %-24s %3d cases%s\n", names[k], n_cases, failed ? "  FAILED" : "");
        total += n_cases;
        free(names[k]);
    }
    printf("fixtures: %d files, %d cases\n", n_files, total);
}

/* ---------------------------------------------------------------- unit tests */

static void test_basics(void) {
    expect_text("", "");
    expect_text("plain text", "plain text");
    expect_text("{{ messages | length }}{{ bos_token }}{{ eos_token }}", "3<s></s>");
    expect_text("{{ add_generation_prompt }}", "False");
    expect_text("{% for m in messages %}{{ m.role[0] }}{% endfor %}", "sua");
    expect_text("{{ strftime_now('%d %b %Y') }}", "14 Nov 2023"); /* now_unix 1700000000 */

    /* a NULL field is a missing key (transformers drops None values) */
    chat_message m[1] = {{"user", NULL}};
    hr_error err = {0};
    hr_status st;
    size_t n;
    char *out = render("{{ messages[0].content is defined }}|{{ messages[0] | length }}", m, 1,
                       NULL, &st, &err, &n);
    CHECK_MSG(st == HR_OK && out && !strcmp(out, "False|1"), "%s %s", err.msg, out ? out : "");
    hr_free(out);

    /* opts NULL: no bos/eos, no generation prompt */
    out = render("[{{ bos_token }}]{{ bos_token is defined }}{{ add_generation_prompt }}", k_msgs,
                 1, NULL, &st, &err, &n);
    CHECK_MSG(st == HR_OK && out && !strcmp(out, "[]FalseFalse"), "%s", out ? out : err.msg);
    hr_free(out);

    /* the length counts a NUL a string literal put in the output */
    out = render("{{ 'a\\x00b' }}", k_msgs, 1, NULL, &st, &err, &n);
    CHECK(st == HR_OK && n == 3 && out && out[1] == '\0' && out[2] == 'b' && out[3] == '\0');
    hr_free(out);

    /* now_unix 0: the current time */
    out = render("{{ strftime_now('%Y') | int > 2023 }}", k_msgs, 1, NULL, &st, &err, &n);
    CHECK_MSG(st == HR_OK && out && !strcmp(out, "True"), "%s", out ? out : err.msg);
    hr_free(out);

    /* one parsed template, many renders */
    chat_template *t = NULL;
    CHECK_OK(chat_template_parse("{{ messages[-1].content }}", &t, &err), &err);
    for (int k = 0; k < 3 && t; k++) {
        out = NULL;
        CHECK_OK(chat_template_render(t, &k_msgs[k], 1, NULL, &out, NULL, &err), &err);
        CHECK(out && !strcmp(out, k_msgs[k].content));
        hr_free(out);
    }
    chat_template_free(t);
    chat_template_free(NULL);
}

static void test_bad_input(void) {
    /* syntax, with line:col */
    expect_error("{{ x", HR_ERR_FORMAT, "1:1", "unterminated '{{'");
    expect_error("{% if x", HR_ERR_FORMAT, "1:1", "unterminated '{%'");
    expect_error("a\n{# never closed", HR_ERR_FORMAT, "2:1", "comment");
    expect_error("{% if x %}yes", HR_ERR_FORMAT, "never closed", "endif");
    expect_error("{% for x in y %}{% endif %}", HR_ERR_FORMAT, "1:20", "unexpected '{% endif %}'");
    expect_error("{% endfor %}", HR_ERR_FORMAT, "1:4", "endfor");
    expect_error("{{ 'abc }}", HR_ERR_FORMAT, "1:4", "unterminated string");
    expect_error("{{ (1 }}", HR_ERR_FORMAT, NULL, NULL);
    expect_error("{{ ) }}", HR_ERR_FORMAT, "1:4", "unexpected )");
    expect_error("{{ [1) }}", HR_ERR_FORMAT, "1:6", "expected ']'");
    expect_error("{{ 1 2 }}", HR_ERR_FORMAT, "1:6", "expected '}}'");
    expect_error("{% if %}{% endif %}", HR_ERR_FORMAT, "1:7", "expected an expression");
    expect_error("{{ x $ y }}", HR_ERR_FORMAT, "1:6", "unexpected character");
    expect_error("{% break %}", HR_ERR_FORMAT, "1:4", "outside a for loop");
    expect_error("{% frobnicate %}", HR_ERR_FORMAT, "1:4", "frobnicate");
    expect_error("{{ '\\x4' }}", HR_ERR_FORMAT, "truncated", NULL);
    expect_error("bad \xff byte", HR_ERR_FORMAT, "1:5", "UTF-8");
    expect_error("line1\nline2\n  {{ messages | bogus }}", HR_ERR_UNSUPPORTED, "3:17", "'bogus'");
    /* unsupported features are named */
    expect_error("{{ x is bogus }}", HR_ERR_UNSUPPORTED, "'bogus'", NULL);
    expect_error("{% include 'other.jinja' %}", HR_ERR_UNSUPPORTED, "'include'", NULL);
    expect_error("{% extends 'base' %}", HR_ERR_UNSUPPORTED, "'extends'", NULL);
    expect_error("{% for x in y recursive %}{% endfor %}", HR_ERR_UNSUPPORTED, "recursive", NULL);
    expect_error("{{ f(*args) }}", HR_ERR_UNSUPPORTED, "*args", NULL);
    expect_error("{% macro m(varargs) %}{% endmacro %}", HR_ERR_UNSUPPORTED, "varargs", NULL);
    expect_error("{{ '%s' % 1 }}", HR_ERR_UNSUPPORTED, "formatting", NULL);
    expect_error("{{ 'a'.zfill(3) }}", HR_ERR_UNSUPPORTED, "zfill", NULL);
    expect_error("{{ 99999999999999999999 }}", HR_ERR_UNSUPPORTED, "64 bits", NULL);
    expect_error("{{ 9223372036854775807 + 1 }}", HR_ERR_UNSUPPORTED, "overflow", NULL);
    /* runtime errors and raise_exception */
    expect_error("x{{ raise_exception('No system role here') }}", HR_ERR_INVALID,
                 "No system role here", "1:5");
    expect_error("{{ messages[0].role.x.y }}", HR_ERR_INVALID, "undefined", NULL);
    expect_error("{% set l = [] %}{{ l.append(1) }}", HR_ERR_INVALID, "not allowed", NULL);
    expect_error("{% set ns = namespace(_x=1) %}", HR_ERR_INVALID, "'_'", NULL);

    /* messages and arguments */
    hr_error err = {0};
    char *out = NULL;
    chat_template *t = NULL;
    CHECK_OK(chat_template_parse("{{ messages[0].content }}", &t, &err), &err);
    chat_message bad[1] = {{"user", "caf\xc3"}};
    CHECK(chat_template_render(t, bad, 1, NULL, &out, NULL, &err) == HR_ERR_INVALID && !out &&
          strstr(err.msg, "UTF-8"));
    CHECK(chat_template_render(t, k_msgs, 0, NULL, &out, NULL, &err) == HR_ERR_INVALID && !out);
    CHECK(chat_template_render(t, NULL, 1, NULL, &out, NULL, &err) == HR_ERR_INVALID);
    CHECK(chat_template_render(NULL, k_msgs, 1, NULL, &out, NULL, &err) == HR_ERR_INVALID);
    chat_render_opts o = {.bos_token = "\xe2\x82"};
    CHECK(chat_template_render(t, k_msgs, 1, &o, &out, NULL, &err) == HR_ERR_INVALID &&
          strstr(err.msg, "bos_token"));
    chat_template_free(t);
    CHECK(chat_template_parse(NULL, &t, &err) == HR_ERR_INVALID);
}

/* n copies of s (malloc'd). */
static char *repeat(const char *s, int n, const char *prefix, const char *suffix) {
    size_t l = strlen(s), pl = strlen(prefix), sl = strlen(suffix);
    char *p = malloc(pl + l * (size_t)n + sl + 1);
    memcpy(p, prefix, pl);
    for (int k = 0; k < n; k++)
        memcpy(p + pl + l * (size_t)k, s, l);
    memcpy(p + pl + l * (size_t)n, suffix, sl + 1);
    return p;
}

static void test_limits(void) {
    /* nesting: brackets, not, unary minus, blocks */
    char *s = repeat("(", 5000, "{{ ", "1 }}");
    expect_error(s, HR_ERR_INVALID, "nested", NULL);
    free(s);
    s = repeat("[", 300, "{{ ", "1 }}");
    expect_error(s, HR_ERR_INVALID, "nested", NULL);
    free(s);
    s = repeat("not ", 100000, "{{ ", "x }}");
    expect_error(s, HR_ERR_INVALID, "nested", NULL);
    free(s);
    s = repeat("- ", 100000, "{{ ", "1 }}");
    expect_error(s, HR_ERR_INVALID, "nested", NULL);
    free(s);
    s = repeat("{% if true %}", 1000, "", "x");
    expect_error(s, HR_ERR_INVALID, "nested", NULL);
    free(s);
    /* a value nested deeper than the limit, built at run time */
    expect_error("{% set ns = namespace(v=1) %}{% for i in range(500) %}{% set ns.v = [ns.v] %}"
                 "{% endfor %}{{ ns.v }}",
                 HR_ERR_INVALID, "nested", NULL);
    /* 40 nested levels is fine */
    s = repeat("(", 40, "{{ ", "1");
    char *s2 = repeat(")", 40, s, " }}");
    expect_text(s2, "1");
    free(s);
    free(s2);
    /* loops: a huge range, too many steps, too much output, too much memory */
    expect_error("{% for i in range(1000000000) %}{% endfor %}", HR_ERR_INVALID, "range", NULL);
    expect_error(
        "{% set r = range(5000) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}",
        HR_ERR_INVALID, "steps", NULL);
    /* a fresh range per iteration: memory runs out first, cleanly */
    expect_error("{% for i in range(5000) %}{% for j in range(5000) %}{% endfor %}{% endfor %}",
                 HR_ERR_INVALID, "MiB", NULL);
    expect_error("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", HR_ERR_INVALID,
                 "output", NULL);
    expect_error("{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}"
                 "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                 HR_ERR_INVALID, "MiB", NULL);
    expect_error("{{ 'x' * 10000000000 }}", HR_ERR_INVALID, "too large", NULL);
    /* recursion */
    expect_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", HR_ERR_INVALID, "macro calls",
                 NULL);
    /* a source past the size limit */
    s = repeat("x", (1 << 20) + 1, "", "");
    expect_error(s, HR_ERR_INVALID, "KiB", NULL);
    free(s);
}

/* ---------------------------------------------------------------- robustness */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)rng_state;
}

/* Mutations of the real templates: deletions, duplications and swaps of
 * bytes and of Jinja tokens. Each must parse or fail, render or fail. */
static void test_mutations(void) {
    static const char *const families[] = {
        "llama2", "llama3_1", "llama3_2",         "mistral_nemo",  "qwen2_5",
        "gemma2", "phi3_5",   "deepseek_r1_qwen", "deepseek_v3_1", "zephyr"};
    static const char *const pieces[] = {
        "{{", "}}", "{%",   "%}", "{#", "#}",       "-",       "+",     "(",        ")",
        "[",  "]",  "'",    "\"", "|",  " if ",     " endif ", " for ", " endfor ", " set ",
        ".",  ":",  "loop", "\\", "\n", "\xc3\xa9", "not ",    " is ",  "~",        "**"};
    int n_runs = 0, n_ok = 0;
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s.json", TEST_PATH("tests/fixtures/chat"), families[f]);
        size_t len;
        char *text = test_read_file(path, &len, 0);
        if (!text)
            continue;
        bool nomem;
        cJSON *doc = hr_json_parse(text, len, NULL, &nomem);
        free(text);
        const char *tmpl = doc ? jstr(doc, "template") : NULL;
        if (!tmpl) {
            cJSON_Delete(doc);
            continue;
        }
        size_t tl = strlen(tmpl);
        char *buf = malloc(tl * 2 + 64);
        for (int r = 0; r < 300; r++) {
            memcpy(buf, tmpl, tl + 1);
            size_t n = tl;
            int edits = 1 + (int)(rnd() % 4);
            for (int e = 0; e < edits && n > 2; e++) {
                size_t at = rnd() % n;
                switch (rnd() % 3) {
                case 0: { /* delete a run */
                    size_t k = 1 + rnd() % 8;
                    if (at + k > n)
                        k = n - at;
                    memmove(buf + at, buf + at + k, n - at - k + 1);
                    n -= k;
                    break;
                }
                case 1: { /* insert a piece */
                    const char *p = pieces[rnd() % (sizeof pieces / sizeof pieces[0])];
                    size_t k = strlen(p);
                    if (n + k >= tl * 2 + 60)
                        break;
                    memmove(buf + at + k, buf + at, n - at + 1);
                    memcpy(buf + at, p, k);
                    n += k;
                    break;
                }
                default: /* overwrite a byte */
                    buf[at] = (char)(rnd() % 128 ? rnd() % 95 + 32 : rnd() % 256);
                    if (!buf[at])
                        buf[at] = ' ';
                }
            }
            hr_error err = {0};
            hr_status st;
            size_t on;
            chat_render_opts o = {.add_generation_prompt = r & 1,
                                  .bos_token = "<s>",
                                  .eos_token = "</s>",
                                  .now_unix = 1};
            char *out = render(buf, k_msgs, 3, &o, &st, &err, &on);
            n_runs++;
            n_ok += st == HR_OK;
            CHECK_MSG(st == HR_OK ? out != NULL : out == NULL && err.msg[0] != '\0',
                      "mutation %d of %s: %s", r, families[f], hr_status_name(st));
            hr_free(out);
        }
        free(buf);
        cJSON_Delete(doc);
    }
    printf("mutations: %d runs, %d rendered\n", n_runs, n_ok);
    CHECK(n_runs > 1000);
}

/* Every allocation of a parse and a render fails in turn. */
static void test_alloc_faults(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/llama3_1.json", TEST_PATH("tests/fixtures/chat"));
    size_t len;
    char *text = test_read_file(path, &len, 1);
    bool nomem;
    cJSON *doc = hr_json_parse(text, len, NULL, &nomem);
    free(text);
    const char *tmpl = doc ? jstr(doc, "template") : NULL;
    CHECK(tmpl != NULL);
    if (!tmpl) {
        cJSON_Delete(doc);
        return;
    }
    char *want = NULL;
    int n_runs = 0;
    for (int64_t n = 1; n < 100000; n++) {
        hr_error err = {0};
        hr_status st;
        size_t on;
        chat_render_opts o = {.add_generation_prompt = true, .bos_token = "<s>"};
        hr_alloc_fail_at(n);
        char *out = render(tmpl, k_msgs, 3, &o, &st, &err, &on);
        bool fired = hr_alloc_fault_fired();
        hr_alloc_fail_at(0);
        n_runs++;
        if (!fired) {
            CHECK_OK(st, &err);
            want = out;
            break;
        }
        CHECK_MSG(st == HR_ERR_NOMEM && !out, "allocation %" PRId64 ": %s %s", n,
                  hr_status_name(st), err.msg);
        hr_free(out);
    }
    CHECK(want && strstr(want, "<|start_header_id|>assistant"));
    printf("allocation faults: %d runs\n", n_runs);
    CHECK(n_runs >= 4);
    hr_free(want);
    cJSON_Delete(doc);
}

int main(void) {
    hr_json_init();
    test_fixtures();
    test_basics();
    test_bad_input();
    test_limits();
    test_mutations();
    test_alloc_faults();
    TEST_END();
}
