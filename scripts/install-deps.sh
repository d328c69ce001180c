#!/usr/bin/env bash
# Installs tide's build and test dependencies from Debian 12 packages (nodejs and npm run the server tests).
# Idempotent; needs root (or sudo).
set -euo pipefail
packages=(
  build-essential cmake ninja-build ccache pkg-config
  nlohmann-json3-dev libcli11-dev libfmt-dev
  libutf8proc-dev libpcre2-dev libopenblas-dev libxxhash-dev
  libgtest-dev libgmock-dev
  libcpp-httplib-dev libboost1.81-dev
  clang-14 libclang-rt-14-dev llvm-14  # scripts/sanitize.sh: sanitizers, libFuzzer, llvm-symbolizer
)
# Node.js and npm run the server tests: Debian's packages, unless a node and npm are already installed
# (e.g. NodeSource's nodejs, which bundles npm and conflicts with Debian's npm package).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
echo "install-deps: installing ${missing[*]}"
$sudo_cmd apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
