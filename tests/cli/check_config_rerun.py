#!/usr/bin/env python3
"""`kvlab replay|compare --config DIR/run.json` reruns a recorded run (issue 30).

    check_config_rerun.py KVLAB OUT

A compare with options set away from their defaults, rerun from its run.json into another folder:
the same resolved options (but --config and --out), the same compare.csv (but the wall-clock
columns), and an option given beside --config wins over the recorded one.
"""
import csv
import json
import shutil
import subprocess
import sys

WALL = {"replay_wall_s", "replay_tokens_per_s"}


def fail(msg):
    print(f"check_config_rerun: {msg}")
    sys.exit(1)


def kvlab(*args):
    r = subprocess.run(list(args), capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")


def rows(d):
    with open(f"{d}/compare.csv", newline="") as f:
        return [{k: v for k, v in r.items() if k not in WALL} for r in csv.DictReader(f)]


def options(d):
    with open(f"{d}/run.json") as f:
        return json.load(f)["provenance"]["options"]


def main(binary, out):
    a, b, c = f"{out}/first", f"{out}/rerun", f"{out}/override"
    for d in (a, b, c):
        shutil.rmtree(d, ignore_errors=True)
    kvlab(binary, "compare", "--backends", "contiguous-pow2,paged-16-hash,vmm-64k", "--requests", "40", "--rate", "10",
          "--model", "llama-3-8b", "--capacity-gib", "1", "--seed", "7", "--goodput", "ttft:800", "--chunked-prefill",
          "--prompt-len", "uniform:10:500", "--no-progress", "--out", a)
    kvlab(binary, "compare", "--config", f"{a}/run.json", "--out", b)
    first, rerun = options(a), options(b)
    differ = {k for k in set(first) | set(rerun) if first.get(k) != rerun.get(k)}
    if differ != {"config", "out"}:
        fail(f"the rerun's options differ in {sorted(differ)}: {[(k, first.get(k), rerun.get(k)) for k in sorted(differ)]}")
    if rows(a) != rows(b):
        fail("the rerun's compare.csv differs from the first run's")
    kvlab(binary, "replay", "--config", f"{a}/paged-b16-hash/summary.json", "--backend", "paged-16", "--out", c)
    over = options(c)
    if over["backend"] != "paged-16" or over["seed"] != "7" or over["chunked-prefill"] != "true":
        fail(f"--backend beside --config did not win, or the recorded options were lost: {over}")
    print(f"check_config_rerun: {len(rows(a))} backends rerun identically from run.json; an option beside it wins")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])
