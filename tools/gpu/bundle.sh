#!/usr/bin/env bash
# Packs what the GPU machine needs into .gpu-bundle/ (git-ignored; carry it): the CUDA build's test binary
# and tide program, and the non-CUDA shared libraries they take from Debian packages (xz-compressed to fit the
# transfer limit), and the benchmark program. Usage: tools/gpu/bundle.sh [BUILD_DIR] (default build-cuda).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-cuda}
rm -rf .gpu-bundle && mkdir -p .gpu-bundle/libs
cp "$build/tests/tide_gpu_tests" "$build/apps/tide/tide" "$build/bench/tide_bench" .gpu-bundle/
ldd "$build/tests/tide_gpu_tests" | awk '/=> \// {print $3}' |
  grep -vE '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' | grep -v '/usr/local/cuda' |
  while read -r lib; do cp -L "$lib" .gpu-bundle/libs/; done
tar -C .gpu-bundle -cJf .gpu-bundle/libs.tar.xz libs && rm -rf .gpu-bundle/libs
du -sh .gpu-bundle
