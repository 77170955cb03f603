#!/usr/bin/env python3
"""Fit the decode-attention constants of a device model to Vidur's measured attention profile.

    scripts/fit_attention_profile.py ATTENTION_CSV [--gpu a100|h100] [--bandwidth B/s]
                                     [--min-mib M] [--max-mib M]

ATTENTION_CSV is Vidur's attention profile (github.com/microsoft/vidur, data/profiling/a100/
attention.csv; the preset's numbers came from commit e2d00e9). It is not in ../shared/profiles (that
snapshot holds the MLP profiles only) and scripts/download_traces.sh does not fetch it: download it
from GitHub. For every decode row (is_prefill False, attn_decode measured) the KV one layer's decode
kernel reads is

    bytes = batch_size * kv_cache_size * 2 (K, V) * (n_kv_head / TP) * (n_embd / n_q_head) * 2 (fp16)

and, over the rows with min-mib <= bytes / 2^20 < max-mib, it fits

    t = floor + bytes / (eta * bandwidth)      per layer and step

by least squares in relative error (weights 1/t^2; a closed form, deterministic). It prints eta
(attention_bandwidth_efficiency), floor (attention_layer_overhead_s, seconds) and the mean and worst
relative error, the numbers serving/devices/a100-*.txt cite, and the same fit over the rows of
64 MiB and more as a check of the shape. Times in the file are milliseconds (Vidur's CUDA timer).
Only the standard library.
"""
import argparse
import csv
import sys

DATASHEET = {"a100": 2.039e12, "h100": 3.35e12}  # bytes/s: A100 80 GB SXM, H100 SXM
MIB = 1 << 20
COLUMNS = ("n_embd", "n_q_head", "n_kv_head", "num_tensor_parallel_workers", "batch_size", "kv_cache_size",
           "is_prefill", "time_stats.attn_decode.median")


def load(path):
    """(bytes, seconds) of every decode row; a bad row ends the run with FILE:LINE: field: why."""
    rows = []
    try:
        f = open(path, newline="")
    except OSError as e:
        sys.exit(f"{path}: cannot read: {e.strerror}")
    with f:
        reader = csv.reader(f)
        header = next(reader, [])
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            sys.exit(f"{path}:1: {missing[0]}: column missing (is this Vidur's attention.csv?)")
        for fields in reader:
            line = reader.line_num
            if len(fields) != len(header):
                sys.exit(f"{path}:{line}: {len(fields)} fields where the header has {len(header)}")
            r = dict(zip(header, fields))
            if r["is_prefill"].strip().lower() not in ("false", "0") or not r["time_stats.attn_decode.median"].strip():
                continue
            values = {}
            for c in COLUMNS[:6]:
                try:
                    values[c] = int(r[c])
                except (TypeError, ValueError):
                    sys.exit(f"{path}:{line}: {c}: '{r[c]}' is not a whole number")
                if values[c] <= 0:
                    sys.exit(f"{path}:{line}: {c}: {values[c]} is not positive")
            try:
                ms = float(r["time_stats.attn_decode.median"])
            except ValueError:
                sys.exit(f"{path}:{line}: time_stats.attn_decode.median: "
                         f"'{r['time_stats.attn_decode.median']}' is not a number")
            if not ms > 0:
                sys.exit(f"{path}:{line}: time_stats.attn_decode.median: {ms} is not positive")
            head_dim = values["n_embd"] // values["n_q_head"]
            kv_heads = values["n_kv_head"] / values["num_tensor_parallel_workers"]
            nbytes = values["batch_size"] * values["kv_cache_size"] * 2 * kv_heads * head_dim * 2
            rows.append((nbytes, ms * 1e-3))
    if not rows:
        sys.exit(f"{path}: no decode rows")
    return rows


def fit(rows):
    """floor, seconds per byte and the relative errors of t = floor + bytes * s minimising
    sum(((floor + bytes * s - t) / t)^2)."""
    # Normal equations of the weighted least squares with weight 1/t^2, in MiB so that the sums
    # stay near 1 and a singular system (every row one size) shows as a small determinant.
    s00 = sum(1 / t**2 for _, t in rows)
    s01 = sum(b / MIB / t**2 for b, t in rows)
    s11 = sum((b / MIB) ** 2 / t**2 for b, t in rows)
    r0 = sum(1 / t for _, t in rows)
    r1 = sum(b / MIB / t for b, t in rows)
    det = s00 * s11 - s01 * s01
    if det <= 1e-9 * s00 * s11:
        sys.exit("the selected rows cannot separate a floor from a bandwidth (one size only?)")
    floor = (r0 * s11 - r1 * s01) / det
    per_byte = (s00 * r1 - s01 * r0) / det / MIB
    errors = [abs(floor + b * per_byte - t) / t for b, t in rows]
    return floor, per_byte, errors


def report(label, rows, bandwidth):
    floor, per_byte, errors = fit(rows)
    if per_byte <= 0:
        sys.exit(f"{label}: the fitted time does not grow with bytes")
    eta = 1 / (per_byte * bandwidth)
    print(f"{label}: {len(rows)} rows, floor {floor * 1e6:.1f} us, {1 / per_byte / 1e12:.3f} TB/s = eta {eta:.3f} "
          f"of {bandwidth / 1e12:.3f} TB/s, mean relative error {100 * sum(errors) / len(errors):.1f} %, "
          f"worst {100 * max(errors):.0f} %")
    return eta, floor


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", help="Vidur's attention.csv")
    ap.add_argument("--gpu", choices=sorted(DATASHEET), default="a100")
    ap.add_argument("--bandwidth", type=float, help="bytes/s (default: the GPU's datasheet)")
    ap.add_argument("--min-mib", type=float, default=1.0, help="smallest KV read fitted (default 1)")
    ap.add_argument("--max-mib", type=float, default=float("inf"), help="largest KV read fitted (default none)")
    a = ap.parse_args()
    bandwidth = a.bandwidth or DATASHEET[a.gpu]
    rows = load(a.csv)
    chosen = [r for r in rows if a.min_mib * MIB <= r[0] < a.max_mib * MIB]
    if len(chosen) < 2:
        sys.exit(f"{a.csv}: {len(chosen)} decode rows between {a.min_mib} and {a.max_mib} MiB; need 2")
    eta, floor = report(f"{a.csv} ({a.min_mib:g} MiB and more)", chosen, bandwidth)
    big = [r for r in rows if r[0] >= 64 * MIB]
    if len(big) >= 2:
        report("check: rows of 64 MiB and more", big, bandwidth)
    print(f"attention_bandwidth_efficiency = {eta:.2f}")
    print(f"attention_layer_overhead_s = {floor:.3g}")


if __name__ == "__main__":
    main()
