#!/usr/bin/env python3
"""Fit the linear-layer constants of a device model to Vidur's measured per-operator profiles.

    scripts/fit_linear_profile.py [--profiles DIR] [--gpu a100|h100] [--model meta-llama/Llama-2-7b-hf]
                                  [--bandwidth B/s] [--peak FLOP/s]

Reads DIR/compute/GPU/MODEL/mlp.csv (Vidur's format, ms per operator by num_tokens; the default DIR
is ../shared/profiles/vidur, see its SOURCES.md; scripts/download_traces.sh does not fetch it: get
it from github.com/microsoft/vidur, data/profiling/compute) and fits, over the tensor-parallel-1 rows,

    t(T) = max(W / (bw * eta_bw), 2 * P * T / (peak * eta_flops)) + c      per layer

where W and P are one layer's weight bytes (fp16) and parameters and t sums the median times of the
layer's operators (projections, MLP, activation, norms, rope, residual adds). It prints eta_bw,
eta_flops and c (seconds per layer) with the mean and worst relative error, the numbers that
serving/devices/*.txt cite. Grid search on the efficiencies (steps of 0.01), least squares on
relative error for c; deterministic. Only the standard library.
"""
import argparse
import csv
import os
import sys

OPS = ["attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj", "mlp_act",
       "input_layernorm", "post_attention_layernorm", "attn_rope", "add"]
DATASHEET = {"a100": (2.039e12, 312e12), "h100": (3.35e12, 989e12)}


def load(path):
    rows = []
    with open(path, newline="") as f:
        for line, r in enumerate(csv.DictReader(f), start=2):
            if r.get("num_tensor_parallel_workers") != "1":
                continue
            try:
                d, h, kvh, ff = (int(r[k]) for k in ("n_embd", "n_head", "n_kv_head", "n_expanded_embd"))
                gated = r["use_gated_mlp"].strip().lower() in ("true", "1")
                tokens = int(r["num_tokens"])
                t = sum(float(r[f"time_stats.{op}.median"]) for op in OPS) * 1e-3
            except (KeyError, ValueError) as e:
                sys.exit(f"{path}:{line}: {e}")
            hd = d // h
            params = d * h * hd + 2 * d * kvh * hd + h * hd * d + (3 if gated else 2) * d * ff
            rows.append((tokens, params, t))
    if not rows:
        sys.exit(f"{path}: no tensor-parallel-1 rows")
    return sorted(rows)


def fit(rows, bw, peak):
    best = None
    for eb in (x / 100 for x in range(20, 101)):
        for ef in (x / 100 for x in range(20, 101)):
            base = [max(2 * p / (bw * eb), 2 * p * n / (peak * ef)) for n, p, _ in rows]
            c = sum((t - m) / t**2 for m, (_, _, t) in zip(base, rows)) / sum(1 / t**2 for _, _, t in rows)
            c = max(c, 0.0)
            err = sum(((m + c - t) / t) ** 2 for m, (_, _, t) in zip(base, rows))
            if best is None or err < best[0]:
                best = (err, eb, ef, c, base)
    _, eb, ef, c, base = best
    rel = [abs(m + c - t) / t for m, (_, _, t) in zip(base, rows)]
    return eb, ef, c, sum(rel) / len(rel), max(rel)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profiles", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "profiles", "vidur"))
    ap.add_argument("--gpu", choices=sorted(DATASHEET), default="a100")
    ap.add_argument("--model", default="meta-llama/Llama-2-7b-hf")
    ap.add_argument("--bandwidth", type=float, help="bytes/s (default: the GPU's datasheet)")
    ap.add_argument("--peak", type=float, help="FLOP/s (default: the GPU's datasheet)")
    a = ap.parse_args()
    bw, peak = DATASHEET[a.gpu]
    bw, peak = a.bandwidth or bw, a.peak or peak
    path = os.path.join(a.profiles, "compute", a.gpu, a.model, "mlp.csv")
    if not os.path.isfile(path):
        sys.exit(f"fit_linear_profile: {path} not found (--profiles DIR)")
    rows = load(path)
    eb, ef, c, mean_err, max_err = fit(rows, bw, peak)
    print(f"{path}: {len(rows)} rows, bandwidth {bw:.4g} B/s, peak {peak:.4g} FLOP/s")
    print(f"linear_bandwidth_efficiency = {eb:.2f}")
    print(f"linear_flops_efficiency = {ef:.2f}")
    print(f"linear_layer_overhead_s = {c:.3g}")
    print(f"relative error: mean {mean_err:.3f}, worst {max_err:.3f}")


if __name__ == "__main__":
    main()
