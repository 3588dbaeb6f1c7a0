#!/usr/bin/env python3
"""Checks that src/'s includes point down the layers only (issue 47).

The layers, lowest first (a file may include its own layer and those below):

  0 util/                         errors, allocation, files, dtypes, logging
  1 format/, quant/               file parsers and writers, block formats
  2 tokenizer/, kv/, model/       the description (tensor.h, model.h, loaders,
                                  convert); the KV cache's block bookkeeping
  3 backend/                      the ops table, the cpu and cuda backends, and
                                  the bytes each allocation takes (sizes.c)
  4 model/llama.*                 the forward pass
  5 engine/, chat/                requests, the step, sampling, the plan;
                                  conversations (templates, the context policy)
  6 cli/, server/                 front ends

Usage: tools/check_layers.py [--root DIR]. Prints every upward include as
"FILE:LINE includes HEADER (layer A -> layer B)" and exits 1 if there is one,
0 otherwise. Only quoted includes of files under src/ count; the public
header (include/headroom.h) is below everything.
"""
import argparse
import os
import re
import sys

LAYER_NAMES = ["util", "format/quant", "tokenizer/kv/model description", "backend",
               "forward", "engine", "front ends"]

# (pattern on the path under src/, layer): the first match wins
RULES = [
    (r"^util/", 0),
    (r"^(format|quant)/", 1),
    (r"^model/llama\.", 4),
    (r"^(tokenizer|kv|model)/", 2),
    (r"^backend/", 3),
    (r"^(engine|chat)/", 5),
    (r"^(cli|server)/", 6),
]

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path):
    for pattern, layer in RULES:
        if re.search(pattern, path):
            return layer
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    args = ap.parse_args()
    src = os.path.join(args.root, "src")
    bad = 0
    for dirpath, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith((".c", ".h", ".cu", ".cuh")):
                continue
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, src)
            mine = layer_of(rel)
            if mine is None:
                print(f"{rel}: in no layer (add it to RULES)")
                bad += 1
                continue
            with open(full, encoding="utf-8", errors="replace") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    inc = m.group(1)
                    # a header beside the file ("kernels.h" in backend/cuda/)
                    if not os.path.exists(os.path.join(src, inc)):
                        inc = os.path.relpath(os.path.join(dirpath, inc), src)
                        if not os.path.exists(os.path.join(src, inc)):
                            continue  # generated (build_commit.h) or outside src/
                    theirs = layer_of(inc)
                    if theirs is not None and theirs > mine:
                        print(f"{rel}:{n} includes {m.group(1)} "
                              f"({LAYER_NAMES[mine]} -> {LAYER_NAMES[theirs]})")
                        bad += 1
    print(f"{bad} upward include{'s' if bad != 1 else ''}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
