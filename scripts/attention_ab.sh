#!/usr/bin/env bash
# A/B of the host attention kernel in one process: kernels/host_attention.cpp at a base revision
# (A) against the working tree's (B), on the same data, round by round. See
# benchmarks/attention_ab.cpp for the cases and why (this host's bandwidth drifts too
# much for two separate benchmark runs to resolve a 5 % change).
set -euo pipefail
caller="$PWD"
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF'
usage: scripts/attention_ab.sh [BASE] [options]

Compiles kernels/host_attention.cpp at git revision BASE (default HEAD) as build A and the working
tree's as build B, both with the flags the build directory compiles it with, links them with
benchmarks/attention_ab.cpp, checks that A and B compute the same outputs, and prints
B's speed relative to A's (the median over rounds of time(A)/time(B)) for decode from memory
(all threads and one), paged-16 decode, decode with the KV in L2, and prefill.

Both builds compile against the working tree's headers, so BASE must be a revision whose
host_attention.cpp still compiles against them.

options:
  --build DIR     a configured and built kvlab build directory [default the repository's build/release]
  --rounds N      rounds per case [default 21]
  --quick         small shapes and few rounds: checks that it runs, not speed (CI)
  --keep DIR      build in DIR and keep it (default: a temporary directory, removed afterwards)
  -h, --help      this text

examples:
  scripts/attention_ab.sh                     # uncommitted kernel changes against HEAD
  scripts/attention_ab.sh 986f640 --rounds 31 # the working tree against an older revision
EOF
}

base=HEAD build="" rounds=21 quick="" keep=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="${2:?--build needs a directory}"; shift 2 ;;
    --rounds) rounds="${2:?--rounds needs a number}"; shift 2 ;;
    --quick) quick=--quick; shift ;;
    --keep) keep="${2:?--keep needs a directory}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "attention_ab: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) base="$1"; shift ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "attention_ab: --rounds: '$rounds' is not a positive integer" >&2; exit 2; }
# --build and --keep are relative to where the script was called from; the default build is the
# repository's build/release.
if [ -z "$build" ]; then build="$PWD/build/release"; else case "$build" in /*) ;; *) build="$caller/$build" ;; esac; fi
if [ -n "$keep" ]; then case "$keep" in /*) ;; *) keep="$caller/$keep" ;; esac; fi
db="$build/compile_commands.json"
[ -f "$db" ] || { echo "attention_ab: $db not found: configure and build first (scripts/setup.sh)" >&2; exit 1; }
for lib in kernels/libkvlab_kernels.a alloc/libkvlab_alloc_core.a alloc/libkvlab_alloc_backend.a; do
  [ -f "$build/$lib" ] || { echo "attention_ab: $build/$lib not found: build first (cmake --build $build)" >&2; exit 1; }
done

# The compiler and flags the build uses for the kernel, and the libraries it links benchmarks with.
mapfile -d '' compile < <(python3 - "$db" <<'PY'
import json, shlex, sys
for e in json.load(open(sys.argv[1])):
    if e["file"].endswith("kernels/host_attention.cpp"):
        args = e["arguments"] if "arguments" in e else shlex.split(e["command"])
        out, skip = [], False
        for a in args:
            if skip: skip = False; continue
            if a in ("-o", "-c"): skip = True; continue
            out.append(a)
        sys.stdout.write("".join(a + "\0" for a in out))
        break
else:
    sys.exit("attention_ab: kernels/host_attention.cpp is not in " + sys.argv[1])
PY
)
[ "${#compile[@]}" -gt 0 ] || exit 1
# The build's link line for the attention benchmark: libraries, search path and linker flags.
block=$(sed -n '/^build bench\/kvlab_bench_attention:/,/^$/p' "$build/build.ninja" 2>/dev/null || true)
libs=$(sed -n 's/^ *LINK_LIBRARIES = //p' <<< "$block")
[ -n "$libs" ] || { echo "attention_ab: no link line for kvlab_bench_attention in $build/build.ninja (a Ninja build with benchmarks is needed)" >&2; exit 1; }
link=()
set -f  # the link line is split on spaces, never globbed
for l in $(sed -n 's/^ *LINK_FLAGS = //p' <<< "$block") $(sed -n 's/^ *LINK_PATH = //p' <<< "$block") $libs; do
  case "$l" in -*|/*) link+=("$l") ;; *) link+=("$build/$l") ;; esac  # the build's own libraries are relative to it
done
set +f

if [ -n "$keep" ]; then work="$keep"; mkdir -p "$work"; else work=$(mktemp -d); trap 'rm -rf "$work"' EXIT; fi
if ! git show "$base:kernels/host_attention.cpp" > "$work/host_attention_a.cpp" 2> "$work/git.err"; then
  echo "attention_ab: no kernels/host_attention.cpp at revision '$base': $(head -n1 "$work/git.err")" >&2
  exit 1
fi
cp kernels/host_attention.cpp "$work/host_attention_b.cpp"

echo "# A: kernels/host_attention.cpp at $(git rev-parse --short "$base"); B: the working tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD -- kernels/host_attention.cpp || echo ' + uncommitted changes'))"
echo "# built with: ${compile[0]} (flags of $db)"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# command: scripts/attention_ab.sh $base --build $build --rounds $rounds $quick"
# The renaming define makes each copy define its own entry point (the header's declaration is renamed with it).
"${compile[@]}" -I"$PWD" -Dhost_attention=host_attention_a -Dhost_prefetch_lead_heads=host_prefetch_lead_heads_a -c "$work/host_attention_a.cpp" -o "$work/a.o" & pa=$!
"${compile[@]}" -I"$PWD" -Dhost_attention=host_attention_b -Dhost_prefetch_lead_heads=host_prefetch_lead_heads_b -c "$work/host_attention_b.cpp" -o "$work/b.o" & pb=$!
"${compile[@]}" -I"$PWD" -c benchmarks/attention_ab.cpp -o "$work/driver.o" & pd=$!
failed=0
for p in $pa $pb $pd; do wait "$p" || failed=1; done
[ "$failed" = 0 ] || { echo "attention_ab: compiling failed (see above)" >&2; exit 1; }
# The build's compile flags and link line (its sanitizer flags included) link the objects.
"${compile[@]}" "$work/driver.o" "$work/a.o" "$work/b.o" -o "$work/attention_ab" "${link[@]}"
"$work/attention_ab" --rounds "$rounds" $quick
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
