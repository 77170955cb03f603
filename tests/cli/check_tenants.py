#!/usr/bin/env python3
"""`kvlab compare --tenants FILE` (issue 32): several tenants sharing the KV capacity.

    check_tenants.py KVLAB OUT

Three Llama-3-8B tenants whose bursts come one after another, under paged-16 (a static split)
and elastic-16 (one pool). Checks that every file complete.json lists is there; that tenants.csv
holds one row per backend and tenant with the policy auto chose; that the static split never holds
more than a tenant's share while the elastic pool lends a tenant more than a third; that every
tenant's p99 TTFT is lower in the elastic pool (the load here is the kind it helps); and that each
tenant's summary.json agrees with its tenants.csv row.
"""
import csv
import json
import os
import shutil
import subprocess
import sys

TENANTS = """# three tenants, bursts 30 s apart
chat model=llama-3-8b requests=120 rate=6 burstiness=3 prompt-len=uniform:200:1200 output-len=uniform:50:300 seed=1
code model=llama-3-8b requests=120 rate=6 burstiness=3 prompt-len=uniform:200:1200 output-len=uniform:50:300 seed=2 offset=30
docs model=llama-3-8b requests=120 rate=6 burstiness=3 prompt-len=uniform:200:1200 output-len=uniform:50:300 seed=3 offset=60
"""
GIB = 1 << 30


def fail(msg):
    print(f"check_tenants: {msg}")
    sys.exit(1)


def main():
    binary, out = sys.argv[1], sys.argv[2]
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    tenants = os.path.join(out, "tenants.txt")
    with open(tenants, "w") as f:
        f.write(TENANTS)
    run_dir = os.path.join(out, "run")
    r = subprocess.run([binary, "compare", "--tenants", tenants, "--backends", "paged-16,elastic-16",
                        "--capacity-gib", "4", "--out", run_dir, "--no-progress"], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"kvlab failed ({r.returncode}): {r.stderr}")
    complete = json.load(open(os.path.join(run_dir, "complete.json")))
    listed = {f["path"]: f["bytes"] for f in complete["files"]}
    for path, size in listed.items():
        if not os.path.isfile(os.path.join(run_dir, path)) or os.path.getsize(os.path.join(run_dir, path)) != size:
            fail(f"complete.json lists {path} ({size} bytes), which is not there as listed")
    for t in ("chat", "code", "docs"):
        for b in ("paged-b16", "elastic-16-2m"):
            for f in ("steps.csv", "requests.csv", "summary.json"):
                if f"{t}/{b}/{f}" not in listed:
                    fail(f"complete.json does not list {t}/{b}/{f}")
    rows = list(csv.DictReader(open(os.path.join(run_dir, "tenants.csv"))))
    if [(x["backend"], x["policy"], x["tenant"]) for x in rows] != [
            (b, p, t) for b, p in (("paged-b16", "static"), ("elastic-16-2m", "elastic")) for t in ("chat", "code", "docs")]:
        fail(f"tenants.csv rows: {[(x['backend'], x['policy'], x['tenant']) for x in rows]}")
    by = {(x["backend"], x["tenant"]): x for x in rows}
    for t in ("chat", "code", "docs"):
        static, elastic = by[("paged-b16", t)], by[("elastic-16-2m", t)]
        for x in (static, elastic):
            if int(x["completed"]) != 120:
                fail(f"{x['backend']} {t}: {x['completed']} of 120 completed")
        if int(static["peak_held_bytes"]) > 4 * GIB // 3 + 1:
            fail(f"{t}: the static split held {static['peak_held_bytes']} bytes, more than a third")
        if int(elastic["peak_held_bytes"]) <= 4 * GIB // 3:
            fail(f"{t}: the elastic pool never lent it more than a third")
        if not float(elastic["ttft_p99_ms"]) < float(static["ttft_p99_ms"]):
            fail(f"{t}: p99 TTFT {elastic['ttft_p99_ms']} ms elastic, not below {static['ttft_p99_ms']} ms static")
        for x in (static, elastic):
            s = json.load(open(os.path.join(run_dir, t, x["backend"], "summary.json")))
            if s["completed"] != int(x["completed"]) or s["peak_held_bytes"] != int(x["peak_held_bytes"]):
                fail(f"{t}/{x['backend']}/summary.json disagrees with tenants.csv")
            if "--tenants" not in s["command"]:
                fail(f"{t}/{x['backend']}/summary.json does not record the command")
    print("check_tenants: ok")


if __name__ == "__main__":
    main()
