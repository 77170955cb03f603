#!/usr/bin/env python3
"""Plots for kvlab results (matplotlib; scripts/setup.sh installs Debian's python3-matplotlib).

    scripts/plot.py compare DIR                            # DIR/compare.csv -> DIR/compare.png
    scripts/plot.py figure NAME DIR [--format png,pdf,svg] # DIR/data.csv    -> DIR/NAME.png (and .pdf, .svg)

Each plot states what it shows in its title and axis labels, so it can be read without the code.
"""
import csv
import os
import re
import sys

import matplotlib

if __name__ == "__main__":  # a script draws files; imported (the Python package's kvlab._plot), the caller's
    matplotlib.use("Agg")   # backend stands, so a notebook shows the figure inline
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


def save(fig, path):
    """Saves `fig` as `path` (PNG, PDF or SVG by its extension) atomically: a temporary name in the same
    directory, renamed into place."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        fig.savefig(tmp, dpi=120, format=os.path.splitext(path)[1][1:])
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def without_paths(text):
    """`text` with every file path (/..., ./..., ../...) cut to its name: no machine's directories in a title."""
    return re.sub(r"""(^|[\s(])(?:\.\.?/|/)(?:[^\s,;()'"/]+/)*([^\s,;()'"/]+)""", r"\1\2", text)


def compare(directory):
    """DIR/compare.csv -> DIR/compare.png."""
    fig = compare_figure(read_rows(f"{directory}/compare.csv"))
    save(fig, f"{directory}/compare.png")
    print(f"wrote {directory}/compare.png")


def compare_figure(rows):
    """The compare chart of compare.csv's rows (dicts of strings): memory breakdown, throughput, latency."""
    names = [r["backend"] for r in rows]
    latency = bool(rows) and "ttft_mean_ms" in rows[0]
    fig, axes = plt.subplots(1, 3 if latency else 2, figsize=(18 if latency else 13, 5),
                             gridspec_kw={"width_ratios": [3, 2, 2] if latency else [3, 2]})
    ax1, ax2 = axes[0], axes[1]
    bottom = [0.0] * len(rows)
    for key, label, color in CATEGORIES:
        values = [100.0 * float(r[f"{key}_frac"]) for r in rows]
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
    tps = [float(r["throughput_tokens_per_s"]) for r in rows]
    ax2.bar(names, tps, color="#1565c0")
    clock = rows[0].get("clock", "modelled") if rows else "modelled"
    ax2.set_ylabel(f"generated tokens per second ({clock} clock)")
    ax2.set_title("Throughput on the same workload")
    ax2.tick_params(axis="x", rotation=30, labelsize=8)
    for i, v in enumerate(tps):
        ax2.text(i, v, f"{v:.0f}", ha="center", va="bottom", fontsize=8)
    if latency:  # vLLM bench serve's latencies, mean and p99, on a log scale (they differ by orders)
        ax3 = axes[2]
        x = range(len(rows))
        for k, (col, label, color) in enumerate((("ttft", "TTFT", "#6a1b9a"), ("tpot", "TPOT", "#2e7d32"))):
            means = [max(float(r[f"{col}_mean_ms"]), 1e-3) for r in rows]
            ax3.bar([i + (k - 0.5) * 0.38 for i in x], means, 0.38, color=color, label=f"{label} mean")
            # the highest percentile the run reported (--percentiles; p99 by default)
            tails = [c for c in rows[0] if re.fullmatch(rf"{col}_p[0-9_]+_ms", c)]
            if tails:
                tail = tails[-1]
                values = [max(float(r[tail]), 1e-3) for r in rows]
                ax3.scatter([i + (k - 0.5) * 0.38 for i in x], values, color=color, marker="_", s=200,
                            label=f"{label} {tail[len(col) + 1:-3].replace('_', '.')}")
        ax3.set_xticks(list(x), names, rotation=30, fontsize=8)
        ax3.set_yscale("log")
        ax3.set_ylabel(f"latency (ms, {clock} clock)")
        ax3.set_title("Time to first token and per output token")
        ax3.legend(fontsize=7)
    workload = without_paths(rows[0].get("workload", "")) if rows else ""
    fig.suptitle(f"kvlab compare: {workload}", fontsize=10)
    fig.tight_layout()
    return fig


def fig_memory_breakdown(d, rows):
    names = [r["system"].replace("vLLM (paged, block 16)", "vLLM paged-16")
             + ("\n" + r["workload"].replace("ShareGPT ", "") if "workload" in r else "") for r in rows]
    fig, ax = plt.subplots(figsize=(max(11, 1.5 * len(rows)), 5.5))
    bottom = [0.0] * len(rows)
    keys = [("token_states_pct", CATEGORIES[0]), ("reserved_pct", CATEGORIES[1]),
            ("internal_fragmentation_pct", CATEGORIES[2]), ("external_fragmentation_pct", CATEGORIES[3]), ("free_pct", CATEGORIES[4])]
    for key, (_, label, color) in keys:
        values = [float(r[key]) for r in rows]
        ax.bar(names, values, bottom=bottom, label=label, color=color, edgecolor="white", linewidth=0.5)
        bottom = [b + v for b, v in zip(bottom, values)]
    paper = [float(r["paper_token_states_of_used_pct"]) * (100 - float(r["free_pct"])) / 100 for r in rows]
    ax.tick_params(axis="x", labelsize=7)
    ax.scatter(names, paper, marker="_", s=900, color="black", zorder=3,
               label="paper's token-state share of used memory, scaled to ours")
    for i, r in enumerate(rows):
        ax.text(i, float(r["token_states_pct"]) / 2, f"{float(r['token_states_pct']):.1f}%", ha="center",
                color="white", fontsize=9)
    ax.set_ylabel("share of KV capacity (%)")
    ax.set_ylim(0, 100)
    ax.set_title("OPT-13B, 12 GB KV, ShareGPT: where the KV cache memory goes\n(bars: kvlab, modelled clock; "
                 "black ticks: vLLM paper Fig. 2)", fontsize=10)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig


def fig_batch_size(d, rows):
    workloads = list(dict.fromkeys(r.get("workload", "ShareGPT @ 2 req/s") for r in rows))
    fig, axes = plt.subplots(1, len(workloads), figsize=(6 * len(workloads), 4.8), squeeze=False)
    for ax, wl in zip(axes[0], workloads):
        sub = [r for r in rows if r.get("workload", "ShareGPT @ 2 req/s") == wl]
        x = range(len(sub))
        ours = [float(r["mean_batch"]) for r in sub]
        paper = [float(r["paper_mean_batch"]) for r in sub]
        ax.bar([i - 0.2 for i in x], ours, 0.4, label="kvlab (modelled)", color="#1565c0")
        ax.bar([i + 0.2 for i in x], paper, 0.4, label=f"vLLM paper Fig. 13 ({sub[0].get('paper_panel', wl)})",
               color="#90a4ae")
        for i, r in enumerate(sub):
            if "relative_error_pct" in r:
                ax.text(i - 0.2, ours[i], f"{r['relative_error_pct']}%", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(list(x), [r["system"].replace(" (paged, block 16)", "") for r in sub], fontsize=8)
        ax.set_ylabel("average batched requests")
        ax.set_title(f"OPT-13B, {wl}", fontsize=10)
        ax.legend(fontsize=8)
    fig.suptitle("How many requests run together (labels: our error relative to the paper)", fontsize=10)
    return fig


def fig_request_rate(d, rows):
    # One panel per setting (model on its GPUs), workload and scheduler; older files have no setting
    # or scheduler column.
    def key(r):
        return (r.get("setting", "OPT-13B on 1x A100-40GB"), r["workload"], r.get("scheduler", "separate"))

    panels = list(dict.fromkeys(key(r) for r in rows))
    cols = min(3, len(panels))
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(5.5 * cols, 4.6 * nrows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (setting, wl, sched) in zip(axes.flat, panels):
        sub = [r for r in rows if key(r) == (setting, wl, sched)]
        if sched == "mixed":
            wl += ",\nprompts in the decode step (the paper's own code)"
        threshold = float(sub[0]["threshold_normalized_latency_s"])
        for system in dict.fromkeys(r["system"] for r in sub):
            pts = [r for r in sub if r["system"] == system]
            ax.plot([float(r["request_rate_per_s"]) for r in pts], [float(r["mean_normalized_latency_s"]) for r in pts],
                    marker="o", markersize=3, label=f"{system}: sustains {pts[0]['sustained_rate_per_s']}")
        ax.axhline(threshold, color="black", linestyle=":", linewidth=1)
        ax.set_xscale("log")
        ax.set_ylim(0, threshold * 6)
        ax.set_xlabel("request rate (req/s, Poisson)")
        ax.set_ylabel("normalized latency (s/token, modelled)")
        ax.set_title(f"{setting}: {wl}\n(dotted: the latency a sustained rate is read at)", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle("vLLM Fig. 12: latency against load, Orca reservations vs paging", fontsize=10)
    return fig


PAPER_BEST_BLOCKS = {"ShareGPT": (16, 128), "Alpaca": (16, 32)}  # vLLM Fig. 18b text


def fig_block_size(d, rows):
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.8))
    for wl in dict.fromkeys(r["workload"] for r in rows):
        sub = [r for r in rows if r["workload"] == wl]
        bs = [int(r["block_size"]) for r in sub]
        # Relative to the workload's lowest, so both workloads' trade-offs share one scale.
        relative = "latency_vs_best_ratio" in sub[0]
        lat = [float(r["latency_vs_best_ratio"]) if relative else 1e3 * float(r["mean_normalized_latency_s"])
               for r in sub]
        line = a1.plot(bs, lat, marker="o", label=wl)[0]
        best = min(range(len(lat)), key=lambda i: lat[i])
        a1.scatter([bs[best]], [lat[best]], marker="*", s=200, color=line.get_color(), zorder=3)
        for key, (lo, hi) in PAPER_BEST_BLOCKS.items():
            if wl.startswith(key):
                a1.axvspan(lo, hi, color=line.get_color(), alpha=0.12, label=f"paper's best for {key}: {lo}-{hi}")
        a2.plot(bs, [float(r["internal_fragmentation_pct"]) + float(r["reserved_pct"]) for r in sub], marker="o", label=wl)
    for a in (a1, a2):
        a.set_xscale("log", base=2)
        a.set_xlabel("block size (tokens)")
        a.legend(fontsize=8)
    a1.set_ylabel("mean normalized latency / the workload's lowest (modelled)" if rows and "latency_vs_best_ratio" in rows[0]
                  else "mean normalized latency (ms / output token, modelled)")
    a1.set_title("Latency vs block size (vLLM Fig. 18b); star: our lowest", fontsize=10)
    a2.set_ylabel("unused slots in held blocks (% of capacity)")
    a2.set_title("Block-tail waste (internal fragmentation + reserved)", fontsize=10)
    return fig


def fig_recompute_vs_swap(d, rows):
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.8))
    micro = [r for r in rows if r["part"] == "microbenchmark"]
    styles = {"recompute": ("#e64a19", "-"), "swap in": ("#90caf9", ":"), "swap out": ("#42a5f5", "--"),
              "swap in+out": ("#1565c0", "-")}
    for method, (color, style) in styles.items():
        sub = [r for r in micro if r["method"] == method]
        a1.plot([int(r["block_size"]) for r in sub], [float(r["time_ms"]) for r in sub], marker="o", color=color,
                linestyle=style, label=method)
    a1.set_ylabel("time to bring the KV back (ms, modelled)")
    a1.set_title("(a) Microbenchmark: recompute vs swap (vLLM Fig. 19a)", fontsize=10)
    e2e = [r for r in rows if r["part"] == "end-to-end"]
    for method in ("recompute", "swap"):
        sub = [r for r in e2e if r["method"] == method]
        a2.plot([int(r["block_size"]) for r in sub], [float(r["mean_normalized_latency_s"]) for r in sub],
                marker="o", color=styles[method if method == "recompute" else "swap in+out"][0], label=method)
    a2.set_ylabel("mean normalized latency (s / output token, modelled)")
    a2.set_title("(b) End to end, ShareGPT at 2 req/s (vLLM Fig. 19b)", fontsize=10)
    for a in (a1, a2):
        a.set_xscale("log", base=2)
        a.set_xlabel("block size (tokens)")
        a.legend(fontsize=8)
    return fig


def fig_kernel_overhead(d, rows):
    # One panel per (kernels run, phase); data from before the kernels column are kvlab's.
    for r in rows:
        r.setdefault("kernels", "kvlab")
    panels = list(dict.fromkeys((r["kernels"], r["phase"]) for r in rows))
    cols = min(len(panels), 2)
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(6 * cols, 4.5 * nrows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (kernel, phase) in zip(axes.flat, panels):
        sub = [r for r in rows if r["phase"] == phase and r["kernels"] == kernel]
        contexts = list(dict.fromkeys(r["context_tokens"] for r in sub))
        backends = list(dict.fromkeys(r["backend"] for r in sub))
        width = 0.8 / len(backends)
        for j, b in enumerate(backends):
            cells = [next(r for r in sub if r["backend"] == b and r["context_tokens"] == c) for c in contexts]
            vals = [float(r["latency_vs_contiguous_ratio"]) for r in cells]
            # Error bars: the backend's interquartile range over its runs, relative to the contiguous
            # median of the same context (older data without quartiles: no bars).
            yerr = None
            if all("q1_ms" in r for r in cells):
                base = [float(r["latency_ms"]) / float(r["latency_vs_contiguous_ratio"]) for r in cells]
                # (clamped at 0: the ratio is printed to 3 decimals, so a quartile equal to the median
                # can come out a hair on the wrong side of it)
                yerr = [[max(0.0, v - float(r["q1_ms"]) / m) for v, r, m in zip(vals, cells, base)],
                        [max(0.0, float(r["q3_ms"]) / m - v) for v, r, m in zip(vals, cells, base)]]
            ax.bar([i + j * width for i in range(len(contexts))], vals, width, label=b, yerr=yerr, capsize=2)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(contexts))], [f"context {c}" for c in contexts])
        ax.set_ylabel("attention latency / contiguous (median, bars: IQR)")
        ax.set_title(f"{kernel} kernels, {phase}: cost of the KV view", fontsize=10)
        ax.legend(fontsize=8)
    return fig


def fig_sharing(d, rows):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for dec, color in (("parallel sampling", "#1565c0"), ("beam search", "#e64a19")):
        sub = [r for r in rows if r["decoding"] == dec]
        n = [int(r["outputs"]) for r in sub]
        ax.plot(n, [float(r["memory_saving_pct"]) for r in sub], marker="o", color=color, label=f"{dec} (kvlab)")
        ax.plot(n, [float(r["paper_memory_saving_pct"]) for r in sub], marker="x", linestyle="--", color=color,
                label=f"{dec} (vLLM paper Fig. 15)")
    ax.set_xlabel("outputs per request (n / beam width)")
    ax.set_ylabel("memory saved by sharing blocks (%)")
    ax.set_title("OPT-13B, Alpaca-like lengths: memory saved by sharing", fontsize=10)
    ax.legend(fontsize=8)
    return fig


def fig_prefix_cache(d, rows):
    lpm = [r for r in rows if r["schedule"] == "lpm"]
    rows = [r for r in rows if r["schedule"] == "fcfs"]
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(16, 7))
    home = max(int(r["capacity_gib"]) for r in rows if r["backend"] == "paged-16-radix" and
               sum(1 for x in rows if x["trace"] == r["trace"] and x["backend"] == r["backend"] and
                   x["capacity_gib"] == r["capacity_gib"]) > 1)
    top = max(int(r["max_batch"]) for r in rows)
    for trace in dict.fromkeys(r["trace"] for r in rows):
        sub = [r for r in rows if r["trace"] == trace and r["backend"] == "paged-16-radix" and
               int(r["capacity_gib"]) == home]
        mb = [int(r["max_batch"]) for r in sub]
        line = a1.plot(mb, [float(r["hit_rate_of_prompt_tokens_pct"]) for r in sub], marker="o", label=trace)[0]
        a1.plot(mb, [float(r["hit_rate_of_looked_up_tokens_pct"]) for r in sub], marker=".", linestyle="--",
                color=line.get_color())
        a1.axhline(float(sub[0]["anchor_pct"]), color=line.get_color(), linestyle=":", linewidth=1)
        for backend, style in (("paged-16-radix", "-"), ("paged-16-hash", "--"), ("paged-16-hash-host512", (0, (1, 1))),
                               ("paged-16", ":")):
            cap = sorted((r for r in rows if r["trace"] == trace and r["backend"] == backend and
                          int(r["max_batch"]) == top), key=lambda r: int(r["capacity_gib"]))
            gib = [int(r["capacity_gib"]) for r in cap]
            if backend != "paged-16":
                a2.plot(gib, [float(r["hit_rate_of_prompt_tokens_pct"]) for r in cap], marker="o", linestyle=style,
                        color=line.get_color(), label=f"{trace}, {backend[len('paged-16-'):]}")
            a3.plot(gib, [float(r["throughput_tokens_per_s"]) for r in cap], marker="o", linestyle=style,
                    color=line.get_color(), label=f"{trace}, {backend}")
        cap = sorted((r for r in lpm if r["trace"] == trace), key=lambda r: int(r["capacity_gib"]))
        if cap:
            a2.plot([int(r["capacity_gib"]) for r in cap], [float(r["hit_rate_of_prompt_tokens_pct"]) for r in cap], marker="x",
                    linestyle="-.", color=line.get_color(), label=f"{trace}, radix + lpm")
    a1.set_xscale("log", base=2)
    a1.set_xlabel(f"max batch size (sequences), radix, {home} GiB")
    a1.set_ylabel("prefix-cache hit rate (% of prompt tokens)")
    a1.set_title("Hits / prompt tokens (dashed: hits / looked-up tokens;\ndotted: trace owners' numbers)",
                 fontsize=9)
    for a in (a2, a3):
        a.set_xscale("log", base=2)
        a.set_xlabel(f"KV capacity (GiB), max batch {top}")
    a2.set_ylabel("prefix-cache hits (% of prompt tokens)")
    a2.set_title("Capacity and policy (solid: radix, dashed: hash, dense dots: hash + 512 GiB host tier,\n"
                 "dash-dot: radix + LPM scheduling)", fontsize=9)
    a3.set_yscale("log")
    a3.set_ylabel("generated tokens / s (modelled)")
    a3.set_title("Throughput (solid: radix, dashed: hash, dotted: no prefix cache)", fontsize=9)
    for a in (a1, a2, a3):
        a.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    fig.tight_layout()
    return fig


def fig_page_size(d, rows):
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
    per = [r for r in rows if r["layout"] == "per-layer"]
    pages = [r["page"] for r in per]
    if all(r["map_touch_per_page_us"] != "n/a" for r in per):  # n/a on a GPU: the CPU cannot write there
        a1.plot(pages, [float(r["map_touch_per_page_us"]) for r in per], marker="o", label="map + first write")
    a1.plot(pages, [float(r["map_per_page_us"]) for r in per], marker="o", label="map only")
    a1.plot(pages, [float(r["unmap_per_page_us"]) for r in per], marker="o", label="unmap")
    a1.set_yscale("log")
    on_host = pages and pages[0] == "4k"
    a1.set_ylabel("microseconds per page (measured)")
    a1.set_xlabel("page size")
    a1.set_title("Mapping cost per page (%s)" % ("POSIX VM driver" if on_host else "CUDA VMM driver"), fontsize=10)
    a1.legend(fontsize=8)
    x = range(len(pages))
    for j, (layout, color) in enumerate((("per-layer", "#e64a19"), ("megacache", "#2e7d32"))):
        sub = [r for r in rows if r["layout"] == layout]
        a2.bar([i + 0.4 * j - 0.2 for i in x], [float(r["internal_fragmentation_pct"]) + float(r["reserved_pct"]) for r in sub],
               0.4, label=f"{layout} tensors", color=color)
    a2.set_xticks(list(x), pages)
    a2.set_xlabel("page size")
    a2.set_ylabel("mapped but unused (% of capacity, modelled)")
    a2.set_title("Page-tail waste: per-layer tensors vs megacache", fontsize=10)
    a2.legend(fontsize=8)
    return fig


def fig_overlap(d, rows):
    steps = read_rows(f"{d}/steps.csv")
    panels = list(dict.fromkeys((r.get("clock", "measured (host)"), r["page"]) for r in steps))
    cols = 2
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(6 * cols, 4.2 * nrows), squeeze=False)
    for ax, (clock, page) in zip(axes.flat, panels):
        for mode, color in (("synchronous", "#e64a19"), ("background", "#1565c0")):
            sub = [r for r in steps
                   if r.get("clock", "measured (host)") == clock and r["page"] == page and r["mapping"] == mode]
            ax.plot(range(len(sub)), [float(r["step_ms"]) for r in sub], color=color, linewidth=1,
                    label=f"{mode} mapping")
        ax.set_xlabel("decode step")
        ax.set_ylabel(f"step latency (ms, {clock})")
        ax.set_title(f"{page} pages, {clock}: decode step latency", fontsize=10)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle("vAttention Fig. 11: synchronous vs background mapping", fontsize=11)
    return fig


def fig_multi_tenant(d, rows):
    tenants = list(dict.fromkeys(r["tenant"] for r in rows))
    colors = dict(zip(tenants, ("#1565c0", "#e64a19", "#2e7d32", "#6a1b9a")))
    bursts = [r for r in rows if r["part"] == "bursts"]
    gaps = sorted({float(r["gap_s"]) for r in bursts})
    headline = max(g for g in gaps if g <= 30)
    fig, (a1, a2, a3, a4) = plt.subplots(1, 4, figsize=(22, 5.2))
    # 1. p99 TTFT per tenant at the headline gap, static against the pools (fair-share in newer files).
    policies = [p for p in ("static", "elastic", "fair-share") if any(r["policy"] == p for r in bursts)]
    names = {"static": "static split (a third each)", "elastic": "elastic pool (first come)",
             "fair-share": "elastic pool (fair share)"}
    shades = {"static": "#90a4ae", "elastic": "#1565c0", "fair-share": "#6a1b9a"}
    width = 0.8 / len(policies)
    for k, policy in enumerate(policies):
        vals = [next(float(r["ttft_p99_ms"]) for r in bursts if float(r["gap_s"]) == headline and
                     r["policy"] == policy and r["tenant"] == t) / 1e3 for t in tenants]
        a1.bar([i + (k - (len(policies) - 1) / 2) * width for i in range(len(tenants))], vals, width,
               label=names[policy], color=shades[policy])
    a1.set_xticks(range(len(tenants)), tenants)
    a1.set_ylabel("p99 time to first token (s)")
    a1.set_title(f"bursts {headline:g} s apart: p99 TTFT per tenant", fontsize=10)
    a1.legend(fontsize=8)
    # 2. Memory held over time at the headline gap (memory.csv).
    mem = read_rows(f"{d}/memory.csv") if os.path.exists(f"{d}/memory.csv") else []
    for t in tenants:
        sub = [r for r in mem if r["policy"] == "elastic" and r["tenant"] == t]
        a2.plot([float(r["time_s"]) for r in sub], [float(r["held_gib"]) for r in sub], color=colors[t],
                label=f"{t}: held (elastic)")
        a2.plot([float(r["time_s"]) for r in sub], [float(r["floor_gib"]) for r in sub], color=colors[t],
                linestyle=":", linewidth=1, label=f"{t}: packed floor")
    static = [r for r in mem if r["policy"] == "static"]
    if static:
        a2.axhline(float(static[0]["held_gib"]), color="#90a4ae", linestyle="--", label="static share (each)")
    a2.set_xlabel("time since the first arrival (s)")
    a2.set_ylabel("KV memory (GiB)")
    a2.set_title("elastic pool: memory each tenant holds", fontsize=10)
    a2.legend(fontsize=7)
    # 3. Where the pool stops helping: static / pool p99 TTFT against the gap (fair share dashed).
    def p99(g, policy, t):
        return next(float(r["ttft_p99_ms"]) for r in bursts if float(r["gap_s"]) == g and r["policy"] == policy
                    and r["tenant"] == t)
    for t in tenants:
        for policy, style in (("elastic", "-"), ("fair-share", "--")):
            if policy not in policies:
                continue
            ratio = [p99(g, "static", t) / p99(g, policy, t) if p99(g, policy, t) > 0 else float("nan") for g in gaps]
            a3.plot(gaps, ratio, marker="o" if style == "-" else "x", linestyle=style, color=colors[t],
                    label=t if policy == "elastic" else f"{t} (fair share)")
    a3.axhline(1, color="black", linewidth=0.8)
    a3.set_ylim(bottom=0)
    a3.set_xlabel("gap between the tenants' bursts (s)")
    a3.set_ylabel("p99 TTFT static / pool (>1: the pool helps)")
    a3.set_title("where the pool stops helping", fontsize=10)
    a3.legend(fontsize=8)
    # 4. Idle memory: held / packed floor per allocation and eviction policy, the mean over the idle
    # tenants of every workload (seed) with their range; files before the seeds have one workload.
    idle = [r for r in rows if r["part"] == "idle" and r["idle_held_over_floor_ratio"] not in ("n/a", "") and
            float(r["idle_s"]) >= 10]  # the tenants idle for a while (as the README counts them)

    def kind(backend):
        for k in ("firstfree", "compact", "spread", "local"):
            if f"-{k}" in backend:
                return {"firstfree": "page-blind"}.get(k, k)
        return "page-aware"
    kinds = [k for k in ("page-blind", "page-aware", "local", "spread", "compact")
             if any(kind(r["backend"]) == k for r in idle)]
    loads = [ld for ld in ("light", "bursts") if any(r["load"] == ld for r in idle)]
    width = 0.8 / max(len(loads), 1)
    for j, ld in enumerate(loads):
        means, lo, hi = [], [], []
        for k in kinds:
            v = [float(r["idle_held_over_floor_ratio"]) for r in idle if r["load"] == ld and kind(r["backend"]) == k]
            m = sum(v) / len(v) if v else float("nan")
            means.append(m)
            lo.append(m - min(v) if v else 0)
            hi.append(max(v) - m if v else 0)
        a4.bar([i + (j - (len(loads) - 1) / 2) * width for i in range(len(kinds))], means, width, yerr=[lo, hi],
               capsize=3, label=f"{ld} load", color=("#90caf9", "#1565c0")[j % 2])
    a4.axhline(1.4, color="#e64a19", linestyle="--", linewidth=1, label="issue 32's goal (1.4x)")
    a4.axhline(1.0, color="black", linewidth=0.8)
    a4.set_xticks(range(len(kinds)), kinds, fontsize=8)
    a4.set_ylabel("idle memory held / packed floor (the cache)")
    a4.set_title("idle memory (tenants idle 10 s or more): mean, range over workloads", fontsize=10)
    a4.legend(fontsize=8, loc="upper right")
    a4.text(0.30, 0.80, "kvcached, idle Qwen3-4B (its PR #390):\n10.3 GB against a 2.25 GB floor (4.6x);\n5.2 GB "
            "with page-ordered eviction (2.3x)", transform=a4.transAxes, va="top", fontsize=7)
    fig.suptitle("Three Llama-3-8B tenants on one modelled A100-80GB: static split vs elastic pool (kvcached)",
                 fontsize=11)
    return fig


FIGURES = {
    "multi-tenant": fig_multi_tenant,
    "page-size": fig_page_size,
    "overlap": fig_overlap,
    "prefix-cache": fig_prefix_cache,
    "request-rate": fig_request_rate,
    "memory-breakdown": fig_memory_breakdown,
    "batch-size": fig_batch_size,
    "block-size": fig_block_size,
    "recompute-vs-swap": fig_recompute_vs_swap,
    "kernel-overhead": fig_kernel_overhead,
    "sharing": fig_sharing,
}


FORMATS = ("png", "pdf", "svg")


def smoke_scale(directory):
    """Whether the figure's README says it ran at smoke scale (kvlab figure without --full)."""
    try:
        with open(f"{directory}/README.md") as f:
            return any(line.startswith("- scale: smoke") for line in f)
    except OSError:
        return False


def figure(name, directory, formats=("png",)):
    rows = read_rows(f"{directory}/data.csv")
    fig = FIGURES[name](directory, rows)
    # tight_layout leaves no room for a suptitle: keep about a third of an inch above the panels.
    top = 1 - 0.35 / fig.get_figheight() if getattr(fig, "_suptitle", None) is not None else 1
    fig.tight_layout(rect=(0, 0, 1, top))
    if smoke_scale(directory):  # visible on the plot itself, not only in its README
        fig.text(0.995, 0.005, "SMOKE SCALE (kvlab figure --full for paper scale)", ha="right", va="bottom",
                 fontsize=9, color="#b71c1c", alpha=0.8)
    for fmt in formats:
        save(fig, f"{directory}/{name}.{fmt}")
        print(f"wrote {directory}/{name}.{fmt}")


def main(argv):
    if len(argv) == 3 and argv[1] == "compare":
        compare(argv[2])
        return 0
    formats = ("png",)
    if len(argv) == 6 and argv[4] == "--format":
        formats = tuple(dict.fromkeys(argv[5].split(",")))
        if not formats or any(f not in FORMATS for f in formats):
            print(f"plot.py: --format must list png, pdf or svg (got '{argv[5]}')", file=sys.stderr)
            return 2
        argv = argv[:4]
    if len(argv) == 4 and argv[1] == "figure" and argv[2] in FIGURES:
        figure(argv[2], argv[3], formats)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
