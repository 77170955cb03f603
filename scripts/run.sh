#!/usr/bin/env bash
# The main job: set kvlab up, then replay the Azure LLM inference 2023 conversation trace (19,366
# requests, twice its real arrival rate) through every backend — Orca-style contiguous max / pow2 /
# oracle, paged at two block sizes, vmm at several page sizes — for Llama-3-8B with 8 GiB of KV, and
# print and chart where the memory went. Memory mode: the clock is a declared A100-80GB roofline.
#
#   scripts/run.sh [extra kvlab compare options]      results in results/compare-azure-conv/
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
trace=AzureLLMInferenceTrace_conv.csv
dir="${KVLAB_TRACE_DIR:-../shared/traces}"
if [ ! -f "$dir/$trace" ]; then
  echo "run: $trace not found in $dir; downloading the public traces there" >&2
  scripts/download_traces.sh "$dir"
fi
exec build/release/kvlab compare --trace "$trace" --trace-dir "$dir" --model llama-3-8b --capacity-gib 8 \
  --time-scale 0.5 --out results/compare-azure-conv "$@"
