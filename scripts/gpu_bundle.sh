#!/usr/bin/env bash
# Builds kvlab here and writes a self-contained GPU bundle into DIR: a folder that runs kvlab's GPU
# suite on a bare Linux x86-64 machine with an NVIDIA driver and nothing else of kvlab's
# (no compilers, no Boost or Google Benchmark packages).
#
#   scripts/gpu_bundle.sh DIR            # set up and build (scripts/setup.sh), then assemble DIR
#   scripts/gpu_bundle.sh --no-build DIR # assemble DIR from the existing build/release ($KVLAB_BUILD_DIR)
#   DIR/run.sh OUT [SECONDS]             # on the GPU machine: the whole suite within SECONDS (480)
#   DIR/run.sh --device emulated OUT     # the same steps on the CUDA driver double, here
#
# DIR holds: bin/ (kvlab, kvlab_gpu_tests, kvlab_alloc_tests for the driver-table tests,
# kvlab_bench_cuda; stripped), lib/ (the shared libraries they need beyond glibc: Boost's, Google
# Benchmark's, libstdc++ and libgcc_s from the build machine), plot.py, traces/ (the one public
# trace the measured figures read, copied from the trace directory, never committed), run.sh,
# steps.txt and REVISION. The static CUDA runtime is inside the binaries; the driver is the GPU
# machine's. At most 56 MiB (FlashInfer's kernels are in three of the binaries; with the working tree
# it must stay under the device tool's 64 MiB): the script fails when it is larger.
set -euo pipefail
build=1
if [ "${1:-}" = "--no-build" ]; then
  build=0
  shift
fi
dir="${1:?usage: scripts/gpu_bundle.sh [--no-build] DIR}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"  # DIR as the caller meant it, before the cd below
# DIR is emptied first: only a folder that is empty or was a bundle before.
if [ -n "$(ls -A "$dir")" ] && [ ! -f "$dir/REVISION" ]; then
  echo "gpu_bundle: $dir is not empty and holds no bundle (no REVISION file): choose another DIR" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
[ "$build" = 1 ] && KVLAB_PRESET=release scripts/setup.sh
rel="${KVLAB_BUILD_DIR:-build/release}"  # the build to take binaries from
bins=("$rel/kvlab" "$rel/tests/kvlab_gpu_tests" "$rel/tests/kvlab_alloc_tests" "$rel/bench/kvlab_bench_cuda")
for b in "${bins[@]}"; do
  [ -x "$b" ] || { echo "gpu_bundle: $b is missing: the release build has no CUDA (is nvcc on PATH?)" >&2; exit 1; }
done
trace_dir="${KVLAB_TRACE_DIR:-../shared/traces}"
trace="$trace_dir/sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
[ -f "$trace" ] || { echo "gpu_bundle: $trace not found (scripts/download_traces.sh fetches it)" >&2; exit 1; }

rm -rf "${dir:?}"/*
mkdir -p "$dir/bin" "$dir/lib" "$dir/traces"
for b in "${bins[@]}"; do
  cp "$b" "$dir/bin/"
  strip --strip-unneeded "$dir/bin/$(basename "$b")" 2>/dev/null || true
done
# Every shared library the binaries load except glibc's own (the GPU machine has a glibc; a copied
# one would not match its loader).
ldd "${bins[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*) ;;
    *) cp -L "$lib" "$dir/lib/" ;;
  esac
done
cp scripts/plot.py "$dir/plot.py"
cp "$trace" "$dir/traces/"
cp tests/gpu/bundle/run.sh "$dir/run.sh"
cp tests/gpu/bundle/steps.txt "$dir/steps.txt"
chmod +x "$dir/run.sh"
rev="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
[ -n "$(git status --porcelain 2>/dev/null)" ] && rev="$rev (with uncommitted changes)"
echo "$rev built $(date -u +%FT%TZ) on $(uname -srm)" > "$dir/REVISION"
size=$(du -sb "$dir" | cut -f1)
if [ "$size" -gt $((56 << 20)) ]; then
  echo "gpu_bundle: $dir is $((size >> 20)) MiB, over the 56 MiB limit" >&2
  exit 1
fi
echo "gpu_bundle: $dir ($((size >> 20)) MiB, revision $rev); run: $dir/run.sh OUT [SECONDS]" >&2
