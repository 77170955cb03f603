#!/usr/bin/env python3
"""Checks that kvlab's folders depend on each other one way only (the floors of the design).

    scripts/check_layers.py [--root DIR]

  tests/        test-only code (tests/support: doubles): no shipped folder includes it
  alloc/        errors, memory, the backend front door: includes nothing from the other folders.
                Its rooms have floors, bottom up: core, memory, faults, cuda (cuda/emulated is
                cuda's), transfer, backend, contiguous
  kernels/      attention kernels: may include alloc/, nothing else of ours
  paged/, vmm/  backends: alloc/ and kernels/; never each other
  experiments/  replayer, CLI, figures: reaches backends only through the factory — no file but
                experiments/replay/backend_factory.cpp includes paged/ or vmm/ backend headers or names a
                concrete backend type, and nothing there uses dynamic_cast. Its rooms have floors of
                their own, bottom up: support, traces, clock, replay, report, runs, figures, cli
                (benchmarks/ may include any room); a room includes only its own headers and those
                of the rooms below it (devices/, the device model files, is clock's)
Prints one line per violation (FILE:LINE: what) and exits 1 if there is any.
"""
import argparse
import pathlib
import re
import sys

OURS = ("alloc", "kernels", "paged", "vmm", "experiments")
INCLUDABLE = OURS + ("tests",)  # folders an #include "X/..." can name
ALLOWED = {
    "alloc": {"alloc"},
    "kernels": {"alloc", "kernels"},
    "paged": {"alloc", "kernels", "paged"},
    "vmm": {"alloc", "kernels", "vmm"},
    "experiments": set(OURS),
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/')
CONCRETE = re.compile(r"\b(ContiguousBackend|PagedBackend|VmmBackend|ContiguousConfig|PagedConfig|VmmConfig)\b")
BACKEND_HEADERS = re.compile(r'#\s*include\s+"(paged/paged_backend|vmm/vmm_backend|alloc/contiguous/contiguous_backend)\.hpp"')
FACTORY = "experiments/replay/backend_factory.cpp"
# The rooms of a folder, bottom up, and folders that count as a room's (a data folder; the top floor).
ROOMS = {
    "experiments": ["support", "traces", "clock", "replay", "report", "runs", "figures", "cli"],
    "alloc": ["core", "memory", "faults", "cuda", "transfer", "backend", "contiguous"],
}
ROOM_ALIASES = {"experiments": {"devices": "clock", "benchmarks": "cli"}, "alloc": {}}


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
                if folder != "experiments":
                    continue
                if rel == FACTORY:
                    continue
                code = code_only(line)
                if BACKEND_HEADERS.search(code):
                    problems.append(f"{rel}:{n}: only the factory includes a concrete backend ({line.strip()})")
                if CONCRETE.search(code):
                    problems.append(f"{rel}:{n}: names a concrete backend type outside the factory ({line.strip()})")
                if "dynamic_cast" in code:
                    problems.append(f"{rel}:{n}: dynamic_cast in experiments/ ({line.strip()})")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=str(pathlib.Path(__file__).resolve().parent.parent))
    problems = check(pathlib.Path(ap.parse_args().root))
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
