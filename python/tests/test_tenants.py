"""tenants="FILE" from Python: several models sharing one GPU's KV memory, as `--tenants` runs them."""
import json
import subprocess

import pandas as pd
import pytest

import kvlab

TENANTS = """# two tenants, bursts 20 s apart
chat model=llama-3-8b requests=60 rate=6 burstiness=3 prompt-len=uniform:200:1200 output-len=uniform:50:300 seed=1
code model=llama-3-8b requests=60 rate=6 burstiness=3 prompt-len=uniform:200:1200 output-len=uniform:50:300 seed=2 offset=20
"""


@pytest.fixture
def tenants_file(tmp_path):
    path = tmp_path / "tenants.txt"
    path.write_text(TENANTS)
    return path


def test_tenants_give_the_three_tables_and_every_tenants_run(tenants_file, kvlab_binary, tmp_path):
    t = kvlab.compare(["paged-16", "elastic-16"], tenants=tenants_file, capacity_gib=2, progress=False)
    assert isinstance(t, kvlab.Tenants)
    assert list(zip(t.tenants["backend"], t.tenants["tenant"])) == [
        ("paged-b16", "chat"), ("paged-b16", "code"), ("elastic-16-2m", "chat"), ("elastic-16-2m", "code")]
    assert list(t.tenants["policy"]) == ["static"] * 2 + ["elastic"] * 2
    assert set(t.runs) == {(n, b) for n in ("chat", "code") for b in ("paged-b16", "elastic-16-2m")}
    for (tenant, backend), run in t.runs.items():
        row = t.tenants[(t.tenants["tenant"] == tenant) & (t.tenants["backend"] == backend)].iloc[0]
        assert run.summary["completed"] == row["completed"] == (run.requests["status"] == "completed").sum()
    assert list(t.gpu["backend"]) == ["paged-b16", "elastic-16-2m"]
    assert set(t.memory["tenant"]) == {"chat", "code"} and (t.memory["held_bytes"] >= 0).all()
    # the CLI writes the same tables for the command the result records
    out = tmp_path / "cli"
    done = subprocess.run([kvlab_binary, *t.command.split()[1:], f"--out={out}"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    pd.testing.assert_frame_equal(pd.read_csv(out / "tenants.csv"), t.tenants)
    pd.testing.assert_frame_equal(pd.read_csv(out / "gpu.csv"), t.gpu)
    written = json.loads((out / "chat" / "elastic-16-2m" / "summary.json").read_text())
    assert written["completed"] == t.runs[("chat", "elastic-16-2m")].summary["completed"]


def test_a_bad_tenants_file_names_its_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("chat model=llama-3-8b requests=10\nchat model=nope requests=10\n")
    with pytest.raises(kvlab.Error, match="bad.txt:2"):
        kvlab.replay(backend="elastic-16", tenants=bad)


def test_policies_are_refused_with_tenants(tenants_file):
    with pytest.raises(kvlab.UsageError, match="not with --tenants"):
        kvlab.replay(backend="elastic-16", tenants=tenants_file, admit=lambda q: list(range(len(q))))
