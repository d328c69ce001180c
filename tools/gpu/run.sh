#!/usr/bin/env bash
# Temporary: the GPU tests and a CUDA generate from a bundle, without the benchmark (= check.sh --no-bench).
exec "$(dirname "$0")/check.sh" --bundle "${1:-.gpu-bundle}" --no-bench
