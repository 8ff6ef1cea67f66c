"""The documentation site's sources stay complete: every public name is in the API reference
(docs/api/*.rst), every gallery script has the header sphinx-gallery needs. `make docs` builds it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import attnflow

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api"
SRC = ROOT / "src" / "attnflow"
# the subpackages whose __init__ declares a public face (__all__); each has its page docs/api/<name>.rst
FACES = sorted(p.parent.name for p in SRC.glob("*/__init__.py") if "__all__" in p.read_text())


def autosummary_names(page: Path) -> set[str]:
    """The entries of the page's autosummary tables, as written ('~attnflow.X' is 'X')."""
    names, inside = set(), False
    for line in page.read_text().splitlines():
        if line.startswith(".. autosummary::"):
            inside = True
        elif inside and line and not line.startswith(" "):
            inside = False
        elif inside and re.fullmatch(r"   [~\w.]+", line):
            names.add(line.strip().lstrip("~").rpartition(".")[2])
    return names


def face_names(package: str) -> list[str]:
    """The package's __all__, read from its source (nothing imported)."""
    for node in ast.parse((SRC / package / "__init__.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"attnflow.{package} has no literal __all__")


def test_every_top_level_name_is_in_the_reference():
    missing = sorted(set(attnflow.__all__) - autosummary_names(API / "attnflow.rst"))
    assert not missing, f"add them to docs/api/attnflow.rst: {missing}"


@pytest.mark.parametrize("package", FACES)
def test_every_name_of_a_face_is_in_its_page(package):
    page = API / f"{package}.rst"
    assert page.is_file(), f"attnflow.{package} has a public face but no page {page.name}"
    missing = sorted(set(face_names(package)) - autosummary_names(page))
    assert not missing, f"add them to docs/api/{package}.rst: {missing}"
    assert f"\n   {package}\n" in (API / "index.rst").read_text(), "its page is not in the API toctree"


def test_the_check_sees_a_missing_name(tmp_path):
    page = tmp_path / "p.rst"
    page.write_text(".. autosummary::\n   :toctree: g/\n\n   simulate\n   ~attnflow.w2\n\nText\n   t_star\n")
    assert autosummary_names(page) == {"simulate", "w2"}


def test_faces_are_found():
    assert {"attention", "experiments", "sweeps"} <= set(FACES)


@pytest.mark.parametrize("script", sorted((ROOT / "examples" / "gallery").glob("*.py")), ids=lambda p: p.name)
def test_gallery_scripts_have_a_titled_header(script):
    doc = ast.get_docstring(ast.parse(script.read_text()), clean=False)
    assert doc is not None, "a gallery script starts with its docstring"
    lines = doc.strip("\n").splitlines()
    assert len(lines) >= 3 and set(lines[1]) == {"="} and len(lines[1]) >= len(lines[0]), lines[:2]
    assert script.name.startswith("plot_"), "only plot_*.py scripts are executed and shown"
