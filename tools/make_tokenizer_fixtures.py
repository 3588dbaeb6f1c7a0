#!/usr/bin/env python3
"""Builds the committed tokenizer fixtures (run once; needs transformers,
tokenizers, sentencepiece and gguf from pip):

  tests/fixtures/tokenizers/llama2/tokenizer.json, tokenizer_config.json
      Llama 2's tokenizer.model converted with transformers' LlamaConverter
      (legacy mode: Prepend + Replace normalizer, byte-fallback BPE, the <s>
      template), as the official Llama-2-7b-hf files are.
  tests/fixtures/tokenizers/hf/{gpt2,llama3,qwen2}.template.json
      tokenizer.json files built with Hugging Face tokenizers over GPT-2's
      vocabulary (from tests/data/tokenizer-vectors/ggml-vocab-gpt-2.gguf),
      with "vocab" and "merges" left empty: the test fills them from that
      GGUF, so the 1 MB vocabulary is not committed three times.
        gpt2:   ByteLevel pre-tokenizer with its regex
        llama3: Split(Llama 3 regex) + ByteLevel(use_regex=false),
                ignore_merges, a template adding <|endoftext|> in front
        qwen2:  NFC, Split(Qwen2 regex) + ByteLevel(use_regex=false), and
                <|im_start|>/<|im_end|> added as special tokens
  tests/fixtures/tokenizers/hf/spm_*.template.json
      {"base": "llama2", "normalizer": ..., "pre_tokenizer": ...}: the llama2
      tokenizer.json with other pipelines (Metaspace with prepend "first"
      and "always", NFD + Strip, Digits, Punctuation, Split with each
      behaviour, WhitespaceSplit); the test substitutes them in.
  tests/fixtures/tokenizers/hf/cases.bin
      generated strings (tests/tokenizer_diff.py's generator) and, for each
      variant, the number of ids Hugging Face tokenizers gives (with
      add_special_tokens) and a hash of them: full ids would be 5x larger.
      `make_tokenizer_fixtures.py --show N` prints case N's ids.

`make_tokenizer_fixtures.py --unicode-tables` writes
src/tokenizer/unicode_norm_data.c (canonical decompositions, combining
classes, composition pairs) from Python's unicodedata, for NFC/NFD.

transformers 5 broke LlamaConverter's SentencePiece extractor call, so the
merges are made with transformers' own generate_merges(vocab, scores), which
is what the 4.x extractor did.
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import tokenizer_diff  # noqa: E402

SPM_MODEL = os.path.join(ROOT, "tests/data/llama2-tokenizer/tokenizer.model")
GPT2_GGUF = os.path.join(ROOT, "tests/data/tokenizer-vectors/ggml-vocab-gpt-2.gguf")
OUT = os.path.join(ROOT, "tests/fixtures/tokenizers")

LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
            r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

N_CASES = 3000
SEED = 7


def llama2_json():
    import sentencepiece as spm
    from tokenizers import processors
    from transformers.convert_slow_tokenizer import LlamaConverter
    from transformers.tokenization_utils_base import generate_merges

    class Extractor:
        def __init__(self, path):
            self.sp = spm.SentencePieceProcessor(model_file=path)

        def extract(self, vocab_scores):
            vocab = {self.sp.id_to_piece(i): i for i in range(self.sp.get_piece_size())}
            return vocab, generate_merges(vocab, vocab_scores)

    class Original:  # what LlamaConverter reads from a slow LlamaTokenizer
        vocab_file = SPM_MODEL
        legacy = True
        add_prefix_space = True

        def __init__(self):
            self.sp = spm.SentencePieceProcessor(model_file=SPM_MODEL)

        def convert_ids_to_tokens(self, i):
            return self.sp.id_to_piece(i)

    conv = LlamaConverter(Original())
    conv.SpmExtractor = Extractor
    tok = conv.converted()
    # LlamaTokenizerFast.update_post_processor: BOS in front, no EOS
    tok.post_processor = processors.TemplateProcessing(
        single="<s>:0 $A:0", pair="<s>:0 $A:0 <s>:1 $B:1", special_tokens=[("<s>", 1)])
    d = os.path.join(OUT, "llama2")
    os.makedirs(d, exist_ok=True)
    data = json.loads(tok.to_str())
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, separators=(",", ":"))
    cfg = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": None,
        "legacy": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 4096,
        "tokenizer_class": "LlamaTokenizer",
        "added_tokens_decoder": {
            str(i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                     "single_word": False, "special": True}
            for i, c in enumerate(["<unk>", "<s>", "</s>"])
        },
    }
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    return tok


def gpt2_vocab():
    import gguf
    r = gguf.GGUFReader(GPT2_GGUF)

    def strings(key):
        field = r.fields[key]
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    tokens = strings("tokenizer.ggml.tokens")
    merges = []
    for m in strings("tokenizer.ggml.merges"):
        sp = m.find(" ", 1)
        merges.append((m[:sp], m[sp + 1:]))
    return tokens, merges


def bpe_variants(tokens, merges):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers, processors

    vocab = {t: i for i, t in enumerate(tokens)}
    eot = AddedToken("<|endoftext|>", special=True, normalized=False)

    def base(ignore_merges=False):
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges))
        tok.add_special_tokens([eot])
        tok.decoder = decoders.ByteLevel()
        return tok

    gpt2 = base()
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    gpt2.post_processor = processors.ByteLevel(trim_offsets=False)

    llama3 = base(ignore_merges=True)
    llama3.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    llama3.post_processor = processors.TemplateProcessing(
        single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", vocab["<|endoftext|>"])])

    qwen2 = base()
    qwen2.normalizer = normalizers.NFC()
    qwen2.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    qwen2.add_special_tokens([AddedToken("<|im_start|>", special=True, normalized=False),
                              AddedToken("<|im_end|>", special=True, normalized=False)])
    qwen2.post_processor = processors.ByteLevel(trim_offsets=False)
    return [("gpt2", gpt2), ("llama3", llama3), ("qwen2", qwen2)]


def spm_variants(llama2):
    """Other normalizer / pre-tokenizer pipelines over the llama2 tokenizer.json."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers

    def variant(norm, pre):
        t = Tokenizer.from_str(llama2.to_str())
        t.normalizer = norm
        t.pre_tokenizer = pre
        return t

    return [
        ("spm_metaspace_first",
         variant(None, pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first",
                                                split=False))),
        ("spm_metaspace_split",
         variant(None, pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always",
                                                split=True))),
        ("spm_nfd_digits_punct",
         variant(normalizers.Sequence([normalizers.NFD(), normalizers.Strip(),
                                       normalizers.Replace(" ", "\u2581")]),
                 pre_tokenizers.Sequence([
                     pre_tokenizers.Digits(individual_digits=True),
                     pre_tokenizers.Punctuation(behavior="contiguous"),
                     pre_tokenizers.Split("\u2581", behavior="merged_with_previous")]))),
        ("spm_merged_next",
         variant(normalizers.Replace(" ", "\u2581"),
                 pre_tokenizers.Sequence([
                     pre_tokenizers.Split("\u2581", behavior="merged_with_next"),
                     pre_tokenizers.Digits(individual_digits=False)]))),
        ("spm_wsplit_removed",
         variant(normalizers.Sequence([normalizers.Prepend("\u2581"),
                                       normalizers.Replace(" ", "\u2581")]),
                 pre_tokenizers.Sequence([
                     pre_tokenizers.WhitespaceSplit(),
                     pre_tokenizers.Split("a", behavior="removed", invert=False)]))),
    ]


def main():
    llama2 = llama2_json()
    print("wrote", os.path.join(OUT, "llama2"))

    tokens, merges = gpt2_vocab()
    variants = bpe_variants(tokens, merges) + spm_variants(llama2)
    d = os.path.join(OUT, "hf")
    os.makedirs(d, exist_ok=True)
    cases = tokenizer_diff.gen_cases(N_CASES, SEED)
    rows = []
    for name, tok in variants:
        data = json.loads(tok.to_str())
        if name.startswith("spm_"):
            data = {"base": "llama2", "normalizer": data["normalizer"],
                    "pre_tokenizer": data["pre_tokenizer"]}
        else:
            data["model"]["vocab"] = {}
            data["model"]["merges"] = []
        with open(os.path.join(d, name + ".template.json"), "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=1)
            f.write("\n")
        ids = [tok.encode(c.decode("utf-8", "replace"), add_special_tokens=True).ids
               for c in cases]
        rows.append((name, ids))
    tokenizer_diff.write_cases(os.path.join(d, "cases.bin"), cases, rows, hashed=True)
    print("wrote", d, f"({len(cases)} cases)")


def unicode_tables():
    import unicodedata as ud
    ccc_runs = []  # (first, last, class)
    for cp in range(0x110000):
        c = ud.combining(chr(cp))
        if not c:
            continue
        if ccc_runs and ccc_runs[-1][1] == cp - 1 and ccc_runs[-1][2] == c:
            ccc_runs[-1][1] = cp
        else:
            ccc_runs.append([cp, cp, c])
    decomp = []  # (cp, first, second or 0, composes back)
    comp = []    # (first, second, composite)
    for cp in range(0x110000):
        d = ud.decomposition(chr(cp))
        if not d or d.startswith("<"):
            continue
        parts = [int(x, 16) for x in d.split()]
        assert len(parts) in (1, 2)
        primary = ud.normalize("NFC", chr(cp)) == chr(cp)
        decomp.append((cp, parts[0], parts[1] if len(parts) == 2 else 0, primary))
        if primary:
            assert len(parts) == 2
            comp.append((parts[0], parts[1], cp))
    comp.sort()
    path = os.path.join(ROOT, "src/tokenizer/unicode_norm_data.c")

    def rows(items, fmt, per):
        lines = []
        for i in range(0, len(items), per):
            lines.append("    " + " ".join(fmt(x) for x in items[i:i + per]))
        return "\n".join(lines)

    with open(path, "w") as f:
        f.write(f"""/*
 * unicode_norm_data.c — Unicode {ud.unidata_version} tables for NFC/NFD, generated by
 * tools/make_tokenizer_fixtures.py --unicode-tables from Python's unicodedata
 * (do not edit). Hangul syllables are algorithmic and not listed.
 *
 *   uni_ccc:    runs of code points with a non-zero canonical combining class
 *   uni_decomp: one level of canonical decomposition, cp -> (a, b) with b 0
 *               for singletons; bit 31 of cp set when cp is a primary
 *               composite (NFC puts it back together)
 *   uni_comp:   (a, b) -> composite for the primary composites, sorted by (a, b)
 */
#include "tokenizer/unicode_norm.h"

const uni_ccc_run uni_ccc[UNI_N_CCC] = {{
{rows(ccc_runs, lambda r: "{0x%X, 0x%X, %d}," % tuple(r), 4)}
}};

const uint32_t uni_decomp[UNI_N_DECOMP][3] = {{
{rows(decomp, lambda r: "{0x%X, 0x%X, 0x%X}," % (r[0] | (0x80000000 if r[3] else 0), r[1], r[2]), 4)}
}};

const uint32_t uni_comp[UNI_N_COMP][3] = {{
{rows(comp, lambda r: "{0x%X, 0x%X, 0x%X}," % r, 4)}
}};
""")
    hpath = os.path.join(ROOT, "src/tokenizer/unicode_norm.h")
    with open(hpath) as f:
        h = f.read()
    import re
    for name, n in (("UNI_N_CCC", len(ccc_runs)), ("UNI_N_DECOMP", len(decomp)),
                    ("UNI_N_COMP", len(comp))):
        h = re.sub(r"#define %s \d+" % name, "#define %s %d" % (name, n), h)
    with open(hpath, "w") as f:
        f.write(h)
    print("wrote", path, len(ccc_runs), len(decomp), len(comp))


def show(n):
    tokens, merges = gpt2_vocab()
    case = tokenizer_diff.gen_cases(N_CASES, SEED)[n]
    print("case", n, repr(case))
    for name, tok in bpe_variants(tokens, merges) + spm_variants(llama2_json()):
        print(name, tok.encode(case.decode("utf-8", "replace"), add_special_tokens=True).ids)


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "--unicode-tables":
        unicode_tables()
    elif len(sys.argv) == 3 and sys.argv[1] == "--show":
        show(int(sys.argv[2]))
    else:
        main()
