#!/usr/bin/env python3
"""Decode speed beside busy neighbour processes (issue 50), headroom and llama.cpp.

For 0, 1 and 2 neighbours (each a `yes > /dev/null`), runs decode with
headroom's default thread count (adaptive), --threads 1 and --threads 2, and
llama.cpp's llama-bench -t 1 and -t 2 (tools/build_llama_cpp.sh), interleaved,
--rounds times; prints a table and writes JSON lines (--out). Not part of CI.

  tools/cpu_neighbours.py -m MODEL.gguf [--headroom build/bin/headroom]
      [--llama-bench DIR/llama-bench] [--rounds 3] [--gen 256] [--out FILE]
"""
import argparse, datetime, json, os, statistics, subprocess, sys


def headroom(exe, model, threads, gen):
    cmd = [exe, "bench", "-m", model, "--device", "cpu", "--prompt", "128", "--gen", str(gen),
           "--json"] + (["--threads", str(threads)] if threads else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["decode_tok_s"]


def llama(exe, model, threads, gen):
    cmd = [exe, "-m", model, "-p", "0", "-n", str(gen), "-t", str(threads), "-r", "1", "-o", "json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out)[0]["avg_ts"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--headroom", default="build/bin/headroom")
    ap.add_argument("--llama-bench", default=os.path.expanduser(
        "~/.cache/headroom/llama.cpp/build/bin/llama-bench"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gen", type=int, default=256)
    ap.add_argument("--neighbours", default="0,1,2")
    ap.add_argument("--out")
    a = ap.parse_args()
    configs = [("headroom", 0), ("headroom", 1), ("headroom", 2)]
    if os.path.exists(a.llama_bench):
        configs += [("llama.cpp", 1), ("llama.cpp", 2)]
    else:
        print("no llama-bench at %s: headroom only" % a.llama_bench, file=sys.stderr)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    rows = []
    for nb in [int(x) for x in a.neighbours.split(",")]:
        busy = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(nb)]
        try:
            got = {c: [] for c in configs}
            for _ in range(a.rounds):
                for eng, t in configs:
                    f = headroom if eng == "headroom" else llama
                    exe = a.headroom if eng == "headroom" else a.llama_bench
                    got[(eng, t)].append(f(exe, a.model, t, a.gen))
        finally:
            for p in busy:
                p.kill()
                p.wait()
        for (eng, t), v in got.items():
            r = {"date": datetime.date.today().isoformat(), "commit": commit,
                 "machine": "%d cores, %s" % (os.cpu_count(), os.uname().machine),
                 "model": os.path.basename(a.model), "neighbours": nb, "engine": eng,
                 "threads": t or "default", "gen": a.gen, "decode_tok_s": v,
                 "decode_tok_s_median": statistics.median(v)}
            rows.append(r)
            print("neighbours %d  %-9s threads %-7s decode %6.1f tok/s  (%s)" % (
                nb, eng, r["threads"], r["decode_tok_s_median"],
                " ".join("%.1f" % x for x in v)), flush=True)
    if a.out:
        with open(a.out, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
