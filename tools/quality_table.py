#!/usr/bin/env python3
"""quality_table.py - what each weight type costs: bits per weight, perplexity
delta, mean KL divergence and top-1 agreement against the unquantized model,
and CPU decode speed, for one model over one text.

Every type is made by quantizing the base model's layer matrices at load
(`--weights TYPE`), so all rows start from the same weights; the embedding
and output head stay as the base stores them.

Usage: tools/quality_table.py HEADROOM BASE_MODEL TEXT [--ctx N] [--json OUT]
       [--types q8_0,int8,...]
Prints a markdown table; --json appends one JSON line per type (for
bench/results). Not run by CI (minutes of CPU).
"""
import argparse
import datetime
import json
import platform
import re
import subprocess

TYPES = ["q8_0", "int8", "q6_k", "q5_k", "q4_k", "q5_0", "q4_1", "q4_0", "nf4", "fp4", "q3_k",
         "q2_k"]
BPW = {"q8_0": 8.5, "int8": 8.5, "q6_k": 6.5625, "q5_k": 5.5, "q4_k": 4.5, "q5_0": 5.5,
       "q4_1": 5.0, "q4_0": 4.5, "nf4": 4.25, "fp4": 4.25, "q3_k": 3.4375, "q2_k": 2.625}


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("headroom")
    ap.add_argument("model")
    ap.add_argument("text")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--json")
    ap.add_argument("--types", default=",".join(TYPES))
    a = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"model {a.model}, text {a.text}, windows of {a.ctx}, commit {commit}\n")
    print("| type | bits/weight | perplexity | delta | mean KL (nats) | top-1 agreement | "
          "cpu decode tok/s |")
    print("|---|---|---|---|---|---|---|")
    for t in a.types.split(","):
        rc, out = run([a.headroom, "perplexity", "-m", a.model, "--weights", t, "--kl-base",
                       a.model, "-f", a.text, "--ctx", str(a.ctx)])
        if rc != 0:
            msg = out.strip().splitlines()[-1] if out.strip() else "failed"
            print(f"| {t} | {BPW.get(t, '?')} | n/a: {msg} | | | | |")
            continue
        # a K-quant on rows that are not multiples of 256 falls back per matrix
        fb = re.search(r"average ([0-9.]+) bits a weight", out)
        bpw = float(fb.group(1)) if fb else BPW[t]
        ppl = float(re.search(r"^perplexity: (\S+)", out, re.M).group(1))
        base = float(re.search(r"^base perplexity: (\S+)", out, re.M).group(1))
        kl = float(re.search(r"^mean KL divergence: (\S+)", out, re.M).group(1))
        top1 = float(re.search(r"^top-1 agreement: (\S+)%", out, re.M).group(1))
        rc, out = run([a.headroom, "bench", "-m", a.model, "--weights", t, "--device", "cpu",
                       "--prompt", "64", "--gen", "64", "--repeat", "3"])
        m = re.search(r"^cpu\s.*\|\s+\S+\s+\S+\s+(\S+)", out, re.M) if rc == 0 else None
        decode = float(m.group(1)) if m else None
        print(f"| {t}{' (mixed)' if fb else ''} | {bpw:.4g} | {ppl:.4f} | {100 * (ppl - base) / base:+.2f}% | {kl:.5f} | "
              f"{top1:.2f}% | {decode if decode else 'n/a'} |", flush=True)
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps({
                    "commit": commit, "date": datetime.date.today().isoformat(),
                    "machine": platform.processor() or platform.machine(),
                    "model": a.model, "text": a.text, "ctx": a.ctx, "weights": t,
                    "bits_per_weight": bpw, "perplexity": ppl, "base_perplexity": base,
                    "mean_kl": kl, "top1_agreement": top1, "cpu_decode_tok_s": decode}) + "\n")


if __name__ == "__main__":
    main()
