#!/usr/bin/env python3
"""Every benchmark JSON names the host it ran on (benchmarks/host_context.hpp).

    check_bench_context.py BENCH_BINARY FILTER OUT_JSON [KEY...]

Runs one quick benchmark of BENCH_BINARY into OUT_JSON and fails unless its context holds the
git revision, the CPU model, the L3 size, the transparent-huge-page mode, the host kernel's prefetch
distance and every KEY given, with values that mean something (a KEY ending in _bytes_per_s above
10^8, a THP mode the kernel knows, a prefetch distance host_prefetch_lead_heads() can return).
"""
import json
import subprocess
import sys


def main() -> int:
    binary, benchmark_filter, out, *extra = sys.argv[1:]
    subprocess.run([binary, f"--benchmark_filter={benchmark_filter}", "--benchmark_min_time=0.01",
                    f"--benchmark_out={out}", "--benchmark_out_format=json"], check=True,
                   stdout=subprocess.DEVNULL)
    with open(out) as f:
        context = json.load(f)["context"]
    problems = []
    for key in ["kvlab_git_revision", "cpu_model", "l3_cache_bytes", "transparent_hugepage",
                "host_prefetch_lead_heads", *extra]:
        if not str(context.get(key, "")).strip():
            problems.append(f"no {key}")
    if context.get("transparent_hugepage") not in ("always", "madvise", "never", "unknown"):
        problems.append(f"transparent_hugepage {context.get('transparent_hugepage')!r}")
    if context.get("host_prefetch_lead_heads") not in ("1", "3"):  # Intel, everything else
        problems.append(f"host_prefetch_lead_heads {context.get('host_prefetch_lead_heads')!r}")
    for key in extra:  # a measured rate (bandwidth, arithmetic ceiling) is a positive number of bytes/s
        if key.endswith("_bytes_per_s") and str(context.get(key, "")).strip() and not float(context[key]) > 1e8:
            problems.append(f"{key} {context[key]}")
    for p in problems:
        print(f"check_bench_context: {binary}: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
