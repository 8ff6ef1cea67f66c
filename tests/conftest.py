"""Fixtures shared by several test modules."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished tiny concentration run (tests that damage it work on a copy)."""
    from cli_helpers import TINY, invoke

    out = tmp_path_factory.mktemp("run") / "tiny"
    result = invoke("run", *TINY, "--out", str(out), "--quiet", "--no-figures")
    assert result.exit_code == 0, result.output
    return out
