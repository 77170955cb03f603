"""Scheduling policies written in Python: called by the replayer, checked, and their errors raised."""
import pytest

import kvlab

LOADED = dict(backend="paged-16", model="llama-3-8b", capacity_gib=0.5, requests=80, rate=20, seed=3,
              progress=False)


def test_an_admission_order_equal_to_fcfs_changes_nothing():
    calls = []

    def fcfs(queued):
        calls.append(len(queued))
        assert all(isinstance(q, kvlab.QueuedRequest) for q in queued)
        assert [q.id for q in queued] == sorted(q.id for q in queued) or any(q.preemptions for q in queued)
        return list(range(len(queued)))

    with_policy = kvlab.replay(admit=fcfs, **LOADED)
    plain = kvlab.replay(**LOADED)
    assert calls and max(calls) >= 2
    for key in ("completed", "preemptions", "steps", "makespan_s", "generated_tokens"):
        assert with_policy.summary[key] == plain.summary[key], key
    assert with_policy.summary["python_policies"] == {"admit": "test_an_admission_order_equal_to_fcfs_changes_nothing."
                                                               "<locals>.fcfs"}


def test_shortest_prompt_first_changes_who_waits():
    def shortest_first(queued):
        return sorted(range(len(queued)), key=lambda i: queued[i].prompt_tokens)

    sjf = kvlab.replay(admit=shortest_first, **LOADED)
    fcfs = kvlab.replay(**LOADED)
    # shorter prompts admitted first: their time to first token falls against FCFS's
    def short_ttft(run):
        r = run.requests
        done = r[r["status"] == "completed"]
        short = done[done["prompt_tokens"] <= done["prompt_tokens"].median()]
        return (short["first_token_s"] - short["arrival_s"]).mean()

    assert short_ttft(sjf) < short_ttft(fcfs)


def test_a_preemption_policy_chooses_the_victim():
    seen = []

    def oldest(running):
        seen.append([r.id for r in running])
        return 0  # the earliest arrival among the candidates, not vLLM's latest

    run = kvlab.replay(preempt=oldest, **LOADED)
    assert seen, "the load must preempt"
    assert all(ids == sorted(ids) for ids in seen)  # candidates come in arrival order
    assert run.summary["preemptions"] >= len(seen)
    assert isinstance(kvlab.replay(preempt=lambda running: len(running) - 1, **LOADED).summary["preemptions"], int)


def test_a_policy_that_raises_stops_the_run_with_its_exception():
    class Boom(Exception):
        pass

    def broken(queued):
        raise Boom("policy failed on purpose")

    with pytest.raises(Boom, match="on purpose"):
        kvlab.replay(admit=broken, **LOADED)
    assert kvlab.replay(**LOADED).summary["requests"] == 80  # usable at once


@pytest.mark.parametrize("answer, message", [([0], "each of the"), ([0, 0], "each of the"), ("x", "list of indices")])
def test_a_bad_admission_answer_is_refused(answer, message):
    with pytest.raises((kvlab.InvalidArgument, kvlab.UsageError), match=message):
        kvlab.replay(admit=lambda queued: answer if len(queued) > 1 else list(range(len(queued))), **LOADED)


def test_a_bad_victim_is_refused():
    with pytest.raises(kvlab.InvalidArgument, match="index below"):
        kvlab.replay(preempt=lambda running: len(running), **LOADED)
    with pytest.raises(kvlab.UsageError, match="must be callable"):
        kvlab.replay(preempt=3, **LOADED)
