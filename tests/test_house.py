"""The house rules that a linter does not state: few top-level modules (one room per concept), no
long functions, and the old import paths still working for one release."""

from __future__ import annotations

import ast
import importlib
import sys
import warnings
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "attnflow"
MAX_TOP_MODULES = 10  # beside __init__.py; the deprecated aliases live in one table (_compat)
MAX_LINES = 60  # lines of code of a function, its docstring apart


def test_at_most_ten_top_level_modules():
    modules = sorted(p.name for p in SRC.glob("*.py") if p.name != "__init__.py")
    assert len(modules) <= MAX_TOP_MODULES, modules


def _long_functions(path: Path, root: Path = SRC) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            doc = isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant)
            start = body[1].lineno if doc and len(body) > 1 else body[0].lineno
            if node.end_lineno - start + 1 > MAX_LINES:
                out.append(f"{path.relative_to(root)}:{node.lineno} {node.name}")
    return out


def test_no_function_over_sixty_lines():
    long = [f for p in sorted(SRC.rglob("*.py")) for f in _long_functions(p)]
    assert not long, long


def test_the_check_sees_a_long_function(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('def f():\n    """doc"""\n' + "    x = 1\n" * (MAX_LINES + 1))
    assert _long_functions(f, tmp_path) == ["m.py:1 f"]


@pytest.mark.parametrize("old", sorted(importlib.import_module("attnflow._compat").MOVED))
def test_old_import_paths_work_with_a_deprecation_warning(old):
    new = importlib.import_module("attnflow._compat").MOVED[old]
    sys.modules.pop(old, None)  # imported by an earlier test: the warning comes on import
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message) for w in caught)
