#!/usr/bin/env bash
# ctest-label: unit
# src/'s includes point down the layers only (tools/check_layers.py has the
# layers: util, format/quant, tokenizer/kv/model description, backend, the
# forward pass, engine, front ends). An upward include fails, naming the line.
#   tests/sh_layers.sh PATH_TO_HEADROOM BUILD_DIR   (both unused)
set -u
out=$(python3 tools/check_layers.py)
st=$?
echo "$out"
if [ $st -eq 0 ]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi
exit $st
