#!/usr/bin/env bash
# Every C++/CUDA source is as .clang-format lays it out (clang-format --dry-run -Werror). The tree
# was formatted with clang-format 14 (Debian 12's); another major version lays some lines out
# differently, so there the check is skipped (exit 77) rather than failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v clang-format >/dev/null || { echo "clang-format not installed (scripts/setup.sh installs it): skipped"; exit 77; }
version="$(clang-format --version | grep -oE '[0-9]+\.[0-9]+' | head -1)"
[ "${version%%.*}" = 14 ] || { echo "clang-format $version: the tree is laid out by 14; skipped"; exit 77; }
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || { echo "not a git checkout: skipped"; exit 77; }
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h' | grep -v '^tests/architecture/fixtures/')
clang-format --dry-run -Werror "${files[@]}"
echo "check_format: ${#files[@]} files as .clang-format lays them out"
