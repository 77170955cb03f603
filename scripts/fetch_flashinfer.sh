#!/usr/bin/env bash
# Fetches FlashInfer's C++/CUDA headers (Apache-2.0) for kvlab's GPU attention (issue 27,
# docs/dependencies.md): downloads one pinned flashinfer-python wheel from PyPI, checks its
# SHA-256 and unpacks only the headers kvlab compiles against (FlashInfer's include/ and the
# libcudacxx headers of its CCCL) plus the licence, into DEST. Nothing is committed.
#
#   scripts/fetch_flashinfer.sh                    # into build/_deps/flashinfer-0.7.2.post1
#   scripts/fetch_flashinfer.sh DEST
#   KVLAB_FLASHINFER_WHEEL=/path/to.whl scripts/fetch_flashinfer.sh   # offline: a wheel at hand
#
# Exit 0 when DEST holds the headers (already there or just unpacked), 1 with one line on stderr
# otherwise (no network, checksum mismatch); CMake then builds kvlab without FlashInfer.
set -euo pipefail
cd "$(dirname "$0")/.."
version="0.7.2.post1"
sha256="bfdc18b9e1e4d8d0730fe4343dc0e284cd0c160086de80f99888bc4867922d49"
url="https://files.pythonhosted.org/packages/b6/ad/da1fc7644b28ab82db922021955a0c85c8d6b3b1d6db224a13ef65cef85e/flashinfer_python-${version}-py3-none-any.whl"
dest="${1:-build/_deps/flashinfer-${version}}"

if [ -f "$dest/include/flashinfer/page.cuh" ] && [ -f "$dest/VERSION" ] && [ "$(cat "$dest/VERSION")" = "$version" ]; then
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
wheel="${KVLAB_FLASHINFER_WHEEL:-}"
if [ -z "$wheel" ]; then
  wheel="$tmp/flashinfer.whl"
  if ! curl -fsSL --retry 2 --max-time 300 -o "$wheel" "$url"; then
    echo "fetch_flashinfer: could not download $url; building without FlashInfer" >&2
    exit 1
  fi
fi
got="$(sha256sum "$wheel" | cut -d' ' -f1)"
if [ "$got" != "$sha256" ]; then
  echo "fetch_flashinfer: $wheel has SHA-256 $got, expected $sha256 (flashinfer-python $version); not used" >&2
  exit 1
fi
python3 - "$wheel" "$tmp/out" <<'PY'
import sys, zipfile, pathlib
wheel, out = sys.argv[1], pathlib.Path(sys.argv[2])
keep = {"flashinfer/data/include/": "include/", "flashinfer/data/cccl/libcudacxx/include/": "libcudacxx/include/"}
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        target = None
        for prefix, to in keep.items():
            if name.startswith(prefix) and not name.endswith("/"):
                target = out / (to + name[len(prefix):])
        if name.endswith("dist-info/licenses/LICENSE") or name.endswith("dist-info/LICENSE"):
            target = out / "LICENSE"
        if target is None:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(z.read(name))
PY
echo "$version" > "$tmp/out/VERSION"
mkdir -p "$(dirname "$dest")"
rm -rf "$dest"
mv "$tmp/out" "$dest"
echo "fetch_flashinfer: FlashInfer $version headers in $dest" >&2
