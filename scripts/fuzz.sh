#!/usr/bin/env bash
# Builds the libFuzzer targets (the `fuzz` preset: clang++, ASan + UBSan, CUDA off) and runs each
# for SECONDS (default 30). Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
#   TARGET: trace_reader, backend_ops, sweep_file, options (default: all four)
# Inputs the fuzzer finds go to a temporary corpus seeded from tests/fuzz/corpus/<target>/, never
# into the repository; crashes are written to $KVLAB_FUZZ_OUT (default build/fuzz/findings/) and
# the script exits non-zero when a target finds one. Extra libFuzzer flags: $KVLAB_FUZZ_FLAGS.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-30}
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(trace_reader backend_ops sweep_file options)
if ! [[ $seconds =~ ^[0-9]+$ ]] || [[ $seconds -lt 1 ]]; then
  echo "scripts/fuzz.sh: SECONDS must be a whole number >= 1 (got '$seconds')" >&2
  exit 2
fi
for t in "${targets[@]}"; do
  if [[ ! -d tests/fuzz/corpus/$t ]]; then
    echo "scripts/fuzz.sh: unknown target '$t' (known: trace_reader, backend_ops, sweep_file, options)" >&2
    exit 2
  fi
done
command -v clang++ > /dev/null || { echo "scripts/fuzz.sh: clang++ not found (apt-get install clang)" >&2; exit 2; }

cmake --preset fuzz > /dev/null
cmake --build --preset fuzz -j "${KVLAB_JOBS:-2}"

findings=${KVLAB_FUZZ_OUT:-build/fuzz/findings}
mkdir -p "$findings"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

status=0
for t in "${targets[@]}"; do
  corpus=$work/$t
  mkdir -p "$corpus"
  cp tests/fuzz/corpus/"$t"/* "$corpus"/
  echo "== $t: ${seconds} s (corpus in $corpus, findings in $findings/)"
  # shellcheck disable=SC2086
  if ! build/fuzz/fuzz/kvlab_fuzz_"$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
      -artifact_prefix="$findings/$t-" ${KVLAB_FUZZ_FLAGS:-} "$corpus" 2> "$work/$t.log"; then
    status=1
    grep -E "ERROR|SUMMARY|backend_ops_fuzz|trace_reader_fuzz|sweep_file_fuzz|options_fuzz|Test unit written" "$work/$t.log" | head -20 >&2 || true
    echo "== $t: FOUND A CRASH (log above; input under $findings/)" >&2
  fi
  grep -E "^(#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::average_exec_per_sec|stat::new_units_added)" \
    "$work/$t.log" || tail -3 "$work/$t.log"
done
exit $status
