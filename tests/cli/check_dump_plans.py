#!/usr/bin/env python3
"""`kvlab replay --dump-plans N` shows the scheduler's plans (issue 31).

    check_dump_plans.py KVLAB OUT

With --out: BACKEND/plans.txt holds the first N plans, is listed in complete.json, and each plan
that runs agrees with its row of steps.csv (step N is row N: the sequences that ran plus those
paused, and the requests left waiting); the run preempts, and the plans say so. A rerun without
--dump-plans leaves no plans.txt behind. Without --out the plans are printed.
"""
import csv
import json
import os
import re
import shutil
import subprocess
import sys

HEADER = re.compile(r"^step (\d+) at [0-9.]+ s: (?:prompt step, )?(\d+) sequences \(prefill (\d+) tokens, "
                    r"decode (\d+)\), (\d+) paused, (\d+) waiting$")
RUN = ["replay", "--backend", "paged-16", "--model", "llama-3-8b", "--capacity-gib", "0.5", "--requests", "20",
       "--rate", "0", "--no-progress"]


def fail(msg):
    print(f"check_dump_plans: {msg}")
    sys.exit(1)


def kvlab(binary, *args):
    r = subprocess.run([binary, *args], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"kvlab {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def check_plans(text, steps, limit):
    plans = [p for p in re.split(r"\n(?=\S)", text.strip()) if p]
    if len(plans) != limit:
        fail(f"{len(plans)} plans for --dump-plans {limit}")
    ran = preempted = 0
    for plan in plans:
        lines = plan.split("\n")
        m = HEADER.match(lines[0])
        if not m:
            if not lines[0].startswith("before step "):
                fail(f"not a plan header: {lines[0]!r}")
            continue
        n, seqs, prefill, decode, paused, waiting = map(int, m.groups())
        ran += 1
        if n != ran:
            fail(f"plan {lines[0]!r}: expected step {ran}")
        row = steps[n - 1]
        if int(row["running"]) != seqs + paused or int(row["waiting"]) != waiting:
            fail(f"step {n}: the plan says {seqs} + {paused} running, {waiting} waiting; steps.csv {row}")
        work = [l for l in lines[1:] if l.startswith("  prefill ") or l.startswith("  decode ")]
        if len(work) != seqs:
            fail(f"step {n}: {len(work)} work lines for {seqs} sequences")
        tokens = sum(int(b) - int(a) for a, b in re.findall(r"tokens (\d+)\.\.(\d+)", plan))
        if tokens != prefill:
            fail(f"step {n}: prefill lines sum to {tokens}, the header says {prefill}")
        preempted += sum(l.startswith("  preempted") for l in lines)
    if preempted == 0:
        fail("no preemption in the plans of a run that preempts")


def main(binary, out):
    shutil.rmtree(out, ignore_errors=True)
    d = os.path.join(out, "run")
    kvlab(binary, *RUN, "--dump-plans", "40", "--out", d)
    plans_file = os.path.join(d, "paged-b16", "plans.txt")
    with open(plans_file) as f:
        text = f.read()
    with open(os.path.join(d, "paged-b16", "steps.csv")) as f:
        steps = list(csv.DictReader(f))
    check_plans(text, steps, 40)
    with open(os.path.join(d, "complete.json")) as f:
        files = [e["path"] if isinstance(e, dict) else e for e in json.load(f)["files"]]
    if "paged-b16/plans.txt" not in files:
        fail(f"complete.json does not list paged-b16/plans.txt: {files}")
    kvlab(binary, *RUN, "--out", d)
    if os.path.exists(plans_file):
        fail("a rerun without --dump-plans left the older plans.txt")
    printed = kvlab(binary, *RUN, "--dump-plans", "3")
    if "plans of paged-b16, the first 3:\nstep 1 at " not in printed:
        fail(f"the plans are not printed without --out: {printed[:300]!r}")
    print("check_dump_plans: plans agree with steps.csv; listed; removed on a rerun; printed without --out")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    main(sys.argv[1], sys.argv[2])
