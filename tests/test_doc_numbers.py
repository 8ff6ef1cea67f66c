"""The numbers docs/ quotes for a preset or a checkpoint come from the runs the pages name, written
by docs/doc_numbers.py: each page holds its blocks once, and a fresh run gives exactly them."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def script(doc_numbers):
    return doc_numbers  # docs/doc_numbers.py, loaded once for the session (conftest.py)


def test_every_block_lies_once_in_its_page_and_names_its_run(script):
    for name, block in script.BLOCKS.items():
        page = (script.DOCS / block.page).read_text(encoding="utf-8")
        begin, end = script.markers(name)
        assert page.count(begin) == 1 and page.count(end) == 1 and page.index(begin) < page.index(end)
        assert f"python docs/doc_numbers.py {name}" in page  # how to regenerate it, said beside it
    pretrained = (script.DOCS / "pretrained.md").read_text(encoding="utf-8")
    assert "72.0000 with R^2" not in pretrained  # the old hand-copied "exact" fit, contradicted by layer 0


def _written_from(script, name, result):
    """Block `name` of its page is what the script writes from `result`, its run's output."""
    block = script.BLOCKS[name]
    page = (script.DOCS / block.page).read_text(encoding="utf-8")
    new = script.replaced(page, name, block.write(result))
    assert new == page, f"docs: block {name} differs from a fresh run; run python docs/doc_numbers.py {name}"


def _fresh(script, name):
    _, page, new = script.fresh(name)
    assert new == page, f"docs: block {name} differs from a fresh run; run python docs/doc_numbers.py {name}"


@pytest.mark.slow
def test_smollm2_numbers_match_a_fresh_run(script, smollm2_report):
    """The SmolLM2 block from the session's run of the script's own command (`smollm2_report`)."""
    _written_from(script, "smollm2", smollm2_report)


@pytest.mark.slow
def test_demo_numbers_match_a_fresh_run(script, demo_run):
    """The demo's block from the session's demo run (the same command as the script's)."""
    summary = json.loads((demo_run / "summary.json").read_text(encoding="utf-8"))
    _written_from(script, "concentration-demo", summary)


@pytest.mark.slow
def test_metastability_numbers_match_a_fresh_run(script):
    _fresh(script, "metastability-tiny")
