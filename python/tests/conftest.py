"""The Python package's tests (run by ctest as python.pytest: scripts/test.sh runs them).

They import the package the release build assembled (build/<preset>/python, on PYTHONPATH) and run
the kvlab binary beside it (KVLAB_BINARY) for the parity checks."""
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def kvlab_binary():
    path = os.environ.get("KVLAB_BINARY")
    if not path or not os.access(path, os.X_OK):
        pytest.fail("KVLAB_BINARY must name the kvlab binary of the same build (ctest sets it)")
    return path


@pytest.fixture(scope="session")
def schema_text():
    return (ROOT / "docs" / "schema.md").read_text()
