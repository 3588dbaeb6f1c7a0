/*
 * sp_model.c — a protobuf wire-format reader for SentencePiece's
 * tokenizer.model (ModelProto, sentencepiece_model.proto).
 *
 * Read: pieces (1) {piece 1, score 2, type 3}, trainer_spec (2) {model_type 3,
 * treat_whitespace_as_suffix 24, byte_fallback 35, unk_id 40, bos_id 41,
 * eos_id 42, pad_id 43}, normalizer_spec (3) {name 1, precompiled_charsmap 2,
 * add_dummy_prefix 3, remove_extra_whitespaces 4, escape_whitespaces 5};
 * every other field is skipped by its wire type. Absent fields take the
 * proto2 defaults of the .proto file (model_type UNIGRAM, ids 0/1/2/-1,
 * normalizer flags true).
 *
 * The file is hostile: every varint is at most 10 bytes, every length fits in
 * what remains of its enclosing message, wire types 3/4 (groups) and 6/7 are
 * refused, and the token table is sized by a first counting pass, so nothing
 * is allocated beyond what the bytes can hold. Only BPE models are
 * supported; a non-empty precompiled_charsmap (NFKC-style normalization
 * rules) is refused rather than silently ignored.
 */
#include "tokenizer/tok_impl.h"

#include "tokenizer/unicode.h"

#include <string.h>

typedef struct {
    const uint8_t *p, *end;
    const char *name;
    hr_error *err;
} pb_reader;

typedef struct {
    uint32_t field;
    uint32_t wire;
    uint64_t v;          /* varint value, or fixed32/fixed64 bits */
    const uint8_t *data; /* length-delimited payload */
    size_t len;
} pb_field;

static hr_status pb_varint(pb_reader *r, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (r->p >= r->end)
            return hr_err_set(r->err, HR_ERR_FORMAT, "%s: truncated varint (file cut short?)",
                              r->name);
        uint8_t b = *r->p++;
        if (i == 9 && b > 1)
            return hr_err_set(r->err, HR_ERR_FORMAT, "%s: varint longer than 64 bits", r->name);
        v |= (uint64_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            *out = v;
            return HR_OK;
        }
    }
    return hr_err_set(r->err, HR_ERR_FORMAT, "%s: varint longer than 10 bytes", r->name);
}

/* Reads the next field; false at the end of the message. */
static hr_status pb_next(pb_reader *r, pb_field *f, bool *more) {
    *more = false;
    if (r->p >= r->end)
        return HR_OK;
    uint64_t key;
    HR_TRY(pb_varint(r, &key));
    f->field = (uint32_t)(key >> 3);
    f->wire = (uint32_t)(key & 7);
    if (f->field == 0 || key >> 3 > 0x1FFFFFFF)
        return hr_err_set(r->err, HR_ERR_FORMAT, "%s: invalid protobuf field number", r->name);
    size_t left;
    switch (f->wire) {
    case 0: HR_TRY(pb_varint(r, &f->v)); break;
    case 1:
    case 5: {
        size_t n = f->wire == 1 ? 8 : 4;
        if ((size_t)(r->end - r->p) < n)
            return hr_err_set(r->err, HR_ERR_FORMAT, "%s: truncated fixed-size field %u", r->name,
                              f->field);
        f->v = 0;
        for (size_t i = 0; i < n; i++)
            f->v |= (uint64_t)r->p[i] << (8 * i);
        r->p += n;
        break;
    }
    case 2: {
        uint64_t len;
        HR_TRY(pb_varint(r, &len));
        left = (size_t)(r->end - r->p);
        if (len > left)
            return hr_err_set(r->err, HR_ERR_FORMAT,
                              "%s: field %u claims %llu bytes but only %zu remain (truncated?)",
                              r->name, f->field, (unsigned long long)len, left);
        f->data = r->p;
        f->len = (size_t)len;
        r->p += len;
        break;
    }
    default:
        return hr_err_set(r->err, HR_ERR_FORMAT,
                          "%s: unsupported protobuf wire type %u (not a SentencePiece model?)",
                          r->name, f->wire);
    }
    *more = true;
    return HR_OK;
}

static float f32_of(uint64_t bits) {
    uint32_t u = (uint32_t)bits;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

typedef struct {
    int64_t model_type;
    bool byte_fallback;
    bool ws_suffix;
    int64_t unk_id, bos_id, eos_id, pad_id;
    bool add_dummy_prefix, remove_extra_ws, escape_ws;
    size_t charsmap_len;
} sp_settings;

static hr_status read_trainer(const uint8_t *d, size_t n, const char *name, sp_settings *s,
                              hr_error *err) {
    pb_reader r = {d, d + n, name, err};
    pb_field f;
    bool more;
    for (;;) {
        HR_TRY(pb_next(&r, &f, &more));
        if (!more)
            break;
        if (f.wire != 0)
            continue;
        int64_t v = (int64_t)f.v; /* int32 fields: negatives are 10-byte varints */
        switch (f.field) {
        case 3: s->model_type = v; break;
        case 24: s->ws_suffix = f.v != 0; break;
        case 35: s->byte_fallback = f.v != 0; break;
        case 40: s->unk_id = v; break;
        case 41: s->bos_id = v; break;
        case 42: s->eos_id = v; break;
        case 43: s->pad_id = v; break;
        default: break;
        }
    }
    return HR_OK;
}

static hr_status read_normalizer(const uint8_t *d, size_t n, const char *name, sp_settings *s,
                                 hr_error *err) {
    pb_reader r = {d, d + n, name, err};
    pb_field f;
    bool more;
    for (;;) {
        HR_TRY(pb_next(&r, &f, &more));
        if (!more)
            break;
        if (f.field == 2 && f.wire == 2)
            s->charsmap_len = f.len;
        else if (f.wire == 0 && f.field == 3)
            s->add_dummy_prefix = f.v != 0;
        else if (f.wire == 0 && f.field == 4)
            s->remove_extra_ws = f.v != 0;
        else if (f.wire == 0 && f.field == 5)
            s->escape_ws = f.v != 0;
    }
    return HR_OK;
}

/* One SentencePiece message -> text, score, type. */
static hr_status read_piece(const uint8_t *d, size_t n, const char *name, int32_t index,
                            const uint8_t **text, size_t *len, float *score, int64_t *type,
                            hr_error *err) {
    pb_reader r = {d, d + n, name, err};
    pb_field f;
    bool more;
    *text = NULL;
    *len = 0;
    *score = 0.0f;
    *type = TOK_TYPE_NORMAL;
    for (;;) {
        HR_TRY(pb_next(&r, &f, &more));
        if (!more)
            break;
        if (f.field == 1 && f.wire == 2) {
            *text = f.data;
            *len = f.len;
        } else if (f.field == 2 && f.wire == 5) {
            *score = f32_of(f.v);
        } else if (f.field == 3 && f.wire == 0) {
            *type = (int64_t)f.v;
        } else if (f.field <= 3) {
            return hr_err_set(err, HR_ERR_FORMAT, "%s: piece %d: field %u has wire type %u", name,
                              index, f.field, f.wire);
        }
    }
    if (!*text || *len == 0)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: piece %d has no text", name, index);
    if (*type < TOK_TYPE_NORMAL || *type > TOK_TYPE_BYTE)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: piece %d has unknown type %lld", name, index,
                          (long long)*type);
    if (!uni_valid((const char *)*text, *len))
        return hr_err_set(err, HR_ERR_FORMAT, "%s: piece %d is not valid UTF-8", name, index);
    return HR_OK;
}

hr_status sp_model_load(hr_tokenizer *t, const uint8_t *buf, size_t n, const char *name,
                        hr_error *err) {
    sp_settings s = {.model_type = 1,
                     .unk_id = 0,
                     .bos_id = 1,
                     .eos_id = 2,
                     .pad_id = -1,
                     .add_dummy_prefix = true,
                     .remove_extra_ws = true,
                     .escape_ws = true};
    pb_reader r = {buf, buf + n, name, err};
    pb_field f;
    bool more;
    int64_t n_pieces = 0;

    /* pass 1: count pieces, read the specs */
    for (;;) {
        HR_TRY(pb_next(&r, &f, &more));
        if (!more)
            break;
        if (f.wire != 2)
            continue;
        if (f.field == 1)
            n_pieces++;
        else if (f.field == 2)
            HR_TRY(read_trainer(f.data, f.len, name, &s, err));
        else if (f.field == 3)
            HR_TRY(read_normalizer(f.data, f.len, name, &s, err));
    }
    if (n_pieces == 0)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: no pieces (not a SentencePiece model?)", name);
    if (n_pieces > INT32_MAX / 2)
        return hr_err_set(err, HR_ERR_FORMAT, "%s: %lld pieces", name, (long long)n_pieces);
    if (s.model_type != 2)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "%s: SentencePiece model type %lld (%s) is not supported; headroom "
                          "handles BPE models (type 2: Llama 2, Mistral, Phi-3)",
                          name, (long long)s.model_type,
                          s.model_type == 1   ? "unigram"
                          : s.model_type == 3 ? "word"
                                              : "char");
    if (s.ws_suffix)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "%s: treat_whitespace_as_suffix is not supported", name);
    if (s.charsmap_len > 0)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "%s: the model normalizes text with a precompiled character map, "
                          "which headroom does not apply (use tokenizer.json)",
                          name);

    /* pass 2: the pieces */
    HR_TRY(vocab_alloc(&t->v, (int32_t)n_pieces, err));
    r = (pb_reader){buf, buf + n, name, err};
    int32_t i = 0;
    for (;;) {
        HR_TRY(pb_next(&r, &f, &more));
        if (!more)
            break;
        if (f.field != 1 || f.wire != 2)
            continue;
        const uint8_t *text;
        size_t len;
        float score;
        int64_t type;
        HR_TRY(read_piece(f.data, f.len, name, i, &text, &len, &score, &type, err));
        HR_TRY(vocab_set(&t->v, i, (const char *)text, len, score, (tok_type)type, err));
        i++;
    }
    HR_TRY(vocab_index(&t->v, name, err));

    strcpy(t->v.model, "llama");
    strcpy(t->v.pre, "default");
    int64_t ids[4] = {s.unk_id, s.bos_id, s.eos_id, s.pad_id};
    int32_t *dst[4] = {&t->v.unk_id, &t->v.bos_id, &t->v.eos_id, &t->v.pad_id};
    for (int k = 0; k < 4; k++)
        *dst[k] = ids[k] >= 0 && ids[k] < n_pieces ? (int32_t)ids[k] : -1;

    t->algo = TOK_ALGO_SPM;
    t->byte_fallback = s.byte_fallback;
    t->spm_escape_ws = s.escape_ws;
    t->spm_remove_extra_ws = s.remove_extra_ws;
    t->spm_legacy = true; /* transformers' default; tokenizer_config.json may say otherwise */
    t->v.add_space_prefix = s.add_dummy_prefix;
    t->v.add_bos = true; /* LlamaTokenizer's add_bos_token default */
    t->v.add_eos = false;
    return HR_OK;
}
