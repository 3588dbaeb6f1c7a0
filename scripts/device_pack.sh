#!/usr/bin/env bash
# Builds the CUDA binaries here (nvcc is on this machine, no GPU) and packs
# them with the Debian shared libraries they link into .dev/device/, which
# the device tool carries to the GPU machine (it has CUDA but none of our
# -dev packages), and compresses them into .dev/pack/ (carry that folder).
# Then scripts/device_check.sh runs there.
#   scripts/device_pack.sh [ARCH]
# ARCH (e.g. 80) builds the kernels for that architecture alone, into
# build-cuda-smARCH and .dev/device-smARCH: an H200 has no machine code
# then and runs what its driver compiles from the compute_80 PTX at load,
# the code an RTX 30xx runs (device_check.sh's sm80 part).
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:-}
build=build-cuda${arch:+-sm$arch}
# a shared libheadroom keeps the binaries small: the carried tree is limited;
# -UHR_MODULES: an older build folder may have cached a list without new modules
cmake -S . -B $build -UHR_MODULES -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHR_CUDA=ON -DHR_SHARED=ON \
  ${arch:+-DCMAKE_CUDA_ARCHITECTURES=$arch} > /dev/null
targets=(headroom_cli test_backend_ops test_cuda_model test_cuda_pstep attention_check
         gemv_sample_check bench_plan_sweep test_bad_numbers test_cuda_packed packed_check)
cmake --build $build -j2 --target "${targets[@]}"
out=.dev/device${arch:+-sm$arch}
rm -rf $out
mkdir -p $out/lib
for t in headroom test_backend_ops test_cuda_model test_cuda_pstep test_bad_numbers \
         attention_check gemv_sample_check bench_plan_sweep test_cuda_packed packed_check; do
  cp $build/bin/$t $out/
  strip $out/$t
done
cp -L $build/lib/libheadroom.so $out/lib/
strip $out/lib/libheadroom.so
# the Debian libraries the library links (the CUDA ones are on the device)
for lib in $(ldd $build/lib/libheadroom.so | awk '/=>/ {print $3}' | grep -E 'cjson|pcre2|xxhash'); do
  cp -L "$lib" $out/lib/
done
# and those the CLI adds: libmicrohttpd (serve), libedit (chat) with libbsd and libmd
# (GnuTLS, ncurses: Ubuntu has them)
for lib in $(ldd $build/bin/headroom | awk '/=>/ {print $3}' |
             grep -E 'microhttpd|libedit|libbsd|libmd\.'); do
  cp -L "$lib" $out/lib/
done
# the binaries name files by the path of this checkout: the device links it
pwd > $out/source_dir
# the device tool carries at most 64 MiB with the working tree (46 MiB of it
# tracked files): the pack travels compressed, device_check.sh unpacks it
mkdir -p .dev/pack
tar -cJf .dev/pack/$(basename $out).tar.xz -C .dev $(basename $out)
du -sh $out .dev/pack/$(basename $out).tar.xz
