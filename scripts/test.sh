#!/usr/bin/env bash
# Sets kvlab up (scripts/setup.sh) and runs the whole test suite with ctest. Tests that need a GPU
# skip with a message on machines without one; tests/gpu/run.sh runs the GPU suite where one exists.
#
#   scripts/test.sh                 # release build, every test
#   KVLAB_PRESET=asan scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${KVLAB_PRESET:-release}"
KVLAB_PRESET="$preset" scripts/setup.sh
ctest --preset "$preset" -j "$(nproc)" --timeout 600
