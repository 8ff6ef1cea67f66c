"""The report of `attnflow heads`: every layer and head of a checkpoint beside the theorem's
assumptions, with a summary per layer and per model, the spread of the checks over rotary
offsets, and the effective beta fitted from the model's own attention on a token cloud.

Plain values only (dicts, lists, floats), written by `attnflow.io.to_json`.  The verdicts are
`check_assumptions`' (through `diagnostics.diagnose`); the summaries count them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict
from typing import Any, NotRequired, TypedDict, cast

import numpy as np

from .._threads import DEFAULT_THREADS, blas_threads, check_threads
from ..attention import COND_B_MAX, SYMMETRY_TOL, Attention
from ..science.assumptions import OK
from .beta import head_fits
from .checkpoint import Checkpoint, CheckpointLike, check_layers, open_checkpoint
from .diagnostics import Diagnosis, diagnose, distinct_gap
from .forward import TokenizerLike, TokenStates, attention_logits, sink_mass, token_states
from .heads import Head, Layer, Norm, load_heads
from .regime import StepFit, departure, layer_step, regime_of
from .rope import RoPE

__all__ = ["OFFSETS", "SPECTRUM_KEEP", "TOLERANCE", "offset_spread", "report", "summary"]

#: rotary offsets r = i - j at which a head's checks are repeated (r = 0 is the reported B)
OFFSETS = (1, 4, 16, 64)
#: eigenvalues of A kept per entry in the report unless `spectra` (the rest: count only)
SPECTRUM_KEEP = 8
#: what "satisfies assumption 1" means, as `check_assumptions` judges it
TOLERANCE = f"cond(B) <= {COND_B_MAX:.0e}, asymmetry <= {SYMMETRY_TOL:.0e}, gap > 0"


class OffsetSpread(TypedDict):
    """`offset_spread`: the offsets and [min, max] of each number over them (None: none finite)."""

    offsets: list[int]
    asymmetry: list[float] | None
    mu1: list[float] | None
    rel_gap: list[float] | None
    norm_B: list[float] | None
    rank_B: list[float] | None


class Entry(Diagnosis, total=False):
    """A row of the report: a whole layer's `diagnose` ("full"), or a head's with what the report
    adds (its index, its key/value head, and with a text its fitted beta and departure)."""

    head: int
    kv_head: int
    query_bias_ratio: float
    offsets: OffsetSpread
    sink: float
    sink_mass: float
    beta_fit: dict[str, Any]  # BetaFit.to_dict()
    departure: list[float] | None
    layer: int


class Summary(TypedDict):
    """How many heads satisfy assumption 1 and the closest, as numbers and one line (`summary`)."""

    heads_ok: int
    heads: int
    tolerance: str
    line: str
    offset_asymmetry: NotRequired[list[float]]
    layers_ok: NotRequired[int]


class LayerEntry(TypedDict):
    """A layer of the report: its norm and beta_eff, the whole layer's entry, its heads' entries."""

    layer: int
    d_head: int
    norm: float
    norm_source: str
    beta_eff: float
    output_bias_norm: float
    full: Entry
    heads: list[Entry]
    summary: NotRequired[Summary]
    step: NotRequired[dict[str, Any]]  # asdict(StepFit)


class _Header(TypedDict):
    """The checkpoint's part of a report (`_header`)."""

    checkpoint: str
    format: str
    layout: str
    notes: list[str]
    num_layers: int
    d: int
    d_head: int
    num_heads: int
    num_kv_heads: int
    kv_head_rule: str
    causal: bool
    rope: dict[str, float] | None
    norm: str | None
    scale: str
    beta_means: str
    text: str | None
    tokens: list[str] | None
    ids: list[int] | None


class _Model(TypedDict, total=False):
    """The model's summary (with heads) and regime (with heads, a text and every layer)."""

    summary: Summary
    regime: dict[str, Any]  # Regime.to_dict()


class Report(_Header, _Model):
    """What `report` returns: the checkpoint's header, the model's summary and regime, the layers."""

    layers: list[LayerEntry]


def _ok1(diag: Diagnosis) -> bool:
    return diag["assumptions"]["items"][0]["status"] == OK


def _span(values: Sequence[float | None]) -> list[float] | None:
    v = [x for x in values if x is not None and math.isfinite(x)]
    return [min(v), max(v)] if v else None


def _pieces(head: Head) -> tuple[np.ndarray, ...]:
    """The d_h x d_h pieces every offset's numbers come from (`_at_offset`): Q_h Q_h^T,
    G = W_V K_h^T, Q_h W_O, W_O^T W_O and the R factors of Q_h^T and K_h^T."""
    assert head.W_V is not None and head.W_O is not None
    R1 = cast(np.ndarray, np.linalg.qr(head.Q.T, mode="r"))  # NumPy's stubs say QRResult
    RK = cast(np.ndarray, np.linalg.qr(head.K.T, mode="r"))
    return head.Q @ head.Q.T, head.W_V @ head.K.T, head.Q @ head.W_O, head.W_O.T @ head.W_O, R1, RK


def _at_offset(head: Head, pieces: tuple[np.ndarray, ...], r: int) -> tuple[float, float, float, float, int]:
    """(asymmetry, mu1, relative gap, ||B||, rank B) of A_h(r) = V_h B_h(r)^T, B_h(r) = Q_h^T K_r
    with K_r = R(-r) K_h, from d_h x d_h pieces: A = F Q_h with F = V_h K_r^T = W_O (G R(-r)^T)
    (rank <= d_h; its other d - d_h eigenvalues are exact zeros), and B's nonzero singular values
    those of R1 (RK R(-r)^T)^T (Q_h^T = U1 R1, K_h^T = U2 RK)."""
    assert head.rope is not None
    QQ, G, QW, OO, R1, RK = pieces
    Rm = head.rope.matrix(-r)
    Gr = G @ Rm.T
    QF = QW @ Gr
    norm2 = float(np.trace((Gr.T @ OO @ Gr) @ QQ))  # |A|_F^2 = trace(F^T F Q Q^T)
    asym = math.sqrt(max(2 * norm2 - 2 * float(np.trace(QF @ QF)), 0.0) / norm2) / 2 if norm2 > 0 else 0.0
    w = np.concatenate([np.linalg.eigvals(QF), np.zeros(head.Q.shape[1] - head.d_head)])
    w = w[np.lexsort((-w.imag, -w.real))]
    radius = float(np.max(np.abs(w)))
    mu1, mu2, _ = distinct_gap(w.real, radius)
    gap = mu1 - mu2 if mu2 is not None else 0.0
    s = np.linalg.svd(R1 @ (RK @ Rm.T).T, compute_uv=False)
    rank = int(np.sum(s > s[0] * head.Q.shape[1] * np.finfo(float).eps)) if s[0] > 0 else 0
    return asym, mu1, gap / radius if radius > 0 else 0.0, float(s[0]), rank


def offset_spread(head: Head, offsets: Sequence[int]) -> OffsetSpread:
    """The numbers of assumption 1 for B_h(r), A_h(r) over rotary offsets r (0 included): [min,
    max] of the asymmetry of A, its top real part mu1, its relative gap, ||B|| and the rank of B.
    Numbers, not verdicts: `check_assumptions` judges r = 0 (the head's reported B); B_h(r) has
    rank <= d_h < d at every r, so assumption 1 fails at every offset through B alone."""
    pieces = _pieces(head)
    rows = [_at_offset(head, pieces, r) for r in (0, *offsets)]
    asym, mu1, rel_gap, norm_B, rank_B = (_span([row[k] for row in rows]) for k in range(5))
    return {
        "offsets": [0, *offsets],
        "asymmetry": asym,
        "mu1": mu1,
        "rel_gap": rel_gap,
        "norm_B": norm_B,
        "rank_B": rank_B,
    }


#: what an Attention caches (d x d matrices, eigenvectors): dropped once an entry is written
_DERIVED = ("B", "A", "_spectrum", "singular_values_B", "_head_rows", "cond_B", "norm_B")


def _diagnosed(att: Attention, X: np.ndarray | None, spectra: bool) -> Entry:
    """diagnose(att, X), trimmed (`_trimmed`), with att's cached matrices dropped afterwards: a
    layer's heads are diagnosed one by one and never all held with their eigenvectors."""
    diag: Entry = {**_trimmed(diagnose(att, X), spectra)}
    for name in _DERIVED:
        att.__dict__.pop(name, None)
    return diag


def _trimmed(diag: Diagnosis, spectra: bool) -> Diagnosis:
    """diag with each assumption's list of eigenvalues cut to the top SPECTRUM_KEEP (and their
    count, "eigenvalues_count") unless `spectra`: d of them per head would repeat in every entry."""
    if spectra:
        return diag
    for item in diag["assumptions"]["items"]:
        eig = item["numbers"].get("eigenvalues")
        if isinstance(eig, list) and len(eig) > SPECTRUM_KEEP:
            item["numbers"]["eigenvalues"] = eig[:SPECTRUM_KEEP]
            item["numbers"]["eigenvalues_count"] = len(eig)
    return diag


def _head_entry(
    h: Head, rec: Layer, ck: Checkpoint, run: TokenStates | None, offsets: Sequence[int], spectra: bool
) -> Entry:
    X = run.states[rec.layer] if run is not None else None  # diagnose normalises the rows
    diag = _diagnosed(h.attention, X, spectra)
    diag["head"], diag["kv_head"] = h.head, h.kv_head
    diag["query_bias_ratio"] = (
        float(np.linalg.norm(h.query_bias)) * rec.norm / (h.beta * max(diag["norm_B"], 1e-300))
    )
    if h.rope is not None and offsets:
        diag["offsets"] = offset_spread(h, offsets)
    if h.sink is not None:
        diag["sink"] = h.sink
        if run is not None:
            logits = attention_logits(ck, rec.layer, run.states[rec.layer])[h.head]
            diag["sink_mass"] = float(np.mean(sink_mass(logits, h.sink)))
    return diag


def _layer_entry(
    ck: Checkpoint, rec: Layer, run: TokenStates | None, heads: bool, offsets: Sequence[int], spectra: bool
) -> LayerEntry:
    X = run.states[rec.layer] if run is not None else None  # diagnose normalises the rows
    entry: LayerEntry = {
        "layer": rec.layer,
        "d_head": rec.d_head,
        "norm": rec.norm,
        "norm_source": rec.norm_source,
        "beta_eff": rec.beta,
        "output_bias_norm": float(np.linalg.norm(rec.output_bias)),
        "full": _diagnosed(rec.attention, X, spectra),
        "heads": [],
    }
    if heads:
        entry["heads"] = [_head_entry(h, rec, ck, run, offsets, spectra) for h in rec.heads]
        if run is not None:
            for h, diag, fit in zip(rec.heads, entry["heads"], head_fits(ck, rec, run), strict=True):
                diag["beta_fit"] = fit.to_dict()
                dep = departure(h, fit.beta if fit.beta is not None else h.beta, len(run.tokens))
                diag["departure"] = None if dep is None else list(dep)
        entry["summary"] = summary(entry["heads"], len(entry["heads"]), where="head")
    if run is not None:
        entry["step"] = asdict(layer_step(ck, rec, run))
    return entry


def _regime(layers: list[LayerEntry]) -> dict[str, Any]:
    """The model against the window t <~ log beta (`regime`), from the layers' entries."""
    steps = [StepFit(**L["step"]) for L in layers]
    fits = [[h["beta_fit"]["beta"] for h in L["heads"]] for L in layers]
    normB = [h["beta_normB"] for L in layers for h in L["heads"]]
    deps = [h["departure"] for L in layers for h in L["heads"]]
    out = regime_of(steps, fits, normB, [None if d is None else (d[0], d[1]) for d in deps]).to_dict()
    out["layers"] = [L["layer"] for L in layers]
    return out


def _closest(rows: list[Entry], where: str) -> str:
    best = min(rows, key=lambda r: r["asymmetry"])
    name = f"layer {best['layer']} head {best['head']}" if where == "layer head" else f"head {best['head']}"
    numbers = (
        f"asymmetry {best['asymmetry']:.3g}, rank {best['rank_B']}/{best['d']}, rel gap {best['rel_gap']:.2g}"
    )
    return f"{name} ({numbers})"


def summary(rows: list[Entry], total: int, where: str = "head") -> Summary:
    """How many of the heads `rows` satisfy assumption 1 within `TOLERANCE`, and the closest (the
    smallest asymmetry of A), as numbers and one line."""
    ok = sum(_ok1(r) for r in rows)
    line = f"{ok} of {total} heads satisfy assumption 1 within tolerance ({TOLERANCE})"
    if rows:
        line += f"; the closest is {_closest(rows, where)}"
    out: Summary = {"heads_ok": ok, "heads": total, "tolerance": TOLERANCE, "line": line}
    with_offsets = [r["offsets"] for r in rows if "offsets" in r]
    if with_offsets:
        spans = [o["asymmetry"] for o in with_offsets if o["asymmetry"] is not None]
        lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
        out["offset_asymmetry"] = [lo, hi]
        out["line"] += (
            f"; over rotary offsets r in {with_offsets[0]['offsets']} the asymmetry spans {lo:.3g}-{hi:.3g}"
        )
    return out


def _model_summary(layers: list[LayerEntry]) -> Summary:
    rows: list[Entry] = [{**h, "layer": L["layer"]} for L in layers for h in L["heads"]]
    out = summary(rows, len(rows), where="layer head")
    full_ok = sum(_ok1(L["full"]) for L in layers)
    out["layers_ok"] = full_ok
    out["line"] += f"; {full_ok} of {len(layers)} whole layers do"
    return out


def beta_meaning(ck: Checkpoint, with_text: bool) -> str:
    """What beta_eff measures under the checkpoint's norm convention, and what carries the
    temperature beside it."""
    if ck.arch.placement == "pre" and ck.arch.norm == "rmsnorm":
        return (
            f"beta_eff = d / sqrt(d_head) = {ck.d / ck.d_head**0.5:.4g} for every head by the RMSNorm's "
            "convention (|x / rms(x)| = sqrt(d), eps aside): the norm fixes it, the weights do not; "
            "the temperature is carried by ||B_h|| (beta|B| = beta_eff ||B_h||, the largest logit on "
            "unit tokens)"
        )
    where = (
        "the median |h| of the text's tokens"
        if with_text
        else ("the layer norm's expected |h|" if ck.arch.placement == "post" else "sqrt(d) (no norm)")
    )
    return (
        f"beta_eff = r^2 / sqrt(d_head) with r {where}: token norms vary around r, so the fitted beta "
        "(the logits' slope on the unit-token score, biases as regressors) is the measured one; "
        "beta|B| = beta_eff ||B_h|| is the largest logit on unit tokens"
    )


def _header(
    ck: Checkpoint, run: TokenStates | None, first: tuple[RoPE | None, Norm | None] | None
) -> _Header:
    rope, norm = first if first is not None else (None, None)
    notes = list(ck.notes)
    biased = any(ck.layer_array(0, b, required=False) is not None for b in ("b_Q", "b_K"))
    if rope is not None and biased:
        notes.append(
            "query/key biases with rotary positions: their logit terms depend on the offset and are "
            "not in B_h; beta_fit takes them as regressors (query-bias and key-bias logits, a fixed "
            "effect per offset)"
        )
    if ck.softcap is not None:
        notes.append(
            f"attention logits soft-capped, {ck.softcap:g} tanh(logits / {ck.softcap:g}): the forward "
            "pass, the field and beta_fit see the capped logits; a head's Attention (B, beta) is uncapped"
        )
    if ck.layer_array(0, "sinks", required=False) is not None:
        notes.append(
            "attention sinks: a sink logit per head (`sink`) takes softmax mass and gives nothing "
            "(`sink_mass`, averaged over the queries of the text); in the forward pass and the field, "
            "not in a head's Attention"
        )
    return {
        "checkpoint": ck.source,
        "format": ck.fmt,
        "layout": ck.layout,
        "notes": notes,
        "num_layers": ck.num_layers,
        "d": ck.d,
        "d_head": ck.d_head,
        "num_heads": ck.num_heads[0],
        "num_kv_heads": ck.num_kv_heads[0],
        "kv_head_rule": f"h // {ck.num_heads[0] // ck.num_kv_heads[0]}",
        "causal": ck.arch.causal,
        "rope": None if rope is None else {"base": rope.base, "dim": rope.dim},
        "norm": norm.describe() if norm is not None else None,
        "scale": f"logits = (Q_h h_i)^T (K_h h_j) / sqrt(d_head): 1/sqrt({ck.d_head}) is in beta_eff, "
        "not in B",
        "beta_means": beta_meaning(ck, run is not None),
        "text": run.text if run is not None else None,
        "tokens": run.tokens if run is not None else None,
        "ids": run.ids if run is not None else None,
    }


def report(
    checkpoint: CheckpointLike,
    text: str | None = None,
    layer: int | None = None,
    *,
    ids: Sequence[int] | None = None,
    num_heads: int | None = None,
    heads: bool = True,
    tokenizer: TokenizerLike = None,
    offsets: Sequence[int] = OFFSETS,
    threads: int = DEFAULT_THREADS,
    spectra: bool = False,
) -> Report:
    """`diagnose` of every layer (whole layer and each head) of a checkpoint, with summaries.

    With `text` (or token `ids`) the model runs once on it: beta_eff uses its token norms where
    the norm is not exact, assumption 2 is checked on the token cloud entering each layer, and each
    head's beta is fitted from its logits ("beta_fit").  offsets: rotary offsets at which the
    checks are repeated ("offsets" per head; rotary models only).  threads: BLAS threads (1 is
    fastest on a shared machine).  "summary" (the model) and each layer's "summary" count the heads
    that satisfy assumption 1 and name the closest.  spectra: keep every eigenvalue of A in each
    entry's assumption numbers (default: the top `SPECTRUM_KEEP` and their count).
    """
    n = check_threads(threads)
    with blas_threads(n) if n else nullcontext():  # NumPy only: torch is not imported (0.3 GB)
        ck = open_checkpoint(checkpoint, num_heads)
        idx = check_layers(None if layer is None else [layer], ck.num_layers)
        run = token_states(ck, text, tokenizer, ids=ids) if text is not None or ids is not None else None
        layers: list[LayerEntry] = []
        first = None
        for i in idx:  # one layer at a time: a layer's Attention objects are large (d x d each)
            (rec,) = load_heads(ck, layers=[i], states=run)
            layers.append(_layer_entry(ck, rec, run, heads, offsets, spectra))
            ck.release(i)
            first = first or (rec.rope, rec.input_norm)
    model: _Model = {}
    if heads:
        model["summary"] = _model_summary(layers)
    if run is not None and heads and layer is None:  # the stack's time needs every layer
        model["regime"] = _regime(layers)
    return {**_header(ck, run, first), **model, "layers": layers}
