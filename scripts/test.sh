#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite (GPU-labelled tests skip without a GPU); then the
# unit and CPU op tests under AddressSanitizer + UndefinedBehaviorSanitizer and a short run of each fuzz target
# (scripts/sanitize.sh, its own clang build in ./build-sanitize).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
ctest --test-dir build --output-on-failure --parallel "$(nproc)" --timeout 600
scripts/sanitize.sh
