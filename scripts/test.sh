#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite (GPU-labelled tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
ctest --test-dir build --output-on-failure --parallel "$(nproc)" --timeout 600
