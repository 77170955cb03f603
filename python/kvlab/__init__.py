"""kvlab from Python: replays and comparisons of KV-cache backends as DataFrames.

    import kvlab
    run = kvlab.replay(backend="paged-16", workload="synthetic", requests=200)
    run.summary["serving"]["ttft_p99_ms"]          # summary.json, as a dict
    run.requests.head()                            # requests.csv, as a DataFrame
    cmp = kvlab.compare(["contiguous-max", "paged-16"], requests=200)
    cmp.summary                                    # compare.csv: one row per backend
    cmp.plot()                                     # the chart `kvlab compare --out` draws

Every keyword argument is an option of `kvlab replay` / `kvlab compare` with dashes written as
underscores (capacity_gib=8 is --capacity-gib 8; a switch takes True; a list is joined with commas);
`kvlab.options("replay")` lists them with their defaults. They are parsed and checked by the same C++
code as the command line's, so defaults, checks and error messages are the CLI's, and each result
records the `kvlab` command that reproduces it. docs/python.md has the whole API.
"""
from __future__ import annotations

import concurrent.futures
import csv
import difflib
import io
import itertools
import json
import multiprocessing
import os
import pathlib
import re
import shlex
import tempfile
import time
import warnings
from typing import Any, Iterable, Mapping

import pandas as pd

from . import _kvlab
from ._kvlab import Backend, Error, InvalidArgument, OutOfMemory, QueuedRequest, RunningRequest, UsageError

__all__ = ["replay", "compare", "sweep", "options", "models", "backend_families", "Run", "Comparison", "Tenants",
           "Backend", "Error",
           "UsageError", "InvalidArgument", "OutOfMemory", "QueuedRequest", "RunningRequest"]
__version__ = _kvlab.__version__

# `workload="synthetic"` names the default synthetic workload (what runs without --trace); any other
# value is a trace file, as --trace takes it.
_SYNTHETIC = "synthetic"


def options(command: str = "replay") -> pd.DataFrame:
    """The options of `kvlab replay` or `kvlab compare`: name (as a keyword), takes_value, default, description."""
    rows = [(name.replace("-", "_"), takes, default, text) for name, takes, default, text in _kvlab.options(command)]
    return pd.DataFrame(rows, columns=["name", "takes_value", "default", "description"])


def models() -> list[str]:
    """The model presets (`kvlab models`)."""
    return list(_kvlab.models())


def backend_families() -> list[str]:
    """The backend name grammars, one per registered family (--backend's help)."""
    return list(_kvlab.backend_families())


def _arguments(command: str, kwargs: dict[str, Any]) -> list[str]:
    """`kwargs` as `kvlab COMMAND` arguments, each `--name=value` (a value may start with a dash)."""
    known = {name: takes for name, takes, _, _ in _kvlab.options(command)}
    args: list[str] = []
    for key, value in kwargs.items():
        if value is None:
            continue
        name = key.replace("_", "-")
        if name in ("help", "h"):
            raise UsageError(f"{command}(): help is kvlab.options('{command}') or help(kvlab.{command})")
        if name not in known:
            if f"no-{name}" in known and isinstance(value, bool):  # progress=False is --no-progress
                if not value:
                    args.append(f"--no-{name}")
                continue
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0].replace('-', '_')}?)" if close else ""
            raise UsageError(f"{command}(): unknown option '{key}'{hint}; kvlab.options('{command}') lists them")
        if not known[name]:  # a switch
            if not isinstance(value, bool):
                raise UsageError(f"{command}(): '{key}' is a switch: pass True or False, not {value!r}")
            if value:
                args.append(f"--{name}")
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, os.PathLike):
            text = os.fspath(value)
        elif isinstance(value, (list, tuple)):
            text = ",".join(str(v) for v in value)
        else:
            text = str(value)
        args.append(f"--{name}={text}")
    return args


class Run:
    """One backend's replay: `summary` (summary.json as a dict), `requests` and `steps` (the CSV files'
    columns as DataFrames), and `command`, the `kvlab` command that reproduces it."""

    def __init__(self, backend: dict[str, Any], log: str, timing: dict[str, float] | None = None):
        self.summary: dict[str, Any] = json.loads(backend["summary_json"])
        self.backend: str = self.summary["backend"]
        self.command: str = self.summary.get("command", "")
        self.requests: pd.DataFrame = pd.DataFrame(backend["requests"])
        self.steps: pd.DataFrame = pd.DataFrame(backend["steps"])
        self.log = log
        # Where the call's wall time went: "cli_s" (the work the kvlab binary does for the same run),
        # "frames_s" (records to columns) and "total_s" (the whole call, Python included).
        self.timing: dict[str, float] = timing or {}

    def __repr__(self) -> str:
        s = self.summary
        return (f"kvlab.Run({self.backend}: {s.get('requests')} requests, {s.get('completed')} completed, "
                f"{s.get('preemptions')} preemptions)")


class Comparison:
    """Several backends replayed on one workload: `summary` (compare.csv, one row per backend), `runs`
    (each backend's Run, by name), `requests` and `steps` (all backends', with a `backend` column)."""

    def __init__(self, outcome: dict[str, Any]):
        self.log: str = outcome["log"]
        self.runs: dict[str, Run] = {}
        for b in outcome["backends"]:
            run = Run(b, self.log)
            self.runs[run.backend] = run
        self._compare_csv: str = outcome["compare_csv"]
        self.summary: pd.DataFrame = pd.read_csv(io.StringIO(self._compare_csv))
        first = next(iter(self.runs.values()), None)
        self.command: str = first.command if first else ""

    def _tidy(self, table: str) -> pd.DataFrame:
        frames = [getattr(r, table).assign(backend=name) for name, r in self.runs.items()]
        if not frames:
            return pd.DataFrame()
        frame = pd.concat(frames, ignore_index=True)
        return frame[["backend"] + [c for c in frame.columns if c != "backend"]]

    @property
    def requests(self) -> pd.DataFrame:
        return self._tidy("requests")

    @property
    def steps(self) -> pd.DataFrame:
        return self._tidy("steps")

    def plot(self, path: str | os.PathLike | None = None):
        """The chart `kvlab compare --out` draws (scripts/plot.py's), as a matplotlib Figure; with `path`
        also saved there (PNG, PDF or SVG by its extension)."""
        from . import _plot

        fig = _plot.compare_figure(list(csv.DictReader(io.StringIO(self._compare_csv))))
        if path is not None:
            _plot.save(fig, os.fspath(path))
        return fig

    def __repr__(self) -> str:
        return f"kvlab.Comparison({', '.join(self.runs)})"


class Tenants:
    """Several tenants sharing one GPU's KV memory (`tenants="FILE"`, docs/elastic.md), through each
    backend: `tenants` (tenants.csv: a row per backend and tenant), `gpu` (gpu.csv: the tenants'
    memory together), `memory` (memory.csv: each tenant's held and floor bytes over time; empty with
    keep_steps=False) and `runs`, each tenant's Run by (tenant, backend)."""

    def __init__(self, outcome: dict[str, Any]):
        self.log: str = outcome["log"]
        self.runs: dict[tuple[str, str], Run] = {}
        for b in outcome["backends"]:
            run = Run(b, self.log)
            self.runs[(b["tenant"], run.backend)] = run
        tables = outcome["tables"]
        self.tenants: pd.DataFrame = pd.read_csv(io.StringIO(tables["tenants"]))
        self.gpu: pd.DataFrame = pd.read_csv(io.StringIO(tables["gpu"]))
        self.memory: pd.DataFrame = pd.read_csv(io.StringIO(tables["memory"]))
        first = next(iter(self.runs.values()), None)
        self.command: str = first.command if first else ""

    def __repr__(self) -> str:
        names = sorted({t for t, _ in self.runs})
        backends = sorted({b for _, b in self.runs})
        return f"kvlab.Tenants({', '.join(names)} through {', '.join(backends)})"


def _workload(kwargs: dict[str, Any], workload: str | os.PathLike | None) -> None:
    if workload is None or workload == _SYNTHETIC:
        return
    if "trace" in kwargs:
        raise UsageError("give workload= or trace=, not both")
    kwargs["trace"] = workload


def _policy_names(admit, preempt) -> dict[str, str]:
    return {k: getattr(f, "__qualname__", repr(f)) for k, f in (("admit", admit), ("preempt", preempt)) if f}


def _run(command: str, kwargs: dict[str, Any], keep_steps: bool, admit=None, preempt=None) -> dict[str, Any]:
    start = time.perf_counter()
    args = _arguments(command, kwargs)
    invocation = shlex.join(["kvlab", command] + args)
    outcome = _kvlab.run(command, args, invocation, keep_steps, admit, preempt)
    policies = _policy_names(admit, preempt)
    if policies:  # the recorded command alone does not reproduce a run with Python policies
        for b in outcome["backends"]:
            summary = json.loads(b["summary_json"])
            summary["python_policies"] = policies
            b["summary_json"] = json.dumps(summary)
    for line in outcome["errors"].splitlines():
        if line.startswith("kvlab: warning: "):
            warnings.warn(line[len("kvlab: warning: "):], RuntimeWarning, stacklevel=3)
    outcome["start"] = start
    if outcome["status"] != 0:
        problems = [line for line in outcome["errors"].splitlines() if not line.startswith("kvlab: warning: ")]
        raise Error(problems[-1] if problems else f"kvlab {command} failed (status {outcome['status']})")
    return outcome


def replay(backend: str = "paged-16", workload: str | os.PathLike | None = None, *, keep_steps: bool = True,
           admit=None, preempt=None, **options: Any) -> Run | Tenants:
    """Replays a workload through one backend, as `kvlab replay` does, and returns its Run.

    backend: any registered backend (kvlab.backend_families()); workload: "synthetic" (the default) or
    a trace file (the same as trace=); every other keyword is a `kvlab replay` option
    (kvlab.options("replay")): model="llama-3-8b", capacity_gib=8, requests=200, rate=4, out="dir"
    (also writes the CLI's files there), ... keep_steps=False skips the per-step records (steps is
    then empty) for long traces. Ctrl-C raises KeyboardInterrupt at the next step. With
    tenants="FILE" (several models sharing one GPU) the result is a Tenants, not a Run.

    Scheduling policies in Python (docs/python.md#policies):
      admit(queued: list[QueuedRequest]) -> list[int]: the order in which the head of the waiting
        queue is offered to the backend (a permutation of its indices), each step that can admit;
      preempt(running: list[RunningRequest]) -> int: which running request to preempt when one
        does not fit (the candidates have not claimed memory this step; default: the latest arrival).
    Whatever a policy raises stops the run and is raised here.
    """
    kwargs = {"backend": backend, **options}
    _workload(kwargs, workload)
    outcome = _run("replay", kwargs, keep_steps, admit, preempt)
    if "tables" in outcome:
        return Tenants(outcome)
    run = Run(outcome["backends"][0], outcome["log"])
    run.timing = {"cli_s": outcome["cli_s"], "frames_s": outcome["frames_s"],
                  "total_s": time.perf_counter() - outcome["start"]}
    return run


def compare(backends: Iterable[str] | str | None = None, workload: str | os.PathLike | None = None, *,
            keep_steps: bool = True, admit=None, preempt=None, **options: Any) -> Comparison | Tenants:
    """Replays one workload through several backends side by side, as `kvlab compare` does.

    backends: a list of backend names (default: the CLI's default set); the other arguments as for
    replay(). With out="dir" the CLI's files and chart are written there too.
    """
    kwargs = dict(options)
    if backends is not None:
        kwargs["backends"] = [backends] if isinstance(backends, str) else list(backends)
    _workload(kwargs, workload)
    outcome = _run("compare", kwargs, keep_steps, admit, preempt)
    return Tenants(outcome) if "tables" in outcome else Comparison(outcome)


def _point_name(point: Mapping[str, Any]) -> str:
    """A point's folder: its values, in grid order, as name=value joined by commas, path-safe."""
    text = ",".join(f"{k}={v if not isinstance(v, (list, tuple)) else '+'.join(map(str, v))}" for k, v in point.items())
    return re.sub(r"[^A-Za-z0-9_.=,+-]", "_", text)


def _sweep_point(point: dict[str, Any], fixed: dict[str, Any], folder: str) -> None:
    """One point, in a worker process: a replay writing the CLI's files (complete.json last)."""
    replay(**fixed, **point, out=folder, keep_steps=False, progress=False)


def _point_row(point: Mapping[str, Any], folder: pathlib.Path) -> dict[str, Any]:
    row = dict(point)  # the grid's values as given (backend="paged-16", not compare.csv's "paged-b16")
    row.update({k: v for k, v in pd.read_csv(folder / "compare.csv").iloc[0].to_dict().items() if k not in point})
    row["point"] = folder.name
    return row


def sweep(grid: Mapping[str, Iterable[Any]], *, jobs: int | None = None, out: str | os.PathLike | None = None,
          **fixed: Any) -> pd.DataFrame:
    """Replays every point of `grid` (its options' values, crossed) in `jobs` processes and returns one
    DataFrame: a row per point, the grid's columns and then compare.csv's.

        kvlab.sweep({"backend": ["paged-8", "paged-16", "paged-32"], "rate": [1, 2, 4]}, jobs=2,
                    out="results/my-sweep", model="llama-3-8b", trace="sharegpt_8k_filtered_stats_llama2_tokenizer.csv")

    `fixed` options apply to every point. With `out`, each point writes the CLI's files into
    out/<name=value,...>/ and a rerun skips the points whose complete.json is there (resumable, as
    `kvlab sweep`); a failed point is reported in the `error` column and the others go on.
    """
    names = list(grid)
    values = [list(v) if isinstance(v, (list, tuple, range)) else [v] for v in grid.values()]
    points = [dict(zip(names, combo)) for combo in itertools.product(*values)]
    for point in points:  # the whole grid's options checked before any point runs
        _arguments("replay", {**fixed, **point, "out": "x"})
    temporary = tempfile.TemporaryDirectory(prefix="kvlab-sweep-") if out is None else None
    root = pathlib.Path(temporary.name if temporary else out)
    root.mkdir(parents=True, exist_ok=True)
    folders = [root / _point_name(p) for p in points]
    todo = [i for i, f in enumerate(folders) if not (f / "complete.json").exists()]
    errors: dict[int, str] = {}
    try:
        context = multiprocessing.get_context("spawn")  # no fork of a process that may hold threads
        with concurrent.futures.ProcessPoolExecutor(max_workers=jobs or os.cpu_count(), mp_context=context) as pool:
            futures = {pool.submit(_sweep_point, points[i], fixed, str(folders[i])): i for i in todo}
            for future in concurrent.futures.as_completed(futures):
                if (error := future.exception()) is not None:
                    errors[futures[future]] = f"{type(error).__name__}: {error}"
        rows = []
        for i, (point, folder) in enumerate(zip(points, folders)):
            rows.append(dict(point, point=folder.name, error=errors[i]) if i in errors else _point_row(point, folder))
        if errors:
            warnings.warn(f"sweep: {len(errors)} of {len(points)} points failed (see the error column)",
                          RuntimeWarning, stacklevel=2)
        return pd.DataFrame(rows)
    finally:
        if temporary:
            temporary.cleanup()
