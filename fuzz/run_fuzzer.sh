#!/usr/bin/env bash
# Runs one libFuzzer target over its checked-in seeds: run_fuzzer.sh BINARY SEEDS WORK ARTIFACT_PREFIX [FLAGS...].
# WORK is emptied first and receives the new inputs libFuzzer finds (it writes to its first corpus folder), so
# the checked-in SEEDS stay unchanged and each run starts from the same corpus. A finding (crash, sanitizer
# report, uncaught exception, timeout, out of memory) makes libFuzzer exit non-zero and saves the input as
# ARTIFACT_PREFIX<kind>-<sha1>, which BINARY reruns when given it as its only argument.
set -euo pipefail
binary=$1 seeds=$2 work=$3 artifact_prefix=$4
shift 4
rm -rf "$work"
mkdir -p "$work" "$(dirname "$artifact_prefix")"
corpora=("$work")
if [ -d "$seeds" ]; then
  corpora+=("$seeds")
else
  echo "run_fuzzer: no seeds in $seeds; starting from an empty corpus" >&2
fi
exec "$binary" -artifact_prefix="$artifact_prefix" -rss_limit_mb=2560 "$@" "${corpora[@]}"
