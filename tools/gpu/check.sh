#!/usr/bin/env bash
# The GPU check in one go: builds what the GPU needs (or takes the binaries tools/gpu/bundle.sh packed),
# runs the GPU tests, `tide generate` on the GPU (also R7B's shape with dummy weights) and the benchmark, and
# prints a short summary last. Full logs
# and bench.json go to $OUT (or ./gpu-out).
#
#   tools/gpu/check.sh [--bundle DIR] [--no-bench] [-- TIDE_BENCH_ARGS...]
#
# --bundle DIR: run the binaries of a bundle (a GPU machine without the build tools; see bundle.sh);
# otherwise configure and build build-cuda here first. The benchmark defaults to `--synthetic r7b --quick`.
# GTEST_ARGS adds flags to the GPU tests (e.g. GTEST_ARGS=--gtest_filter=*Attention*). Exit status 1 when
# a test or the generate run failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
bundle="" bench=1
bench_args=(--synthetic r7b --quick)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bundle) bundle=${2:?--bundle needs a folder}; shift 2 ;;
    --no-bench) bench=0; shift ;;
    --) shift; bench_args=("$@"); break ;;
    *) echo "check.sh: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
out=${OUT:-gpu-out}
mkdir -p "$out"

if [[ -n "$bundle" ]]; then
  tar -C "$bundle" -xJf "$bundle/bundle.tar.xz" || exit 1
  export LD_LIBRARY_PATH="$PWD/$bundle/libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  bin=$bundle tests=$bundle/tide_gpu_tests tide=$bundle/tide tide_bench=$bundle/tide_bench
else
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIDE_CUDA=ON >"$out/build.log" 2>&1 &&
    cmake --build build-cuda --target tide_gpu_tests tide tide_bench >>"$out/build.log" 2>&1 ||
    { tail -30 "$out/build.log"; echo "check.sh: the build failed (log: $out/build.log)"; exit 1; }
  tests=build-cuda/tests/tide_gpu_tests tide=build-cuda/apps/tide/tide tide_bench=build-cuda/bench/tide_bench
fi
export TIDE_FIXTURES_DIR="$PWD/tests/fixtures" TIDE_MODELS_DIR="$PWD/models"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
status=0
# shellcheck disable=SC2086  # GTEST_ARGS holds several flags
"$tests" --gtest_color=no ${GTEST_ARGS:-} >"$out/gpu_tests.log" 2>&1 || status=1
"$tide" generate --device cuda --model tests/fixtures/cohere2-tiny --prompt "def fibonacci(n):" \
  --max-tokens 24 --json >"$out/generate.log" 2>&1 || status=1
# The bundled trained model in bf16 (scripts/demo.sh's command on the GPU).
"$tide" generate --device cuda --model models/tide-demo --prompt "def fibonacci(n):" --max-tokens 200 \
  --repetition-penalty 1.2 >"$out/generate_demo.log" 2>&1 || status=1
# A real model's shape without its checkpoint: R7B's config.json, dummy weights quantized to FP8 on the GPU.
"$tide" generate --device cuda --model bench/models/command-r7b-12-2024 --load-format dummy --quantization fp8 \
  --prompt-ids 5,6,7,8 --max-tokens 16 --ignore-eos --json >"$out/generate_dummy.log" 2>&1 || status=1
# Continuous batching on the GPU: prompts of different lengths at once, stop strings, two samples, logprobs.
prompts="$out/prompts.jsonl"
{
  echo '{"prompt": "def fibonacci(n):", "max_tokens": 20}'
  echo '{"prompt": "Hello", "max_tokens": 8}'
  echo '{"prompt_ids": [5, 100, 200, 300, 400, 500, 600, 700, 800, 900, 17, 18, 19], "max_tokens": 30}'
  echo '{"prompt": "The quick brown fox jumps over the lazy dog. The quick brown fox", "max_tokens": 12}'
} >"$prompts"
"$tide" generate --device cuda --model tests/fixtures/cohere2-tiny --prompts-file "$prompts" --concurrent \
  --n 2 --temperature 0.8 --seed 3 --logprobs 2 --stop "e t" --json >"$out/generate_concurrent.log" 2>&1 || status=1
# The OpenAI server on the GPU: greedy completion, streamed chat, 64 concurrent streams, blocks returned.
python3 tools/gpu/serve_smoke.py "$tide" tests/fixtures/cohere2-tiny --device cuda >"$out/serve.log" 2>&1 || status=1
if [[ $bench -eq 1 ]]; then
  "$tide_bench" "${bench_args[@]}" --out "$out/bench.json" >"$out/bench.log" 2>"$out/bench.err" ||
    { tail -5 "$out/bench.err"; echo "check.sh: tide_bench failed (log: $out/bench.err)"; }
fi

echo "--- generate"
tail -c 600 "$out/generate.log"
echo
echo "--- generate, models/tide-demo"
cat "$out/generate_demo.log"
echo
echo "--- generate, R7B's config with --load-format dummy --quantization fp8"
tail -c 400 "$out/generate_dummy.log"
echo
echo "--- generate --concurrent (finish reasons, samples)"
grep -o '"finish_reason":"[a-z]*"' "$out/generate_concurrent.log" | sort | uniq -c
grep -c '"samples"' "$out/generate_concurrent.log"
tail -c 300 "$out/generate_concurrent.log"
echo
if [[ $bench -eq 1 ]]; then
  echo "--- benchmark (table rows; JSON in $out/bench.json)"
  grep -vE '^\{' "$out/bench.log"
fi
echo "--- tide serve"
cat "$out/serve.log"
echo "--- GPU tests"
grep -E '^\[ (bf16|kv|fp8) ' "$out/gpu_tests.log"
grep -E '^\[  FAILED  \]|^\[  SKIPPED \]' "$out/gpu_tests.log" | sort -u
grep -E 'tests? ran|^\[  PASSED  \]' "$out/gpu_tests.log"
[[ $status -eq 0 ]] && echo "check.sh: all GPU tests and the generate run passed" || echo "check.sh: FAILED (logs in $out)"
exit $status
