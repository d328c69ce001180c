#!/usr/bin/env bash
# ctest's entry to the server integration tests: `run.sh deps` installs the pinned openai client once (npm ci,
# when node_modules is missing); `run.sh FILE.test.mjs` runs one test file with node's built-in runner. Exit 77
# (ctest: skipped) when node or npm is missing.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
  echo "server tests: node and npm are needed (scripts/install-deps.sh installs them); skipped"
  exit 77
fi
if [ "$1" = deps ]; then
  [ -d node_modules/openai ] || npm ci --no-audit --no-fund
  exit 0
fi
exec node --test "$@"
