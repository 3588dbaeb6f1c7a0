#!/usr/bin/env python3
"""headroom against llama.cpp on the CPU, same GGUF files, interleaved rounds (issue 48).

Makes the TinyLlama-1.1B-shape files once (random weights: speed does not
depend on them): F16 and BF16 with `headroom convert --synthetic`, Q8_0, Q4_0
and Q4_K_M from the F16 file with llama.cpp's llama-quantize (the files users
download are made that way: Q4_0's output matrix is Q6_K, Q4_K_M mixes Q4_K
and Q6_K). Then, each round, for each type, both engines run prefill (prompt
128) and decode (gen 64) with 2 threads, --reps times each in the order
A B B A (A B A B ... for other counts; A is headroom in odd rounds and
llama.cpp in even ones), the round's figure per engine the mean of its runs:
this VM's memory bandwidth moves between ~34 and ~60 GB/s over tens of
seconds, and the mirrored order cancels a drift within the round. Each run
waits for a quiet machine (1-minute load under --quiet, at most --wait
seconds; the load at its start is recorded). Prints each round's ratios
(headroom / llama.cpp), the geometric mean and the worst round per type, and
appends JSON lines to --out. Not part of CI.

  tools/cpu_side_by_side.py [--rounds 5] [--types f16,bf16,q8_0,q4_0,q4_k_m]
      [--threads 2] [--prompt 128] [--gen 64] [--reps 2]
      [--out bench/results/DATE-cpu-side-by-side.jsonl]
"""
import argparse, datetime, json, math, os, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER = os.path.join(ROOT, "..", "shared", "data", "llama2-tokenizer")
QUANTIZE_NAME = {"q8_0": "Q8_0", "q4_0": "Q4_0", "q4_k_m": "Q4_K_M"}


def llama_bin():
    """The folder of llama-bench and llama-quantize, built if missing."""
    out = subprocess.run([os.path.join(ROOT, "tools", "build_llama_cpp.sh")],
                         capture_output=True, text=True, check=True).stdout
    return out.strip().splitlines()[-1]


def make_model(kind, folder, headroom, quantize):
    path = os.path.join(folder, "tinyllama-%s.gguf" % kind)
    if os.path.exists(path):
        return path
    tmp = path + ".part"
    if kind in ("f16", "bf16"):
        subprocess.run([headroom, "convert", "--synthetic", "tinyllama-1.1b", "--tokenizer",
                        TOKENIZER, "--type", kind, "-o", tmp], check=True,
                       stdout=subprocess.DEVNULL)
    else:
        f16 = make_model("f16", folder, headroom, quantize)
        subprocess.run([quantize, f16, tmp, QUANTIZE_NAME[kind]], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.rename(tmp, path)
    return path


def wait_quiet(limit, wait_s):
    """Waits until the 1-minute load is under limit (at most wait_s); returns the load."""
    end = time.time() + wait_s
    while True:
        load = float(open("/proc/loadavg").read().split()[0])
        if load < limit or time.time() >= end:
            return load
        time.sleep(5)


def run_headroom(exe, model, a):
    cmd = [exe, "bench", "-m", model, "--device", "cpu", "--threads", str(a.threads),
           "--prompt", str(a.prompt), "--gen", str(a.gen), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return r["prefill_tok_s"], r["decode_tok_s"]


def run_llama(exe, model, a):
    cmd = [exe, "-m", model, "-p", str(a.prompt), "-n", str(a.gen), "-t", str(a.threads),
           "-r", "1", "-o", "json"]
    rows = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    prefill = next(r["avg_ts"] for r in rows if r["n_prompt"] > 0)
    decode = next(r["avg_ts"] for r in rows if r["n_gen"] > 0)
    return prefill, decode


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--types", default="f16,bf16,q8_0,q4_0,q4_k_m")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--reps", type=int, default=2, help="runs of each engine a round")
    ap.add_argument("--headroom", default=os.path.join(ROOT, "build", "bin", "headroom"))
    ap.add_argument("--models", default=os.path.expanduser("~/.cache/headroom/side-by-side"))
    ap.add_argument("--quiet", type=float, default=0.5, help="1-minute load to wait for")
    ap.add_argument("--wait", type=float, default=60, help="most seconds to wait for it")
    ap.add_argument("--out", default=os.path.join(
        ROOT, "bench", "results", "%s-cpu-side-by-side.jsonl" % datetime.date.today()))
    a = ap.parse_args()
    types = a.types.split(",")
    for t in types:
        if t not in ("f16", "bf16") and t not in QUANTIZE_NAME:
            sys.exit("unknown type %s (f16, bf16, q8_0, q4_0, q4_k_m)" % t)
    bindir = llama_bin()
    bench = os.path.join(bindir, "llama-bench")
    os.makedirs(a.models, exist_ok=True)
    models = {t: make_model(t, a.models, a.headroom, os.path.join(bindir, "llama-quantize"))
              for t in types}
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    # results[type] = list of rounds: {"load": .., "headroom": (pp, tg), "llama.cpp": (pp, tg)}
    results = {t: [] for t in types}
    for rnd in range(a.rounds):
        for t in types:
            engines = [("headroom", run_headroom, a.headroom), ("llama.cpp", run_llama, bench)]
            if rnd % 2:  # neither always runs first
                engines.reverse()
            order = []
            for i in range(a.reps):  # A B B A, or A B A B ... for odd counts
                pair = engines if (i % 2 == 0 or a.reps % 2) else engines[::-1]
                order += pair
            runs = {"headroom": [], "llama.cpp": []}
            loads = {"headroom": [], "llama.cpp": []}
            for name, fn, exe in order:
                loads[name].append(wait_quiet(a.quiet, a.wait))
                runs[name].append(fn(exe, models[t], a))
            got = {}
            for name in runs:
                got[name] = tuple(sum(r[i] for r in runs[name]) / len(runs[name]) for i in (0, 1))
                got[name + "_load"] = max(loads[name])
                got[name + "_runs"] = runs[name]
            results[t].append(got)
            pp = got["headroom"][0] / got["llama.cpp"][0]
            tg = got["headroom"][1] / got["llama.cpp"][1]
            print("round %d %-7s prefill %7.1f / %7.1f = %.2fx  decode %6.2f / %6.2f = %.2fx"
                  "  (load %.2f, %.2f)" % (rnd + 1, t, got["headroom"][0], got["llama.cpp"][0],
                                           pp, got["headroom"][1], got["llama.cpp"][1], tg,
                                           got["headroom_load"], got["llama.cpp_load"]),
                  flush=True)
    print("\n%-7s %-28s %-28s" % ("type", "prefill geomean (worst)", "decode geomean (worst)"))
    rows = []
    for t in types:
        pp = [g["headroom"][0] / g["llama.cpp"][0] for g in results[t]]
        tg = [g["headroom"][1] / g["llama.cpp"][1] for g in results[t]]
        print("%-7s %.2fx (%.2fx)%17s %.2fx (%.2fx)" % (t, geomean(pp), min(pp), "",
                                                          geomean(tg), min(tg)))
        rows.append({"date": datetime.datetime.now(datetime.timezone.utc).strftime(
                         "%Y-%m-%dT%H:%M:%SZ"), "commit": commit,
                     "machine": "%s, %d cores" % (cpu, os.cpu_count()),
                     "model": "tinyllama-1.1b shape, %s" % t, "threads": a.threads,
                     "prompt": a.prompt, "gen": a.gen, "rounds": a.rounds,
                     "reps": a.reps,
                     "headroom_runs": [g["headroom_runs"] for g in results[t]],
                     "llama_cpp_runs": [g["llama.cpp_runs"] for g in results[t]],
                     "headroom_prefill_tok_s": [g["headroom"][0] for g in results[t]],
                     "llama_cpp_prefill_tok_s": [g["llama.cpp"][0] for g in results[t]],
                     "headroom_decode_tok_s": [g["headroom"][1] for g in results[t]],
                     "llama_cpp_decode_tok_s": [g["llama.cpp"][1] for g in results[t]],
                     "load_1min": [[g["headroom_load"], g["llama.cpp_load"]] for g in results[t]],
                     "prefill_ratio_geomean": round(geomean(pp), 3),
                     "prefill_ratio_worst": round(min(pp), 3),
                     "decode_ratio_geomean": round(geomean(tg), 3),
                     "decode_ratio_worst": round(min(tg), 3),
                     "llama_cpp": "0c1e570 (llama-cpp-python 0.3.36), GGML_NATIVE, AMX off"})
    if a.out:
        with open(a.out, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        print("appended %d rows to %s" % (len(rows), a.out))


if __name__ == "__main__":
    main()
