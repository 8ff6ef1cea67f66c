"""Sphinx configuration of the attnflow documentation (`make docs` builds docs/_build/html).

The pages are the Markdown files of docs/ (MyST), the API reference is docs/api/*.rst (autodoc,
autosummary, numpydoc), and the gallery is examples/gallery/, executed at build time.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import attnflow  # noqa: E402

project = "attnflow"
author = "attnflow contributors"
copyright = "attnflow contributors"
release = attnflow.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
smartquotes = False  # the pages and docstrings write code-like text: (..., N, d), "rk4"
exclude_patterns = ["_build", "**/*.ipynb", "auto_examples/*.py", "auto_examples/*.ipynb"]

# MyST: `[math.md](math.md)` links between the pages; headings get anchors for `page.md#section`
myst_heading_anchors = 3
myst_enable_extensions = ["deflist"]

# the API reference: one page per name (docs/api/generated/, written at build time)
templates_path = ["_templates"]  # autosummary/data.rst: a constant's page without its repr
autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"  # the signature shows the hints; numpydoc sections give types in words
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks: set[str] = set()

sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples" / "gallery"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",  # executed: every plot_*.py (each well under a minute on 2 cores)
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "abort_on_example_error": True,
}

html_theme = "pydata_sphinx_theme"
html_title = f"attnflow {release}"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}
html_static_path: list[str] = []


# The docstrings write their formulas as plain text (|B^T x|, sum_j w_ij, x * y): in reST `|...|` is
# a substitution and `*...*` emphasis, so both are escaped outside inline literals and literal blocks.
_LITERAL = re.compile(r"(``.*?``|`[^`]*`)")
_STARRED = re.compile(r"^(\s*)\\(\*)(?:\\(\*))?(?=\w+( :|$))")


def _escape(line: str) -> str:
    parts = _LITERAL.split(line)
    parts[::2] = [p.replace("|", "\\|").replace("*", "\\*") for p in parts[::2]]
    return "".join(parts)


def plain_text_formulas(app, what, name, obj, options, lines: list[str]) -> None:
    if not name.startswith("attnflow"):
        return
    block = None  # the indentation of the paragraph that opened a literal block (`::`)
    for i, line in enumerate(lines):
        indent = len(line) - len(line.lstrip())
        if block is not None and line.strip() and indent <= block:
            block = None
        if block is None and not line.lstrip().startswith(">>>"):
            # numpydoc escapes the stars of `*args` / `**kwargs` in a parameter's name itself
            lines[i] = _STARRED.sub(r"\1\2\3", _escape(line))
            if line.rstrip().endswith("::"):
                block = indent


def _constant_doc(name: str, obj: object) -> list[str]:
    """A module constant's comment (the `#` lines above its assignment, or the one after it) in the
    module of its package that defines it, and its value when short."""
    package, _, attr = name.rpartition(".")
    folder = ROOT / "src" / Path(*package.split("."))
    files = [folder / "__init__.py", *sorted(folder.rglob("*.py"))] if folder.is_dir() else []
    for path in files:
        lines = path.read_text().splitlines()
        starts = [i for i, line in enumerate(lines) if re.match(rf"{attr}\s*(:[^=]*)?=", line)]
        module = ".".join(path.relative_to(ROOT / "src").with_suffix("").parts).removesuffix(".__init__")
        if not starts or getattr(importlib.import_module(module), attr, None) is not obj:
            continue
        i, above = starts[0], []
        while i > 0 and lines[i - 1].startswith("#"):
            i -= 1
            above.insert(0, lines[i].lstrip("#:").strip())
        after = lines[starts[0]].partition("  # ")[2].strip()
        text = [" ".join(above)] if above else [after] if after else []
        value = repr(obj)
        return text + (["", f"Value: ``{value}``"] if len(value) <= 80 and " at 0x" not in value else [])
    return []


def constant_docs(app, what, name, obj, options, lines: list[str]) -> None:
    if what != "data" or not name.startswith("attnflow"):
        return
    own = "\n".join(lines).strip()
    if not own or own == inspect.cleandoc(type(obj).__doc__ or "").strip():  # the type's, not its own
        lines[:] = _constant_doc(name, obj)


def setup(app) -> None:
    app.connect("autodoc-process-docstring", constant_docs, priority=300)
    app.connect("autodoc-process-docstring", plain_text_formulas, priority=400)  # before numpydoc
