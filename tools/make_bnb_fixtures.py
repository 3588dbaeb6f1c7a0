#!/usr/bin/env python3
"""make_bnb_fixtures.py - bitsandbytes checkpoints, written by bitsandbytes
itself, with transformers' reference results, as fixtures for tests/test_bnb.c.

For each variant a small random Llama (seeded; hidden 64 so that rows hold
whole 64-blocks) is saved in bf16, loaded by transformers with a
BitsAndBytesConfig (bitsandbytes quantizes on the CPU since 0.45), and saved
again with save_pretrained: the folder then holds exactly what a
"-bnb-4bit" / 8-bit Hugging Face repository holds. Beside it:

  reference.bin / .json  transformers' results on that quantized checkpoint
                         (tools/refio.py's format), compute dtype float32 and
                         the bf16 tensors upcast: f32 arithmetic on the
                         weights as bitsandbytes dequantizes them (rounded
                         to the quant_state's bf16 for 4-bit; int8 matmuls
                         with 8-bit activations for LLM.int8).
  dequant.bin            bitsandbytes' own dequantization of layer 0's q, k
                         and down matrices, in f32: magic "HRBNBDQ1", u32 n,
                         then n x (u32 name_len, name (HF name), u32 N, u32 K,
                         f32[N*K]).

The checkpoint is saved with the unquantized tensors in bf16 (the embedding
is most of the bytes) and loaded again in float32 for the reference, which
also checks that transformers reads back what it wrote. The FP4 variant is
kept to layer 0's quantized tensors (no config, no reference): its
dequantization is what test_bnb checks, and a whole model would add 4 MB of
embedding.

Usage: python3 tools/make_bnb_fixtures.py OUT_DIR TOKENIZER_DIR
Needs torch, transformers, safetensors and bitsandbytes from PyPI (CPU).
"""
import copy
import json
import os
import shutil
import struct
import sys
import tempfile

import bitsandbytes
import bitsandbytes.functional as bnbf
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig, LlamaConfig

from refio import write_reference

TEXT = ("First Citizen: Before we proceed any further, hear me speak. "
        "All: Speak, speak. First Citizen: You are all resolved rather to die than to famish?")
N_GREEDY = 16
N_FULL = 4

CONFIG = dict(vocab_size=32000, hidden_size=64, num_hidden_layers=2, intermediate_size=128,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16,
              max_position_embeddings=512, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
              initializer_range=0.25, rope_theta=10000.0, tie_word_embeddings=True)

VARIANTS = {
    "llama-nf4": BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                    bnb_4bit_use_double_quant=True,
                                    bnb_4bit_compute_dtype=torch.float32),
    "llama-fp4": BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="fp4",
                                    bnb_4bit_use_double_quant=False,
                                    bnb_4bit_compute_dtype=torch.float32),
    "llama-int8": BitsAndBytesConfig(load_in_8bit=True),
}


KEEP = ("model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj",
        "model.layers.0.mlp.down_proj")


def base_model(dir_, seed):
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(LlamaConfig(**CONFIG), dtype=torch.float32)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
    model.to(torch.bfloat16).save_pretrained(dir_, safe_serialization=True)


def dequantized(model):
    """bitsandbytes' dequantization of layer 0's quantized matrices (f32)."""
    out = []
    for name, mod in model.named_modules():
        if name not in KEEP:
            continue
        w = getattr(mod, "weight", None)
        if isinstance(w, bitsandbytes.nn.Params4bit):
            # in f32: bitsandbytes rounds to quant_state.dtype (bf16) last
            qs = copy.copy(w.quant_state)
            qs.dtype = torch.float32
            d = bnbf.dequantize_4bit(w.data, qs)
            out.append((name + ".weight", d))
        elif isinstance(w, bitsandbytes.nn.Int8Params):
            # LLM.int8's weight: int8 codes and one scale a row (SCB / 127)
            scb = w.SCB if w.SCB is not None else mod.state.SCB
            d = w.data.float() * (scb.float().view(-1, 1) / 127.0)
            out.append((name + ".weight", d))
    return out


def write_dequant(path, mats):
    with open(path, "wb") as f:
        f.write(b"HRBNBDQ1")
        f.write(struct.pack("<I", len(mats)))
        for name, d in mats:
            nb = name.encode()
            f.write(struct.pack("<I", len(nb)) + nb)
            f.write(struct.pack("<II", d.shape[0], d.shape[1]))
            f.write(d.contiguous().numpy().astype("<f4").tobytes())


def reference(model, tok, path):
    ids = [tok.bos_token_id] + tok(TEXT, add_special_tokens=False).input_ids
    x = torch.tensor([ids])
    with torch.no_grad():
        logits = model(x).logits[0].float()
        logp = torch.log_softmax(logits.double(), dim=-1)
        nll = [-logp[t, ids[t + 1]].item() for t in range(len(ids) - 1)]
        ppl = float(torch.exp(torch.tensor(nll, dtype=torch.float64).mean()))
        gen = model.generate(x, max_new_tokens=N_GREEDY, do_sample=False, eos_token_id=None,
                             pad_token_id=0)[0, len(ids):].tolist()
        full = model(torch.tensor([ids + gen])).logits[0]
        top2 = torch.topk(full[len(ids) - 1:-1], 2, dim=-1).values
        margin = float((top2[:, 0] - top2[:, 1]).min())
    T = len(ids)
    full_pos = sorted(set([0, T // 3, (2 * T) // 3, T - 1]))[:N_FULL]
    write_reference(os.path.join(path, "reference.bin"), ids, logits, nll, ppl, gen, full_pos)
    summary = {"text": TEXT, "tokens": ids, "perplexity": ppl, "greedy": gen,
               "greedy_text": tok.decode(gen), "min_greedy_margin": margin,
               "transformers": transformers.__version__, "torch": torch.__version__,
               "bitsandbytes": bitsandbytes.__version__}
    with open(os.path.join(path, "reference.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return ppl, margin


def main():
    out_dir, tok_dir = sys.argv[1], sys.argv[2]
    tok = AutoTokenizer.from_pretrained(tok_dir)
    with tempfile.TemporaryDirectory() as base:
        base_model(base, seed=4321)
        for name, qc in VARIANTS.items():
            path = os.path.join(out_dir, name)
            shutil.rmtree(path, ignore_errors=True)
            model = AutoModelForCausalLM.from_pretrained(base, quantization_config=qc,
                                                         device_map="cpu", dtype=torch.bfloat16)
            model.save_pretrained(path, safe_serialization=True)
            write_dequant(os.path.join(path, "dequant.bin"), dequantized(model))
            if name == "llama-fp4":
                trim(path)
                print(f"{name}: tensors of layer 0 and their dequantization")
                continue
            for f in ("tokenizer.json", "tokenizer_config.json"):
                os.symlink(os.path.relpath(os.path.join(tok_dir, f), path), os.path.join(path, f))
            model = AutoModelForCausalLM.from_pretrained(path, device_map="cpu",
                                                         dtype=torch.float32,
                                                         attn_implementation="eager")
            # a pre-quantized checkpoint keeps its bf16 tensors whatever dtype
            # says: upcast them (exactly), so everything but the quantized
            # weights is computed in f32
            with torch.no_grad():
                for p in model.parameters():
                    if p.dtype == torch.bfloat16:
                        p.data = p.data.float()
            model.eval()
            ppl, margin = reference(model, tok, path)
            print(f"{name}: perplexity {ppl:.6f}, smallest greedy margin {margin:.4f}")


def trim(path):
    """Keeps the quantized tensors of KEEP (and their companions) only."""
    from safetensors.torch import load_file, save_file
    f = os.path.join(path, "model.safetensors")
    t = load_file(f)
    keep = {k: v for k, v in t.items() if k.startswith(KEEP)}
    save_file(keep, f, metadata={"format": "pt"})
    for extra in ("config.json", "generation_config.json"):
        os.remove(os.path.join(path, extra))

if __name__ == "__main__":
    main()
