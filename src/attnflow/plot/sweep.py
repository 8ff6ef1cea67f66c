"""The generic figure of a sweep: each per-point number against one grid axis.

A sweep's Dataset (`attnflow.sweeps.open_sweep`) has the grid keys as dimensions and its grid in
attrs["grid"]. Every numeric variable with one value per grid point gets a panel: its median over
`seed` (min-max spread as bars and a band when there are several seeds) against the x axis, one
series per value of the other axes. Any experiment's sweep gets this figure; an experiment may draw
its own instead (`Experiment.sweep_figures`), usually by calling `plot_sweep` with its choices.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .._text import format_value
from ..io import json_attr
from .style import (
    DPI,
    SERIES_CMAP,
    new_figure,
    plain_log_ticks,
    positive,
    require,
    run_title,
    save,
    series_styles,
)

if TYPE_CHECKING:
    import xarray as xr
    from matplotlib.axes import Axes

SWEEP_CAPTIONS: dict[str, tuple[str, str]] = {
    "sweep": (
        "Sweep",
        "Each per-point result against a grid axis: median over seeds with the min–max spread, "
        "one series per value of the other axes.",
    )
}
MAX_PANELS = 9


def sweep_variables(ds: xr.Dataset) -> list[str]:
    """Numeric data variables with one value per grid point (their dims are grid axes)."""
    grid = json_attr(ds, "grid", None)
    axes = set(grid) if isinstance(grid, dict) and grid else set(ds.dims)
    return [
        str(name)
        for name, v in ds.data_vars.items()
        if v.dims and set(v.dims) <= axes and v.dtype.kind in "fiub"
    ]


def _x_axis(ds: xr.Dataset, dims: Sequence[Hashable]) -> str:
    """The first axis other than seed with more than one value (else the first axis)."""
    for d in dims:
        if d != "seed" and ds.sizes[d] > 1:
            return str(d)
    return str(dims[0])


@dataclass(frozen=True)
class _Grid:
    """What the panels of a sweep figure share: the variables, the x axis and its values, the
    series (one per combination of the other axes but seed) and the seeds."""

    variables: list[str]
    x: str
    raw: np.ndarray  # the x axis's values as stored
    xs: np.ndarray  # ... as floats (positions 0, 1, ... for a non-numeric axis)
    numeric: bool
    log_x: bool
    series: list[dict[str, int]]  # isel of each series
    seeded: bool
    nseed: int


def _grid(ds: xr.Dataset, variables: Sequence[str] | None, x: str | None) -> _Grid:
    """The variables (checked: present, sharing dims with x among them) and the axes of the figure."""
    chosen = list(variables) if variables is not None else sweep_variables(ds)[:MAX_PANELS]
    if not chosen:
        raise ValueError("plot_sweep: ds has no numeric variable with one value per grid point")
    require(ds, chosen, "plot_sweep")
    dims = ds[chosen[0]].dims
    x = x or _x_axis(ds, dims)
    for v in chosen:
        if x not in ds[v].dims:
            raise ValueError(f"plot_sweep needs ds[{v!r}] with a {x!r} dim, got dims {ds[v].dims}")
        if set(ds[v].dims) != set(dims):
            raise ValueError(f"plot_sweep: {chosen} must share dims, got {dims} and {ds[v].dims}")
    others = [str(d) for d in dims if d not in (x, "seed")]
    combos = itertools.product(*[range(ds.sizes[d]) for d in others])
    raw = np.asarray(ds[x].values)
    numeric = raw.dtype.kind in "fiu"
    xs = raw.astype(float) if numeric else np.arange(raw.size, dtype=float)
    return _Grid(
        variables=chosen,
        x=x,
        raw=raw,
        xs=xs,
        numeric=numeric,
        log_x=numeric and bool(np.all(xs > 0)) and xs.max() >= 10 * xs.min(),
        series=[dict(zip(others, c, strict=True)) for c in combos],
        seeded="seed" in dims,
        nseed=ds.sizes["seed"] if "seed" in dims else 1,
    )


def _draw_series(ax: Axes, ds: xr.Dataset, g: _Grid, var: str, sel: dict[str, int], style: dict, log: bool):
    """One series of one panel: the median over seeds with min-max bars and band (several seeds)."""
    a = ds[var].isel(sel).transpose(g.x, *(["seed"] if g.seeded else []))
    vals = np.asarray(a.values, dtype=float).reshape(len(g.xs), -1)
    if log:
        vals = positive(vals)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns give NaN, wanted
        med, lo, hi = np.nanmedian(vals, 1), np.nanmin(vals, 1), np.nanmax(vals, 1)
    label = ", ".join(f"{d} = {format_value(ds[d].values[i].item())}" for d, i in sel.items())
    label = label or ("median over seeds" if g.nseed > 1 else "grid points")  # the one series
    ax.errorbar(
        g.xs,
        med,
        yerr=np.vstack([med - lo, hi - med]) if g.nseed > 1 else None,
        capsize=3,
        label=label,
        color=style["color"],
        ls=style["linestyle"],
        marker=style["marker"],
        mfc="white",
    )
    if g.nseed > 1:
        ax.fill_between(g.xs, lo, hi, color=style["color"], alpha=0.15, lw=0)


def _finish_panel(ax: Axes, g: _Grid, var: str, log: bool, y_label: str, x_label: str) -> None:
    """Scales, ticks, labels, grid and legend of one panel."""
    if g.log_x:
        ax.set_xscale("log")
    if log:
        ax.set_yscale("log", nonpositive="mask")
        plain_log_ticks(ax.yaxis)  # at least three labelled ticks over less than three decades
    if not g.numeric:
        ax.set_xticks(g.xs, [str(v) for v in g.raw])
    ax.set_xlabel(x_label + (" (log scale)" if g.log_x else ""))
    ax.set_ylabel(y_label + (" (log scale)" if log else ""))
    ax.grid(True, which="both", alpha=0.3)
    spread = f"median over {g.nseed} seeds, bars and band: min–max" if g.nseed > 1 else "single seed"
    ax.legend(fontsize="small", title=spread, title_fontsize="x-small")


def plot_sweep(
    ds: xr.Dataset,
    outdir: str | Path,
    variables: Sequence[str] | None = None,
    x: str | None = None,
    *,
    log_y: Collection[str] = (),
    labels: Mapping[str, str] | None = None,
    x_label: str | None = None,
    decorate: Callable[[Axes, str, np.ndarray], None] | None = None,
    title: str = "Sweep: per-point results against the grid",
    stem: str = "sweep",
    dpi: int = DPI,
) -> list[Path]:
    """Each of `variables` (default: every per-point number) against the grid axis `x` (default:
    the first axis other than seed), median over `seed` with the min-max spread, one series per
    value of the other axes.

    log_y: variables drawn on a log axis; labels: y labels by variable; x_label: the x axis's
    label (default: the axis name); decorate(ax, var, xs): draws
    extra lines (references) on a panel, xs the finite positive x values.  Writes STEM.png / .pdf.
    """
    g = _grid(ds, variables, x)
    ncols = min(len(g.variables), 3)
    nrows = math.ceil(len(g.variables) / ncols)
    fig, axes = new_figure(nrows, ncols, (5.6 * ncols + 0.4, 4.6 * nrows + 0.3))
    flat = [ax for row in axes for ax in row]
    styles = series_styles(len(g.series), SERIES_CMAP)
    ok = g.xs[np.isfinite(g.xs) & (g.xs > 0)]
    for ax, var in zip(flat, g.variables, strict=False):
        for sel, style in zip(g.series, styles, strict=True):
            _draw_series(ax, ds, g, var, sel, style, var in log_y)
        if decorate is not None and ok.size:
            decorate(ax, var, ok)
        _finish_panel(ax, g, var, var in log_y, (labels or {}).get(var, var), x_label or g.x)
    for ax in flat[len(g.variables) :]:
        ax.set_axis_off()
    fig.suptitle(run_title(ds, title))
    return save(fig, outdir, stem, dpi)
