#!/usr/bin/env bash
# Installs dependencies, builds, and generates text with the model bundled in the repo. Arguments are passed
# to `tide generate` (defaults: a short prompt, 40 tokens).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh > /dev/null
model=tests/fixtures/cohere2-tiny
if [ $# -eq 0 ]; then set -- --prompt "def fibonacci(n):" --max-tokens 40; fi
build/apps/tide/tide generate --model "$model" "$@"
