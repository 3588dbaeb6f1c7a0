#!/usr/bin/env bash
# Builds llama.cpp's llama-bench, llama-server and llama-quantize for the
# side-by-side benchmarks (tools/cpu_side_by_side.py, tools/cpu_neighbours.py,
# tools/serve_bench.py): the llama.cpp sources come in the llama-cpp-python
# sdist on PyPI (vendor/llama.cpp). Not part of CI.
#   tools/build_llama_cpp.sh [DIR]     (default ~/.cache/headroom/llama.cpp)
# Prints the folder of the binaries. Built for this CPU (GGML_NATIVE) with AMX
# off: -march=native on a CPU that reports AMX crashes in llama.cpp's AMX
# path for Q8_0/Q4_0 files (seen on this project's EPYC VMs).
set -euo pipefail
dir=${1:-$HOME/.cache/headroom/llama.cpp}
version=0.3.36 # llama.cpp 0c1e570
mkdir -p "$dir"
if [[ ! -d $dir/llama_cpp_python-$version ]]; then
  python3 -m pip download --no-deps --no-binary :all: -d "$dir" "llama-cpp-python==$version" >&2
  tar -xzf "$dir/llama_cpp_python-$version.tar.gz" -C "$dir"
fi
src=$dir/llama_cpp_python-$version/vendor/llama.cpp
noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
cmake -S "$src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
  -DCMAKE_C_FLAGS="$noamx" -DCMAKE_CXX_FLAGS="$noamx" \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF >&2
cmake --build "$dir/build" -j"$(nproc)" --target llama-bench llama-server llama-quantize >&2
echo "$dir/build/bin"
