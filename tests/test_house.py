"""The house rules that a linter does not state: few top-level modules (one room per concept) and no
long functions."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "attnflow"
MAX_TOP_MODULES = 10  # beside __init__.py
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
