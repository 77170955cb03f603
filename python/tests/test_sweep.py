"""kvlab.sweep: a grid over processes, one DataFrame, resumable."""
import warnings

import pytest

import kvlab

FIXED = dict(requests=40, rate=8, model="llama-3-8b", capacity_gib=1)


def test_a_grid_runs_every_point_once_and_resumes(tmp_path):
    grid = {"backend": ["paged-8", "paged-32"], "seed": [1, 2]}
    frame = kvlab.sweep(grid, jobs=2, out=tmp_path, **FIXED)
    assert len(frame) == 4 and list(frame.columns[:2]) == ["backend", "seed"]
    assert set(frame["backend"]) == {"paged-8", "paged-32"}
    assert (frame["completed"] > 0).all() and "error" not in frame
    # each row is that point's replay, as kvlab.replay gives it
    one = kvlab.replay(backend="paged-32", seed=2, **FIXED).summary
    row = frame[(frame["backend"] == "paged-32") & (frame["seed"] == 2)].iloc[0]
    assert row["completed"] == one["completed"] and row["preemptions"] == one["preemptions"]
    # a rerun finds every point complete and runs none: a point's files are not rewritten
    marker = tmp_path / frame["point"][0] / "complete.json"
    stamp = marker.stat().st_mtime_ns
    again = kvlab.sweep(grid, jobs=2, out=tmp_path, **FIXED)
    assert marker.stat().st_mtime_ns == stamp
    assert again.drop(columns=[c for c in again.columns if c.startswith("replay_")]).equals(
        frame.drop(columns=[c for c in frame.columns if c.startswith("replay_")]))


def test_a_failing_point_is_reported_and_the_others_run(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = kvlab.sweep({"backend": ["paged-16", "paged-0"]}, jobs=2, out=tmp_path, requests=20)
    assert any("1 of 2 points failed" in str(w.message) for w in caught)
    bad = frame[frame["backend"] == "paged-0"].iloc[0]
    assert bad["error"].startswith("InvalidArgument: ") and "paged-0" in bad["error"]
    assert frame[frame["backend"] == "paged-16"].iloc[0]["completed"] == 20
    assert not (tmp_path / bad["point"] / "complete.json").exists()


def test_a_bad_option_fails_before_any_point_runs(tmp_path):
    with pytest.raises(kvlab.UsageError, match="unknown option 'rat'"):
        kvlab.sweep({"rat": [1, 2]}, out=tmp_path)
    assert not any(tmp_path.iterdir())
