#!/usr/bin/env python3
"""Plots for kvlab results (matplotlib; scripts/setup.sh installs Debian's python3-matplotlib).

    scripts/plot.py compare DIR    # DIR/compare.csv -> DIR/compare.png

Each plot states what it shows in its title and axis labels, so it can be read without the code.
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CATEGORIES = [
    ("token_states", "token states (KV in use)", "#2e7d32"),
    ("reserved", "reserved for future tokens", "#fbc02d"),
    ("internal_fragmentation", "internal fragmentation", "#e64a19"),
    ("external_fragmentation", "external fragmentation", "#6a1b9a"),
    ("free", "free", "#cfd8dc"),
]


def read_rows(path):
    with open(path, newline="") as f:
        lines = [line for line in f if not line.startswith("#")]
    return list(csv.DictReader(lines))


def compare(directory):
    rows = read_rows(f"{directory}/compare.csv")
    names = [r["backend"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 2]})
    bottom = [0.0] * len(rows)
    for key, label, color in CATEGORIES:
        values = [100.0 * float(r[key]) for r in rows]
        ax1.bar(names, values, bottom=bottom, label=label, color=color, edgecolor="white", linewidth=0.5)
        for i, v in enumerate(values):
            if key == "token_states":
                ax1.text(i, v / 2, f"{v:.1f}%", ha="center", va="center", fontsize=8, color="white")
        bottom = [b + v for b, v in zip(bottom, values)]
    ax1.set_ylabel("share of KV capacity, time-weighted (%)")
    ax1.set_ylim(0, 100)
    ax1.set_title("Where the KV cache memory goes (vLLM Fig. 2 categories)")
    ax1.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3)
    ax1.tick_params(axis="x", rotation=30, labelsize=8)
    tps = [float(r["tokens_per_s"]) for r in rows]
    ax2.bar(names, tps, color="#1565c0")
    clock = rows[0].get("clock", "modelled") if rows else "modelled"
    ax2.set_ylabel(f"generated tokens per second ({clock} clock)")
    ax2.set_title("Throughput on the same workload")
    ax2.tick_params(axis="x", rotation=30, labelsize=8)
    for i, v in enumerate(tps):
        ax2.text(i, v, f"{v:.0f}", ha="center", va="bottom", fontsize=8)
    workload = rows[0].get("workload", "") if rows else ""
    fig.suptitle(f"kvlab compare: {workload}", fontsize=10)
    fig.tight_layout()
    fig.savefig(f"{directory}/compare.png", dpi=120)
    print(f"wrote {directory}/compare.png")


def main(argv):
    if len(argv) == 3 and argv[1] == "compare":
        compare(argv[2])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
