#!/usr/bin/env python3
"""A notebook in script form: a public trace, a request-rate sweep, and a latency plot (vLLM Fig. 12's
axes), driven from Python. CI runs it (ctest python.example); in a notebook, run the cells one by one.

    .venv/bin/python docs/examples/rate_sweep.py [--out DIR] [--requests N]

Needs the ShareGPT length trace in $KVLAB_TRACE_DIR or ../shared/traces (scripts/download_traces.sh).
"""
import argparse
import pathlib

import matplotlib

matplotlib.use("Agg")  # in a notebook, leave this out and the figure shows inline
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

import kvlab  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--out", default="rate-sweep", help="folder for sweep.csv and latency.png")
parser.add_argument("--requests", type=int, default=400, help="requests of the trace replayed at each rate")
a = parser.parse_args()
out = pathlib.Path(a.out)
out.mkdir(parents=True, exist_ok=True)

# %% One comparison per request rate: the trace's lengths with Poisson arrivals at that rate.
trace = "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
backends = ["contiguous-max", "contiguous-oracle", "paged-16"]
frames = []
for rate in (0.5, 1, 1.5, 2, 3):
    cmp = kvlab.compare(backends, trace, model="llama-3-8b", capacity_gib=4, rate=rate, limit=a.requests, seed=1,
                        progress=False, keep_steps=False)
    frames.append(cmp.summary.assign(rate=rate))
    print(f"rate {rate}/s: " + ", ".join(f"{r.backend} {r.mean_normalized_latency_s:.3f} s/token"
                                         for r in cmp.summary.itertuples()))
sweep = pd.concat(frames, ignore_index=True)
sweep.to_csv(out / "sweep.csv", index=False)

# %% Normalized latency (end-to-end latency over output length, averaged) against the rate.
fig, ax = plt.subplots(figsize=(6, 4))
for name, rows in sweep.groupby("backend", sort=False):
    ax.plot(rows["rate"], rows["mean_normalized_latency_s"], marker="o", label=name)
ax.set_xlabel("request rate (requests/s)")
ax.set_ylabel("normalized latency (s/token, modelled clock)")
ax.set_yscale("log")
ax.set_title(f"ShareGPT lengths, llama-3-8b, 4 GiB of KV, {a.requests} requests")
ax.legend()
fig.tight_layout()
fig.savefig(out / "latency.png", dpi=120)
print(f"wrote {out / 'sweep.csv'} and {out / 'latency.png'}")

# %% What the sweep shows, from its data: paged sustains at least the load of the static reservations.
last = sweep[sweep["rate"] == sweep["rate"].max()].set_index("backend")["mean_normalized_latency_s"]
assert last["paged-b16"] <= last["contiguous-max"], last
