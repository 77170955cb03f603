#!/usr/bin/env python3
"""Every example command in README.md and in each command's --help works (issue 30).

    check_examples.py KVLAB SOURCE_DIR WORK_DIR

Collects the `kvlab ...` lines of README.md's code blocks and of the Examples of `kvlab CMD --help`
(CMD: replay, compare, sweep, figure, calibrate), and runs each in a small version from SOURCE_DIR:
output paths moved under WORK_DIR, traces cut to their first 300 requests (--limit), figures at
smoke scale, calibrate --quick, progress off. A command fails the test when it exits non-zero,
rejects more than 5 % of its requests (read from the summary.json files it writes), or runs
--verify-kv and verifies no token. Commands that need a GPU (--device cuda) are listed as skipped
(tests/gpu/run.sh runs them on one); so is `sbatch`, which is not kvlab.
"""
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

COMMANDS = ("replay", "compare", "sweep", "figure", "calibrate")
MAX_REJECTED = 0.05


def help_examples(kvlab):
    out = []
    for cmd in COMMANDS:
        text = subprocess.run([kvlab, cmd, "--help"], capture_output=True, text=True).stdout
        if "Examples:" not in text:
            sys.exit(f"check_examples: kvlab {cmd} --help has no Examples")
        lines = text.split("Examples:", 1)[1].splitlines()
        out.extend((f"kvlab {cmd} --help", line) for line in joined(lines))
    return out


def readme_examples(readme):
    out, inside = [], False
    lines = []
    for line in open(readme):
        if line.startswith("```"):
            inside = not inside
            continue
        if inside:
            lines.append(line.rstrip("\n"))
    return [("README.md", line) for line in joined(lines)]


def joined(lines):
    """Lines starting with `kvlab`, continuation lines (ending in a backslash) joined, comments cut."""
    out, current = [], None
    for raw in lines:
        line = raw.strip()
        if current is not None:
            current += " " + line.rstrip("\\").strip()
            if not line.endswith("\\"):
                out.append(current)
                current = None
            continue
        if not line.startswith("kvlab "):
            continue
        if line.endswith("\\"):
            current = line.rstrip("\\").strip()
        else:
            out.append(line)
    return [re.sub(r"\s+#.*$", "", c).strip() for c in out]


def smaller(args, work, n):
    """One kvlab command (argument list after `kvlab`) in its small version, its outputs under work/n."""
    cmd = args[0]
    out = []
    i = 1
    outdir = None
    while i < len(args):
        a = args[i]
        if a == "--full":
            i += 1
            continue
        if a in ("--out",) and i + 1 < len(args):
            outdir = os.path.join(work, n)
            if cmd == "calibrate":
                outdir += ".txt"
            out += [a, outdir]
            i += 2
            continue
        if a == "--device-model" and i + 1 < len(args) and args[i + 1].endswith(".txt"):
            out += [a, os.path.join(work, "calibrated.txt")]
            i += 2
            continue
        if a == "--config" and cmd in ("replay", "compare") and i + 1 < len(args):
            out += [a, os.path.join(work, "recorded", "run.json")]
            i += 2
            continue
        out.append(a)
        i += 1
    if cmd in ("replay", "compare"):
        if "--trace" in out and "--limit" not in out:
            out += ["--limit", "300"]
        if outdir is None:
            outdir = os.path.join(work, n)
            out += ["--out", outdir]
        out.append("--no-progress")
    if cmd == "sweep" and "my.sweep" in out:
        out[out.index("my.sweep")] = os.path.join(work, "my.sweep")
    if cmd in ("sweep", "figure"):
        out.append("--no-progress")
        if cmd == "figure" and outdir is None:
            outdir = os.path.join(work, n)
            out += ["--out", outdir]
    if cmd == "calibrate":
        if "--quick" not in out:
            out.append("--quick")
    if cmd == "collect":
        out = [os.path.join(work, "sweep-for-collect")]
    return [cmd] + out, outdir


def check_outputs(outdir, verify):
    """The share of rejected requests and the tokens verified, over every summary.json written."""
    problems = []
    summaries = glob.glob(os.path.join(outdir, "**", "summary.json"), recursive=True) if outdir else []
    for s in summaries:
        with open(s) as f:
            j = json.load(f)
        if j["requests"] and j["rejected"] / j["requests"] > MAX_REJECTED:
            problems.append(f"{s}: {j['rejected']} of {j['requests']} requests rejected")
        if verify and j["kv_tokens_checked"] == 0:
            problems.append(f"{s}: --verify-kv verified 0 tokens")
    return problems


def main(kvlab, source, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    with open(os.path.join(work, "my.sweep"), "w") as f:
        f.write("backend = paged-16 | vmm-64k\nmodel = llama-3-8b\ncapacity-gib = 1\nworkload = --requests 20\n")
    # The run a --config example reruns, and the model a --device-model example reads.
    subprocess.run([kvlab, "replay", "--requests", "20", "--model", "llama-3-8b", "--capacity-gib", "1",
                    "--no-progress", "--out", os.path.join(work, "recorded")], check=True, capture_output=True)
    examples = help_examples(kvlab) + readme_examples(os.path.join(source, "README.md"))
    failed, ran, skipped = [], 0, []
    for k, (where, line) in enumerate(examples):
        for part in line.split("&&"):
            args = shlex.split(part.strip())
            if not args or args[0] != "kvlab":
                skipped.append(f"{where}: {part.strip()} (not kvlab)")
                continue
            if len(args) == 1 or args[1] in ("help", "models", "devices", "version") or "--help" in args:
                cmd, outdir = args[1:], None
            elif "--device" in args and args[args.index("--device") + 1].startswith("cuda"):
                skipped.append(f"{where}: {part.strip()} (needs a GPU)")
                continue
            else:
                cmd, outdir = smaller(args[1:], work, f"ex{k:02d}")
            r = subprocess.run([kvlab] + cmd, cwd=source, capture_output=True, text=True)
            ran += 1
            if cmd[0] == "calibrate" and r.returncode == 0 and outdir:
                shutil.copy(outdir, os.path.join(work, "calibrated.txt"))
            if cmd[0] == "sweep" and r.returncode == 0 and outdir and "--slurm" not in cmd:
                shutil.copytree(outdir, os.path.join(work, "sweep-for-collect"), dirs_exist_ok=True)
            problems = [] if r.returncode == 0 else [f"exit {r.returncode}: {r.stderr.strip()[-400:]}"]
            problems += check_outputs(outdir, "--verify-kv" in cmd)
            status = "ok" if not problems else "FAILED"
            print(f"{status}: {where}: kvlab {shlex.join(cmd)}")
            for p in problems:
                print(f"    {p}")
            if problems:
                failed.append(line)
    for s in skipped:
        print(f"skipped: {s}")
    print(f"check_examples: {ran} commands from {len(examples)} examples, {len(failed)} failed, {len(skipped)} skipped")
    return 1 if failed or ran == 0 else 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
