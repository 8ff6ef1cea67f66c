"""The figures of a metastability run (from its Dataset and attrs["fits"]): the map of departures per
cloud kind, the two branches against log N per beta, and the crossover N*(beta)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

from ..._text import format_value, format_with_error
from ...plot import DPI, beta_label, fits_of, new_figure, require, run_title, save, series_styles, ticks_at

if TYPE_CHECKING:
    import xarray as xr
    from matplotlib.axes import Axes

    from .branches import BranchFits, KindFits

CAPTIONS = {
    "map": (
        "The metastable time mapped in (β, N)",
        "The departure t_depart of the clusters from Pi_# rho_0 (the mass near an atom ±u₁ falls back "
        "below half the atom's mass) for each β and number of tokens N, one panel per cloud kind; random "
        "clouds: the mean over seeds. Each cell: t_depart to the digits its error supports, the error "
        'below; grey, "none": no departure (no metastable phase, or none by the horizon).',
    ),
    "branches": (
        "The two branches of the departure",
        "t_depart against N (log scale) per β: filled points were fitted on the finite-N branch a log N + "
        "b (solid line), open ones lie within branch_gap of the mean-field departure t_mf(β) (dotted "
        "line, drawn where it lies in the plotted range).",
    ),
    "crossover": (
        "Where the branches meet",
        "The crossover N*(β), where a log N* + b = t_mf(β), per β from that β's fit (points with their "
        "errors) and from the pooled fit with the mean-field branch (line); the grey band is the map's "
        "range of N. Beyond N*, more tokens no longer lengthen the metastable phase.",
    ),
}


def _kinds(ds: xr.Dataset) -> list[str]:
    return [str(k) for k in ds["init"].values]


def kind_title(ds: xr.Dataset, kind: str) -> str:
    """A panel's title: the cloud kind and whether its points are means over random clouds."""
    seeded = "seeded" in ds.variables and bool(ds["seeded"].sel(init=kind))
    return f"init = {kind}: " + (
        f"random, mean of {ds.sizes['seed']} seeds" if seeded else "deterministic nodes"
    )


def _cell(v: float, e: float) -> str:
    """A map cell: the departure to the digits its error supports, the error below; "none" where
    there is no departure; "(one cloud)" below a mean of one departed cloud of several, whose error
    (the seeds' spread) is unknown."""
    if not math.isfinite(v):
        return "none"
    if not math.isfinite(e):
        return f"{format_value(v, 3)}\n(one cloud)"
    if not e > 0:
        return format_value(v, 3)
    value, error = format_with_error(v, e)
    return f"{value}\n± {error}"


def plot_map(ds: xr.Dataset, outdir: Path, dpi: int = DPI) -> list[Path]:
    """Heatmap of t_depart (beta, N) per cloud kind, each cell labelled with its value."""
    require(ds, ["t_depart"], "plot_map", {"t_depart": ("init", "beta", "N")})
    kinds, betas, Ns = _kinds(ds), ds["beta"].values, ds["N"].values
    width = max(0.95 * len(Ns) + 1.0, 3.4)  # inches per panel: room for its two-line title
    fig, axes = new_figure(1, len(kinds), (width * len(kinds) + 1.3, 0.55 * len(betas) + 2.4))
    t = ds["t_depart"].transpose("init", "beta", "N").values
    err = (
        ds["t_depart_error"].transpose("init", "beta", "N").values
        if "t_depart_error" in ds.variables
        else np.full(t.shape, math.nan)
    )
    finite = t[np.isfinite(t)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    image = None
    for ax, kind, values, errors in zip(axes[0], kinds, t, err, strict=True):
        ax.set_facecolor("0.85")
        image = ax.imshow(values, origin="lower", aspect="auto", cmap="viridis", vmin=lo, vmax=hi)
        for (j, k), v in np.ndenumerate(values):
            colour = "white" if math.isfinite(v) and v < lo + 0.6 * (hi - lo) else "black"
            ax.text(k, j, _cell(v, errors[j, k]), ha="center", va="center", fontsize="x-small", color=colour)
        ax.set_xticks(range(len(Ns)), [str(int(n)) for n in Ns], rotation=45)
        ax.set_yticks(range(len(betas)), [f"{b:g}" for b in betas])
        ax.set_xlabel("tokens N")
        ax.set_ylabel("β")
        ax.set_title(kind_title(ds, kind).replace(": ", "\n"), fontsize="medium")
    if image is not None:
        fig.colorbar(image, ax=list(axes[0]), label="departure time t_depart")
    fig.suptitle(run_title(ds, "Departure time of the clusters"))
    return save(fig, outdir, "map", dpi)


def _kind_fits(fits: BranchFits, kind: str) -> KindFits:
    """The fits of one cloud kind (none: {})."""
    none: KindFits = {}
    return fits.get("kinds", {}).get(kind, none)


def _branch_panel(ax: Axes, ds: xr.Dataset, kind: str, fits: BranchFits) -> None:
    """One kind's departures against N, its fitted lines and mean-field levels, one colour per beta."""
    betas, Ns = ds["beta"].values, np.asarray(ds["N"].values, dtype=float)
    styles = series_styles(len(betas))
    per_beta = _kind_fits(fits, kind).get("per_beta", {})
    p = ds.sel(init=kind)
    top = np.nanmax(p["t_depart"].values) if np.isfinite(p["t_depart"].values).any() else 1.0
    for i, b in enumerate(betas):
        q, entry, st = p.sel(beta=b), per_beta.get(f"{b:g}", {}), styles[i]
        t, err = q["t_depart"].values, np.nan_to_num(q["t_depart_error"].values)
        used = np.isin(Ns, entry.get("N_fitted", []))
        colour = st["color"]
        ax.errorbar(Ns[used], t[used], err[used], fmt=st["marker"], color=colour, label=beta_label(float(b)))
        ax.errorbar(Ns[~used], t[~used], err[~used], fmt=st["marker"], color=colour, mfc="none")
        fit = entry.get("fit")
        if fit is not None:
            grid = np.geomspace(min(fit["Ns"]), max(fit["Ns"]), 20)
            ax.plot(grid, fit["a"] * np.log(grid) + fit["b"], color=colour, ls="-", lw=1.2)
        t_mf = _number(entry.get("t_mf"))
        if math.isfinite(t_mf) and 0 < t_mf <= 1.3 * top:  # (a negative t_mf: no metastable phase)
            ax.axhline(t_mf, color=colour, ls=":", lw=1.0)
    ax.set_xscale("log")
    ticks_at(ax.xaxis, Ns)
    ax.set_xlabel("tokens N (log scale)")
    ax.set_ylabel("departure time t_depart")
    ax.set_title(kind_title(ds, kind), fontsize="medium")
    ax.grid(True, alpha=0.3)


def plot_branches(ds: xr.Dataset, outdir: Path, dpi: int = DPI) -> list[Path]:
    """t_depart against N per beta with the finite-N fits and the mean-field levels, per kind."""
    require(ds, ["t_depart", "t_depart_error"], "plot_branches")
    kinds, fits = _kinds(ds), cast("BranchFits", fits_of(ds))
    fig, axes = new_figure(1, len(kinds), (4.6 * len(kinds) + 1.4, 4.4))
    for ax, kind in zip(axes[0], kinds, strict=True):
        _branch_panel(ax, ds, kind, fits)
    from matplotlib.lines import Line2D

    handles, labels = axes[0][0].get_legend_handles_labels()
    keys = [
        (Line2D([], [], color="0.3", marker="o", ls=""), "fitted (finite-N branch)"),
        (Line2D([], [], color="0.3", marker="o", mfc="none", ls=""), "left out of the fit"),
        (Line2D([], [], color="0.3", ls="-"), "a log N + b"),
        (Line2D([], [], color="0.3", ls=":"), "t_mf(β)"),
    ]
    handles += [h for h, _ in keys]
    labels += [lab for _, lab in keys]
    fig.legend(handles, labels, loc="outside right upper", fontsize="small")
    fig.suptitle(run_title(ds, "The finite-N branch a log N + b and the mean-field departure"))
    return save(fig, outdir, "branches", dpi)


def _number(v: object) -> float:
    """A fit's number as a float; NaN where it is missing or None (a fit that had too few points)."""
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan


def _crossover_line(fits: BranchFits, kind: str, betas: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(beta grid, N*) of the pooled fit of `kind` with the mean-field branch, or None."""
    pooled = _kind_fits(fits, kind).get("pooled", {})
    mf = fits.get("mean_field", {})
    a, b = _number(pooled.get("a")), _number(pooled.get("b"))
    slope, intercept = _number(mf.get("slope")), _number(mf.get("intercept"))
    if not (a > 0 and math.isfinite(b) and math.isfinite(slope) and math.isfinite(intercept)):
        return None
    grid = np.geomspace(float(betas.min()), float(betas.max()), 100)
    log_n = (slope * grid + intercept - b) / a
    with np.errstate(over="ignore"):
        return grid, np.where(log_n < 700, np.exp(np.minimum(log_n, 700)), np.nan)


def plot_crossover(ds: xr.Dataset, outdir: Path, dpi: int = DPI) -> list[Path]:
    """N*(beta) per kind (points with errors) and the line exp((t_mf(beta) - b) / a)."""
    require(ds, ["t_depart"], "plot_crossover")
    fits, betas = cast("BranchFits", fits_of(ds)), np.asarray(ds["beta"].values, dtype=float)
    Ns = np.asarray(ds["N"].values, dtype=float)
    fig, axes = new_figure(1, 1, (6.2, 4.4))
    ax = axes[0][0]
    ax.axhspan(Ns.min(), Ns.max(), color="0.9", label="the map's N")
    for i, (kind, st) in enumerate(zip(_kinds(ds), series_styles(len(_kinds(ds)), "cividis"), strict=True)):
        per_beta = _kind_fits(fits, kind).get("per_beta", {})
        b, y, lo, hi = [], [], [], []
        for beta in betas:
            cross = per_beta.get(f"{beta:g}", {}).get("crossover", {})
            log_n, err = _number(cross.get("log_N_star")), _number(cross.get("log_N_star_err"))
            if math.isfinite(log_n) and log_n < 700:
                e = err if math.isfinite(err) else 0.0
                b.append(beta)
                y.append(math.exp(log_n))
                lo.append(math.exp(log_n) - math.exp(log_n - e))
                hi.append(math.exp(min(log_n + e, 700)) - math.exp(log_n))
        if b:
            ax.errorbar(
                b, y, [lo, hi], fmt=st["marker"], color=st["color"], label=f"{kind}: per β", capsize=2
            )
        line = _crossover_line(fits, kind, betas)
        if line is not None:
            ax.plot(
                *line, color=st["color"], ls=("-", "--")[i % 2], label=f"{kind}: pooled a log N + b = t_mf(β)"
            )
    ax.set_xscale("log")
    ax.set_yscale("log", nonpositive="mask")
    ticks_at(ax.xaxis, betas)
    ax.set_xlabel("β (log scale)")
    ax.set_ylabel("crossover N* (log scale)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="upper left")
    fig.suptitle(run_title(ds, "Crossover of the branches"))
    return save(fig, outdir, "crossover", dpi)


def draw(ds: xr.Dataset, outdir: Path, dpi: int = DPI) -> list[Path]:
    """Every figure of the run (CAPTIONS' order)."""
    return [*plot_map(ds, outdir, dpi), *plot_branches(ds, outdir, dpi), *plot_crossover(ds, outdir, dpi)]
