#!/usr/bin/env bash
# Peer benchmark: ggml's CPU flash attention against kvlab's host decode attention, same shape, same
# run (issue 16). Downloads ggml's source at a pinned version into a cache OUTSIDE the repository,
# builds its CPU library, compiles our driver (scripts/peers/ggml_attention_driver.cpp) against it,
# times ggml_flash_attn_ext, then runs kvlab's BM_DecodeContiguous and prints ours/peer.
# No ggml code is ever written inside the repository. See docs/peers.md.
set -euo pipefail

PINNED_PYPI_VERSION=0.3.36   # llama-cpp-python sdist; vendors ggml-org/llama.cpp@0c1e57098 (ggml 0.25.3)
PINNED_PYPI_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
PINNED_GIT_REF=0c1e57098     # the same llama.cpp commit, for --source git
GIT_URL=https://github.com/ggml-org/llama.cpp.git

usage() {
  cat <<EOF
usage: scripts/peers/ggml_attention.sh [options]

Builds ggml's CPU flash attention (ggml_flash_attn_ext) at kvlab's BM_DecodeContiguous shape
(llama-3-8b decode: 32 q / 8 KV heads, head dim 128, fp16 KV, 32 sequences x 4096 tokens, one
query token each), times it, runs kvlab's benchmark in the same invocation and prints
ours GB/s, peer GB/s, ours/peer, threads and /proc/loadavg at each measurement.

options (environment variable in brackets):
  --source SRC      where ggml comes from [KVLAB_GGML_SOURCE], default pypi:
                      pypi   llama-cpp-python==${PINNED_PYPI_VERSION} sdist from PyPI (pip download),
                             which vendors llama.cpp/ggml; its sha256 is checked
                      git    git clone ${GIT_URL} at --git-ref
                      PATH   an existing llama.cpp checkout or ggml directory (used read-only)
  --pypi-version V  llama-cpp-python version [KVLAB_GGML_PYPI_VERSION], default ${PINNED_PYPI_VERSION}
                    (the sha256 is only checked for the pinned version)
  --git-ref REF     llama.cpp tag or commit for --source git [KVLAB_GGML_GIT_REF], default ${PINNED_GIT_REF}
  --cache DIR       download and build directory, must be outside the repository
                    [KVLAB_PEER_CACHE], default \$HOME/.cache/kvlab/peers
  --bench PATH      kvlab's attention benchmark [KVLAB_BENCH], default
                    <repository>/build/release/bench/kvlab_bench_attention
  --threads N       ggml threads [KVLAB_PEER_THREADS], default the online CPU count, which is what
                    kvlab's default thread pool uses (std::thread::hardware_concurrency)
  --ours-reps N     repetitions of BM_DecodeContiguous (each >= 2 s); the median is used, default 3
  --min-seconds S   ggml timed runs last at least S seconds (and at least 20 runs), default 2
  --jobs N          build parallelism, default 2
  --skip-ours       only build and time ggml
  -h, --help        this text

example:
  cmake --preset release && cmake --build --preset release -j2 --target kvlab_bench_attention
  scripts/peers/ggml_attention.sh
  KVLAB_PEER_CACHE=/scratch/peers scripts/peers/ggml_attention.sh --source ~/src/llama.cpp --threads 2

needs: cmake, a C/C++ compiler, python3 (pip for --source pypi, git for --source git).
EOF
}

die() { echo "ggml_attention.sh: $*" >&2; exit 2; }
fail() { echo "ggml_attention.sh: $*" >&2; exit 1; }
log() { echo "== $*" >&2; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
SOURCE=${KVLAB_GGML_SOURCE:-pypi}
PYPI_VERSION=${KVLAB_GGML_PYPI_VERSION:-$PINNED_PYPI_VERSION}
GIT_REF=${KVLAB_GGML_GIT_REF:-$PINNED_GIT_REF}
CACHE=${KVLAB_PEER_CACHE:-${HOME:-/tmp}/.cache/kvlab/peers}
BENCH=${KVLAB_BENCH:-$REPO/build/release/bench/kvlab_bench_attention}
THREADS=${KVLAB_PEER_THREADS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc)}
OURS_REPS=3
MIN_SECONDS=2
JOBS=2
SKIP_OURS=0

need_value() { [[ $# -ge 2 && -n $2 ]] || die "$1 needs a value"; }
while [[ $# -gt 0 ]]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --source) need_value "$@"; SOURCE=$2; shift 2 ;;
    --pypi-version) need_value "$@"; PYPI_VERSION=$2; shift 2 ;;
    --git-ref) need_value "$@"; GIT_REF=$2; shift 2 ;;
    --cache) need_value "$@"; CACHE=$2; shift 2 ;;
    --bench) need_value "$@"; BENCH=$2; shift 2 ;;
    --threads) need_value "$@"; THREADS=$2; shift 2 ;;
    --ours-reps) need_value "$@"; OURS_REPS=$2; shift 2 ;;
    --min-seconds) need_value "$@"; MIN_SECONDS=$2; shift 2 ;;
    --jobs) need_value "$@"; JOBS=$2; shift 2 ;;
    --skip-ours) SKIP_OURS=1; shift ;;
    *) die "unknown argument '$1' (try --help)" ;;
  esac
done

is_count() { [[ $1 =~ ^[1-9][0-9]*$ ]]; }
is_count "$THREADS" || die "--threads must be a positive integer, got '$THREADS'"
is_count "$OURS_REPS" || die "--ours-reps must be a positive integer, got '$OURS_REPS'"
is_count "$JOBS" || die "--jobs must be a positive integer, got '$JOBS'"
[[ $MIN_SECONDS =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--min-seconds must be a number, got '$MIN_SECONDS'"
command -v cmake >/dev/null || die "cmake not found"
command -v python3 >/dev/null || die "python3 not found"
BENCH=$(realpath -m -- "$BENCH")
[[ $PYPI_VERSION =~ ^[0-9A-Za-z.+!-]+$ ]] || die "--pypi-version has odd characters: '$PYPI_VERSION'"
[[ $SKIP_OURS = 1 || -x $BENCH ]] ||
  die "kvlab benchmark not found at $BENCH (build it: cmake --preset release && cmake --build --preset release -j2 --target kvlab_bench_attention, or pass --bench)"

# The cache must not be inside the repository: no peer code is ever written there.
CACHE=$(realpath -m -- "$CACHE")
[[ $CACHE/ = "$REPO"/* ]] && die "cache $CACHE is inside the repository $REPO; pick one outside (--cache)"
mkdir -p "$CACHE" || die "cannot create cache directory $CACHE"

# --- ggml source -------------------------------------------------------------------------------
fetch_pypi() {
  local dir=$CACHE/ggml-pypi-$PYPI_VERSION sdist
  if [[ ! -f $dir/ggml/CMakeLists.txt ]]; then
    python3 -m pip --version >/dev/null 2>&1 || die "pip not found (python3 -m pip); use --source git or --source PATH"
    log "downloading llama-cpp-python==$PYPI_VERSION sdist from PyPI"
    rm -rf "$dir" && mkdir -p "$dir/dl"
    python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$PYPI_VERSION" -d "$dir/dl" >&2 ||
      fail "pip download of llama-cpp-python==$PYPI_VERSION failed"
    sdist=$(ls "$dir"/dl/llama_cpp_python-"$PYPI_VERSION".tar.gz 2>/dev/null) ||
      fail "pip did not leave llama_cpp_python-$PYPI_VERSION.tar.gz in $dir/dl"
    if [[ $PYPI_VERSION = "$PINNED_PYPI_VERSION" ]]; then
      echo "$PINNED_PYPI_SHA256  $sdist" | sha256sum --check --quiet - >&2 ||
        fail "sha256 of $sdist is not the pinned $PINNED_PYPI_SHA256"
    fi
    tar -xzf "$sdist" -C "$dir" --strip-components=3 "llama_cpp_python-$PYPI_VERSION/vendor/llama.cpp/ggml" ||
      fail "$sdist has no vendor/llama.cpp/ggml"
    rm -rf "$dir/dl"
  fi
  GGML_DIR=$dir/ggml
  SOURCE_DESC="llama-cpp-python==$PYPI_VERSION sdist (PyPI), vendor/llama.cpp/ggml"
  BUILD_KEY=pypi-$PYPI_VERSION
}

fetch_git() {
  command -v git >/dev/null || die "git not found"
  [[ $GIT_REF =~ ^[A-Za-z0-9._/-]+$ ]] || die "--git-ref has odd characters: '$GIT_REF'"
  local dir=$CACHE/llama.cpp-git-${GIT_REF//\//_}
  if [[ ! -f $dir/ggml/CMakeLists.txt ]]; then
    log "cloning $GIT_URL at $GIT_REF"
    rm -rf "$dir"
    git clone --quiet --filter=blob:none --no-checkout "$GIT_URL" "$dir" >&2 || fail "git clone $GIT_URL failed"
    git -C "$dir" checkout --quiet "$GIT_REF" >&2 || fail "llama.cpp has no ref '$GIT_REF'"
  fi
  GGML_DIR=$dir/ggml
  SOURCE_DESC="ggml-org/llama.cpp@$(git -C "$dir" rev-parse --short=9 HEAD) (git), ggml/"
  BUILD_KEY=git-${GIT_REF//\//_}
}

use_path() {
  local p
  p=$(cd "$SOURCE" 2>/dev/null && pwd -P) || die "--source '$SOURCE' is not pypi, git or a directory"
  if [[ -f $p/ggml/include/ggml.h ]]; then GGML_DIR=$p/ggml
  elif [[ -f $p/include/ggml.h && -f $p/CMakeLists.txt ]]; then GGML_DIR=$p
  else die "$p is neither a llama.cpp checkout nor a ggml directory (no ggml/include/ggml.h or include/ggml.h)"
  fi
  SOURCE_DESC="local $GGML_DIR"
  BUILD_KEY=local-$(printf '%s' "$GGML_DIR" | sha256sum | cut -c1-12)
}

case $SOURCE in
  pypi) fetch_pypi ;;
  git) fetch_git ;;
  *) use_path ;;
esac
GGML_VERSION=$(sed -n 's/^set(GGML_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\))/\2/p' "$GGML_DIR/CMakeLists.txt" | paste -sd. -)
log "ggml ${GGML_VERSION:-?} from $SOURCE_DESC"

# --- build ggml's CPU library and the driver (one CMake project in the cache) ---------------------
PROJECT=$CACHE/build-$BUILD_KEY/project
BUILD=$CACHE/build-$BUILD_KEY/build
mkdir -p "$PROJECT"
cat >"$PROJECT/CMakeLists.txt" <<EOF
# Written by kvlab's scripts/peers/ggml_attention.sh; builds ggml's CPU backend and kvlab's driver.
cmake_minimum_required(VERSION 3.14)
project(kvlab_ggml_peer C CXX)
set(BUILD_SHARED_LIBS OFF CACHE BOOL "" FORCE)
add_subdirectory("$GGML_DIR" ggml)
add_executable(ggml_attention_driver "$REPO/scripts/peers/ggml_attention_driver.cpp")
target_compile_features(ggml_attention_driver PRIVATE cxx_std_17)
target_link_libraries(ggml_attention_driver PRIVATE ggml ggml-cpu ggml-base)
EOF
log "building ggml (CPU only, GGML_NATIVE=ON, Release) and the driver in $BUILD"
cmake -S "$PROJECT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CPU=ON \
  -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_BLAS=OFF -DGGML_VULKAN=OFF -DGGML_OPENCL=OFF -DGGML_HIP=OFF \
  -DGGML_SYCL=OFF -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF -DGGML_CCACHE=OFF >"$BUILD.configure.log" 2>&1 ||
  fail "configuring ggml failed; see $BUILD.configure.log"
cmake --build "$BUILD" --target ggml_attention_driver -j "$JOBS" >"$BUILD.build.log" 2>&1 ||
  fail "building ggml or the driver failed; see $BUILD.build.log"
DRIVER=$BUILD/ggml_attention_driver

# --- measure ------------------------------------------------------------------------------------
TMP=$(mktemp -d "${TMPDIR:-/tmp}/kvlab-peer.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

log "ggml_flash_attn_ext, $THREADS threads"
LOAD_PEER_BEFORE=$(cat /proc/loadavg)
"$DRIVER" --threads "$THREADS" --min-seconds "$MIN_SECONDS" | tee "$TMP/peer.txt" >&2 ||
  fail "the ggml driver failed (output above)"
LOAD_PEER_AFTER=$(cat /proc/loadavg)
PEER_GBS=$(sed -n 's/^ggml_peer .*kv_gb_per_s=\([0-9.]*\).*/\1/p' "$TMP/peer.txt")
PEER_ERR=$(sed -n 's/^max_abs_err=\([^ ]*\).*/\1/p' "$TMP/peer.txt")
[[ -n $PEER_GBS ]] || fail "the ggml driver printed no ggml_peer line"

if [[ $SKIP_OURS = 1 ]]; then
  printf 'peer (ggml %s) %.2f GB/s, %s threads, max_abs_err %s, loadavg %s -> %s\n' \
    "$GGML_VERSION" "$PEER_GBS" "$THREADS" "$PEER_ERR" "$LOAD_PEER_BEFORE" "$LOAD_PEER_AFTER"
  exit 0
fi

log "kvlab BM_DecodeContiguous x$OURS_REPS ($BENCH)"
LOAD_OURS_BEFORE=$(cat /proc/loadavg)
"$BENCH" --benchmark_filter='^BM_DecodeContiguous' --benchmark_repetitions="$OURS_REPS" \
  --benchmark_out="$TMP/ours.json" --benchmark_out_format=json >&2 || fail "$BENCH failed (output above)"
LOAD_OURS_AFTER=$(cat /proc/loadavg)
read -r OURS_GBS OURS_THREADS OURS_BW < <(python3 - "$TMP/ours.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
runs = [b for b in d["benchmarks"] if b["name"].startswith("BM_DecodeContiguous")]
med = [b for b in runs if b.get("aggregate_name") == "median"]
it = [b for b in runs if b.get("run_type", "iteration") == "iteration"]
b = med[0] if med else it[0]
ctx = d["context"]
print(b["kv_bytes_per_s"] / 1e9, ctx.get("threads", "?"),
      float(ctx.get("memory_read_bandwidth_bytes_per_s", "nan")) / 1e9)
EOF
) || fail "could not read BM_DecodeContiguous from the benchmark's JSON"

[[ $OURS_THREADS = "$THREADS" ]] ||
  echo "ggml_attention.sh: warning: kvlab used $OURS_THREADS threads, ggml $THREADS" >&2
python3 - "$OURS_GBS" "$PEER_GBS" "$OURS_BW" <<EOF
import sys
ours, peer, bw = (float(x) for x in sys.argv[1:4])
call = 536870912 / 1e9  # GB of K and V read per call
rows = [
    ("ours: kvlab BM_DecodeContiguous", f"{ours:7.2f} GB/s  {call / ours * 1e3:7.1f} ms/call  threads $OURS_THREADS  (median of $OURS_REPS reps)"),
    ("peer: ggml $GGML_VERSION flash_attn_ext", f"{peer:7.2f} GB/s  {call / peer * 1e3:7.1f} ms/call  threads $THREADS  (median; max_abs_err $PEER_ERR)"),
    ("ours/peer", f"{ours / peer:7.2f}x"),
    ("memory read bandwidth (kvlab)", f"{bw:7.2f} GB/s"),
    ("ggml source", "$SOURCE_DESC"),
    ("loadavg during peer", "$LOAD_PEER_BEFORE -> $LOAD_PEER_AFTER"),
    ("loadavg during ours", "$LOAD_OURS_BEFORE -> $LOAD_OURS_AFTER"),
]
print("peer comparison: llama-3-8b decode attention, 32 q / 8 kv heads, head_dim 128, fp16 KV, 32 seqs x 4096 tokens")
for label, value in rows:
    print(f"  {label:<36} {value}")
EOF
