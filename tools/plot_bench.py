#!/usr/bin/env python3
"""Draws the benchmark charts of README.md and docs/performance.md from bench/results.

    python3 tools/plot_bench.py [--results bench/results] [--out docs]

Writes PNGs (matplotlib, Agg backend: no display needed):
  bench-decode.png    decode tok/s by technique: headroom's default beside each
                      alternative measured in the same run (f16 compute, naive
                      attention, no CUDA graphs, no overlap) and HF transformers
  bench-prefill.png   prefill tok/s by prompt length
  bench-batch.png     decode tok/s (all sequences) by batch size
  bench-context.png   decode tok/s by context length (the prompt decoded after)
  bench-weights.png   CPU decode tok/s by weight type, headroom beside llama.cpp

Which rows, by rule (so a new results file changes the charts only by these):
  GPU charts: the newest file (file names start with the date) holding both
    headroom rows (device "cuda", shape "llama2-7b", no "engine" key) and HF
    transformers rows (engine "transformers"), all of one commit: one session,
    one build, so the bars compare. Default settings are weights f16, dtype
    bf16, attn flash, graphs on, overlap on, path hopper (or absent), batch 1,
    prompt 128, gen 256; each bar changes one of them. Rows with a "path"
    other than hopper are left out.
  CPU chart: the newest file with device "cpu", two or more weight types and
    llama.cpp rows (engine starting "llama.cpp", decode_tok_s present).
  Several rows of one setting: the median, with the lowest and highest as an
    error bar. The bound drawn over a bar is the median
    decode_read_limit_tok_s of its rows: the tok/s at which reading every byte
    a step needs (weights, KV) at the GPU's measured read bandwidth takes the
    whole step. Prefill and the CPU rows have no such bound recorded.
The files used are printed.
"""
import argparse
import json
import pathlib
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

DEFAULTS = {"weights": "f16", "dtype": "bf16", "attn": "flash", "graphs": "on",
            "overlap": "on", "batch": 1, "prompt": 128, "gen": 256}
# one bar per alternative: (label, the settings it changes)
DECODE_BARS = [
    ("headroom\n(bf16, flash,\ngraphs, overlap)", {}),
    ("f16 compute", {"dtype": "f16"}),
    ("naive attention", {"attn": "naive"}),
    ("no CUDA graphs", {"graphs": "off"}),
    ("no overlap", {"overlap": "off"}),
]
WEIGHT_ORDER = ["f32", "bf16", "f16", "q8_0", "q6_k", "q5_k", "q5_1", "q5_0", "q4_k", "q4_1",
                "q4_0", "q3_k", "q2_k"]  # largest first
HEADROOM, OTHER, BOUND = "#4e79a7", "#bab0ac", "#c0392b"


def read_rows(path):
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            rows.append(json.loads(line))
    return rows


def is_headroom_gpu(r):
    return ("engine" not in r and r.get("device") == "cuda" and r.get("shape") == "llama2-7b"
            and r.get("path", "hopper") == "hopper" and "decode_tok_s" in r)


def pick_gpu_file(files):
    for f in reversed(files):
        rows = read_rows(f)
        hr = [r for r in rows if is_headroom_gpu(r)]
        hf = [r for r in rows if r.get("engine") == "transformers"]
        if hr and hf and len({r.get("commit") for r in hr + hf}) == 1:
            return f, hr, hf
    sys.exit("plot_bench: no results file has headroom and transformers rows of one commit")


def pick_cpu_file(files):
    for f in reversed(files):
        rows = [r for r in read_rows(f) if r.get("device") == "cpu" and "decode_tok_s" in r]
        if (len({r.get("weights") for r in rows}) >= 2
                and any(str(r.get("engine", "")).startswith("llama.cpp") for r in rows)):
            return f, rows
    sys.exit("plot_bench: no results file has CPU rows of several weight types and llama.cpp")


def select(rows, **change):
    want = dict(DEFAULTS, **change)
    return [r for r in rows if all(r.get(k) == v for k, v in want.items())]


def summary(rows, key):
    """median, (low, high) of key over rows; None when no row has it"""
    vals = [r[key] for r in rows if key in r]
    if not vals:
        return None
    return statistics.median(vals), (min(vals), max(vals))


def bar_chart(path, title, ylabel, bars, source, log=False):
    """bars: (label, rows, key, colour); the median bar, its range, its bound;
    log: a log y axis (bars that differ by orders of magnitude)"""
    fig, ax = plt.subplots(figsize=(max(6.0, 1.25 * len(bars) + 1.5), 4.2), dpi=110)
    drew_bound = False
    for x, (label, rows, key, colour) in enumerate(bars):
        s = summary(rows, key)
        if s is None:
            continue
        med, (lo, hi) = s
        ax.bar(x, med, width=0.6, color=colour, yerr=[[med - lo], [hi - med]], capsize=3,
               error_kw={"ecolor": "#555", "lw": 1})
        ax.annotate(f"{med:,.0f}" if med >= 100 else f"{med:.1f}", (x, med),
                    xytext=(0, 4), textcoords="offset points", ha="center", fontsize=8)
        b = summary(rows, "decode_read_limit_tok_s") if key == "decode_tok_s" else None
        if b is not None:
            ax.hlines(b[0], x - 0.38, x + 0.38, colors=BOUND, linestyles="dashed", lw=1.5,
                      label=None if drew_bound else "read-bandwidth bound")
            ax.annotate(f"{100 * med / b[0]:.0f}%", (x + 0.3, b[0]), xytext=(0, 3),
                        textcoords="offset points", ha="right", fontsize=7, color=BOUND)
            drew_bound = True
    ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if log:
        ax.set_yscale("log")
        ax.set_ylim(top=ax.get_ylim()[1] * 3)  # room for the legend above the bounds
    else:
        ax.set_ylim(0, ax.get_ylim()[1] * 1.08)
    ax.spines[["top", "right"]].set_visible(False)
    if drew_bound:
        ax.legend(loc="upper left" if log else "upper right", fontsize=8, frameon=False)
    fig.text(0.01, 0.01, f"bench/results/{source}", fontsize=7, color="#777")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path)
    plt.close(fig)
    print(f"plot_bench: wrote {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="bench/results", help="folder of *.jsonl")
    ap.add_argument("--out", default="docs", help="folder for the PNGs")
    args = ap.parse_args()
    files = sorted(pathlib.Path(args.results).glob("*.jsonl"))
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    gpu_file, hr, hf = pick_gpu_file(files)
    print(f"plot_bench: GPU charts from {gpu_file} ({len(hr)} headroom rows, "
          f"{len(hf)} transformers rows, commit {hr[0].get('commit')})")
    src = (f"{gpu_file.name}, {hr[0].get('machine', '')}, llama2-7b shape, "
           f"commit {hr[0].get('commit')}")

    bars = [(label, select(hr, **change), "decode_tok_s", HEADROOM if not change else OTHER)
            for label, change in DECODE_BARS]
    for v in sorted({r.get("variant", "?") for r in hf}):
        rows = [r for r in hf if r.get("variant", "?") == v and r.get("prompt") == 128]
        bars.append((f"transformers\n{v}", rows, "decode_tok_s", OTHER))
    bar_chart(out / "bench-decode.png", "Decode, batch 1, 128-token prompt: each technique off "
              "in turn", "tok/s", bars, src)

    prompts = sorted({r["prompt"] for r in hr if r.get("batch") == 1})
    at_prompt = [(p, [r for r in hr if r.get("prompt") == p and r.get("batch") == 1
                      and all(r.get(k) == DEFAULTS[k] for k in ("dtype", "attn", "graphs",
                                                                "overlap"))])
                 for p in prompts]
    bar_chart(out / "bench-prefill.png", "Prefill by prompt length (batch 1)", "tok/s",
              [(f"{p:,} tokens", rows, "prefill_tok_s", HEADROOM) for p, rows in at_prompt], src)
    bar_chart(out / "bench-context.png", "Decode by context length (the prompt before it)",
              "tok/s", [(f"{p:,} tokens", rows, "decode_tok_s", HEADROOM)
                        for p, rows in at_prompt], src)

    batches = sorted({r["batch"] for r in hr if r.get("prompt") == 128})
    bar_chart(out / "bench-batch.png", "Decode by batch size (tok/s of all sequences, log "
              "scale)", "tok/s", [(f"batch {b}", select(hr, batch=b), "decode_tok_s", HEADROOM)
                                  for b in batches], src, log=True)

    cpu_file, cpu = pick_cpu_file(files)
    print(f"plot_bench: CPU chart from {cpu_file} ({len(cpu)} rows)")
    bars = []
    order = {w: i for i, w in enumerate(WEIGHT_ORDER)}
    for w in sorted({r["weights"] for r in cpu}, key=lambda w: (order.get(w, len(order)), w)):
        mine = [r for r in cpu if r["weights"] == w and "engine" not in r]
        llama = [r for r in cpu if r["weights"] == w
                 and str(r.get("engine", "")).startswith("llama.cpp")]
        bars += [(f"headroom\n{w}", mine, "decode_tok_s", HEADROOM),
                 (f"llama.cpp\n{w}", llama, "decode_tok_s", OTHER)]
    shape = cpu[0].get("shape", "")
    bar_chart(out / "bench-weights.png", f"CPU decode by weight type ({shape}, "
              f"{cpu[0].get('threads')} threads; median and range of the rounds)", "tok/s",
              bars, f"{cpu_file.name}, {cpu[0].get('machine', '')}")


if __name__ == "__main__":
    main()
