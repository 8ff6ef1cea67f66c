"""`attnflow heads CHECKPOINT`: the theorem's assumptions checked on every attention head of a model."""

from __future__ import annotations

import json
import math
import sys
from typing import Annotated, Any

import typer


def _clean(x: Any) -> Any:
    """JSON-safe copy: inf and nan become the strings "inf", "-inf", "nan"."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    return x


def _g(x: float | None, fmt: str = ".3g") -> str:
    return "-" if x is None else format(x, fmt)


def _eig(pair: list[float]) -> str:
    re_, im = pair
    return f"{re_:.3g}" if im == 0 else f"{re_:.3g}{im:+.2g}i"


def _row(name: str, r: dict[str, Any], with_tokens: bool) -> list[str]:
    cond = f"rank {r['rank_B']}/{r['d']}, {_g(r['cond_B_range'])}" if r["cond_B"] is None else _g(r["cond_B"])
    row = [
        name,
        cond,
        f"{r['asymmetry']:.2f}",
        " ".join(_eig(p) for p in r["eig_A_top"][:2]),
        f"{r['gap']:.2g} ({r['rel_gap']:.1e})",
        " ".join(f"{v:.3g}" for v in r["sym_eig_top"][:2]),
        f"{r['sym_gap']:.2g}",
        f"{r['beta']:.3g} / {r['beta_normB']:.3g}",
    ]
    if with_tokens:
        row.append(f"{_g(r['M1'])} / {r['min_P1x']:.2g}")
    row.append("; ".join(r["failures"] + r["warnings"]))
    return row


def _print_tables(rep: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(
        f"[bold]{rep['checkpoint']}[/bold]: {rep['layout']} layout, {rep['num_layers']} layers, "
        f"d = {rep['d']}, {rep['num_heads']} heads"
    )
    with_tokens = rep["text"] is not None
    if with_tokens:
        console.print(f"tokens ({len(rep['tokens'])}): {' '.join(rep['tokens'])}")
    for L in rep["layers"]:
        table = Table(
            title=f"layer {L['layer']}: beta_eff = {L['beta_eff']:.3g} = |h|^2 / sqrt({L['d_head']}), "
            f"|h| = {L['norm']:.3g} ({L['norm_source']})",
            title_justify="left",
        )
        cols = [
            "head",
            "cond(B)",
            "asym(A)",
            "top eig A",
            "gap A (rel)",
            "top eig sym",
            "gap sym",
            "beta / beta|B|",
        ]
        if with_tokens:
            cols.append("M1 / min|P1x|")
        for c in [*cols, "assumptions that fail (and warnings)"]:
            table.add_column(c, overflow="fold")
        table.add_row(*_row("all", L["full"], with_tokens))
        for h in L["heads"]:
            table.add_row(*_row(str(h["head"]), h, with_tokens))
        console.print(table)


def heads(
    checkpoint: Annotated[
        str,
        typer.Argument(
            help="Model folder (config.json, model.safetensors or pytorch_model.bin) or weights file."
        ),
    ],
    text: Annotated[
        str | None,
        typer.Option(
            "--text", help="A sentence: token norms for beta_eff and assumption 2 on its token cloud."
        ),
    ] = None,
    layer: Annotated[int | None, typer.Option("--layer", help="Only this layer (default: all).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Per layer and head: cond(B), asymmetry of A, top eigenvalues, gap, effective beta, and which
    assumptions of the theorem fail and by how much."""
    from .pretrained import report

    try:
        rep = report(checkpoint, text=text, layer=layer)
    except (ValueError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise typer.Exit(2) from None
    if json_out:
        print(json.dumps(_clean(rep), indent=1, allow_nan=False))
    else:
        _print_tables(rep)
