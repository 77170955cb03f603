#!/usr/bin/env bash
# kvlab's GPU suite from a self-contained bundle (scripts/gpu_bundle.sh builds it): runs each step
# of steps.txt under its own time limit within a total budget, writes what each step printed as it
# goes, keeps whatever finished, and ends with a one-screen summary. Needs bash, coreutils
# (timeout), tar and gzip; no build tools, no Boost or Google Benchmark packages (their libraries
# are in lib/), an NVIDIA driver for --device cuda.
#
#   DIR/run.sh [--device cuda|emulated] OUT [SECONDS]
#
#   OUT      results, at most 8 files, rewritten after every step:
#              summary.txt       step, status, seconds, key number (also printed at the end)
#              steps.log         every step's command and output, in order, written as it runs
#              environment.txt   nvidia-smi, kernel, driver, the bundle's revision
#              results.tar.gz    every step's output files (compare, figures, calibrate, benchmark
#                                JSON, the verify step's driver call log)
#   SECONDS  the total budget (default 480); a step gets min(its limit, what is left), and a step
#            is skipped once less than 5 s are left. --device emulated runs the same steps on the CUDA
#            driver double and the SIMT emulator at small sizes (how the bundle is tested without
#            a GPU).
#
# Step statuses: ok, failed (rc N), timeout (its limit cut it; what it wrote is kept), crashed
# (signal N), skipped (budget), interrupted (SIGTERM/SIGINT/SIGHUP to run.sh: the step is stopped,
# what finished is packed, and no later step runs). The script exits 0 when every step is ok, 1 otherwise.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
device=cuda
if [ "${1:-}" = "--device" ]; then
  device="${2:?--device needs cuda or emulated}"
  shift 2
fi
case "$device" in cuda|emulated) ;; *) echo "run.sh: --device must be cuda or emulated (got '$device')" >&2; exit 2 ;; esac
out="${1:?usage: run.sh [--device cuda|emulated] OUT [SECONDS]}"
budget="${2:-480}"
case "$budget" in ''|*[!0-9]*) echo "run.sh: SECONDS must be a whole number (got '$budget')" >&2; exit 2 ;; esac
mkdir -p "$out" || exit 2
out="$(cd "$out" && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/kvlab-bundle.XXXXXX")"
trap 'rm -rf "$work"' EXIT
rm -f "$out/summary.txt" "$out/steps.log" "$out/environment.txt" "$out/results.tar.gz"

# What the steps see.
export BIN="$here/bin" W="$work/results" DEV="$device"
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KVLAB_TRACE_DIR="$here/traces" KVLAB_PLOT_SCRIPT="$here/plot.py"
mkdir -p "$W"
gpu_name=""
if [ "$device" = cuda ] && command -v nvidia-smi >/dev/null 2>&1; then
  gpu_name="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
fi
# The preset whose linear-layer constants calibrate borrows (what it does not measure).
case "$gpu_name" in
  *H200*) BASE=h200 ;; *H100*) BASE=h100-sxm ;; *A100*80GB*) BASE=a100-80gb ;; *A100*) BASE=a100-40gb ;; *) BASE=h100-sxm ;;
esac
export BASE
if [ "$device" = cuda ]; then
  # The GPU sizes: SMALL (yi-6b, every KV byte verified) and LARGE (llama-3-8b, two layers run),
  # workloads that fit the step limits with kvlab's own CUDA kernel.
  export SMALL="--model yi-6b --capacity-gib 0.25 --max-seq-len 256 --prompt-len uniform:16:160 --output-len uniform:8:64 --requests 8 --seed 1"
  export LARGE="--model llama-3-8b --capacity-gib 8 --requests 32 --execute-layers 2 --seed 1"
  export CAL_ARGS="" FIGURE_ARGS="--full" BENCH_TIME=0.2 SWAP_REQUESTS=8
else
  export SMALL="--model yi-6b --capacity-gib 0.25 --max-seq-len 256 --prompt-len uniform:8:40 --output-len uniform:2:10 --requests 8 --seed 1"
  export LARGE="$SMALL --execute-layers 1"
  export CAL_ARGS="--quick" FIGURE_ARGS="" BENCH_TIME=0.01 SWAP_REQUESTS=6
fi
# The emulated device runs the CUDA kernels under the SIMT emulator, one host thread per CUDA
# thread: on a loaded machine (ctest -j) a step takes several times its quiet time, so its limits
# stretch (the total budget does not).
limit_scale="${KVLAB_BUNDLE_LIMIT_SCALE:-$([ "$device" = cuda ] && echo 1 || echo 3)}"
case "$limit_scale" in ''|*[!0-9]*|0) echo "run.sh: KVLAB_BUNDLE_LIMIT_SCALE must be a positive integer" >&2; exit 2 ;; esac

{
  echo "date: $(date -u +%FT%TZ)"
  echo "bundle: $(cat "$here/REVISION" 2>/dev/null || echo unknown)"
  echo "device: $device${gpu_name:+ ($gpu_name)}; calibrate base: $BASE; budget ${budget} s"
  echo "kernel: $(uname -srm)"
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.memory --format=csv 2>&1
  else
    echo "nvidia-smi: not found"
  fi
} > "$out/environment.txt"

names=() statuses=() times=() keys=()
write_summary() {
  {
    printf '%-16s %-20s %7s  %s\n' step status seconds "key number"
    for i in "${!names[@]}"; do
      printf '%-16s %-20s %7s  %s\n' "${names[$i]}" "${statuses[$i]}" "${times[$i]}" "${keys[$i]}"
    done
  } > "$out/summary.txt"
}
pack() {  # everything the steps wrote so far, as one file: OUT never holds more than 8
  tar -C "$work" -czf "$out/results.tar.gz.part" results 2>/dev/null && mv "$out/results.tar.gz.part" "$out/results.tar.gz"
}

# A signal to run.sh (a harness's time limit, Ctrl-C, a closed terminal) stops the running step
# (timeout passes it on to the step's whole process group), records it and packs what finished.
step_pid="" interrupted=""
on_signal() {
  interrupted="$1"
  [ -n "$step_pid" ] && kill -TERM "$step_pid" 2>/dev/null
}
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT
trap 'on_signal HUP' HUP

start_all=$SECONDS
while [ -z "$interrupted" ] && IFS='|' read -r name limit key command; do
  case "$name" in ''|'#'*) continue ;; esac
  name="$(echo "$name" | tr -d ' ')"
  limit="$(( $(echo "$limit" | tr -d ' ') * limit_scale ))"
  key="$(echo "$key" | sed 's/^ *//; s/ *$//')"
  left=$((budget - (SECONDS - start_all)))
  [ "$limit" -gt "$left" ] && limit=$left
  names+=("$name")
  if [ "$left" -lt 5 ]; then
    statuses+=("skipped (budget)") times+=(0) keys+=("")
    printf '\n=== %s: skipped, %s s of the budget left\n' "$name" "$left" >> "$out/steps.log"
    write_summary
    continue
  fi
  printf '\n=== %s (limit %s s) %s\n$ %s\n' "$name" "$limit" "$(date -u +%T)" "$command" >> "$out/steps.log"
  from=$(($(stat -c %s "$out/steps.log") + 1))
  t0=$SECONDS
  # The step writes straight into OUT (a cut-off run keeps what it printed). timeout puts the step
  # in a process group of its own and signals all of it at the limit: no child outlives the step.
  timeout --kill-after=5 "$limit" bash -c "$command" >> "$out/steps.log" 2>&1 < /dev/null &
  step_pid=$!
  wait "$step_pid"
  rc=$?
  while kill -0 "$step_pid" 2>/dev/null; do  # wait returned for a trapped signal: the step is ending
    wait "$step_pid"
    rc=$?
  done
  step_pid=""
  elapsed=$((SECONDS - t0))
  if [ -n "$interrupted" ]; then
    status="interrupted (SIG$interrupted)"
  elif [ $rc -eq 0 ]; then
    status=ok
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    status="timeout"
  elif [ $rc -gt 128 ]; then
    status="crashed (signal $((rc - 128)))"
  else
    status="failed (rc $rc)"
  fi
  echo "=== $name: $status in ${elapsed} s" >> "$out/steps.log"
  k=""
  [ -n "$key" ] && k="$(tail -c "+$from" "$out/steps.log" | grep -E -o -- "$key" 2>/dev/null | tail -n 1 | cut -c1-90)"
  statuses+=("$status") times+=("$elapsed") keys+=("$k")
  write_summary
  pack
done < "$here/steps.txt"

echo "kvlab GPU bundle: $device, $((SECONDS - start_all)) s of $budget s${interrupted:+, stopped by SIG$interrupted}; results in $out" >> "$out/summary.txt"
cat "$out/summary.txt"
[ -n "$interrupted" ] && exit 1
for s in "${statuses[@]}"; do [ "$s" = ok ] || exit 1; done
exit 0
