#!/usr/bin/env bash
# Installs every build, test and run dependency of Ascent from Debian's packages. Idempotent: when everything is
# already installed it only checks and returns. Runs as root on a fresh Debian 12 (uses sudo otherwise).
set -euo pipefail

PACKAGES=(
  cmake ninja-build g++ ccache pkg-config make git
  libfmt-dev nlohmann-json3-dev libcli11-dev libpcre2-dev libutf8proc-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-format
  python3 python3-numpy python3-torch python3-jinja2 python3-sentencepiece
)
# Test-only: the fuzz build (preset fuzz, tests/fuzz) needs Debian's clang and its libFuzzer runtime
# (libclang_rt.fuzzer, in libclang-rt-14-dev).
PACKAGES+=(clang-14 libclang-rt-14-dev)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
