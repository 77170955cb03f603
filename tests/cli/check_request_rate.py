#!/usr/bin/env python3
"""figures.request-rate: `kvlab figure request-rate` at smoke scale, then recomputes each system's
sustained rate from its own rows (where its normalized latency first passes threshold_s_per_token,
interpolated linearly) and checks that every sustained rate and ratio the README states is the
data's (issue 28).

usage: check_request_rate.py KVLAB OUT_DIR
"""
import csv
import math
import re
import subprocess
import sys


def fail(msg):
    print(f"check_request_rate: {msg}", file=sys.stderr)
    sys.exit(1)


def sustained(rows, factor=1.0):
    """Where the latency first passes the threshold times `factor` (the README's later readings)."""
    rates = [float(r["request_rate_per_s"]) for r in rows]
    lat = [float(r["mean_normalized_latency_s"]) for r in rows]
    thr = float(rows[0]["threshold_normalized_latency_s"]) * factor
    if lat[0] > thr:
        return math.nan
    for i in range(1, len(rates)):
        if lat[i] > thr:
            return rates[i - 1] + (thr - lat[i - 1]) / (lat[i] - lat[i - 1]) * (rates[i] - rates[i - 1])
    return math.inf


def bracket(rows):
    """The two rates around the first crossing of the threshold, or None."""
    thr = float(rows[0]["threshold_normalized_latency_s"])
    for i in range(1, len(rows)):
        if float(rows[i]["mean_normalized_latency_s"]) > thr:
            return float(rows[i - 1]["request_rate_per_s"]), float(rows[i]["request_rate_per_s"])
    return None


def main(kvlab, out):
    run = subprocess.run([kvlab, "figure", "request-rate", "--no-progress", "--out", out], capture_output=True, text=True)
    if run.returncode != 0:
        fail(f"kvlab figure request-rate exited {run.returncode}: {run.stderr.strip()}")
    d = f"{out}/request-rate"
    rows = list(csv.DictReader(l for l in open(f"{d}/data.csv") if not l.startswith("#")))
    readme = open(f"{d}/README.md").read()
    systems = list(dict.fromkeys(r["system"] for r in rows))
    if systems != ["Orca (Max)", "Orca (Pow2)", "Orca (Oracle)", "vLLM (paged, block 16)"]:
        fail(f"systems {systems}")
    settings = list(dict.fromkeys(r["setting"] for r in rows))
    if settings != ["OPT-13B on 1x A100-40GB", "OPT-66B on 4x A100-40GB", "OPT-175B on 8x A100-80GB"]:
        fail(f"settings {settings}")
    # vLLM's ratios over the settings with the paper's lengths, per scheduler
    span = {sched: {"Oracle": [], "Max": []} for sched in ("separate", "mixed")}
    if {r["scheduler"] for r in rows} != {"separate", "mixed"}:
        fail(f"schedulers {sorted({r['scheduler'] for r in rows})}: want separate and the paper code's mixed")
    for setting, wl, sched in dict.fromkeys((r["setting"], r["workload"], r["scheduler"]) for r in rows):
        rates = {}
        label = f"{setting}, {wl}" + (", prompts in the decode step" if sched == "mixed" else "")
        for s in systems:
            sub = [r for r in rows if (r["setting"], r["workload"], r["scheduler"], r["system"]) == (setting, wl, sched, s)]
            if len(sub) < 5 or len({r["sustained_rate_per_s"] for r in sub}) != 1:
                fail(f"{label} / {s}: {len(sub)} rows or differing sustained_rate")
            rates_in_order = [float(r["request_rate_per_s"]) for r in sub]
            if rates_in_order != sorted(rates_in_order):
                fail(f"{label} / {s}: rows not in rate order")
            want = sustained(sub)
            pair = bracket(sub)
            if pair and float(sub[0]["mean_normalized_latency_s"]) <= float(sub[0]["threshold_normalized_latency_s"]):
                # Three bisection steps (smoke scale) narrow the sweep's bracket (its rates g apart) to g^(1/8).
                swept = [float(r["request_rate_per_s"]) for r in sub if r["point"] == "sweep"]
                narrowed = (swept[1] / swept[0]) ** (1 / 8) * 1.005  # rates are printed to 3 decimals
                if pair[1] / pair[0] > narrowed or not any(r["point"] == "bisection" for r in sub):
                    fail(f"{label} / {s}: the crossing lies between {pair[0]} and {pair[1]} req/s: not bisected")
            got = sub[0]["sustained_rate_per_s"]
            if math.isfinite(want):
                if abs(float(got) - want) > max(0.002, 0.005 * want):  # from latencies rounded to 4 digits
                    fail(f"{label} / {s}: sustained_rate {got}, recomputed {want:.4f}")
                if not re.search(re.escape(label) + r" \(mean prompt [^\n]*" + re.escape(f"{s} {got}"), readme):
                    fail(f"the README does not state {s}'s sustained rate {got} on {label}")
                rates[s] = float(got)
        # The later readings (8x and 16x the unloaded latency, the threshold being 4x): each ratio the
        # README states is the data's; a reading some system's points do not reach is left out.
        later = re.search(re.escape(label) + r" \(mean prompt [^\n]*?Read where the latency is a larger multiple[^\n]*?"
                          r"sustains ([^\n]*?): the ratios depend", readme)
        for k in (8, 16):
            at = {s: sustained([r for r in rows if (r["setting"], r["workload"], r["scheduler"], r["system"]) ==
                                (setting, wl, sched, s)], k / 4) for s in systems}
            if not all(math.isfinite(x) for x in at.values()):
                if later and f"at {k}x," in later.group(1):
                    fail(f"{label}: the README reads at {k}x where the data's points do not reach it")
                continue
            o, m = at[systems[-1]] / at[systems[2]], at[systems[-1]] / at[systems[0]]
            stated = re.search(rf"at {k}x, ([0-9.]+)x Orca \(Oracle\)'s rate and ([0-9.]+)x Orca \(Max\)'s",
                               later.group(1) if later else "")
            # from latencies rounded to 4 digits: the last digit may differ
            if not stated or abs(float(stated.group(1)) - o) > 0.011 or abs(float(stated.group(2)) - m) > 0.011:
                fail(f"{label}: at {k}x the data give vLLM / Orca (Oracle) {o:.2f}x and / Orca (Max) {m:.2f}x; "
                     f"the README: {stated.group(0) if stated else 'nothing'}")
        v = rates.get(systems[-1])
        for s, word in ((systems[2], "Orca (Oracle)'s rate"), (systems[0], "Orca (Max)'s")):
            if v and s in rates:
                ratio = f"{v / rates[s]:.2f}x"
                if not re.search(re.escape(label) + r" \(mean prompt [^\n]*" + re.escape(ratio) + " " + re.escape(word), readme):
                    fail(f"the README does not state vLLM / {s} = {ratio} on {label}")
                if wl == "ShareGPT (vLLM's lengths)":
                    span[sched]["Oracle" if "Oracle" in s else "Max"].append(v / rates[s])
    for sched, suffix in (("separate", ""), ("mixed", ", prompts in the decode step")):
        o, m = span[sched]["Oracle"], span[sched]["Max"]
        if len(o) != 3:
            continue  # a setting's crossing outside its sweep (the README says so on its line)
        want = (f"settings with the paper's lengths{suffix} (", f"vLLM sustains {min(o):.2f}x-{max(o):.2f}x Orca "
                f"(Oracle)'s rate (paper 1.7x-2.7x) and {min(m):.2f}x-{max(m):.2f}x Orca (Max)'s")
        if not re.search(re.escape(want[0]) + r"[^\n]*" + re.escape(want[1]), readme):
            fail(f"the README does not state the span over the settings ({sched}): {want[1]}")
    print(f"check_request_rate: {len(rows)} rows; sustained rates and ratios in the README are the data's")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        fail("usage: check_request_rate.py KVLAB OUT_DIR")
    main(sys.argv[1], sys.argv[2])
