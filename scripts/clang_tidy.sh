#!/usr/bin/env bash
# .clang-tidy over kvlab's sources: the function-size rule (no function of the product outside
# kernels/ runs past 80 lines, whitespace and comments included), checked as architecture.function_size.
# Test files are left out: they are half the translation units and would double the check's time in
# scripts/test.sh (about 100 CPU-seconds more), for test bodies, whose length matters least.
#
#   scripts/clang_tidy.sh BUILD_DIR     every translation unit in BUILD_DIR/compile_commands.json
#                                       in alloc/, paged/, vmm/, serving/, experiments/ and
#                                       benchmarks/ (not kernels/, tests/), one per core; BUILD_DIR
#                                       must be a clang build (the fuzz preset: clang parses a gcc
#                                       build's flags and a few of its sources differently); another
#                                       is skipped (77)
#   scripts/clang_tidy.sh --file FILE   one file without a build (the fixture that must fail)
#
# Exit 77 (skipped) without clang-tidy: scripts/setup.sh installs it.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-tidy >/dev/null || { echo "clang-tidy not installed (scripts/setup.sh installs it): skipped"; exit 77; }
if [ "${1:-}" = --file ]; then
  exec clang-tidy --quiet --config-file=.clang-tidy "$2" -- -std=c++20
fi
build="${1:?usage: scripts/clang_tidy.sh BUILD_DIR | --file FILE}"
db="$build/compile_commands.json"
[ -f "$db" ] || { echo "clang_tidy: no $db (configure the build first)"; exit 1; }
root="$(pwd)"
if ! grep -q '"command": "[^"]*clang++' "$db"; then
  echo "clang_tidy: $build is not a clang build (scripts/test.sh runs this in the fuzz preset's): skipped"
  exit 77
fi
mapfile -t files < <(python3 - "$db" "$root" <<'PY'
import json, sys
db, root = sys.argv[1], sys.argv[2] + "/"
files = set()
for entry in json.load(open(db)):
    f = entry["file"]
    rel = f[len(root):] if f.startswith(root) else ""
    if rel and rel.endswith(".cpp") and rel.split("/")[0] in ("alloc", "paged", "vmm", "serving", "experiments", "benchmarks"):
        files.add(f)
print("\n".join(sorted(files)))
PY
)
[ "${#files[@]}" -gt 0 ] || { echo "clang_tidy: no translation unit of alloc, paged, vmm, serving, experiments or benchmarks in $db"; exit 1; }
jobs="$(nproc)"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
printf '%s\0' "${files[@]}" | xargs -0 -P "$jobs" -n 4 clang-tidy --quiet -p "$build" >"$log" 2>&1 || status=$?
grep -v -e ' warnings\? generated\.$' -e '^Suppressed [0-9]* warnings' -e '^Use -header-filter' "$log" || true
[ "$status" = 0 ] || { echo "clang_tidy: .clang-tidy objects (above)"; exit 1; }
echo "clang_tidy: ${#files[@]} translation units, no function past 80 lines"
