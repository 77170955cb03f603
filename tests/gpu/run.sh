#!/usr/bin/env bash
# Runs the GPU suite on a machine with an NVIDIA GPU: builds the release preset (CUDA on), runs
# every ctest labelled `gpu`, then the GPU microbenchmarks (JSON), calibrates the GPU into a device
# model file, runs the measured figures on it and replays one workload through every backend on
# it, all under results/gpu/.
# Without a GPU every test skips with the reason and the script says so.
#
#   tests/gpu/run.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-results/gpu}"
mkdir -p "$out"
scripts/setup.sh
build/release/kvlab devices | tee "$out/devices.txt"
ctest --preset release -L gpu --output-on-failure 2>&1 | tee "$out/ctest-gpu.txt"
if build/release/kvlab devices | grep -q "^cuda: available"; then
  if [ -x build/release/bench/kvlab_bench_cuda ]; then
    build/release/bench/kvlab_bench_cuda --benchmark_out="$out/cuda_bench.json" --benchmark_out_format=json
  fi
  # Correctness first: every backend family on the GPU with every KV byte checked after every step
  # (a mismatch fails the run), as CI checks the same path on the emulated device.
  build/release/kvlab compare --device cuda --execute --verify-kv --execute-layers 1 --model yi-6b \
    --capacity-gib 0.25 --max-seq-len 256 --prompt-len uniform:16:160 --output-len uniform:8:64 --requests 16 --seed 1 \
    --backends contiguous-oracle,paged-16,paged-16-hash,vmm-2m,vmm-2m-mega-overlap --out "$out/verify-kv" \
    2>&1 | tee "$out/verify-kv.txt"
  # Swap preemption in a pool too small for the load: the swap copies run on their own stream
  # (alloc/copy_stream.hpp) and every swapped-in byte is checked.
  build/release/kvlab replay --device cuda --execute --verify-kv --execute-layers 1 --model yi-6b \
    --capacity-gib 0.03 --max-seq-len 256 --prompt-len uniform:16:160 --output-len uniform:8:64 --requests 16 --seed 1 \
    --backend paged-16 --preemption swap --out "$out/verify-kv-swap" 2>&1 | tee "$out/verify-kv-swap.txt"
  # The GPU's own constants (map/unmap per page, attention per view, copies), then every backend
  # on the GPU in execute mode with the clock those constants give.
  build/release/kvlab calibrate --device cuda --name gpu --out "$out/device.txt" 2>&1 | tee "$out/calibrate.txt"
  # The measured figures on the GPU: attention through each backend's view (vLLM Fig. 18a,
  # vAttention Fig. 2/3 style) and cuMemMap/cuMemUnmap per page size.
  build/release/kvlab figure kernel-overhead --device cuda --full --out "$out/figures"
  build/release/kvlab figure page-size --device cuda --out "$out/figures"
  build/release/kvlab figure overlap --device cuda --out "$out/figures"
  build/release/kvlab compare --device cuda --execute --device-model "$out/device.txt" --model llama-3-8b \
    --backends contiguous-max,contiguous-oracle,paged-16,paged-64,vmm-2m,vmm-2m-mega \
    --capacity-gib 8 --requests 64 --seed 1 --out "$out/compare" 2>&1 | tee "$out/compare.txt"
else
  echo "tests/gpu/run.sh: no usable GPU here; the gpu-labelled tests skipped (see above)." >&2
fi
