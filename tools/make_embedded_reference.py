#!/usr/bin/env python3
"""Reference results of the embedded model, from transformers in float32.

Writes MODEL_DIR/reference.json:
  perplexity     exp(mean nll) over heldout.txt, computed exactly as
                 `headroom perplexity` does: the text tokenized with BOS, cut
                 into consecutive windows of the model's context (512), each
                 window scored from its second token
  n_tokens, ctx  what that covered
  greedy         for each fixed prompt: the prompt, its ids (with BOS) and
                 the 32 greedy tokens transformers generates after it
                 (end-of-sequence not honoured, so the length is fixed)
  gguf_q8_0      the same two results from transformers loading the Q8_0
                 GGUF file that `headroom convert --type q8_0` writes (its own
                 GGUF reader dequantizes the blocks): the reference for
                 headroom on that file, and proof that a llama.cpp-compatible
                 reader loads what headroom writes

Runs on the CPU (torch CPU + transformers + gguf from PyPI):
  python3 tools/make_embedded_reference.py models/tiny-shakespeare build/bin/headroom
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPTS = ["ROMEO:", "First Citizen:\nBefore we proceed", "To be, or not to be",
           "KING HENRY VI:\nWhat", "\n"]
N_GREEDY = 32


def evaluate(model, tok, text, ctx):
    ids = [tok.bos_token_id] + tok(text, add_special_tokens=False).input_ids
    total, count = 0.0, 0
    with torch.no_grad():
        for s in range(0, len(ids), ctx):
            w = ids[s:s + ctx]
            if len(w) < 2:
                break
            logits = model(torch.tensor([w])).logits[0].double()
            logp = torch.log_softmax(logits, dim=-1)
            tgt = torch.tensor(w[1:])
            total += float(-logp[:-1].gather(1, tgt[:, None]).sum())
            count += len(w) - 1
        greedy = []
        for p in PROMPTS:
            pid = [tok.bos_token_id] + tok(p, add_special_tokens=False).input_ids
            out = model.generate(torch.tensor([pid]), max_new_tokens=N_GREEDY, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)[0, len(pid):].tolist()
            greedy.append({"prompt": p, "ids": pid, "greedy": out, "text": tok.decode(out)})
    return {"perplexity": math.exp(total / count), "n_tokens": len(ids), "ctx": ctx,
            "scored": count, "greedy": greedy}


def main():
    d, headroom = sys.argv[1], sys.argv[2]
    tok = AutoTokenizer.from_pretrained(d)
    text = open(os.path.join(d, "heldout.txt"), encoding="utf-8").read()
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    ctx = model.config.max_position_embeddings
    ref = evaluate(model, tok, text, ctx)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([headroom, "convert", "-m", d, "-o", os.path.join(tmp, "m.gguf"),
                        "--type", "q8_0"], check=True)
        qmodel = AutoModelForCausalLM.from_pretrained(tmp, gguf_file="m.gguf",
                                                      dtype=torch.float32,
                                                      attn_implementation="eager")
        qmodel.eval()
        q = evaluate(qmodel, tok, text, ctx)
    ref["gguf_q8_0"] = {"perplexity": q["perplexity"],
                        "greedy": [g["greedy"] for g in q["greedy"]]}
    ref["transformers"] = transformers.__version__
    ref["torch"] = torch.__version__
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)
    print(f"perplexity {ref['perplexity']:.6f} over {ref['scored']} tokens; "
          f"q8_0 GGUF {ref['gguf_q8_0']['perplexity']:.6f}")
    for g in ref["greedy"]:
        print(repr(g["prompt"]), "->", repr(g["text"]))


if __name__ == "__main__":
    main()
