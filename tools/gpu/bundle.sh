#!/usr/bin/env bash
# Packs what the GPU machine needs into .gpu-bundle/ (git-ignored; carry it): the CUDA build's test binary,
# tide program and benchmark program (stripped), and the non-CUDA shared libraries they take from Debian
# packages, all in one xz archive (bundle.tar.xz) to fit the transfer limit; check.sh --bundle unpacks it. Usage: tools/gpu/bundle.sh [BUILD_DIR [DEST]] (defaults build-cuda,
# .gpu-bundle; DEST must be a git-ignored folder of the checkout, such as .gpu-<name>/).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-cuda}
dest=${2:-.gpu-bundle}
rm -rf "$dest" && mkdir -p "$dest/libs"
cp "$build/tests/tide_gpu_tests" "$build/apps/tide/tide" "$build/bench/tide_bench" "$dest/"
for bin in "$build/tests/tide_gpu_tests" "$build/apps/tide/tide" "$build/bench/tide_bench"; do ldd "$bin"; done |
  awk '/=> \// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' | grep -v '/usr/local/cuda' |
  while read -r lib; do cp -L "$lib" "$dest/libs/"; done
strip --strip-unneeded "$dest/tide_gpu_tests" "$dest/tide" "$dest/tide_bench"
# xz -9: a third smaller than the default level (13 MB against 20), which leaves the fixtures room in a transfer.
XZ_OPT="-9 -T0" tar -C "$dest" -cJf "$dest/bundle.tar.xz" libs tide_gpu_tests tide tide_bench &&
  rm -rf "$dest/libs" "$dest/tide_gpu_tests" "$dest/tide" "$dest/tide_bench"
du -sh "$dest"
