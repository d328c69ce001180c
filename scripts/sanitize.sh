#!/usr/bin/env bash
# Builds tide with clang, AddressSanitizer + UndefinedBehaviorSanitizer and libFuzzer's instrumentation, without
# CUDA, in ./build-sanitize; runs the unit and CPU op tests under the sanitizers and each fuzz target (fuzz/) for
# a fixed number of runs from its checked-in seeds (tests/fixtures/fuzz/<target>). Fails on any finding: a
# sanitizer report, a failed test, a fuzz crash, uncaught exception, timeout or leak (the input is saved under
# build-sanitize/fuzz/artifacts/; rerun it with build-sanitize/fuzz/fuzz_<target> <file>).
#   scripts/sanitize.sh                 the CI check (scripts/test.sh runs it)
#   scripts/sanitize.sh --campaign S    instead, a longer local search: each target for S seconds from random
#                                       seeds, the corpus it grows kept in build-sanitize/fuzz/campaign/<target>
# Environment: TIDE_FUZZ_RUNS (runs per target in the check, default 30000), TIDE_SANITIZE_JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."

campaign=0
if [ "${1:-}" = "--campaign" ]; then
  campaign=${2:?"--campaign needs a number of seconds per target"}
fi
runs=${TIDE_FUZZ_RUNS:-30000}
jobs=${TIDE_SANITIZE_JOBS:-$(nproc)}

cxx=$(command -v clang++-14 || command -v clang++ || true)
if [ -z "$cxx" ]; then
  echo "sanitize: clang++ not found (scripts/install-deps.sh installs clang and libclang-rt-14-dev)" >&2
  exit 1
fi
# -O1 keeps the sanitized code fast enough; no NDEBUG, so assertions stay on; line tables for readable reports.
cmake -S . -B build-sanitize -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DTIDE_CUDA=OFF -DTIDE_SANITIZE=ON -DTIDE_FUZZ=ON \
  -DTIDE_FUZZ_RUNS="$runs" >/dev/null
cmake --build build-sanitize --parallel "$jobs" --target tide_unit_tests tide_ops_tests tide_fuzzers

symbolizer=$(command -v llvm-symbolizer-14 || command -v llvm-symbolizer || true)
[ -n "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH="$symbolizer"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

if [ "$campaign" != 0 ]; then
  for fuzzer in build-sanitize/fuzz/fuzz_*; do
    [ -x "$fuzzer" ] || continue
    name=${fuzzer##*/fuzz_}
    dict=$(sed -n "s/^tide_add_fuzzer($name [^ ]* DICT \([^ ]*\) .*/\1/p" fuzz/CMakeLists.txt)
    echo "sanitize: fuzzing $name for ${campaign}s"
    mkdir -p "build-sanitize/fuzz/campaign/$name" build-sanitize/fuzz/artifacts
    "$fuzzer" -max_total_time="$campaign" -timeout=10 -rss_limit_mb=2560 -print_final_stats=1 \
      -artifact_prefix="build-sanitize/fuzz/artifacts/$name-" ${dict:+-dict=fuzz/$dict} \
      "build-sanitize/fuzz/campaign/$name" "tests/fixtures/fuzz/$name"
  done
  exit 0
fi

# Each test folder in one process: ctest's process per test would spend most of the time starting sanitized
# processes (the main build's ctest runs them one by one). e2e/ is left out: its build and its runs under the
# sanitizers would take longer than CI's budget allows.
echo "sanitize: unit and CPU op tests under ASan + UBSan"
build-sanitize/tests/tide_unit_tests --gtest_brief=1
build-sanitize/tests/tide_ops_tests --gtest_brief=1
echo "sanitize: fuzz targets, $runs runs each"
ctest --test-dir build-sanitize -L '^fuzz$' --output-on-failure --parallel "$jobs" --timeout 600
