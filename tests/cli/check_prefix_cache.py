#!/usr/bin/env python3
"""figures.prefix-cache: `kvlab figure prefix-cache` at smoke scale, then checks that every hit
rate is its named hits over its named total (hit_rate_of_prompt_tokens_pct = prefix_hit_tokens /
prompt_tokens; hit_rate_of_looked_up_tokens_pct = prefix_hit_tokens / looked_up_tokens), and that
every percentage the README states is one of the data's (issue 28: no number a figure's README
quotes that its data do not hold).

usage: check_prefix_cache.py KVLAB OUT_DIR
"""
import csv
import re
import subprocess
import sys


def fail(msg):
    print(f"check_prefix_cache: {msg}", file=sys.stderr)
    sys.exit(1)


def main(kvlab, out):
    run = subprocess.run([kvlab, "figure", "prefix-cache", "--no-progress", "--out", out],
                         capture_output=True, text=True)
    if run.returncode != 0:
        fail(f"kvlab figure prefix-cache exited {run.returncode}: {run.stderr.strip()}")
    d = f"{out}/prefix-cache"
    with open(f"{d}/data.csv") as f:
        lines = [l for l in f if not l.startswith("#")]
    rows = list(csv.DictReader(lines))
    if not rows:
        fail("data.csv has no rows")
    quoted = set()
    for i, r in enumerate(rows, 2):
        prompt, hits, looked = int(r["prompt_tokens"]), int(r["prefix_hit_tokens"]), int(r["looked_up_tokens"])
        if not 0 <= hits <= looked <= prompt:
            fail(f"data.csv row {i}: hits {hits}, looked up {looked}, prompt tokens {prompt} out of order")
        for col, total in (("hit_rate_of_prompt_tokens_pct", prompt), ("hit_rate_of_looked_up_tokens_pct", looked)):
            want = 100.0 * hits / total if total else 0.0
            if abs(float(r[col]) - want) > 0.051:
                fail(f"data.csv row {i}: {col} = {r[col]}, but hits / total = {want:.3f} %")
            quoted.add(float(r[col]))
        quoted.add(float(r["anchor_pct"]))
    readme = open(f"{d}/README.md").read()
    stated = [float(x) for x in re.findall(r"(\d+(?:\.\d+)?) %", readme)]
    if not stated:
        fail("the README states no percentage")
    missing = sorted({x for x in stated if all(abs(x - q) > 1e-9 for q in quoted)})
    if missing:
        fail(f"the README states {missing} %, which no hit-rate or anchor column of data.csv holds")
    for r in rows:  # the README's token counts come from the data too
        if f"of the {r['prompt_tokens']} prompt tokens" in readme:
            break
    else:
        fail("the README quotes no prompt-token total of the data")
    print(f"check_prefix_cache: {len(rows)} rows, {len(stated)} percentages in the README, all from data.csv")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        fail("usage: check_prefix_cache.py KVLAB OUT_DIR")
    main(sys.argv[1], sys.argv[2])
