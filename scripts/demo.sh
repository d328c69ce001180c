#!/usr/bin/env bash
# Installs dependencies, builds, and generates text with the model bundled in the repo (models/tide-demo, a small
# Cohere2 trained on Python's standard library). Arguments are passed to `tide generate` (defaults: a short
# prompt, up to 200 tokens, greedy with a mild repetition penalty, since a model this small repeats itself).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh > /dev/null
model=models/tide-demo
if [ $# -eq 0 ]; then set -- --prompt "def fibonacci(n):" --max-tokens 200 --repetition-penalty 1.2; fi
build/apps/tide/tide generate --model "$model" "$@"
