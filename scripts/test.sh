#!/usr/bin/env bash
# Sets kvlab up (scripts/setup.sh) and runs the whole test suite:
#   1. the release build: every test (GPU tests skip with the reason on machines without one);
#   2. the fuzz preset (clang, ASan + UBSan, libFuzzer coverage, host code): every test again
#      (one sanitizer build serves the tests and the fuzzers; the gcc `asan` preset stays for
#      whoever wants gcc's ASan, and runs the same tests);
#   3. the tsan preset: the threaded parts (thread pool, SIMT emulator, vmm background mapper,
#      driver double, memory adaptors) under ThreadSanitizer;
#   4. the fuzzers of that same build, each for a bounded time.
# KVLAB_QUICK=1 runs step 1 only. tests/gpu/run.sh runs the GPU suite where a GPU exists.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"
SECONDS=0
# Each stage's start, with the seconds since the script began (where the suite's time goes).
stage() { echo "== [${SECONDS} s] $*" >&2; }
stage "setup: packages and the release build"
KVLAB_PRESET=release scripts/setup.sh
stage "release: all tests"
ctest --preset release -j "$jobs" --timeout 900
[ "${KVLAB_QUICK:-0}" = 1 ] && { stage "release tests passed (KVLAB_QUICK=1: the sanitizer stages skipped)"; exit 0; }

stage "sanitizers: build (clang: ASan + UBSan, the tests and the libFuzzer targets)"
cmake --preset fuzz >/dev/null
cmake --build build/fuzz -j "$jobs"
stage "sanitizers: all tests under AddressSanitizer + UndefinedBehaviorSanitizer"
# Left out: gpu (no GPU), examples and figure-checks (they rerun code the other tests run here).
ctest --preset fuzz -j "$jobs" --timeout 900 -LE "gpu|examples|figure-checks"

stage "tsan: threaded code under ThreadSanitizer"
cmake --preset tsan >/dev/null
cmake --build --preset tsan -j "$jobs" --target kvlab_kernels_tests kvlab_vmm_tests kvlab_alloc_tests kvlab_support_tests kvlab_experiments_tests
export TSAN_OPTIONS="halt_on_error=1:allocator_may_return_null=1"  # some tests ask for impossible sizes
threaded='ThreadPool*:SimtEmulator*:EmulatedAttention*:EmulatedBlockCopy*:HostAttention.LongContext*:LimitingAdaptor*'
build/tsan/tests/kvlab_kernels_tests --gtest_filter="$threaded"
build/tsan/tests/kvlab_alloc_tests --gtest_filter='LimitingAdaptor*:*Thread*:*Concurren*'
build/tsan/tests/kvlab_support_tests --gtest_filter='*Thread*:*Concurren*'
build/tsan/tests/kvlab_vmm_tests --gtest_filter='*Overlap*:*Background*:*Thread*'
build/tsan/tests/kvlab_experiments_tests --gtest_filter='*VmmOverlap*:CudaPath*:OverlapOrder*'
stage "fuzz: libFuzzer targets (trace readers, backend operations, sweep files, replay/compare options), 20 s each"
scripts/fuzz.sh "${KVLAB_FUZZ_SECONDS:-20}"
stage "all test stages passed"
