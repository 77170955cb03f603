#!/usr/bin/env python3
"""Issue 33's goal: a replay through Python costs within 2 % of the same replay through the CLI.

    .venv/bin/python scripts/python_overhead.py [--reps N] [--json FILE]

Replays the whole Azure conversation trace (memory mode, llama-3-8b, 8 GiB, paged-16) N times
through kvlab.replay and reports two measures:

1. The overhead inside one call (the primary measure): the call's whole time against the time of
   the work the kvlab binary does for the same run (Run.timing: cli_s, measured around the CLI's own
   run_backends in the extension). Both halves are taken in the same call, so the machine's speed
   drifting between runs does not enter the ratio. Without steps (keep_steps=False: what the CLI
   keeps without --out) and with them (the 83,460-row steps frame).
2. The wall time against the kvlab binary run as a process, alternating, both without outputs and
   both with --out / out=: medians, which on this 2-core VM still swing by 5-10 % between sessions.
"""
import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import kvlab

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPTIONS = dict(backend="paged-16", trace="AzureLLMInferenceTrace_conv.csv", model="llama-3-8b", capacity_gib=8)


def cpu(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def timed(fn, who):
    c, t = cpu(who), time.perf_counter()
    fn()
    return time.perf_counter() - t, cpu(who) - c


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "release", "kvlab"))
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    load = os.getloadavg()[0]
    cli = [a.binary, "replay", "--no-progress"] + [f"--{k.replace('_', '-')}={v}" for k, v in OPTIONS.items()]
    results = {}
    for keep in (False, True):
        ratios = []
        for _ in range(a.reps):
            t = kvlab.replay(keep_steps=keep, progress=False, **OPTIONS).timing
            ratios.append(t["total_s"] / t["cli_s"])
        form = "in-call overhead, " + ("with the steps frame" if keep else "without steps")
        results[form] = {"median_total_over_cli": statistics.median(ratios), "max_total_over_cli": max(ratios),
                         "reps": a.reps}
        print(f"{form}: the call takes x{statistics.median(ratios):.4f} of the CLI's work (median; max "
              f"x{max(ratios):.4f})")
    # 3. The cost of a call into Python policies: an identity admit and vLLM's latest-arrival preempt
    #    (the built-in behaviour, so the replay does the same steps) against no policies.
    calls = {"admit": 0, "preempt": 0, "queued": 0}

    def admit(queued):
        calls["admit"] += 1
        calls["queued"] += len(queued)
        return list(range(len(queued)))

    def preempt(running):
        calls["preempt"] += 1
        return len(running) - 1

    plain_s, policy_s = [], []
    for _ in range(max(3, a.reps // 2)):
        plain = kvlab.replay(keep_steps=False, progress=False, **OPTIONS)
        plain_s.append(plain.timing["total_s"])
        calls.update(admit=0, preempt=0, queued=0)
        with_policies = kvlab.replay(keep_steps=False, progress=False, admit=admit, preempt=preempt, **OPTIONS)
        policy_s.append(with_policies.timing["total_s"])
        assert with_policies.summary["steps"] == plain.summary["steps"]
    n = calls["admit"] + calls["preempt"]
    extra = statistics.median(policy_s) - statistics.median(plain_s)
    results["python policies"] = {
        "admit_calls": calls["admit"], "preempt_calls": calls["preempt"],
        "mean_queued_per_admit": calls["queued"] / calls["admit"], "replay_s": statistics.median(plain_s),
        "replay_with_policies_s": statistics.median(policy_s), "us_per_call": 1e6 * extra / n,
        "us_per_candidate": 1e6 * extra / (calls["queued"] + calls["preempt"]), "reps": len(plain_s)}
    r = results["python policies"]
    print(f"python policies: {r['admit_calls']} admit and {r['preempt_calls']} preempt calls, "
          f"{r['mean_queued_per_admit']:.1f} queued per admit call; replay {r['replay_s']:.3f} s -> "
          f"{r['replay_with_policies_s']:.3f} s: {r['us_per_call']:.2f} us per call")
    with tempfile.TemporaryDirectory() as tmp:
        forms = {
            "no outputs": (lambda: subprocess.run(cli, check=True, capture_output=True),
                           lambda: kvlab.replay(keep_steps=False, progress=False, **OPTIONS)),
            "with --out": (lambda: subprocess.run(cli + [f"--out={tmp}/cli"], check=True, capture_output=True),
                           lambda: kvlab.replay(out=f"{tmp}/py", progress=False, **OPTIONS)),
        }
        for form, (run_cli, run_py) in forms.items():
            samples = {"cli": [], "python": []}
            for _ in range(a.reps):
                samples["cli"].append(timed(run_cli, resource.RUSAGE_CHILDREN))
                samples["python"].append(timed(run_py, resource.RUSAGE_SELF))
            med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
                   for k, v in samples.items()}
            results[form] = {"cli_wall_s": med["cli"][0], "python_wall_s": med["python"][0],
                             "wall_ratio": med["python"][0] / med["cli"][0],
                             "cli_cpu_s": med["cli"][1], "python_cpu_s": med["python"][1],
                             "cpu_ratio": med["python"][1] / med["cli"][1], "reps": a.reps}
            r = results[form]
            print(f"{form}: CLI {r['cli_wall_s']:.3f} s, Python {r['python_wall_s']:.3f} s: wall x{r['wall_ratio']:.4f}, "
                  f"CPU x{r['cpu_ratio']:.4f} (medians of {a.reps})")
    revision = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
    doc = {"command": " ".join([sys.executable] + sys.argv), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
           "revision": revision + (" (with uncommitted changes)" if subprocess.run(
               ["git", "-C", ROOT, "diff", "--quiet", "HEAD"]).returncode else ""),
           "load_average_at_start": load, "host": platform.node(), "cpu": platform.processor(),
           "cores": os.cpu_count(), "options": OPTIONS, "results": results}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
