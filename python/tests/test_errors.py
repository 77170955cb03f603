"""Bad input raises a kvlab exception carrying the CLI's message; nothing crashes."""
import subprocess

import pytest

import kvlab


def cli_error(binary, *args):
    done = subprocess.run([binary, *args, "--no-progress"], capture_output=True, text=True, check=False)
    assert done.returncode == 2, done.stderr
    return done.stderr.strip()


def test_an_unknown_keyword_is_named_with_a_suggestion():
    with pytest.raises(kvlab.UsageError, match=r"unknown option 'capacity_gb' \(did you mean capacity_gib\?\)"):
        kvlab.replay(capacity_gb=8)


def test_a_bad_value_raises_the_message_the_cli_prints(kvlab_binary):
    with pytest.raises(kvlab.UsageError) as e:
        kvlab.replay(capacity_gib=-1)
    assert isinstance(e.value, ValueError) and isinstance(e.value, kvlab.Error)
    printed = cli_error(kvlab_binary, "replay", "--capacity-gib=-1")
    assert printed.endswith(str(e.value)), (printed, str(e.value))


def test_an_unknown_backend_lists_the_families(kvlab_binary):
    with pytest.raises(kvlab.InvalidArgument, match="paged-B") as e:
        kvlab.replay(backend="pagd-16")
    assert cli_error(kvlab_binary, "replay", "--backend=pagd-16").endswith(str(e.value))


def test_a_missing_trace_is_named(tmp_path):
    missing = tmp_path / "nope.csv"
    with pytest.raises(kvlab.Error, match="nope.csv"):
        kvlab.replay(workload=missing, model="llama-3-8b")


def test_a_malformed_trace_names_file_line_and_field(tmp_path):
    trace = tmp_path / "bad.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,12,x\n")
    with pytest.raises(kvlab.InvalidArgument, match=r"bad.csv:2.*GeneratedTokens"):
        kvlab.replay(workload=trace, model="llama-3-8b")


def test_a_switch_given_a_value_is_refused():
    with pytest.raises(kvlab.UsageError, match="'chunked_prefill' is a switch"):
        kvlab.replay(chunked_prefill="yes")


def test_workload_and_trace_together_are_refused():
    with pytest.raises(kvlab.UsageError, match="not both"):
        kvlab.replay(workload="a.csv", trace="b.csv")
