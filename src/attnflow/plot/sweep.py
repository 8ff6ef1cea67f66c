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
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._text import format_value
from ..io import json_attr
from .style import DPI, SERIES_CMAP, new_figure, positive, require, run_title, save, series_styles

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


def _x_axis(ds: xr.Dataset, dims: Sequence[Any]) -> str:
    """The first axis other than seed with more than one value (else the first axis)."""
    for d in dims:
        if d != "seed" and ds.sizes[d] > 1:
            return str(d)
    return str(dims[0])


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
    variables = list(variables) if variables is not None else sweep_variables(ds)[:MAX_PANELS]
    if not variables:
        raise ValueError("plot_sweep: ds has no numeric variable with one value per grid point")
    require(ds, variables, "plot_sweep")
    dims = ds[variables[0]].dims
    x = x or _x_axis(ds, dims)
    for v in variables:
        if x not in ds[v].dims:
            raise ValueError(f"plot_sweep needs ds[{v!r}] with a {x!r} dim, got dims {ds[v].dims}")
        if set(ds[v].dims) != set(dims):
            raise ValueError(f"plot_sweep: {variables} must share dims, got {dims} and {ds[v].dims}")
    series_dims = [dd for dd in dims if dd not in (x, "seed")]
    combos = list(itertools.product(*[range(ds.sizes[dd]) for dd in series_dims]))
    raw = np.asarray(ds[x].values)
    numeric = raw.dtype.kind in "fiu"
    xs = raw.astype(float) if numeric else np.arange(raw.size, dtype=float)
    log_x = numeric and bool(np.all(xs > 0)) and xs.max() >= 10 * xs.min()
    styles = series_styles(len(combos), SERIES_CMAP)
    nseed = ds.sizes["seed"] if "seed" in dims else 1
    ncols = min(len(variables), 3)
    nrows = math.ceil(len(variables) / ncols)
    fig, axes = new_figure(nrows, ncols, (5.6 * ncols + 0.4, 4.6 * nrows + 0.3))
    flat = [ax for row in axes for ax in row]
    for ci, combo in enumerate(combos):
        sel = dict(zip(series_dims, combo, strict=True))
        lab = ", ".join(f"{dd} = {format_value(ds[dd].values[i].item())}" for dd, i in sel.items()) or "all"
        for ax, var in zip(flat, variables, strict=False):
            a = ds[var].isel(sel).transpose(x, *(["seed"] if "seed" in dims else []))
            vals = np.asarray(a.values, dtype=float).reshape(len(xs), -1)
            if var in log_y:
                vals = positive(vals)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns give NaN, wanted
                med, lo, hi = np.nanmedian(vals, 1), np.nanmin(vals, 1), np.nanmax(vals, 1)
            st = styles[ci]
            ax.errorbar(
                xs,
                med,
                yerr=np.vstack([med - lo, hi - med]) if nseed > 1 else None,
                capsize=3,
                label=lab,
                color=st["color"],
                ls=st["linestyle"],
                marker=st["marker"],
                mfc="white",
            )
            if nseed > 1:
                ax.fill_between(xs, lo, hi, color=st["color"], alpha=0.15, lw=0)
    spread = f"median over {nseed} seeds, bars and band: min–max" if nseed > 1 else "single seed"
    ok = xs[np.isfinite(xs) & (xs > 0)]
    for ax, var in zip(flat, variables, strict=False):
        if decorate is not None and ok.size:
            decorate(ax, var, ok)
        if log_x:
            ax.set_xscale("log")
        if var in log_y:
            ax.set_yscale("log", nonpositive="mask")
        if not numeric:
            ax.set_xticks(xs, [str(v) for v in raw])
        ax.set_xlabel((x_label or x) + (" (log scale)" if log_x else ""))
        ax.set_ylabel((labels or {}).get(var, var) + (" (log scale)" if var in log_y else ""))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small", title=spread, title_fontsize="x-small")
    for ax in flat[len(variables) :]:
        ax.set_axis_off()
    fig.suptitle(run_title(ds, title))
    return save(fig, outdir, stem, dpi)
