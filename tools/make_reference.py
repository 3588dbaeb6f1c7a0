#!/usr/bin/env python3
"""Build small random models in real Hugging Face layouts and save HF's
float32 reference results beside them, as test fixtures for headroom.

Each model is a real LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM
with random weights (seeded), saved as bf16 safetensors with the Llama 2
tokenizer (tokenizer.json). The reference is computed by transformers in
float32 from the bf16 weights (upcast exactly), eager attention:

  reference.bin   magic "HRREF001", u32 version, u32 T, u32 V, u32 n_full,
                  i32 tokens[T], u32 full_pos[n_full], f32 logits[n_full][V],
                  f32 nll[T-1] (-log p(token t+1 | tokens <= t)),
                  f64 perplexity (exp of the mean nll),
                  u32 n_greedy, i32 greedy[n_greedy] (greedy continuation).
  reference.json  the same scalars for people.

Full logits are kept for a few positions only (a 32000-wide row is 128 KB);
nll covers every position, so every row of logits is still checked through
the log-softmax of its target.

Usage: python3 tools/make_reference.py OUT_DIR TOKENIZER_DIR
  TOKENIZER_DIR holds tokenizer.json + tokenizer_config.json (Llama 2).
Needs torch, transformers and safetensors (PyPI; CPU is enough).
"""
import json
import os
import sys

import torch
import transformers
from transformers import (AutoModelForCausalLM, AutoTokenizer, LlamaConfig, MistralConfig,
                          Qwen2Config)

from refio import write_reference

TEXT = ("First Citizen: Before we proceed any further, hear me speak. "
        "All: Speak, speak. First Citizen: You are all resolved rather to die than to famish?")
N_GREEDY = 16
N_FULL = 4

# hidden 32 keeps the 32000-row embedding at 2 MB; head_dim is set apart from
# hidden / heads (as Mistral-Nemo does), so q/o projections are not square.
COMMON = dict(vocab_size=32000, hidden_size=32, num_hidden_layers=2, intermediate_size=96,
              max_position_embeddings=512, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
              initializer_range=0.25)

MODELS = {
    # Llama 2 layout with grouped-query attention (4 heads over 2 kv heads), untied head.
    "llama-gqa": (LlamaConfig, dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                    rope_theta=10000.0, tie_word_embeddings=False)),
    # Mistral: 4 heads over 1 kv head, large rope theta, untied.
    "mistral": (MistralConfig, dict(num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                                    rope_theta=1000000.0, sliding_window=None,
                                    tie_word_embeddings=False)),
    # Qwen2: q/k/v bias, tied embeddings.
    "qwen2-tied": (Qwen2Config, dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                     rope_theta=1000000.0, tie_word_embeddings=True,
                                     use_sliding_window=False)),
    # Llama 3 style rope scaling, tied (Llama 3.2 1B is tied too).
    "llama3-rope": (LlamaConfig, dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      rope_theta=500000.0, tie_word_embeddings=True,
                                      rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                    "low_freq_factor": 1.0,
                                                    "high_freq_factor": 4.0,
                                                    "original_max_position_embeddings": 64})),
    # Linear rope scaling, head_dim 32 (2 heads, 1 kv head), tied.
    "llama-linear": (LlamaConfig, dict(num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                                       rope_theta=10000.0, tie_word_embeddings=True,
                                       rope_scaling={"rope_type": "linear", "factor": 2.0})),
}


def build(name, cls, extra, out_dir, tok_dir, seed):
    torch.manual_seed(seed)
    cfg = cls(**COMMON, **extra)
    model = transformers.AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
    # Norm weights around 1 with spread, so the test sees them matter.
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            elif n.endswith("bias"):
                p.copy_(0.5 * torch.randn_like(p))
    path = os.path.join(out_dir, name)
    os.makedirs(path, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(path, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        link = os.path.join(path, f)
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(os.path.relpath(os.path.join(tok_dir, f), path), link)
    return path


def reference(path, tok_dir):
    # the tokenizer is loaded from its own folder: AutoTokenizer on a Qwen2
    # model folder would pick Qwen2's byte-level class for a Llama 2 vocab
    tok = AutoTokenizer.from_pretrained(tok_dir)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    ids = [tok.bos_token_id] + tok(TEXT, add_special_tokens=False).input_ids
    x = torch.tensor([ids])
    with torch.no_grad():
        logits = model(x).logits[0].float()
        logp = torch.log_softmax(logits.double(), dim=-1)
        nll = [-logp[t, ids[t + 1]].item() for t in range(len(ids) - 1)]
        ppl = float(torch.exp(torch.tensor(nll, dtype=torch.float64).mean()))
        gen = model.generate(x, max_new_tokens=N_GREEDY, do_sample=False, eos_token_id=None,
                             pad_token_id=0)[0, len(ids):].tolist()
        # greedy margins: the tests compare token for token, so a near tie
        # would make them flaky; report the smallest top-1/top-2 gap.
        full = model(torch.tensor([ids + gen])).logits[0]
        top2 = torch.topk(full[len(ids) - 1:-1], 2, dim=-1).values
        margin = float((top2[:, 0] - top2[:, 1]).min())
    T, V = len(ids), logits.shape[1]
    full_pos = sorted(set([0, T // 3, (2 * T) // 3, T - 1]))[:N_FULL]
    write_reference(os.path.join(path, "reference.bin"), ids, logits, nll, ppl, gen, full_pos)
    summary = {"text": TEXT, "tokens": ids, "perplexity": ppl, "greedy": gen,
               "greedy_text": tok.decode(gen), "min_greedy_margin": margin,
               "transformers": transformers.__version__, "torch": torch.__version__}
    with open(os.path.join(path, "reference.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return ppl, margin


def main():
    out_dir, tok_dir = sys.argv[1], sys.argv[2]
    for i, (name, (cls, extra)) in enumerate(MODELS.items()):
        path = build(name, cls, extra, out_dir, tok_dir, seed=1234 + i)
        ppl, margin = reference(path, tok_dir)
        print(f"{name}: perplexity {ppl:.6f}, smallest greedy margin {margin:.4f}")
        if margin < 1e-3:
            print(f"warning: {name} has a near tie in its greedy continuation", file=sys.stderr)


if __name__ == "__main__":
    main()
