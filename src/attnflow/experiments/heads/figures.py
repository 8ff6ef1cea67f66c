"""The `heads` experiment's figure: a pretrained layer's heads on a sentence's tokens against t, one
line per head and the whole layer (head = WHOLE_LAYER, thick black) in each panel (`plot_heads`,
heads.png / .pdf), and `figures`, the experiment's figures hook."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, cast

import numpy as np

from ..._text import format_value
from ...plot import (
    DPI,
    SERIES_CMAP,
    config_value,
    log_axis_plain_ticks,
    markevery,
    new_figure,
    positive,
    require,
    save,
    series_styles,
)
from ...plot.style import STAR_STYLE

if TYPE_CHECKING:
    import xarray as xr
    from matplotlib.axes import Axes


class HeadStyle(TypedDict, total=False):
    """Keywords of `Axes.plot` for one head's curve (`plot.series_styles` gives color, linestyle and
    marker; the heads' curves add lw and ms)."""

    color: str | tuple[float, ...]
    linestyle: str
    marker: str
    lw: float
    ms: float
    zorder: float


WHOLE_LAYER = -1  # value of the `head` coordinate for the whole layer
HEADS_DIMS = ("head", "time")
# the whole layer: thick black, drawn under the heads so that equal curves stay visible
WHOLE_LAYER_STYLE: HeadStyle = {
    "color": "black",
    "linestyle": "-",
    "marker": "o",
    "lw": 3.2,
    "ms": 7,
    "zorder": 1.5,
}


def _heads_title(ds: xr.Dataset, what: str) -> str:
    """Title of the heads figures: what, then checkpoint, layer, N tokens, beta_eff scale, text."""
    ck = config_value(ds, "checkpoint") or ds.attrs.get("checkpoint", "?")
    name = Path(str(ck)).name or str(ck)
    layer = config_value(ds, "layer")
    n = ds.sizes.get("token")
    parts = [f"heads: checkpoint {name}", f"layer {layer if layer is not None else '?'}"]
    if n:
        parts.append(f"N = {n} tokens")
    if "beta_eff" in ds.variables:
        b = np.unique(np.asarray(ds["beta_eff"].values, dtype=float))
        if b.size == 1:
            parts.append(f"β = {format_value(float(b[0]))}")
    scale = config_value(ds, "beta_scale")
    if isinstance(scale, int | float) and scale != 1:
        parts.append(f"({format_value(float(scale))} β_eff)")
    text = config_value(ds, "text")
    if isinstance(text, str):
        parts.append(f"“{text if len(text) <= 48 else text[:45] + '…'}”")
    return f"{what}\n" + ", ".join(parts)


def _head_labels(ds: xr.Dataset) -> Callable[[int], str]:
    """A head's legend label: its name, and its beta when the heads' betas differ."""
    beta = ds["beta_eff"] if "beta_eff" in ds.variables else None
    if beta is not None and np.unique(np.asarray(beta.values, dtype=float)).size == 1:
        beta = None  # one beta for all: it is in the title

    def label(h: int) -> str:
        name = "whole layer (head = −1)" if h == WHOLE_LAYER else f"head {h}"
        return name if beta is None else f"{name}, β = {format_value(float(beta.sel(head=h)))}"

    return label


def _heads_panels(ds: xr.Dataset) -> list[tuple[str, str, str]]:
    """(variable, title, y label) of each panel; the W2-to-model panel when the run has it."""
    eps = config_value(ds, "eps")
    within = f"within ε = {format_value(eps)} rad" if isinstance(eps, int | float) else "within ε"
    panels = [
        ("mass_S", "mass near the top eigenspace of (A+Aᵀ)/2", f"fraction of tokens {within}"),
        ("mass_V", "mass near V's top eigenspace (largest Re)", f"fraction of tokens {within}"),
        ("w2_pi_S", r"exact $W_2(\rho_t,\, (\Pi_S)_\#\rho_0)$", r"$W_2$, chordal (log scale)"),
        ("diameter", "diameter of the cloud", r"largest $|x_i - x_j|$"),
    ]
    if "w2_model" in ds.variables:
        panels.insert(3, ("w2_model", "W2 to the model's next-layer states (comparison)", r"$W_2$, chordal"))
    return panels


def _model_marks(ax: Axes, ds: xr.Dataset) -> None:
    """The reference W2(rho_0, model) and each head's smallest W2 to the model, with their legend."""
    n_lines = len(ax.get_lines())
    if "w2_model_ref" in ds.variables:
        ref = float(ds["w2_model_ref"].values)
        ax.axhline(ref, color="0.45", ls=(0, (1, 1.5)), lw=1.4, label=f"W2(ρ₀, model) = {format_value(ref)}")
    if "t_model" in ds.variables and "w2_model_min" in ds.variables:
        t_min = np.asarray(ds["t_model"].values, dtype=float)
        w2_min = np.asarray(ds["w2_model_min"].values, dtype=float)
        ax.plot(t_min, w2_min, ms=12, mew=1.2, label="smallest over t", **STAR_STYLE)
    extra = ax.get_lines()[n_lines:]
    if extra:
        ax.legend(extra, [str(ln.get_label()) for ln in extra], fontsize="x-small", loc="best")


def _heads_panel(
    ax: Axes,
    ds: xr.Dataset,
    panel: tuple[str, str, str],
    styles: dict[int, HeadStyle],
    label: Callable[[int], str],
) -> None:
    var, subtitle, ylab = panel
    t = np.asarray(ds["time"].values, dtype=float)
    vals = ds[var].transpose(*HEADS_DIMS)
    for h in (int(h) for h in ds["head"].values):
        y = np.asarray(vals.sel(head=h).values, dtype=float)
        st: HeadStyle = WHOLE_LAYER_STYLE if h == WHOLE_LAYER else {**styles[h], "lw": 1.4, "ms": 4}
        ax.plot(t, positive(y) if var == "w2_pi_S" else y, label=label(h), markevery=markevery(len(t)), **st)
    if var == "w2_model":
        _model_marks(ax, ds)
    if var == "w2_pi_S":
        log_axis_plain_ticks(ax)
    elif var.startswith("mass"):
        ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("time t")
    ax.set_ylabel(ylab)
    ax.set_title(subtitle, fontsize="medium")
    ax.grid(True, which="both", alpha=0.3)


def plot_heads(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """A pretrained layer's heads on a sentence's tokens, against t, one line per head (the whole
    layer, head = -1, thick black): mass within eps of the top eigenspace of (A + A^T)/2 and of V's
    top eigenspace, exact W2 to (Pi_S)_# rho_0 (log y), the diameter, and W2 to the model's own
    next-layer states (with the reference W2(rho_0, model) and each head's minimum) when present.

    Needs `mass_S`, `mass_V`, `w2_pi_S`, `diameter` (head, time); uses `w2_model` (head, time),
    `t_model`, `w2_model_min` (head), `w2_model_ref` (), `beta_eff` (head).  Writes heads.png / .pdf.
    """
    need = ["mass_S", "mass_V", "w2_pi_S", "diameter"]
    dims: dict[str, tuple[str, ...]] = {v: HEADS_DIMS for v in [*need, "w2_model"]}
    dims.update({v: ("head",) for v in ("t_model", "w2_model_min", "beta_eff")})
    require(ds, need, "plot_heads", dims)
    others = [int(h) for h in ds["head"].values if int(h) != WHOLE_LAYER]
    drawn = cast("list[HeadStyle]", series_styles(len(others), SERIES_CMAP))
    styles = dict(zip(others, drawn, strict=True))
    label = _head_labels(ds)
    panels = _heads_panels(ds)
    ncols = 3 if len(panels) > 4 else 2
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = new_figure(nrows, ncols, (4.4 * ncols + 1.8, 3.9 * nrows + 0.6))
    flat = [ax for row in axes for ax in row]
    for ax, panel in zip(flat, panels, strict=False):
        _heads_panel(ax, ds, panel, styles, label)
    for ax in flat[len(panels) :]:
        ax.set_axis_off()
    handles, labels = flat[0].get_legend_handles_labels()
    if len(flat) > len(panels):  # the legend in the free panel
        flat[-1].legend(handles, labels, loc="center", fontsize="small", title="one line per attention")
    else:
        fig.legend(handles, labels, loc="outside right upper", fontsize="small")
    what = "Heads of a pretrained layer on a sentence's tokens (pure attention at β_eff)"
    if "w2_model" in ds.variables:
        what += "; W2 to the model is a comparison, not a test"
    fig.suptitle(_heads_title(ds, what))
    return save(fig, outdir, "heads", dpi)


def figures(ds: xr.Dataset, outdir: str | Path, *, dpi: int = DPI, animation: bool = False) -> list[Path]:
    """The heads' panels against t (heads.png / .pdf); token positions are not kept."""
    return plot_heads(ds, outdir, dpi=dpi)
