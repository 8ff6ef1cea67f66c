"""Fixtures shared by several test modules."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

_CACHE_ENV = "ATTNFLOW_CACHE_DIR"  # attnflow.kernels.cache.CACHE_ENV


def pytest_configure(config):
    """The kernels' cache (the compiled fused core, calibrated cost constants) lives in a temporary
    directory for the whole session: tests never read or write the user's cache."""
    config._attnflow_cache = tempfile.mkdtemp(prefix="attnflow-cache-")
    os.environ[_CACHE_ENV] = config._attnflow_cache


def pytest_unconfigure(config):
    path = getattr(config, "_attnflow_cache", None)
    if path:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """The default run (`attnflow run`: the concentration-demo preset, no figures), made once for the
    session: the demo's test and the docs' demo numbers both read it."""
    from attnflow.cli.app import DEFAULT_RUN
    from cli_helpers import invoke

    out = tmp_path_factory.mktemp("demo") / DEFAULT_RUN
    result = invoke("run", DEFAULT_RUN, "--out", str(out), "--quiet", "--no-figures")
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="session")
def finished(tmp_path_factory):
    """A finished tiny concentration run, made once for the session: tests that change it (damage,
    resume, plot) work on a copy."""
    from cli_helpers import TINY, invoke

    out = tmp_path_factory.mktemp("run") / "tiny"
    result = invoke("run", *TINY, "--out", str(out), "--quiet", "--no-figures")
    assert result.exit_code == 0, result.output
    return out
