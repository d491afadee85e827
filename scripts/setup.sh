#!/usr/bin/env bash
# Installs Ascent's dependencies from Debian's packages: with no argument what building and running need (`make
# demo`), with --test also what the test suite and the development targets need (`make test`, `make format`), and
# the server suite's npm packages (tests/serve, from its package-lock.json). Idempotent: when everything is already
# installed it only checks and returns. Runs as root on a fresh Debian 12 (uses sudo otherwise).
set -euo pipefail

BUILD_PACKAGES=(
  cmake ninja-build g++ ccache pkg-config make git
  libfmt-dev nlohmann-json3-dev libcli11-dev libpcre2-dev libutf8proc-dev
  libboost1.81-dev  # Beast and Asio: ascent serve's HTTP server and ascent loadtest's client
  libyaml-cpp-dev   # ascent train's CONFIG.yaml
)
# The tests' oracles (PyTorch, jinja2, libsentencepiece, NumPy) and frameworks, and the formatter.
TEST_PACKAGES=(
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-format
  python3 python3-numpy python3-torch python3-jinja2 python3-sentencepiece
  # The fuzz build (preset fuzz, tests/fuzz): Debian's clang and its libFuzzer runtime (libclang-rt-14-dev).
  clang-14 libclang-rt-14-dev
  # tests/serve drives `ascent serve` through the official OpenAI client (the npm package openai) under Node.js.
  nodejs
  # bench/train_table.py's peer: Debian's PyTorch falls back to the reference BLAS, ~10x slower, without OpenBLAS.
  libopenblas0-pthread
)

PACKAGES=("${BUILD_PACKAGES[@]}")
case "${1:-}" in
  "") ;;
  --test) PACKAGES+=("${TEST_PACKAGES[@]}") ;;
  *)
    echo "setup: unknown argument '$1' (expected nothing, or --test)" >&2
    exit 2
    ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# Debian's npm package conflicts with NodeSource's nodejs, which carries its own npm: the package is installed only
# where no npm command exists.
if [ "${1:-}" = --test ] && ! command -v npm >/dev/null; then missing+=(npm); fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  echo "setup: done"
fi

# The server suite's npm packages, exactly as package-lock.json pins them. npm ci empties node_modules first, so it
# runs only when the lock file differs from the copy left by the last install.
if [ "${1:-}" = --test ]; then
  serve="$(dirname "$0")/../tests/serve"
  if cmp -s "$serve/package-lock.json" "$serve/node_modules/.ascent-package-lock.json"; then
    echo "setup: tests/serve npm packages present"
  else
    echo "setup: npm ci in tests/serve"
    (cd "$serve" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$serve/package-lock.json" "$serve/node_modules/.ascent-package-lock.json"
  fi
fi
