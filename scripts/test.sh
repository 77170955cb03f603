#!/usr/bin/env bash
# Sets kvlab up (scripts/setup.sh) and runs the whole test suite:
#   1. the release build: every test (GPU tests skip with the reason on machines without one);
#   2. the fuzz preset (clang, ASan + UBSan, libFuzzer coverage, host code): every test again, and
#      clang-tidy over its compile commands (architecture.function_size skips on the gcc build)
#      (one sanitizer build serves the tests and the fuzzers; the gcc `asan` preset stays for
#      whoever wants gcc's ASan, and runs the same tests);
#   3. the tsan preset: the threaded parts (thread pool, SIMT emulator, vmm background mapper,
#      driver double, memory adaptors, the replayer's overlap) under ThreadSanitizer, from one
#      binary of the test files that hold them (kvlab_threaded_tests);
#   4. the fuzzers of that same build, each for a bounded time.
# KVLAB_QUICK=1 runs step 1 only, without the slow end-to-end tests (labels examples, figure-checks,
# emulated-e2e) and clang-tidy (tidy). tests/gpu/run.sh runs the GPU suite where a GPU exists.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"
SECONDS=0
# Each stage's start, with the seconds since the script began (where the suite's time goes).
stage() { echo "== [${SECONDS} s] $*" >&2; }
stage "setup: packages and the release build"
KVLAB_PRESET=release scripts/setup.sh
if [ "${KVLAB_QUICK:-0}" = 1 ]; then
  # The quick round: every unit and CLI test of the release build, without the slow end-to-end runs
  # (examples, the figure text re-checks, kvlab on the emulated GPU) and the sanitizer stages.
  stage "release: all tests but examples, figure-checks and emulated-e2e (KVLAB_QUICK=1)"
  ctest --preset release -j "$jobs" --timeout 900 -LE "gpu|examples|figure-checks|emulated-e2e|tidy"
  stage "quick round passed (KVLAB_QUICK=1: scripts/test.sh without it runs everything)"
  exit 0
fi
stage "release: all tests"
ctest --preset release -j "$jobs" --timeout 900

stage "sanitizers: build (clang: ASan + UBSan, the tests and the libFuzzer targets)"
cmake --preset fuzz >/dev/null
cmake --build build/fuzz -j "$jobs"
stage "sanitizers: all tests under AddressSanitizer + UndefinedBehaviorSanitizer"
# Left out: gpu (no GPU), examples and figure-checks (they rerun code the other tests run here),
# scripts (the scripts' own tests: Python and shell, nothing instrumented), figures-heavy (the
# kernel-overhead and prefix-cache figures, about 100 s of CPU here, and the Python checks that read
# every figure's files: kernels, prefix caches and trace readers have their own tests and fuzzers
# under the sanitizers, and the release stage runs these),
# emulated-e2e (kvlab end to end on the emulated GPU, about 260 s under ASan: the release stage runs them,
# and here CudaPathEndToEnd.*, EveryFamily/EmulatedDevice.* and EmulatedAttention.* run the same
# driver double, SIMT emulator and kernels under the sanitizers).
ctest --preset fuzz -j "$jobs" --timeout 900 -LE "gpu|examples|figure-checks|emulated-e2e|scripts|figures-heavy"

stage "tsan: threaded code under ThreadSanitizer"
cmake --preset tsan >/dev/null
# One binary of the files that hold threaded tests (tests/CMakeLists.txt), not the five folder
# binaries: half the objects to build.
cmake --build --preset tsan -j "$jobs" --target kvlab_threaded_tests
export TSAN_OPTIONS="halt_on_error=1:allocator_may_return_null=1"  # some tests ask for impossible sizes
threaded='ThreadPool*:SimtEmulator*:EmulatedAttention*:EmulatedBlockCopy*:HostAttention.LongContext*:LimitingAdaptor*'
threaded+=':*Thread*:*Concurren*:*Overlap*:*Background*:CudaPath*:OverlapOrder*'
build/tsan/tests/kvlab_threaded_tests --gtest_filter="$threaded"
stage "fuzz: libFuzzer targets (trace readers, backend operations, sweep files, replay/compare options), ${KVLAB_FUZZ_SECONDS:-6} s each"
scripts/fuzz.sh "${KVLAB_FUZZ_SECONDS:-6}"
stage "all test stages passed"
