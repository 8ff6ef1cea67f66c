"""The documents match the code: every fenced Python example of README.md and docs/*.md runs, and
the dataset schema of each experiment in docs/experiments.md is that of a real run.

A Python example that cannot run in the test suite (it needs a checkpoint, a cluster or hours) says
so in its fence, ```` ```python not-run ````, and its first line is a comment saying why.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = "not-run"


def fenced_python(path: Path) -> list[tuple[int, str, str]]:
    """(first line number, info string, code) of each ```python block of a Markdown file."""
    blocks, current, start, info = [], None, 0, ""
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if current is None and line.startswith("```python"):
            current, start, info = [], n + 1, line[3:].strip()
        elif current is not None and line.startswith("```"):
            blocks.append((start, info, "\n".join(current) + "\n"))
            current = None
        elif current is not None:
            current.append(line)
    assert current is None, f"{path.name}: a ```python block opened at line {start} is never closed"
    return blocks


EXAMPLES = [
    pytest.param(path, line, info, code, id=f"{path.name}:{line}")
    for path in DOCUMENTS
    for line, info, code in fenced_python(path)
]


def test_every_document_is_read():
    names = {p.name for p in DOCUMENTS}
    assert {"README.md", "guide.md", "experiments.md", "sweeps.md", "pretrained.md"} <= names
    assert sum(NOT_RUN not in info for _, _, info, _ in (p.values for p in EXAMPLES)) >= 2


@pytest.mark.parametrize(("path", "line", "info", "code"), EXAMPLES)
def test_fenced_python_example(path, line, info, code, tmp_path, monkeypatch):
    """Each example runs as a user would paste it, in an empty folder (one that writes files writes
    them there); a not-run example still compiles, and says why it is not run."""
    compiled = compile(code, f"{path.name}:{line}", "exec")
    if NOT_RUN in info.split():
        first = code.lstrip().splitlines()[0]
        assert first.startswith("# "), f"{path.name}:{line}: a not-run example starts with why: {first!r}"
        return
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    exec(compiled, {"__name__": "__main__"})


# ------------------------------------------------------------------------------------- schemas

EXPERIMENTS_MD = ROOT / "docs" / "experiments.md"
NAME = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)`")
GROUP = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)`|\(([^()]*)\)")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _paragraphs(text: str) -> list[str]:
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]


def _section(title: str) -> str:
    """The text of the `## title` section of docs/experiments.md (its first word)."""
    text = EXPERIMENTS_MD.read_text(encoding="utf-8")
    parts = re.split(r"^## ", text, flags=re.M)
    found = [p for p in parts if p.split("\n", 1)[0].split()[0] == title]
    assert len(found) == 1, f"docs/experiments.md has no single '## {title}' section"
    return found[0]


def parse_schema(paragraph: str) -> dict:
    """The names a "Schema:" paragraph lists: coords, variables with the dims written after them,
    attrs, and the optional ones (clauses "with X: ...")."""
    out: dict = {"coords": set(), "vars": {}, "attrs": set(), "optional": set()}
    for clause in paragraph.removeprefix("Schema:").split(";"):
        clause = clause.strip().rstrip(".")
        optional = clause.startswith("with ")
        if optional:
            clause = clause.split(":", 1)[1].strip()
        kind = "coords" if clause.startswith("coords") else "attrs" if clause.startswith("attrs") else "vars"
        if kind != "vars":  # a parenthesis there describes, it lists no dims
            names = NAME.findall(re.sub(r"\([^()]*\)", "", clause))
            out[kind].update(names)
        else:
            names, pending = [], []
            for m in GROUP.finditer(clause):
                if m.group(1):
                    pending.append(m.group(1))
                elif all(IDENT.fullmatch(d.strip()) for d in m.group(2).split(",") if d.strip()):
                    dims = tuple(d.strip() for d in m.group(2).split(",") if d.strip())
                    out["vars"].update({n: dims for n in pending})
                    names += pending
                    pending = []
            out["vars"].update({n: None for n in pending})
            names += pending
        if optional:
            out["optional"].update(names)
    return out


def common_attrs() -> set[str]:
    text = EXPERIMENTS_MD.read_text(encoding="utf-8")
    (para,) = [p for p in _paragraphs(text) if p.startswith("Attrs of every result:")]
    return set(NAME.findall(para.split(";")[0]))


def documented_schema(title: str) -> dict:
    paras = [p for p in _paragraphs(_section(title)) if p.startswith("Schema:")]
    assert len(paras) == 1, f"the {title} section has {len(paras)} Schema paragraphs"
    return parse_schema(paras[0])


def check_schema(title: str, ds) -> None:
    """The run's coords, variables (with their dims) and attrs are those documented."""
    doc = documented_schema(title)
    listed = doc["coords"] | set(doc["vars"])
    assert not set(ds.coords) - listed, f"{title}: coords missing from the docs: {set(ds.coords) - listed}"
    assert not set(ds.data_vars) - listed, (
        f"{title}: variables missing from the docs: {sorted(set(ds.data_vars) - listed)}"
    )
    for name in doc["coords"] - doc["optional"]:
        assert name in ds.coords, f"{title}: documented coord {name!r} is not in the run"
    for name, dims in doc["vars"].items():
        if name in doc["optional"]:  # (an optional name may be a coord: `coord token` of a cloud)
            if name not in ds.variables:
                continue
        else:
            assert name in ds.data_vars, f"{title}: documented variable {name!r} is not in the run"
        if dims is not None:
            assert ds[name].dims == dims, f"{title}: {name} has dims {ds[name].dims}, documented {dims}"
    attrs = set(ds.attrs)
    required = (doc["attrs"] - doc["optional"]) | (common_attrs() - {"model"})
    assert required <= attrs, f"{title}: documented attrs not in the run: {required - attrs}"
    extra = attrs - doc["attrs"] - common_attrs()
    assert not extra, f"{title}: attrs missing from the docs: {extra}"


def test_schema_parser_reads_dims_and_optional_names():
    doc = parse_schema(
        "Schema: coords `beta` (B), `time`; `w2`, `mass` (beta, time) of the last level; `basis` (dim, k); "
        "with `seeds`: `w2_std` (beta, time); `ref` (); attrs `fits` (`a`, `b`), `zero`."
    )
    assert doc["coords"] == {"beta", "time"} and doc["attrs"] == {"fits", "zero"}
    assert doc["vars"] == {
        "w2": ("beta", "time"),
        "mass": ("beta", "time"),
        "basis": ("dim", "k"),
        "w2_std": ("beta", "time"),
        "ref": (),
    }
    assert doc["optional"] == {"w2_std"}


@pytest.mark.parametrize(
    ("title", "preset", "overrides"),
    [
        ("concentration", "concentration-tiny", ["N=16", "n_keep=4"]),
        ("terminal", "terminal-tiny", ["N=16", "n_keep=4"]),
        ("zero-temperature", "zero-temperature-tiny", ["N=64", "n_keep=4"]),
        ("layers", "layers-tiny", ["N=8"]),
    ],
)
def test_documented_schema_is_a_run_s(title, preset, overrides):
    from attnflow.experiments import load_config, run_experiment

    check_schema(title, run_experiment(load_config(preset, overrides)))


def test_documented_schema_of_concentration_with_seeds():
    from attnflow.experiments import load_config, run_experiment

    ds = run_experiment(
        load_config("concentration-tiny", ["N=16", "n_keep=4", "seeds=[0, 1]", "init=uniform"])
    )
    assert "w2_seed_std" in ds.data_vars
    check_schema("concentration", ds)


def test_documented_schema_of_heads_on_a_tiny_checkpoint(tmp_path):
    pytest.importorskip("safetensors")
    pytest.importorskip("tokenizers")
    from attnflow.experiments import load_config, run_experiment
    from checkpoints import write_checkpoint

    write_checkpoint(tmp_path)  # d = 16, 4 heads, 2 layers
    config = load_config("heads-tiny", [f"checkpoint={tmp_path}", "text='the cat sat on the mat'"])
    check_schema("heads", run_experiment(config))
