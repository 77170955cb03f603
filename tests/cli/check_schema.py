#!/usr/bin/env python3
"""docs/schema.md lists every column kvlab writes, and nothing it does not (issue 30).

    check_schema.py KVLAB OUT SCHEMA_MD FIGURES_DIR

Runs one `kvlab compare` over a backend of every family and variant that has counters of its own
(with --goodput, so every serving column has a value, and --dump-plans), reads the headers of compare.csv, steps.csv
and requests.csv, the keys of summary.json and run.json (nested keys joined with '.'), and the
header of every figure's data.csv, facts.csv, steps.csv and memory.csv under FIGURES_DIR (the figures.smoke
output). Fails naming each column that is written but not documented, or documented but never
written. Also checks the unit rule: a documented column whose unit is s, ms, us, bytes, GiB, frac,
pct or per_s ends in that suffix.
"""
import csv
import json
import os
import re
import shutil
import subprocess
import sys

BACKENDS = ("contiguous-max,contiguous-oracle-buddy,paged-16,paged-16-hash,paged-16-radix,paged-16-hash-host512,"
            "vmm-64k,vmm-2m-mega-overlap,elastic-16,elastic-16-overlap")
SUFFIX = {"s": "_s", "ms": "_ms", "us": "_us", "bytes": "_bytes", "GiB": "_gib", "frac": "_frac", "pct": "_pct",
          "per s": "_per_s"}


def header(path):
    with open(path, newline="") as f:
        return next(csv.reader(f))


def keys(obj, prefix=""):
    """Nested keys joined with '.'; the options of a provenance are one documented pattern."""
    out = []
    for k, v in obj.items():
        name = prefix + k
        if name in ("provenance.options", "counters"):  # open sets of names: one documented pattern each
            out.append(name + ".*")
        elif isinstance(v, dict):
            out.extend(keys(v, name + "."))
        else:
            out.append(name)
    return out


def documented(schema_md):
    """{section title: {column: unit}} from the tables under each '## `FILE`' heading."""
    sections, current = {}, None
    for line in open(schema_md):
        m = re.match(r"^##+ (.*`.*)$", line)
        if m:
            current = m.group(1).strip()
            sections.setdefault(current, {})
            continue
        m = re.match(r"^\| `([^`]+)` \| ([^|]*) \|", line)
        if m and current:
            sections[current][m.group(1)] = m.group(2).strip()
    return sections


def main(kvlab, out, schema_md, figures):
    shutil.rmtree(out, ignore_errors=True)  # an earlier run's backend folders are not this run's
    run = subprocess.run([kvlab, "compare", "--backends", BACKENDS, "--requests", "30", "--rate", "20", "--model",
                          "llama-3-8b", "--capacity-gib", "1", "--no-progress", "--goodput", "ttft:500,tpot:50",
                          "--dump-plans", "5", "--out", out], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"check_schema: kvlab compare failed ({run.returncode}): {run.stderr.strip()}")
    written = {}
    counters = set()
    for backend in sorted(os.listdir(out)):
        d = os.path.join(out, backend)
        if not os.path.isdir(d):
            continue
        written.setdefault("`steps.csv`", set()).update(header(os.path.join(d, "steps.csv")))
        written.setdefault("`requests.csv`", set()).update(header(os.path.join(d, "requests.csv")))
        with open(os.path.join(d, "summary.json")) as f:
            summary = json.load(f)
        written.setdefault("`summary.json`", set()).update(keys(summary))
        counters.update(summary["counters"])
        if not os.path.exists(os.path.join(d, "plans.txt")):
            sys.exit(f"check_schema: --dump-plans wrote no {backend}/plans.txt")
    written["`plans.txt` (`--dump-plans N`)"] = set()  # text, no columns: its layout is described there
    written["backend counters (`counters` in `summary.json`, columns of `compare.csv`)"] = counters
    written["`compare.csv`"] = {c for c in header(os.path.join(out, "compare.csv")) if c not in counters}
    with open(os.path.join(out, "run.json")) as f:
        written["`run.json`"] = set(keys(json.load(f)))
    # --tenants: tenants.csv, and each tenant's files with the columns documented above.
    tenants_out = out.rstrip("/") + "-tenants"
    shutil.rmtree(tenants_out, ignore_errors=True)
    os.makedirs(tenants_out)
    tenants = os.path.join(tenants_out, "tenants.txt")
    with open(tenants, "w") as f:
        f.write("a model=llama-3-8b requests=10 rate=20\nb model=yi-6b requests=10 rate=20 offset=1\n")
    run = subprocess.run([kvlab, "compare", "--tenants", tenants, "--backends", "paged-16,elastic-16", "--capacity-gib",
                          "1", "--no-progress", "--out", os.path.join(tenants_out, "run")], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"check_schema: kvlab compare --tenants failed ({run.returncode}): {run.stderr.strip()}")
    written["`tenants.csv` (`--tenants FILE`)"] = set(header(os.path.join(tenants_out, "run", "tenants.csv")))
    for file in ("gpu.csv", "memory.csv"):
        written[f"`{file}` (`--tenants FILE`)"] = set(header(os.path.join(tenants_out, "run", file)))
    for tenant in ("a", "b"):
        for backend in ("paged-b16", "elastic-16-2m"):
            d = os.path.join(tenants_out, "run", tenant, backend)
            if set(header(os.path.join(d, "steps.csv"))) - written["`steps.csv`"]:
                sys.exit(f"check_schema: {d}/steps.csv has columns a plain run does not write")
    for name in sorted(os.listdir(figures)):
        d = os.path.join(figures, name)
        for file in ("data.csv", "facts.csv", "steps.csv", "memory.csv"):
            if os.path.exists(os.path.join(d, file)):
                section = f"`facts.csv` (every figure)" if file == "facts.csv" else f"figure `{name}`: `{file}`"
                written.setdefault(section, set()).update(header(os.path.join(d, file)))
    docs = documented(schema_md)
    problems = []
    for section, columns in sorted(written.items()):
        doc = docs.get(section)
        if doc is None:
            problems.append(f"no section '## {section}' in {schema_md}")
            continue
        for c in sorted(columns - set(doc)):
            problems.append(f"{section}: column `{c}` is written but not documented")
        for c in sorted(set(doc) - columns):
            problems.append(f"{section}: column `{c}` is documented but never written")
    for section in sorted(set(docs) - set(written)):
        problems.append(f"{schema_md}: section '{section}' documents a file nothing wrote")
    for section, doc in docs.items():
        for c, unit in doc.items():
            want = SUFFIX.get(unit)
            if want and not c.rstrip(".*").endswith(want):
                problems.append(f"{section}: `{c}` is in {unit} but does not end in {want}")
    for p in problems:
        print(p)
    n = sum(len(v) for v in written.values())
    print(f"check_schema: {n} columns in {len(written)} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
