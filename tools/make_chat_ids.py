#!/usr/bin/env python3
"""Builds tests/fixtures/chat/ids.json: the token ids of the chat
conversations of tools/make_chat_fixtures.py, rendered by transformers and
then tokenized by a real tokenizer, for the families whose tokenizer is at
hand offline (tests/test_chat_ids.c checks headroom against each case's
"expected" ids):

  smollm2   SmolLM2-135M-Instruct's GGUF (tools/fetch_smollm2.sh): its chat
            template and tokenizer, read by transformers from the GGUF
  llama2    tests/data/llama2-tokenizer/tokenizer.model (the bytes of
            shared/data/llama2-tokenizer/tokenizer.model), twice: beside a
            tokenizer_config.json saying "legacy": true, and one saying
            "legacy": false (see below)

  pip install transformers jinja2 gguf sentencepiece protobuf   (no torch)
  tools/make_chat_ids.py [--check]   (--check: compare, write nothing)

What is expected: for SmolLM2 (byte-level BPE), transformers' ids; for
Llama 2 (a SentencePiece model), SentencePiece's own (see below), with
transformers' ids beside them as "transformers_ids" and, where the two
differ, a "why".

transformers' ids of a case are tok.apply_chat_template(messages,
add_generation_prompt=..., tokenize=True, return_dict=False). transformers (5.x,
tokenization_utils_base.py) renders the text and then calls
self(rendered, add_special_tokens=False, ...): no BOS/EOS is added (the
template writes its own), and special-token text in the rendered string,
the messages' included, is parsed as special tokens
(sanitize_control_tokens defaults to False). The tool asserts this: the ids
equal tok(text, add_special_tokens=False), and the text equals the
<family>.json fixture's expected text.

Llama 2 and "legacy": transformers 5's LlamaTokenizer built from a bare
tokenizer.model defaults to legacy=False (Metaspace prepend_scheme
"first": no "▁" in front of text that follows a special token, so
"<s>[INST]" is [1, 29961, ...]); so does the hub's Llama-2-*-hf folder, whose
tokenizer_config.json says "legacy": false. Meta's own chat code, llama.cpp
and transformers 4's fast tokenizer give [1, 518, ...] ("▁["): legacy. Both
are recorded, each with the tokenizer_config.json that selects it; the tool
also records which one transformers gives from tokenizer.model alone.

Llama 2 and runs of spaces: transformers 5 builds the BPE merges of a
tokenizer.model with generate_merges(vocab) (convert_slow_tokenizer.py,
SentencePieceExtractor.extract), ranked by piece id, not by score. The 16
pieces of 1-16 "▁" have low ids but score -1e9, so transformers merges
"▁▁" first where SentencePiece merges it last: "x  padded" is
▁x ▁▁ p added here, ▁x ▁ ▁p added in SentencePiece (and in transformers 5
from a tokenizer.json whose merges follow the scores). transformers' ids are
recorded as they are, in "transformers_ids".

Llama 2's expected ids: SentencePiece is the reference for a SentencePiece
model, so "expected" is the sentencepiece library's (pip's sentencepiece, or
Debian's python3-sentencepiece) on the same tokenizer.model: the rendered
text is split at the special tokens transformers parses in it (<unk>, <s>,
</s>: its added tokens, none stripping spaces), each of those gives its id,
and each text segment between them is sp.encode(segment): with the model's
dummy "▁" prefix under legacy (as Meta and llama.cpp tokenize), and under
legacy=False without it (the model's normalizer_spec.add_dummy_prefix
cleared) unless the segment starts the text (Metaspace prepend_scheme
"first"). The tool asserts that sentencepiece and transformers agree on
every case without a run of two or more spaces, and that on every case
transformers' own tokenizer with only its merges re-ranked by
SentencePiece's scores (the merged piece's score, highest first) gives
sentencepiece's ids: where the two differ, the merge order is the reason.

SmolLM2: transformers' GGUF loader rebuilds a plain ByteLevel pre-tokenizer;
the tool puts back the published Digits(individual) + ByteLevel pipeline, as
tools/make_smollm2_reference.py does, so the ids are the model's own
tokenizer's. transformers' GGUF metadata reader is a module that imports
torch at its top without using it for metadata; without torch installed the
tool lends it a stand-in module for that import only, then checks that the
tokenizer built gives every id of tests/fixtures/smollm2/tokenizer.bin
(made with torch installed), so the stand-in changed nothing.
"""
import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_chat_fixtures as mcf  # noqa: E402

OUT = os.path.join(ROOT, "tests", "fixtures", "chat", "ids.json")
LLAMA2_MODEL_REL = "tests/data/llama2-tokenizer/tokenizer.model"
SMOLLM2_TOKBIN = os.path.join(ROOT, "tests", "fixtures", "smollm2", "tokenizer.bin")


class _AnyMeta(type):
    """Whatever a module-level torch expression asks for (annotations, dtype
    tables, base classes) resolves to this class; nothing computes with it."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return cls

    def __getitem__(cls, key):
        return cls

    def __or__(cls, other):
        return cls

    __ror__ = __or__

    def __call__(cls, *a, **k):
        return cls


class _Any(metaclass=_AnyMeta):
    pass


class _TorchStandIn(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any


def smollm2_tokenizer(gguf_path):
    from tokenizers import pre_tokenizers
    from transformers import LlamaTokenizer
    try:
        import torch  # noqa: F401
        stand_in = False
    except ImportError:
        stand_in = True
    saved = {}
    if stand_in:
        for n in ("torch", "torch.nn", "torch.nn.functional"):
            saved[n] = sys.modules.get(n)
            sys.modules[n] = _TorchStandIn(n)
    try:
        # the class AutoTokenizer picks for this GGUF (model_type llama); called
        # directly because AutoTokenizer reads a llama GGUF's config through torch
        d, name = os.path.split(gguf_path)
        tok = LlamaTokenizer.from_pretrained(d, gguf_file=name)
    finally:
        for n, mod in saved.items():
            if mod is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = mod
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    # the same tokenizer as the one tools/make_smollm2_reference.py used
    with open(SMOLLM2_TOKBIN, "rb") as f:
        b = f.read()
    assert b[:8] == b"HRTOK001", SMOLLM2_TOKBIN
    (n,), p = struct.unpack_from("<I", b, 8), 12
    for _ in range(n):
        (ln,) = struct.unpack_from("<I", b, p)
        s = b[p + 4:p + 4 + ln].decode("utf-8")
        p += 4 + ln
        (k,) = struct.unpack_from("<I", b, p)
        want = list(struct.unpack_from(f"<{k}i", b, p + 4))
        p += 4 + 4 * k
        assert tok(s, add_special_tokens=False).input_ids == want, f"tokenizer.bin: {s!r}"
    return tok, stand_in, n


def llama2_tokenizer(model_path, config):
    """LlamaTokenizer from a folder holding tokenizer.model and, unless
    config is None, a tokenizer_config.json with config."""
    from transformers import LlamaTokenizer
    with tempfile.TemporaryDirectory() as d:
        os.symlink(model_path, os.path.join(d, "tokenizer.model"))
        if config is not None:
            with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                json.dump(config, f)
        tok = LlamaTokenizer.from_pretrained(d)
    if config is not None:
        assert tok.legacy == config["legacy"]
    return tok


def sentencepiece_encoders(model_path):
    """sentencepiece on tokenizer.model: as the file is (its dummy "▁"
    prefix) and with normalizer_spec.add_dummy_prefix cleared."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb
    with open(model_path, "rb") as f:
        blob = f.read()
    proto = pb.ModelProto()
    proto.ParseFromString(blob)
    assert proto.normalizer_spec.add_dummy_prefix, model_path
    proto.normalizer_spec.add_dummy_prefix = False
    return (spm.SentencePieceProcessor(model_proto=blob),
            spm.SentencePieceProcessor(model_proto=proto.SerializeToString()))


def special_tokens(tok):
    """The strings transformers parses as special tokens in text, with their ids."""
    out = {}
    for i, t in tok.added_tokens_decoder.items():
        assert not (t.lstrip or t.rstrip or t.single_word or t.normalized), t
        out[t.content] = i
    return out


def sentencepiece_ids(text, specials, legacy, sp_prefix, sp_bare):
    """text split at specials (leftmost, longest first), the segments
    between them encoded by sentencepiece as the legacy setting implies."""
    ids = []

    def segment(start, end):
        if end == start:
            return
        seg = text[start:end]
        ids.extend((sp_prefix if legacy or start == 0 else sp_bare).encode(seg))

    start = i = 0
    while i < len(text):
        hit = max((s for s in specials if text.startswith(s, i)), key=len, default=None)
        if hit is None:
            i += 1
            continue
        segment(start, i)
        ids.append(specials[hit])
        i += len(hit)
        start = i
    segment(start, len(text))
    return ids


def score_ranked(tok, sp):
    """tok's backend tokenizer with its BPE merges re-ranked by the
    SentencePiece score of the merged piece (highest first; ties keep
    transformers' order), all else as it is."""
    from tokenizers import Tokenizer
    j = json.loads(tok.backend_tokenizer.to_str())
    merges = [m.split(" ") if isinstance(m, str) else m for m in j["model"]["merges"]]
    j["model"]["merges"] = sorted(merges, key=lambda m: -sp.get_score(sp.piece_to_id(m[0] + m[1])))
    return Tokenizer.from_str(json.dumps(j))


WHY = ("transformers 5 ranks the BPE merges of a bare tokenizer.model by piece id, not "
       "score (convert_slow_tokenizer.py, SentencePieceExtractor), so it merges '▁▁' "
       "(id 259, score -1e9) first where SentencePiece merges it last; with its merges "
       "ranked by score, transformers gives the expected ids")


def llama2_expected(cases, tok, legacy, sp_prefix, sp_bare):
    """Makes sentencepiece's ids each case's "expected" and transformers'
    its "transformers_ids"; returns how many cases they differ in."""
    specials = special_tokens(tok)
    ranked = score_ranked(tok, sp_prefix)
    n_diff = 0
    for c in cases:
        hf = c.pop("ids")
        want = sentencepiece_ids(c["text"], specials, legacy, sp_prefix, sp_bare)
        assert ranked.encode(c["text"], add_special_tokens=False).ids == want, c["name"]
        c["expected"], c["transformers_ids"] = want, hf
        if want != hf:
            assert "  " in c["text"], f"{c['name']}: sentencepiece and transformers differ"
            c["why"] = WHY
            n_diff += 1
    return n_diff


def family_cases(tok, family, template, bos, eos):
    """ids of each conversation transformers renders (refusals left out)."""
    from transformers.utils import chat_template_utils as ctu
    ctu.datetime = mcf.FixedClock
    assert tok.bos_token == bos and tok.eos_token == eos, (tok.bos_token, tok.eos_token)
    tok.chat_template = template
    with open(os.path.join(mcf.OUT_DIR, f"{family}.json"), encoding="utf-8") as f:
        rendered = {c["name"]: c.get("expected") for c in json.load(f)["cases"]}
    cases = []
    for name, msgs, gps in mcf.CONVERSATIONS:
        for gp in gps:
            cname = f"{name}{'_gp' if gp else ''}"
            try:
                text = tok.apply_chat_template(msgs, add_generation_prompt=gp, tokenize=False)
            except Exception:  # noqa: BLE001 - the template's refusal: no ids
                assert rendered[cname] is None, cname
                continue
            ids = tok.apply_chat_template(msgs, add_generation_prompt=gp, tokenize=True,
                                          return_dict=False)
            assert text == rendered[cname], f"{family}/{cname}: not the {family}.json text"
            assert ids == tok(text, add_special_tokens=False).input_ids, cname
            cases.append({"name": cname, "messages": msgs, "add_generation_prompt": gp,
                          "text": text, "ids": ids})
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed file")
    args = ap.parse_args()
    import jinja2
    import sentencepiece
    import tokenizers
    import transformers

    tool = (f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, "
            f"jinja2 {jinja2.__version__}: apply_chat_template(messages, "
            "add_generation_prompt=..., tokenize=True, return_dict=False), i.e. the rendered "
            "text tokenized with add_special_tokens=False; Llama 2's expected ids: "
            f"sentencepiece {sentencepiece.__version__} on the same text (see the tool)")
    families = []

    tmpl, source = mcf.smollm2()
    _, bos, eos = mcf.FAMILIES["smollm2"]
    gguf_path = subprocess.check_output([os.path.join(ROOT, "tools", "fetch_smollm2.sh")],
                                        text=True).strip()
    tok, stand_in, n_bin = smollm2_tokenizer(gguf_path)
    families.append({
        "family": "smollm2",
        "template_source": source,
        "tokenizer": {
            "file": "gguf",
            "source": "SmolLM2-135M-Instruct.Q4_1.gguf (tools/fetch_smollm2.sh)",
            "built_with": "LlamaTokenizer.from_pretrained(dir, gguf_file=name), pre-tokenizer "
                          "set to Digits(individual_digits) + ByteLevel as published; equals "
                          f"tests/fixtures/smollm2/tokenizer.bin on all {n_bin} strings"
                          + (" (torch stand-in for the GGUF reader's import)" if stand_in else ""),
        },
        "expected_from": "transformers",
        "expected": "transformers' ids",
        "bos_token": bos, "eos_token": eos, "template": tmpl,
        "cases": [{k if k != "ids" else "expected": v for k, v in c.items()}
                  for c in family_cases(tok, "smollm2", tmpl, bos, eos)],
    })

    model = os.path.join(ROOT, LLAMA2_MODEL_REL)
    with open(model, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    tmpl, source = mcf.FAMILIES["llama2"][0]()
    _, bos, eos = mcf.FAMILIES["llama2"]
    sp_prefix, sp_bare = sentencepiece_encoders(model)
    by_legacy, sp_diff = {}, {}
    for legacy in (True, False):
        cfg = {"legacy": legacy}
        tok = llama2_tokenizer(model, cfg)
        cases = family_cases(tok, "llama2", tmpl, bos, eos)
        by_legacy[legacy] = [c["ids"] for c in cases]
        sp_diff[legacy] = llama2_expected(cases, tok, legacy, sp_prefix, sp_bare)
        families.append({
            "family": "llama2",
            "template_source": source,
            "tokenizer": {
                "file": "tokenizer.model",
                "source": f"{LLAMA2_MODEL_REL} (sha256 {sha})",
                "tokenizer_config": cfg,
                "built_with": "LlamaTokenizer.from_pretrained(a folder of tokenizer.model and a "
                              f"tokenizer_config.json {json.dumps(cfg)})",
            },
            "expected_from": "sentencepiece",
            "expected": "sentencepiece's ids: the text split at <unk>, <s>, </s>, each "
                        "segment between them sp.encode()d "
                        + ("with the model's dummy '▁' prefix" if legacy else
                           "without the dummy '▁' prefix (add_dummy_prefix cleared) "
                           "unless it starts the text")
                        + f"; transformers' ids differ in {sp_diff[legacy]} of "
                        f"{len(cases)} cases (their 'why')",
            "bos_token": bos, "eos_token": eos, "template": tmpl, "cases": cases,
        })
    bare = [c["ids"] for c in family_cases(llama2_tokenizer(model, None), "llama2", tmpl, bos, eos)]
    bare_legacy = [k for k, v in by_legacy.items() if v == bare]
    assert len(bare_legacy) == 1, "tokenizer.model alone matches neither legacy setting"
    n_diff = sum(a != b for a, b in zip(by_legacy[True], by_legacy[False]))

    doc = {
        "about": "token ids of rendered chat templates (tools/make_chat_ids.py)",
        "tokenized_with": tool,
        "llama2_note": f"transformers' LlamaTokenizer from tokenizer.model alone gives the legacy="
                       f"{bare_legacy[0]} ids; the two settings differ in {n_diff} of "
                       f"{len(bare)} cases (the '▁' after a special token); sentencepiece's "
                       f"ids (expected) and transformers' differ in {sp_diff[True]} cases under "
                       f"legacy, {sp_diff[False]} under legacy=False (the runs of spaces)",
        "families": families,
    }
    text = json.dumps(doc, ensure_ascii=False, indent=1) + "\n"
    def label(f):
        cfg = f["tokenizer"].get("tokenizer_config")
        return f["family"] + (f" legacy={cfg['legacy']}" if cfg else "")

    summary = ", ".join(f"{label(f)}: {len(f['cases'])}" for f in families)
    if args.check:
        same = os.path.exists(OUT) and open(OUT, encoding="utf-8").read() == text
        print(f"ids.json: {'same' if same else 'DIFFERS'} ({summary})")
        return 0 if same else 1
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"{summary} cases -> {os.path.relpath(OUT, ROOT)}; {doc['llama2_note']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
