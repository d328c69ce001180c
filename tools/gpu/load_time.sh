#!/usr/bin/env bash
# Load times on the GPU: `tide serve` is started, its "model loaded in X s" line read, and the server stopped,
# for MODEL_DIR as the checkpoint stores it, the same with --quantization fp8, and R7B's config
# (bench/models) with --load-format dummy in bf16 and FP8. Each load runs twice: the first may read the
# checkpoint from disk, the second finds it in the page cache. The time covers the weights, the tokenizer
# and the KV cache's allocation (everything before the server answers).
#
#   tools/gpu/load_time.sh [--tide PATH] MODEL_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
tide=build-cuda/apps/tide/tide
if [[ "${1:-}" == "--tide" ]]; then tide=${2:?--tide needs a path}; shift 2; fi
model=${1:?usage: tools/gpu/load_time.sh [--tide PATH] MODEL_DIR}

# Prints "LABEL: model loaded in X s" (or the server's last lines when the load failed).
load() {
  local label=$1 log
  shift
  log=$(mktemp)
  "$tide" serve "$@" --device cuda --port 0 >"$log" 2>&1 &
  local pid=$!
  while ! grep -qE "ready|error" "$log" && kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
  kill -INT "$pid" 2>/dev/null
  wait "$pid"
  echo "$label: $(grep -oE 'model loaded in [0-9.]+ s' "$log" || tail -3 "$log")"
  rm -f "$log"
}

for run in 1 2; do
  load "run $run, $model as stored" "$model"
  load "run $run, $model --quantization fp8" "$model" --quantization fp8
done
load "R7B dummy bf16" bench/models/command-r7b-12-2024 --load-format dummy
load "R7B dummy fp8" bench/models/command-r7b-12-2024 --load-format dummy --quantization fp8
