#!/usr/bin/env python3
"""Fails when a figure's README states a number that none of its data files holds (issue 28).

    scripts/check_readme_numbers.py DIR [DIR ...]   # each DIR a figure folder or a folder above them
    scripts/check_readme_numbers.py --index results/README.md   # the index of figures
    scripts/check_readme_numbers.py --self-test     # proves the check fails where it should

A figure folder is one holding README.md and data.csv. What is checked is everything the README
says after its header list (command, scale, machine, device, clock, clock sources, setup: how the
run was made, recorded in run.json) up to its closing "Files:" line: the table, the notes and the
claims. Each number there must equal, at the precision printed, a number in one of the folder's CSV
files (data.csv, facts.csv, steps.csv), either as it is or as a percentage of a fraction; the sign
may differ (prose says "fell by 5.3 %" of a -5.3 column). Not numbers of a claim, and skipped:
citations (Fig. 12, sec. 6.1, Table 2, SOSP'23), names that carry digits (Llama-3-8B, A100-40GB,
vmm-2m, p99, fp16) and `code spans`.

--index checks an index of figures (results/README.md): each table row that links a figure's
README (`[name](full/name/README.md)`) may state only numbers in that figure's CSV files, at the
scale it links or at the other one (`full/name` and `name` beside it).
"""
import csv
import os
import re
import sys
import tempfile

NUMBER = re.compile(r"(?<![\w.'/])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![0-9A-Za-wyz_]|\.\d)")
CITATION = re.compile(r"\b(?:Figs?\.|Figures?|[Ii]ssues?|[Ss]ec(?:tion|s)?\.?|Tables?|Eq\.|§|SOSP|OSDI|EuroSys|ASPLOS|ISCA|MLSys)"
                      r"\s*'?\d+(?:\.\d+)*[a-z]?(?:\s*(?:,|and|-|–)\s*\d+(?:\.\d+)*[a-z]?)*")
UNIT_SUFFIX = re.compile(r"[x×]")  # "1.46x": a ratio is a number


def numbers_in(text):
    """Each number token in `text` as (printed, value, decimals)."""
    out = []
    for m in NUMBER.finditer(text):
        tok = m.group(0)
        start = m.start()
        # "Llama-3-8B", "paged-16": a hyphen glued to a word makes a name, not a sign or a range
        if tok[0] in "+-" and start > 0 and text[start - 1].isalnum():
            continue
        if start >= 2 and text[start - 1] == "-" and text[start - 2].isalpha():
            continue
        end = m.end()
        if end < len(text) and text[end].isalpha() and not UNIT_SUFFIX.match(text[end]):
            continue
        plain = tok.replace(",", "").lstrip("+")
        decimals = len(plain.split(".")[1]) if "." in plain else 0
        out.append((tok, float(plain), decimals))
    return out


def data_values(folder):
    values = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".csv"):
            continue
        with open(os.path.join(folder, name), newline="") as f:
            for row in csv.reader(f):
                for cell in row:
                    values.extend(v for _, v, _ in numbers_in(cell))
    return values


def claims_text(readme):
    """The part of a README that makes claims: after the header list, before the Files line."""
    lines = readme.splitlines()
    i = 0
    while i < len(lines) and (lines[i].startswith("#") or lines[i].startswith("- ") or not lines[i].strip()):
        i += 1
        if lines[i - 1].startswith("- setup:"):
            break
    body = [l for l in lines[i:] if not l.startswith("Files:")]
    text = "\n".join(body)
    text = re.sub(r"`[^`]*`", " ", text)
    return CITATION.sub(" ", text)


def matches(value, decimals, values):
    tol = 0.5 * 10 ** -decimals + 1e-9 * max(1.0, abs(value))
    for v in values:
        for c in (v, 100.0 * v):
            if abs(abs(c) - abs(value)) <= tol:
                return True
    return False


def check_folder(folder):
    """The README's numbers that no CSV of `folder` holds."""
    with open(os.path.join(folder, "README.md")) as f:
        text = claims_text(f.read())
    values = data_values(folder)
    return [tok for tok, v, d in numbers_in(text) if not matches(v, d, values)]


def figure_folders(root):
    for d, _, files in os.walk(root):
        if "README.md" in files and "data.csv" in files:
            yield d


INDEX_ROW = re.compile(r"^\| \[[^\]]+\]\(([^)]+)/README\.md\) \|")


def scale_twins(root, linked):
    """The folder an index row links, and the same figure at the other scale."""
    folder = os.path.normpath(os.path.join(root, linked))
    name = os.path.basename(folder)
    full = os.path.join(root, "full", name)
    smoke = os.path.join(root, name)
    return [f for f in dict.fromkeys([folder, full, smoke]) if os.path.isfile(os.path.join(f, "data.csv"))]


def check_index(path):
    """Each index row's numbers that none of its figure's CSV files holds, as (row name, numbers)."""
    root = os.path.dirname(path)
    bad = []
    rows = 0
    with open(path) as f:
        for line in f:
            m = INDEX_ROW.match(line)
            if not m:
                continue
            rows += 1
            folders = scale_twins(root, m.group(1))
            values = [v for folder in folders for v in data_values(folder)]
            cells = line.split("|")
            text = CITATION.sub(" ", re.sub(r"`[^`]*`", " ", "|".join(cells[3:])))
            missing = [tok for tok, v, d in numbers_in(text) if not matches(v, d, values)]
            if missing or not folders:
                bad.append((m.group(1), missing or ["(no data.csv)"]))
    return rows, bad


def main_index(path):
    rows, bad = check_index(path)
    for linked, missing in bad:
        print(f"{path}: row {linked}: {len(missing)} number(s) in no data file: {', '.join(missing[:20])}")
    print(f"check_readme_numbers: {path}: {rows} rows, {len(bad)} with numbers not in their figure's data")
    return 1 if bad or not rows else 0


def main(roots):
    folders = sorted(f for r in roots for f in figure_folders(r))
    if not folders:
        print(f"check_readme_numbers: no figure folder (README.md beside data.csv) under {' '.join(roots)}")
        return 1
    failed = 0
    checked = 0
    for folder in folders:
        missing = check_folder(folder)
        with open(os.path.join(folder, "README.md")) as f:
            checked += len(numbers_in(claims_text(f.read())))
        if missing:
            failed += 1
            print(f"{folder}/README.md: {len(missing)} number(s) in no data file: {', '.join(missing[:20])}"
                  + (" ..." if len(missing) > 20 else ""))
    print(f"check_readme_numbers: {len(folders)} READMEs, {checked} numbers, {failed} README(s) with numbers "
          "not in their data")
    return 1 if failed else 0


def self_test():
    """A README quoting a number its data lacks fails; the same README with the number in facts.csv,
    or quoted as a percentage of a fraction, passes; citations and names are not numbers."""
    readme = ("# x — y\n\n- command: `kvlab figure x`\n- machine: 2 threads\n- setup: 12 GB, 2 req/s\n\n"
              "| a | b |\n|---|---|\n| 1.50 | 7 |\n\n"
              "Llama-3-8B on A100-40GB (Fig. 12, sec. 6.1, SOSP'23): ours {q} against the paper's 42.0; "
              "a share of 25.0 %, a ratio of 1.46x.\n\nFiles: `data.csv`, 99 of them.\n")
    with tempfile.TemporaryDirectory() as d:
        def write(name, text):
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        write("data.csv", "a,b,share\n1.5,7,0.25\n")
        write("README.md", readme.format(q="3.25"))
        bad = check_folder(d)
        assert bad == ["3.25", "42.0", "1.46"], bad
        write("facts.csv", "quantity,value,paper_value,relative_error_pct,source\nq,3.25,42.0,-92.3,paper\nr,1.46,,,this run\n")
        assert check_folder(d) == [], check_folder(d)
        write("README.md", readme.format(q="3.26"))
        assert check_folder(d) == ["3.26"], check_folder(d)
        # an index row may quote its figure at either scale, and nothing else
        os.makedirs(os.path.join(d, "full", "x"))
        write(os.path.join("full", "x", "data.csv"), "a\n9.75\n")
        os.makedirs(os.path.join(d, "x"))
        write(os.path.join("x", "data.csv"), "a\n1.5\n")
        row = "| [x](full/x/README.md) | vLLM Fig. 12 | ours {} at full, 1.5 at smoke |\n"
        write("index.md", "# index\n\n| figure | reproduces | headline |\n|---|---|---|\n" + row.format("9.75"))
        assert check_index(os.path.join(d, "index.md")) == (1, []), check_index(os.path.join(d, "index.md"))
        write("index.md", row.format("9.76"))
        assert check_index(os.path.join(d, "index.md")) == (1, [("full/x", ["9.76"])])
    print("check_readme_numbers: self-test passed")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if len(sys.argv) == 3 and sys.argv[1] == "--index":
        sys.exit(main_index(sys.argv[2]))
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
