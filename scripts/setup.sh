#!/usr/bin/env bash
# Sets kvlab up on a Debian machine: installs what is missing (apt-get), configures and builds
# the release preset. Safe to run again: it only installs and rebuilds what it must.
#
#   scripts/setup.sh            # install dependencies, build build/release
#   KVLAB_PRESET=debug scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${KVLAB_PRESET:-release}"

# Debian packages: compilers and build tools, GoogleTest, Google Benchmark, Boost.Program_options,
# nlohmann-json, fmt, xxHash and Howard Hinnant's date (all four used header-only), libcsv.
# docs/dependencies.md says why each one is here.
packages=(build-essential cmake ninja-build pkg-config libgtest-dev libgmock-dev libbenchmark-dev
          libboost-program-options-dev nlohmann-json3-dev libfmt-dev libxxhash-dev libcsv-dev libhowardhinnant-date-dev python3-matplotlib python3-venv python3-dev curl ca-certificates clang libclang-rt-dev clang-format clang-tidy)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# CUDA is optional: with nvcc on PATH (or in /usr/local/cuda) the CUDA code is compiled too.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

# FlashInfer's headers (docs/dependencies.md): fetched once, pinned by checksum, only where nvcc
# compiles them; without them (no network) kvlab builds with its own CUDA kernels only.
if command -v nvcc >/dev/null 2>&1 && [ "$preset" != asan ] && [ "$preset" != tsan ] && [ "$preset" != fuzz ]; then
  scripts/fetch_flashinfer.sh || echo "setup: continuing without FlashInfer's kernels" >&2
fi

# The Python package (docs/python.md): a virtual environment .venv with the pinned packages of
# python/requirements.txt (nanobind, pandas, pytest, ...) from PyPI, and the release build's package
# (build/<preset>/python) on its path. Without PyPI kvlab builds without it.
python_args=()
if [ "$preset" = release ] || [ "$preset" = debug ]; then
  venv_python="$PWD/.venv/bin/python"
  [ -x "$venv_python" ] || python3 -m venv .venv || echo "setup: python3 -m venv failed" >&2
  if [ -x "$venv_python" ]; then
    stamp=.venv/.kvlab-requirements
    if cmp -s python/requirements.txt "$stamp" || { "$venv_python" -m pip install -q --disable-pip-version-check \
        -r python/requirements.txt && cp python/requirements.txt "$stamp"; }; then
      python_args=(-DKVLAB_PYTHON=ON "-DPython_EXECUTABLE=$venv_python")
      site="$("$venv_python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
      echo "$PWD/build/$preset/python" > "$site/kvlab-build.pth"
    else
      echo "setup: continuing without the Python package (pip could not install python/requirements.txt)" >&2
    fi
  fi
fi

cmake --preset "$preset" "${python_args[@]}" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
echo "setup: built build/$preset (kvlab: build/$preset/kvlab${python_args:+; Python: .venv/bin/python -c 'import kvlab'})" >&2
