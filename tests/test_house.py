"""The house rules that a linter does not state: few top-level modules (one room per concept), no
long functions, no private name imported from another package's module."""

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


def _module_parts(path: Path, root: Path) -> tuple[list[str], list[str]]:
    """The dotted parts of the module at path and of the package it lies in."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        return parts[:-1], parts[:-1]
    return parts, parts[:-1]


def _private_imports(path: Path, root: Path = SRC) -> list[str]:
    """`from .x import _y` where _y is a private name of another module, except from a private module
    (its name starts with "_") of the importer's own package: the parts of a package share names
    through their private modules, never across packages or through public modules."""
    _, package = _module_parts(path, root)
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = package[: len(package) - node.level + 1] if node.level else []
        target = base + (node.module.split(".") if node.module else [])
        if target[:1] != [root.name]:
            continue
        folder = root.parent.joinpath(*target)
        for alias in node.names:
            name = alias.name
            if not name.startswith("_") or name.startswith("__"):
                continue
            if (folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file():
                continue  # a module, not a name: the private_modules contract of lint-imports rules it
            if target[-1].startswith("_") and target[:-1] == package:
                continue
            out.append(f"{path.relative_to(root)}:{node.lineno} {name} from {'.'.join(target)}")
    return out


def test_no_private_name_imported_from_another_module():
    found = [f for p in sorted(SRC.rglob("*.py")) for f in _private_imports(p)]
    assert not found, found


def test_the_check_sees_a_private_import(tmp_path):
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    for name in ("__init__.py", "a.py", "_b.py", "sub/__init__.py", "sub/_c.py"):
        (root / name).write_text("")
    (root / "m.py").write_text("from .a import _x\nfrom ._b import _y, z\nfrom .sub._c import _w\n")
    (root / "sub" / "d.py").write_text("from ._c import _v\nfrom .. import _b\nfrom .._b import _u\n")
    (root / "sub" / "__init__.py").write_text("from ._c import _t\n")
    found = [f for p in sorted(root.rglob("*.py")) for f in _private_imports(p, root)]
    assert found == ["m.py:1 _x from pkg.a", "m.py:3 _w from pkg.sub._c", "sub/d.py:3 _u from pkg._b"]
