#!/usr/bin/env bash
# The GPU suite on a machine with an NVIDIA GPU and kvlab's build tools: builds the GPU bundle
# (scripts/gpu_bundle.sh) and runs it (DIR/run.sh: GPU tests, verify-kv of every backend family,
# swap, calibrate, the measured figures, the compare and the benchmarks, each under its own limit
# within SECONDS). On a GPU machine without build tools, build the bundle elsewhere and run its
# run.sh there instead (docs/devices.md).
#
#   tests/gpu/run.sh [OUT_DIR] [SECONDS]     # default results/gpu/run-<UTC date>, 480 s
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-results/gpu/run-$(date -u +%Y%m%dT%H%M%SZ)}"
scripts/gpu_bundle.sh build/gpu-bundle
device=cuda
build/release/kvlab devices | grep -q "^cuda: available" || {
  echo "tests/gpu/run.sh: no usable GPU here; running the bundle on the emulated device instead" >&2
  device=emulated
}
exec build/gpu-bundle/run.sh --device "$device" "$out" "${2:-480}"
