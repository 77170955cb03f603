#!/usr/bin/env python3
"""Checks that kvlab's folders depend on each other one way only (the floors of the design).

    scripts/check_layers.py [--root DIR] [--max-share PCT]

--max-share PCT: also no top-level source folder holds more than PCT % of the lines of code (the
sources of alloc, kernels, paged, vmm, elastic, serving, experiments, benchmarks and python; tests and scripts
apart).

  tests/        test-only code (tests/support: doubles): no shipped folder includes it
  alloc/        errors, memory, the backend front door: includes nothing from the other folders.
                Its rooms have floors, bottom up: core, memory, faults, cuda (cuda/emulated is
                cuda's), transfer, backend, contiguous
  kernels/      attention kernels: may include alloc/, nothing else of ours
  paged/, vmm/  backends: alloc/ and kernels/; never each other
  elastic/      the elastic family's storage: paged/ over vmm/'s drivers, and what they include
  serving/      the serving simulation (traces, clock, scheduler and replayer, output files):
                alloc/, kernels/, and the backends only through the factory — no file but the
                factory's (serving/replay/backend_factory.cpp and the family files in
                serving/replay/families/) includes a backend's headers or names a concrete backend type, and nothing uses dynamic_cast (here, in experiments/ and in
                benchmarks/). Its rooms, bottom up: support, traces, clock, replay, report
                (devices/, the device model files, is clock's)
  experiments/  sweeps and run control, figures, the CLI: serving/ and below. Its rooms, bottom up:
                runs, figures, cli
  benchmarks/   Google Benchmark binaries: any folder but tests/
  python/       the Python package's extension (python/src): any folder but tests/ and benchmarks/,
                backends only through the factory
A room includes only its own headers and those of the rooms below it.
Prints one line per violation (FILE:LINE: what) and exits 1 if there is any.
"""
import argparse
import pathlib
import re
import sys

OURS = ("alloc", "kernels", "paged", "vmm", "elastic", "serving", "experiments", "benchmarks", "python")
INCLUDABLE = OURS + ("tests",)  # folders an #include "X/..." can name
ALLOWED = {
    "alloc": {"alloc"},
    "kernels": {"alloc", "kernels"},
    "paged": {"alloc", "kernels", "paged"},
    "vmm": {"alloc", "kernels", "vmm"},
    "elastic": {"alloc", "kernels", "paged", "vmm", "elastic"},
    "serving": {"alloc", "kernels", "paged", "vmm", "elastic", "serving"},
    "experiments": {"alloc", "kernels", "paged", "vmm", "elastic", "serving", "experiments"},
    "benchmarks": set(OURS) - {"python"},
    "python": set(OURS) - {"benchmarks"},
}
FRONT_DOOR_ONLY = ("serving", "experiments", "benchmarks", "python")  # reach backends only through the factory
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/')
CONCRETE = re.compile(r"\b(ContiguousBackend|PagedBackend|VmmBackend|ContiguousConfig|PagedConfig|VmmConfig|"
                      r"ElasticPages|ElasticConfig)\b")
BACKEND_HEADERS = re.compile(r'#\s*include\s+"(paged/paged_backend|vmm/vmm_backend|alloc/contiguous/contiguous_backend|'
                             r'elastic/elastic_pages)\.hpp"')
FACTORY = "serving/replay/backend_factory.cpp"
FAMILIES = "serving/replay/families/"  # one file per backend family: the factory's too
# The rooms of a folder, bottom up, and folders that count as a room's (a data folder; the top floor).
ROOMS = {
    "serving": ["support", "traces", "clock", "replay", "report"],
    "experiments": ["runs", "figures", "cli"],
    "alloc": ["core", "memory", "faults", "cuda", "transfer", "backend", "contiguous"],
}
ROOM_ALIASES = {"serving": {"devices": "clock"}, "experiments": {"sweeps": "runs"}, "alloc": {}}


def room_of(folder: str, rel: str) -> str | None:
    """The room of a file in `folder` (None for one at the folder's top, which should not exist)."""
    parts = rel.split("/")
    if len(parts) < 3:
        return None
    return ROOM_ALIASES[folder].get(parts[1], parts[1])


def check_rooms(folder: str, rel: str, n: int, line: str) -> list[str]:
    m = re.match(r'^\s*#\s*include\s+"' + folder + r'/([^"/]+)/', line)
    if not m:
        return []
    rooms = ROOMS[folder]
    mine, theirs = room_of(folder, rel), ROOM_ALIASES[folder].get(m.group(1), m.group(1))
    if mine not in rooms or theirs not in rooms:
        return [f"{rel}:{n}: {folder}/ files live in a room ({', '.join(rooms)}) ({line.strip()})"]
    if rooms.index(theirs) > rooms.index(mine):
        return [f"{rel}:{n}: {folder}/{mine}/ must not include {folder}/{theirs}/, a room above it ({line.strip()})"]
    return []
SUFFIXES = {".cpp", ".hpp", ".cu", ".cuh", ".h"}


def code_only(line: str) -> str:
    return line.split("//", 1)[0]


def check(root: pathlib.Path) -> list[str]:
    problems = []
    for folder in OURS:
        for f in sorted((root / folder).rglob("*")):
            if f.suffix not in SUFFIXES:
                continue
            rel = f.relative_to(root).as_posix()
            for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if m and m.group(1) in INCLUDABLE and m.group(1) not in ALLOWED[folder]:
                    problems.append(f"{rel}:{n}: {folder}/ must not include {m.group(1)}/ ({line.strip()})")
                if folder in ROOMS:
                    problems += check_rooms(folder, rel, n, line)
                if folder not in FRONT_DOOR_ONLY:
                    continue
                if rel == FACTORY or rel.startswith(FAMILIES):
                    continue
                code = code_only(line)
                if BACKEND_HEADERS.search(code):
                    problems.append(f"{rel}:{n}: only the factory includes a concrete backend ({line.strip()})")
                if CONCRETE.search(code):
                    problems.append(f"{rel}:{n}: names a concrete backend type outside the factory ({line.strip()})")
                if "dynamic_cast" in code:
                    problems.append(f"{rel}:{n}: dynamic_cast in {folder}/ ({line.strip()})")
    return problems


def shares(root: pathlib.Path) -> dict[str, int]:
    """Lines of source code per top-level folder."""
    lines = {}
    for folder in OURS:
        lines[folder] = sum(len(f.read_text(errors="replace").splitlines())
                            for f in (root / folder).rglob("*") if f.suffix in SUFFIXES | {".py"})
    return lines


def check_shares(root: pathlib.Path, max_pct: float) -> list[str]:
    lines = shares(root)
    total = sum(lines.values()) or 1
    print("lines of code per folder: " + ", ".join(f"{k} {v} ({100 * v / total:.1f} %)" for k, v in lines.items()))
    return [f"{k}/ holds {100 * v / total:.1f} % of the code, more than {max_pct:g} %"
            for k, v in lines.items() if 100 * v / total > max_pct]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=str(pathlib.Path(__file__).resolve().parent.parent))
    ap.add_argument("--max-share", type=float, default=None)
    args = ap.parse_args()
    problems = check(pathlib.Path(args.root))
    if args.max_share is not None:
        problems += check_shares(pathlib.Path(args.root), args.max_share)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
