#!/usr/bin/env python3
"""Hugging Face transformers on the same shape and workload as `headroom
bench`, in the same device call, printed side by side as a ratio.

Builds a LlamaForCausalLM of a named shape with random bf16 weights directly
on the GPU (no download), then measures like headroom bench: a warm-up, then
a prompt of --prompt random tokens and --gen new tokens (greedy, end of
sequence ignored), timing the first token (prefill) and the rest (decode)
with CUDA synchronisation around each phase.

  python3 tools/hf_bench.py --shape llama2-7b --prompt 128 --gen 256 \
      --attn eager,sdpa [--compile] --headroom-json results.jsonl
  (--attn none --compile: the compiled variant alone)

--compile adds transformers' static cache + torch.compile (CUDA graphs):
minutes of compilation on a 7B model. With --headroom-json (JSON lines that
`headroom bench --json` printed), the table shows headroom's decode and
prefill rates next to each HF variant and their ratio.
"""
import argparse
import json
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {  # the published configs, as in src/model/synthetic.c
    "tinyllama-1.1b": dict(vocab_size=32000, hidden_size=2048, num_hidden_layers=22,
                           num_attention_heads=32, num_key_value_heads=4,
                           intermediate_size=5632),
    "llama2-7b": dict(vocab_size=32000, hidden_size=4096, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=32, intermediate_size=11008),
    "llama3-8b": dict(vocab_size=128256, hidden_size=4096, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336,
                      rope_theta=500000.0),
}


def run(shape, attn, prompt, gen, compile_):
    cfg = LlamaConfig(**SHAPES[shape], max_position_embeddings=prompt + gen + 16)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.eval()
    model.config._attn_implementation = attn
    ids = torch.randint(0, cfg.vocab_size, (1, prompt), device="cuda")
    kw = dict(do_sample=False, eos_token_id=None, pad_token_id=0)
    if compile_:
        # generate compiles the forward itself for a static cache (CUDA
        # graphs); wrapping model.forward in torch.compile by hand fails in
        # transformers 5 (graph outputs overwritten by the next replay)
        model.generation_config.cache_implementation = "static"
    with torch.no_grad():
        # warm up with exactly the timed calls: whatever is set up per shape
        # (compilation; attention kernels chosen per sequence length) then
        # stays out of the timing (a 16-token warm-up left it inside: sdpa
        # measured 2-3x slower than eager; docs/journal/comparisons.md)
        for n_new in (1, gen, 1, gen) if compile_ else (1, gen):
            model.generate(ids, max_new_tokens=n_new, min_new_tokens=n_new, **kw)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.generate(ids, max_new_tokens=1, min_new_tokens=1, **kw)
        torch.cuda.synchronize()
        ttft = time.perf_counter() - t0
        t0 = time.perf_counter()
        model.generate(ids, max_new_tokens=gen, min_new_tokens=gen, **kw)
        torch.cuda.synchronize()
        total = time.perf_counter() - t0
    del model
    torch.cuda.empty_cache()
    decode = (gen - 1) / max(total - ttft, 1e-9)
    return {"variant": attn + ("+static+compile" if compile_ else ""), "ttft_ms": ttft * 1e3,
            "prefill_tok_s": prompt / ttft, "decode_tok_s": decode}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="llama2-7b")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=256)
    ap.add_argument("--attn", default="eager,sdpa")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--headroom-json")
    a = ap.parse_args()
    rows = [run(a.shape, at, a.prompt, a.gen, False) for at in a.attn.split(",")
            if at != "none"]
    if a.compile:
        rows.append(run(a.shape, "sdpa", a.prompt, a.gen, True))
    hr = None
    if a.headroom_json:
        with open(a.headroom_json) as f:
            runs = [json.loads(l) for l in f if l.startswith("{")]
        runs = [r for r in runs if r.get("device") == "cuda" and r.get("batch") == 1
                and r.get("prompt") == a.prompt and r.get("gen") == a.gen]
        if runs:
            hr = max(runs, key=lambda r: r["decode_tok_s"])
    print(f"{a.shape}, prompt {a.prompt}, gen {a.gen}, {torch.cuda.get_device_name()}, "
          f"transformers {__import__('transformers').__version__}")
    print(f"{'engine':28s} {'ttft ms':>9s} {'prefill t/s':>12s} {'decode t/s':>11s} "
          f"{'headroom/this (decode)':>23s}")
    for r in rows:
        ratio = f"{hr['decode_tok_s'] / r['decode_tok_s']:.2f}x" if hr else "-"
        print(f"{'HF ' + r['variant']:28s} {r['ttft_ms']:9.2f} {r['prefill_tok_s']:12.1f} "
              f"{r['decode_tok_s']:11.2f} {ratio:>23s}")
        print(json.dumps({"engine": "transformers", "shape": a.shape, **r,
                          "prompt": a.prompt, "gen": a.gen,
                          "machine": torch.cuda.get_device_name()}))
    if hr:
        print(f"{'headroom (' + hr['dtype'] + ', ' + hr['attn'] + ', graphs ' + hr['graphs'] + ')':28s} "
              f"{hr['ttft_ms']:9.2f} {hr['prefill_tok_s']:12.1f} {hr['decode_tok_s']:11.2f}")


if __name__ == "__main__":
    main()
