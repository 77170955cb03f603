#!/usr/bin/env bash
# Sets kvlab up (scripts/setup.sh) and runs the whole test suite:
#   1. the release build: every test (GPU tests skip with the reason on machines without one);
#   2. the asan preset (ASan + UBSan, host code): every test again;
#   3. the tsan preset: the threaded parts (thread pool, SIMT emulator, vmm background mapper,
#      driver double, memory adaptors) under ThreadSanitizer;
#   4. the fuzz preset (clang, libFuzzer + ASan + UBSan): each fuzzer for a bounded time.
# KVLAB_QUICK=1 runs step 1 only. tests/gpu/run.sh runs the GPU suite where a GPU exists.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"
KVLAB_PRESET=release scripts/setup.sh
echo "== release: all tests" >&2
ctest --preset release -j "$jobs" --timeout 900
[ "${KVLAB_QUICK:-0}" = 1 ] && exit 0

echo "== asan: all tests under AddressSanitizer + UndefinedBehaviorSanitizer" >&2
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$jobs"
ctest --preset asan -j "$jobs" --timeout 900 -LE gpu

echo "== tsan: threaded code under ThreadSanitizer" >&2
cmake --preset tsan >/dev/null
cmake --build --preset tsan -j "$jobs" --target kvlab_kernels_tests kvlab_vmm_tests kvlab_alloc_tests kvlab_support_tests kvlab_experiments_tests
export TSAN_OPTIONS="halt_on_error=1:allocator_may_return_null=1"  # some tests ask for impossible sizes
threaded='ThreadPool*:SimtEmulator*:EmulatedAttention*:EmulatedBlockCopy*:HostAttention.LongContext*:LimitingAdaptor*'
build/tsan/tests/kvlab_kernels_tests --gtest_filter="$threaded"
build/tsan/tests/kvlab_alloc_tests --gtest_filter='LimitingAdaptor*:*Thread*:*Concurren*'
build/tsan/tests/kvlab_support_tests --gtest_filter='*Thread*:*Concurren*'
build/tsan/tests/kvlab_vmm_tests --gtest_filter='*Overlap*:*Background*:*Thread*'
build/tsan/tests/kvlab_experiments_tests --gtest_filter='*VmmOverlap*:CudaPath*:OverlapOrder*'
echo "== fuzz: libFuzzer targets (trace readers, backend operations, sweep files), 20 s each" >&2
scripts/fuzz.sh "${KVLAB_FUZZ_SECONDS:-20}"
echo "== all test stages passed" >&2
