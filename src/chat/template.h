/*
 * template.h — chat templates: the Jinja subset that model chat templates
 * (tokenizer_config.json "chat_template", GGUF "tokenizer.chat_template")
 * are written in, rendered as Hugging Face transformers' apply_chat_template
 * renders them: jinja2's ImmutableSandboxedEnvironment with trim_blocks and
 * lstrip_blocks, the loopcontrols extension, and the globals transformers
 * adds (raise_exception, strftime_now, namespace, dict, a json.dumps tojson).
 *
 * Usage:
 *     chat_template *t;
 *     if (chat_template_parse(src, &t, &err) != HR_OK) ...   // once per model
 *     chat_message m[2] = {{"system", "Be brief."}, {"user", "Hi"}};
 *     chat_render_opts o = {.add_generation_prompt = true, .bos_token = "<s>"};
 *     char *text; size_t n;
 *     if (chat_template_render(t, m, 2, &o, &text, &n, &err) == HR_OK) { ...; hr_free(text); }
 *     chat_template_free(t);
 *
 * Both functions take untrusted input (the template from a model file, the
 * messages from a user) and never crash or exit on it: errors say what and
 * where (line:col of the template). A parsed template is immutable, so one
 * may be rendered from several threads at once.
 *
 * Variables a template sees: messages (a list of {"role", "content"}
 * dicts; a NULL field is left out, as transformers drops None values),
 * add_generation_prompt, bos_token and eos_token (when not NULL),
 * tools = none and documents = none (as apply_chat_template passes them).
 * What is supported, and the limits, are listed in chat_internal.h.
 */
#ifndef HR_CHAT_TEMPLATE_H
#define HR_CHAT_TEMPLATE_H

#include "headroom.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct chat_template chat_template;

typedef struct {
    const char *role;    /* "system", "user", "assistant", ... (UTF-8; NULL: no role key) */
    const char *content; /* UTF-8; NULL: no content key */
} chat_message;

typedef struct {
    bool add_generation_prompt; /* end with the header of an assistant turn */
    const char *bos_token; /* NULL: the variable is undefined, as for a tokenizer without one */
    const char *eos_token;
    /* strftime_now's clock (Llama 3.2 prints today's date): seconds since
     * 1970-01-01 UTC, formatted as UTC. 0: the current local time, which is
     * what transformers' datetime.now() gives. Tests set it to be repeatable. */
    int64_t now_unix;
} chat_render_opts;

/* Parses a template (NUL-terminated UTF-8). On success *out owns the parse
 * tree; free it with chat_template_free. Errors: HR_ERR_FORMAT (syntax, with
 * line:col), HR_ERR_UNSUPPORTED (a Jinja feature outside the subset, named),
 * HR_ERR_NOMEM. *out is written only on success. */
hr_status chat_template_parse(const char *source, chat_template **out, hr_error *err);

/* Renders n_msgs messages (opts may be NULL: no generation prompt, no bos/eos).
 * On success *out is a NUL-terminated string allocated with hr_malloc (the
 * caller frees it with hr_free) and *out_len (may be NULL) its length.
 * Errors: HR_ERR_INVALID when the template refuses the conversation
 * (raise_exception: the message is the template's own), when a message is
 * not valid UTF-8 or the list is empty (transformers refuses that too), or
 * on a runtime error of the template (a type error, an undefined value used,
 * a limit exceeded); HR_ERR_UNSUPPORTED for a feature outside the subset met
 * at run time; HR_ERR_NOMEM. Nothing is written to *out on error. */
hr_status chat_template_render(const chat_template *t, const chat_message *msgs, int n_msgs,
                               const chat_render_opts *opts, char **out, size_t *out_len,
                               hr_error *err);

/* NULL is fine. */
void chat_template_free(chat_template *t);

#endif
