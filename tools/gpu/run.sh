#!/usr/bin/env bash
# Runs on the GPU machine from the repository root with .gpu-bundle/ carried (tools/gpu/bundle.sh): the GPU
# tests and the CUDA path of the tide program. Logs go to $OUT (or ./gpu-out); a summary is printed last.
# Usage: tools/gpu/run.sh [BUNDLE] (default .gpu-bundle); extra gtest flags in $GTEST_ARGS.
set -uo pipefail
out=${OUT:-gpu-out}
bundle=${1:-.gpu-bundle}
mkdir -p "$out"
tar -C "$bundle" -xJf "$bundle/libs.tar.xz"
export LD_LIBRARY_PATH="$PWD/$bundle/libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export TIDE_FIXTURES_DIR="$PWD/tests/fixtures"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
status=0
"$bundle/tide_gpu_tests" --gtest_color=no ${GTEST_ARGS:-} 2>&1 | tee "$out/gpu_tests.log" || status=1
"$bundle/tide" generate --device cuda --model tests/fixtures/cohere2-tiny --prompt "def fibonacci(n):" \
  --max-tokens 24 --json 2>&1 | tee "$out/generate.log" || status=1
echo "--- summary"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran|bf16     " "$out/gpu_tests.log"
exit $status
