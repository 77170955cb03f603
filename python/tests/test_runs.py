"""kvlab.replay and kvlab.compare: what they return, and that it is what the CLI writes."""
import json
import re
import subprocess

import numpy as np
import pandas as pd
import pytest

import kvlab

SMALL = dict(requests=60, rate=8, seed=7)  # a few hundred steps: fast, yet preemptions and waits
# Fields that are a run's own wall time or provenance, never the same twice.
VOLATILE = {"command", "provenance", "replay_wall_s", "replay_tokens_per_s"}


def stable(summary):
    return {k: v for k, v in summary.items() if k not in VOLATILE}


def cli(binary, *args):
    return subprocess.run([binary, *args], capture_output=True, text=True, check=False)


def test_replay_returns_summary_requests_and_steps():
    run = kvlab.replay(backend="paged-16", **SMALL)
    assert run.backend == "paged-b16"  # the canonical name, as the CLI's folders spell it
    assert run.summary["requests"] == 60 == len(run.requests)
    assert run.summary["steps"] == len(run.steps) > 0
    assert run.summary["completed"] == int((run.requests["status"] == "completed").sum())
    assert run.summary["generated_tokens"] == int(run.requests["generated_tokens"].sum())
    # every step's five fractions add up to the whole capacity
    fractions = run.steps[[c for c in run.steps.columns if c.endswith("_frac")]].sum(axis=1)
    np.testing.assert_allclose(fractions, 1.0, atol=1e-9)
    assert run.command.startswith("kvlab replay ") and "--requests=60" in run.command
    assert "paged-b16" in run.log and "token_states" in run.log  # the table the CLI prints


def test_replay_equals_the_cli_run_of_its_recorded_command(kvlab_binary, tmp_path):
    run = kvlab.replay(backend="paged-16", model="llama-3-8b", capacity_gib=1, **SMALL)
    # The command the result records, run by the CLI, gives the same summary and the same records.
    args = run.command.split()[1:] + [f"--out={tmp_path}", "--no-progress"]
    done = cli(kvlab_binary, *args)
    assert done.returncode == 0, done.stderr
    written = json.loads((tmp_path / "paged-b16" / "summary.json").read_text())
    assert stable(written) == stable(run.summary)
    for table, frame in (("requests", run.requests), ("steps", run.steps)):
        from_file = pd.read_csv(tmp_path / "paged-b16" / f"{table}.csv", keep_default_na=False)
        assert list(from_file.columns) == list(frame.columns)
        for column in frame.columns:
            if frame[column].dtype.kind in "if":  # the files carry 9 significant digits
                np.testing.assert_allclose(from_file[column], frame[column], rtol=1e-8, err_msg=column)
            else:
                assert list(from_file[column].astype(str)) == list(frame[column]), column


def test_out_writes_the_cli_files(tmp_path):
    run = kvlab.replay(backend="contiguous-oracle", out=tmp_path, progress=False, **SMALL)
    assert (tmp_path / "complete.json").exists()
    written = json.loads((tmp_path / "contiguous-oracle" / "summary.json").read_text())
    assert stable(written) == stable(run.summary)


def test_compare_is_one_tidy_frame_across_backends(kvlab_binary, tmp_path):
    cmp = kvlab.compare(["contiguous-max", "paged-16", "vmm-64k"], **SMALL)
    names = ["contiguous-max", "paged-b16", "vmm-64k"]  # canonical names
    assert list(cmp.runs) == names
    assert list(cmp.summary["backend"]) == names
    assert set(cmp.requests["backend"]) == set(names) and len(cmp.requests) == 3 * 60
    assert list(cmp.steps.columns[:2]) == ["backend", "time_s"]
    for name in names:
        row = cmp.summary.set_index("backend").loc[name]
        assert row["completed"] == cmp.runs[name].summary["completed"]
        assert row["preemptions"] == cmp.runs[name].summary["preemptions"]
    done = cli(kvlab_binary, *cmp.command.split()[1:], f"--out={tmp_path}", "--no-progress")
    assert done.returncode == 0, done.stderr
    from_file = pd.read_csv(tmp_path / "compare.csv")
    keep = [c for c in from_file.columns if not c.startswith("replay_")]
    pd.testing.assert_frame_equal(from_file[keep], cmp.summary[keep])


def test_plot_draws_the_compare_chart(tmp_path):
    cmp = kvlab.compare(["contiguous-pow2", "paged-16"], **SMALL)
    fig = cmp.plot(tmp_path / "chart.png")
    assert (tmp_path / "chart.png").stat().st_size > 10_000
    titles = [ax.get_title() for ax in fig.axes]
    assert any("KV cache memory" in t for t in titles) and any("Throughput" in t for t in titles)


def test_keyword_arguments_follow_the_cli_options():
    opts = kvlab.options("replay")
    assert {"capacity_gib", "model", "trace", "requests", "chunked_prefill"} <= set(opts["name"])
    assert opts.set_index("name").loc["backend", "default"] == "paged-16"
    # a switch, a list and a path all reach the CLI's parser
    run = kvlab.replay(backend="paged-16", chunked_prefill=True, percentiles=[50, 99.9], **SMALL)
    assert "--chunked-prefill" in run.command and "--percentiles=50,99.9" in run.command
    assert "ttft_p99_9_ms" in run.summary["serving"]


def schema_columns(text, section):
    """(column, unit) of a docs/schema.md table."""
    body = text.split(f"## `{section}`", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z0-9_]+)` \| ([a-z]+) \|", body, re.M)


UNIT_DTYPES = {"s": "float64", "frac": "float64", "count": "int64", "bytes": "int64", "tokens": "int64",
               "id": "int64", "text": "str"}


@pytest.mark.parametrize("table", ["steps", "requests"])
def test_frames_match_the_schema(schema_text, table):
    documented = schema_columns(schema_text, f"{table}.csv")
    assert len(documented) >= 10
    run = kvlab.replay(backend="paged-16", **SMALL)
    frame = getattr(run, table)
    assert list(frame.columns) == [name for name, _ in documented]
    for name, unit in documented:
        want = UNIT_DTYPES[unit]
        got = frame[name].dtype
        assert (pd.api.types.is_string_dtype(got) if want == "str" else str(got) == want), (name, unit, got)
