"""Ctrl-C stops a run at a step boundary with KeyboardInterrupt, as SIGINT stops the CLI's."""
import _thread
import threading
import time

import pytest

import kvlab


def test_ctrl_c_stops_a_long_run_and_leaves_no_complete_marker(tmp_path):
    timer = threading.Timer(0.5, _thread.interrupt_main)  # what Ctrl-C does: SIGINT to the main thread
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            # about a minute of replay: the interrupt must stop it, not its end
            kvlab.replay(backend="paged-16", requests=100_000, rate=100, out=tmp_path, progress=False,
                         max_memory_gib=20)
    finally:
        timer.cancel()
    assert time.monotonic() - start < 10
    assert not (tmp_path / "complete.json").exists()
    # the package works on after an interrupt
    assert kvlab.replay(backend="paged-16", requests=10).summary["requests"] == 10
