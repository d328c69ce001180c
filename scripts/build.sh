#!/usr/bin/env bash
# Configures and builds tide in ./build (Release, Ninja, ccache when present). Extra arguments go to cmake's
# configure step, e.g. scripts/build.sh -DTIDE_SANITIZE=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build --parallel "$(nproc)"
