#!/usr/bin/env bash
# The GPU bundle, tested without a GPU: assembled from this build (scripts/gpu_bundle.sh
# --no-build), then run.sh on the emulated device with two extra steps, one that hangs past its
# limit and one that crashes. Both must be reported as such and cut off (no process outlives its
# step); every other step must pass; OUT must hold at most 8 files with every finished step's
# outputs; a budget too small for a step skips it; a signal to run.sh stops the running step and
# keeps what finished.
#
#   tests/gpu/bundle_test.sh SOURCE_DIR WORK_DIR [BUILD_DIR]
set -uo pipefail
src="$1"
work="$2"
fail() {
  echo "bundle_test: $*" >&2
  for f in "$work"/out*/summary.txt; do [ -f "$f" ] && { echo "--- $f" >&2; cat "$f" >&2; }; done
  [ -f "$work/out/steps.log" ] && { echo "--- the last 40 lines of steps.log" >&2; tail -n 40 "$work/out/steps.log" >&2; }
  exit 1
}
rm -rf "$work"
mkdir -p "$work"
(cd "$src" && KVLAB_BUILD_DIR="${3:-build/release}" scripts/gpu_bundle.sh --no-build "$work/bundle") || fail "assembling the bundle failed"
[ "$(du -sb "$work/bundle" | cut -f1)" -le $((56 << 20)) ] || fail "the bundle is over 56 MiB"
for f in run.sh steps.txt plot.py REVISION bin/kvlab bin/kvlab_gpu_tests bin/kvlab_bench_cuda lib traces; do
  [ -e "$work/bundle/$f" ] || fail "the bundle lacks $f"
done
# No library from the build machine beyond what is in lib/ and glibc.
missing="$(LD_LIBRARY_PATH="$work/bundle/lib" ldd "$work/bundle/bin/kvlab" "$work/bundle/bin/kvlab_bench_cuda" | grep 'not found')"
[ -z "$missing" ] || fail "unresolved libraries: $missing"

marker="kvlab-bundle-hang-$$"
{
  head -n 6 "$src/tests/gpu/bundle/steps.txt" | grep -v '^#'
  echo "hang           | 3   |                     | exec -a $marker sleep 600"
  echo "crash          | 10  |                     | echo about to crash; kill -SEGV \$\$"
  tail -n +7 "$src/tests/gpu/bundle/steps.txt" | grep -v '^#'
} > "$work/bundle/steps.txt"
grep -q '^devices' "$work/bundle/steps.txt" || fail "steps.txt did not keep its steps"
"$work/bundle/run.sh" --device emulated "$work/out" 700 > "$work/run.txt" 2>&1
rc=$?
cat "$work/run.txt"
[ $rc -eq 1 ] || fail "run.sh exited $rc; expected 1 (two steps were not ok)"
summary="$work/out/summary.txt"
grep -Eq '^hang +timeout ' "$summary" || fail "the hanging step is not reported as timeout"
grep -Eq '^crash +crashed \(signal 11\) ' "$summary" || fail "the crashing step is not reported as crashed (signal 11)"
pgrep -f "$marker" >/dev/null && fail "the hanging step's process outlived its limit"
for step in devices gpu-tests driver-abi verify-kv calibrate page-size compare bench kernel-overhead overlap swap elastic; do
  grep -Eq "^$step +ok " "$summary" || fail "step $step is not ok: $(grep "^$step" "$summary")"
done
grep -Eq '^verify-kv .*[1-9][0-9]* token reads verified, 0 KV mismatches' "$summary" || fail "no verify-kv key number"
grep -Eq '^calibrate .*map_s\.[0-9]+ = ' "$summary" || fail "no calibrate key number"
n=$(find "$work/out" -type f | wc -l)
[ "$n" -le 8 ] || fail "OUT holds $n files (at most 8)"
listing="$(tar -tzf "$work/out/results.tar.gz")"
for f in results/verify-kv/complete.json results/compare/complete.json results/device.txt results/figures/page-size/data.csv \
         results/figures/overlap/data.csv results/figures/kernel-overhead/data.csv results/driver-verify-kv.log \
         results/verify-kv-swap/complete.json results/elastic-verify/complete.json results/figures/multi-tenant/layout.csv; do
  grep -qx "$f" <<<"$listing" || fail "results.tar.gz lacks $f"
done
grep -q '=== hang: timeout' "$work/out/steps.log" || fail "steps.log does not record the hang"
grep -q 'about to crash' "$work/out/steps.log" || fail "steps.log lost the crashing step's output"

# A signal to run.sh stops the running step (and its children) at once and packs what finished.
printf 'first | 10 | | echo first done\nlong | 100 | | echo started; exec -a %s-2 sleep 100\nnever | 10 | | echo never\n' "$marker" \
  > "$work/bundle/steps.txt"
"$work/bundle/run.sh" --device emulated "$work/out-signal" 60 > "$work/signal.txt" 2>&1 &
runner=$!
for _ in $(seq 300); do grep -q started "$work/out-signal/steps.log" 2>/dev/null && break; sleep 0.1; done
kill -TERM "$runner"
wait "$runner"
src_rc=$?
[ $src_rc -ne 0 ] || fail "an interrupted run must not exit 0"
grep -Eq '^first +ok ' "$work/out-signal/summary.txt" || fail "the finished step was lost on interruption"
grep -Eq '^long +interrupted \(SIGTERM\)' "$work/out-signal/summary.txt" || fail "the running step is not reported as interrupted: $(cat "$work/out-signal/summary.txt")"
grep -q '^never' "$work/out-signal/summary.txt" && fail "a step after the interruption ran"
sleep 0.5
pgrep -f "$marker-2" >/dev/null && fail "the interrupted step's process outlived run.sh"
grep -q 'started' "$work/out-signal/steps.log" || fail "the interrupted step's output was lost"

# A budget too small for a step skips it, and says so.
printf 'a | 10 | | sleep 3\nb | 10 | | echo never\n' > "$work/bundle/steps.txt"
"$work/bundle/run.sh" --device emulated "$work/out-budget" 7 > /dev/null 2>&1
grep -Eq '^a +ok ' "$work/out-budget/summary.txt" || fail "the first step should fit the budget"
grep -Eq '^b +skipped \(budget\)' "$work/out-budget/summary.txt" || fail "the second step should be skipped for the budget"
echo "bundle_test: 1 passed, 0 failed"
