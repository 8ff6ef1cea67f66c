"""Figures of the `concentration` experiment: the list `figures` draws, the figures against beta
(t*(beta), min W2, the N ladder) and the sweeps'; W2 against t under the bound (w2.png, envelope.png)
is `bound_figures`.

Drawn from a run's Dataset (schema: `attnflow.experiments.concentration`) with the pieces of
`attnflow.plot`; the mass figure is `plot.mass.plot_mass`, the tokens `plot.token_figures`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from ..._text import format_value, format_with_error
from ...plot import (
    DPI,
    TOKEN_CAPTIONS,
    FigureWarning,
    NothingToPlot,
    beta_label,
    beta_legend,
    new_figure,
    plain_log_ticks,
    plot_sweep,
    positive,
    require,
    run_title,
    save,
    series_styles,
    ticks_at,
    token_figures,
)
from ...plot.mass import MASS_CAPTION, plot_mass
from ...science.convergence import QUANTITIES
from ...science.fits import temperature_scale
from .bound_figures import bound_curve, claim_row, drawn_as, envelope, plot_envelope, plot_w2

if TYPE_CHECKING:
    import xarray as xr
    from matplotlib.axes import Axes

    from .bound_figures import ClaimRow

CAPTIONS: dict[str, tuple[str, str]] = {
    "w2": (
        "Distance to the zero-temperature limit",
        "Exact W₂(ρ_t^β, Π#ρ₀) against t (log scale), one line per β (an under-resolved β faded); "
        "stars mark t*(β); thick dashed: zero temperature; thin dashed, in each β's colour: Theorem 1's "
        "bound K₁a(β)e^{C₁t} + K₂e^{-ct} with the envelope's constants (claims row bound_envelope), "
        "under which every curve converged in N lies. Right: the synchronous coupling bound (an upper "
        "bound only).",
    ),
    "envelope": (
        "The converged curves under the theorem's bound",
        "Every curve converged in N (solid) under its bound K₁a(β)e^{C₁t} + K₂e^{-ct} (dashed, same "
        "colour) with the smallest constants uniform in β (claims row bound_envelope): c = γ/(2‖B‖), "
        "K₂ from the N = ∞ zero-temperature curve (thick dashed), K₁ and C₁ the smallest that keep "
        "every curve below.",
    ),
    "t_star": (
        "Time of closest approach t*(β)",
        "t*(β) against β (log scale), filled where t* converged in N, open where it did not; bars: "
        "its error (N level, time step, save grid, flatness of the minimum); grey: the near-minimal "
        "band. Lines: the observed laws a + b log β and a + b β over the betas with a metastable "
        "phase (claims row law_t_star), with their rms. The theorem says nothing about t*.",
    ),
    "min_w2": (
        "Closest approach min_t W₂ against β",
        "min_t W₂ against β (log-log), filled where it converged in N; bars: its error. Lines: the "
        "observed laws C a(β)^p and C β^-q (claims row law_min_w2) with their rms, and the guaranteed "
        "best concentration, the minimum over t of the bound with the envelope's constants (row "
        "bound_envelope): the theorem says min W₂ lies below it.",
    ),
    "ladder": (
        "Convergence in N",
        "The doubling ladder: min W₂ over the converged window and the window's end against N, per β.",
    ),
    "mass": MASS_CAPTION,
    **TOKEN_CAPTIONS,
    "sweep": (
        "Sweep over β, N and seeds",
        "Sweep: t* and min W₂ against β, median over seeds with the min–max spread, per N.",
    ),
}


class PointStyle(TypedDict):
    """Keywords of `Axes.errorbar` for the points of one status."""

    marker: str
    mfc: str
    color: str
    label: str


class LineStyle(TypedDict):
    """Keywords of `Axes.plot` for one fitted line."""

    color: str
    ls: str


# how each convergence is drawn: a quantity converged in N, a resolved beta whose quantity did not
# converge, an under-resolved beta (attnflow.science.convergence.STATUSES)
STATUS_STYLE: dict[str, PointStyle] = {
    "converged": {"marker": "o", "mfc": "black", "color": "black", "label": "converged in N"},
    "resolved": {"marker": "o", "mfc": "white", "color": "0.35", "label": "not converged in N"},
    "under-resolved": {
        "marker": "x",
        "mfc": "none",
        "color": "0.55",
        "label": "under-resolved (N too small)",
    },
}
FIT_STYLES: tuple[LineStyle, ...] = (
    {"color": "0.25", "ls": "--"},
    {"color": "0.45", "ls": "-."},
    {"color": "0.6", "ls": ":"},
)


def _by_status(ax: Axes, ds: xr.Dataset, key: str, y: np.ndarray, err: np.ndarray | None) -> None:
    """The points of quantity `key` (with error bars) drawn by their own convergence (drawn_as)."""
    betas = np.asarray(ds["beta"].values, dtype=float)
    drawn = drawn_as(ds, key, betas.size)
    for name, style in STATUS_STYLE.items():
        sel = (drawn == name) & np.isfinite(y)
        if sel.any():
            e = None if err is None else np.where(np.isfinite(err[sel]), err[sel], 0.0)
            ax.errorbar(betas[sel], y[sel], yerr=e, ls="", ms=7, capsize=4, zorder=3, **style)


def _error_of(ds: xr.Dataset, key: str) -> np.ndarray | None:
    return np.asarray(ds[f"{key}_error"].values, dtype=float) if f"{key}_error" in ds.variables else None


def _beta_axis(ax: Axes, betas: np.ndarray) -> None:
    """A log beta axis with its ticks at the data's betas."""
    ax.set_xscale("log")
    ticks_at(ax.xaxis, betas)
    ax.set_xlabel("inverse temperature β (log scale)")


def _regimes(ax: Axes, ds: xr.Dataset, row: ClaimRow, y: np.ndarray) -> None:
    """Mark the betas left out of the row's fits for their regime alone (a law never mixes the betas
    with and without a metastable phase); a beta left out as not converged is its marker's."""
    regimes, left = row.get("regimes") or {}, row.get("left_out") or {}
    for b, v in zip(np.asarray(ds["beta"].values, dtype=float), y, strict=True):
        why = left.get(f"{b:g}")
        if why is None or not np.isfinite(v):
            continue
        if why == regimes.get(f"{b:g}"):
            text = "no metastable phase\n(not in the fits)"
        elif "not the regime" in why:
            text = "a metastable phase\n(not in the fits)"
        else:
            continue
        ax.annotate(
            text,
            (b, v),
            xytext=(8, -4),
            textcoords="offset points",
            fontsize="x-small",
            color="0.35",
            va="top",
        )


def _param(fit: Mapping[str, object], key: str, sign: float = 1.0) -> str:
    """A fitted parameter with its error, to the digits the error supports."""
    value, error = fit.get(key), fit.get(f"{key}_err")
    if not isinstance(value, int | float):
        return "—"
    if not isinstance(error, int | float):
        return format_value(sign * value, 3)
    v, e = format_with_error(sign * value, error)
    return f"{v} ± {e}"


#: how `_fit_lines` draws one fit of a claims row: its label (or label(fit)) and curve(beta, fit)
FitLine = tuple[
    str | Callable[[Mapping[str, float | None]], str],
    Callable[[np.ndarray, Mapping[str, float | None]], np.ndarray],
]


def _fit_lines(ax: Axes, row: ClaimRow, fits: Mapping[str, FitLine]) -> None:
    """The row's fits over the betas it used (never beyond): name -> (label or label(fit),
    curve(beta, fit)), each called a fit, with its rms."""
    used = np.asarray(row.get("betas") or [], dtype=float)
    found = row.get("fits") or {}
    if used.size < 2:
        return
    bb = np.geomspace(used.min(), used.max(), 100)
    for style, (name, (label, curve)) in zip(FIT_STYLES, fits.items(), strict=False):
        f = found.get(name)
        if not isinstance(f, dict) or f.get("rms") is None:
            continue
        text = label(f) if callable(label) else label
        ax.plot(bb, curve(bb, f), lw=1.6, label=f"fit {text}, rms {format_value(f['rms'], 2)}", **style)


def plot_t_star(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """t*(beta) against beta (log x, ticks at the betas) drawn by its own convergence in N with its
    error, the near-minimal band (t_star_lo, t_star_hi) in grey, and the observed laws of the claims
    row law_t_star (a + b log beta, a + b beta) with their rms. Needs `t_star` (beta). Writes
    t_star.png."""
    require(ds, ["t_star"], "plot_t_star", {"t_star": ("beta",)})
    betas = np.asarray(ds["beta"].values, dtype=float)
    ts = np.asarray(ds["t_star"].values, dtype=float)
    if not np.isfinite(ts).any():
        raise NothingToPlot("plot_t_star: no finite t_star to plot (no beta converged in N)")
    fig, axes = new_figure(1, 1, (6.5, 4.6))
    ax = axes[0][0]
    if "t_star_lo" in ds.variables and "t_star_hi" in ds.variables:
        lo, hi = (np.asarray(ds[k].values, dtype=float) for k in ("t_star_lo", "t_star_hi"))
        ok = np.isfinite(lo) & np.isfinite(hi)
        ax.vlines(betas[ok], lo[ok], hi[ok], color="0.8", lw=6, label="near-minimal band", zorder=1)
    _by_status(ax, ds, "t_star", ts, _error_of(ds, "t_star"))
    fits = {
        "log_beta": (
            lambda f: f"a + b log β, b = {_param(f, 'b')}",
            lambda bb, f: f["a"] + f["b"] * np.log(bb),
        ),
        "beta": (lambda f: f"a + b β, b = {_param(f, 'b')}", lambda bb, f: f["a"] + f["b"] * bb),
    }
    row = claim_row(ds, "law_t_star")
    _fit_lines(ax, row, fits)
    _regimes(ax, ds, row, ts)
    _beta_axis(ax, betas)
    ax.set_ylabel(r"$t^*(\beta) = \mathrm{argmin}_t\, W_2$")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.suptitle(run_title(ds, "Time of closest approach t* against β (an observed law)"))
    return save(fig, outdir, "t_star", dpi)


def _guaranteed_minimum(ax: Axes, ds: xr.Dataset, betas: np.ndarray) -> None:
    """The minimum over t of the bound with the envelope's constants, against beta (the theorem's
    guaranteed best concentration), when the envelope has them."""
    found = envelope(ds)
    if found is None:
        return
    bb = np.geomspace(betas.min(), betas.max(), 60)
    t = np.linspace(0.0, float(ds["time"].values[-1]) * 4, 4000)
    vals = [float(np.min(bound_curve(found[0], float(b), t))) for b in bb]
    ax.plot(bb, vals, color="0.5", lw=1.4, ls=(0, (1, 1.5)), label="guaranteed: min over t of the bound")


def plot_min_w2(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """min_t W2 against beta (log-log, ticks at the betas) drawn by its own convergence in N with its
    error, the observed laws of the claims row law_min_w2 (C a(beta)^p, C beta^-q) with their rms,
    and the guaranteed best concentration from the envelope. Needs `min_w2` (beta). Writes
    min_w2.png."""
    require(ds, ["min_w2"], "plot_min_w2", {"min_w2": ("beta",)})
    betas = np.asarray(ds["beta"].values, dtype=float)
    m = positive(ds["min_w2"].values)
    ok = np.isfinite(betas) & np.isfinite(m)
    if not ok.any():
        raise NothingToPlot("plot_min_w2: no finite positive (beta, min_w2) pair to plot")
    fig, axes = new_figure(1, 1, (6.5, 4.6))
    ax = axes[0][0]
    _by_status(ax, ds, "min_w2", m, _error_of(ds, "min_w2"))
    fits = {
        "a_power": (
            lambda f: f"C a(β)^p, p = {_param(f, 'b')}",
            lambda b, f: np.exp(f["a"]) * temperature_scale(b) ** f["b"],
        ),
        "beta_power": (
            lambda f: f"C β^-q, q = {_param(f, 'b', -1.0)}",
            lambda b, f: np.exp(f["a"]) * b ** f["b"],
        ),
    }
    row = claim_row(ds, "law_min_w2")
    _fit_lines(ax, row, fits)
    _regimes(ax, ds, row, m)
    _guaranteed_minimum(ax, ds, betas[ok])
    _beta_axis(ax, betas)
    ax.set_yscale("log", nonpositive="mask")
    plain_log_ticks(ax.yaxis)
    ax.set_ylabel(r"$\mathrm{min}_t W_2$ (log scale)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.suptitle(
        run_title(ds, r"Closest approach $\mathrm{min}_t W_2(\rho^\beta_t, \Pi_\#\rho_0)$ against $\beta$")
    )
    return save(fig, outdir, "min_w2", dpi)


def plot_ladder(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """The N ladder: min W2 and the converged window's end against N, one line per beta.
    Needs `ladder_N`, `ladder_min_w2`, `ladder_window` (beta, level). Writes ladder.png / .pdf."""
    require(ds, ["ladder_N", "ladder_min_w2", "ladder_window"], "plot_ladder")
    betas = np.asarray(ds["beta"].values, dtype=float)
    styles = series_styles(len(betas))
    fig, axes = new_figure(1, 2, (11, 4.4))
    for ax, var, label in zip(
        axes[0],
        ("ladder_min_w2", "ladder_window"),
        ("min W₂ over the converged window", "end of the converged window"),
        strict=True,
    ):
        for i, b in enumerate(betas):
            N = np.asarray(ds["ladder_N"].values[i], dtype=float)
            y = np.asarray(ds[var].values[i], dtype=float)
            ok = np.isfinite(N) & np.isfinite(y)
            dodge = 2.0 ** (0.05 * (i - (len(betas) - 1) / 2))  # equal values side by side, not on top
            style = {**styles[i], "mfc": "none", "mew": 1.3}
            ax.plot(N[ok] * dodge, y[ok], label=beta_label(b), **style)
        ax.set_xscale("log", base=2)
        Ns = np.asarray(ds["ladder_N"].values, dtype=float).ravel()
        ticks_at(ax.xaxis, Ns[np.isfinite(Ns)])
        ax.set_xlabel("number of tokens N (log scale; betas set slightly apart)")
        ax.set_ylabel(label)
        if var == "ladder_min_w2":
            ax.set_yscale("log", nonpositive="mask")
            plain_log_ticks(ax.yaxis)
        ax.grid(True, which="both", alpha=0.3)
    beta_legend(fig, axes[0][0], betas)
    fig.suptitle(run_title(ds, "Convergence in N: the doubling ladder"))
    return save(fig, outdir, "ladder", dpi)


def figures(ds: xr.Dataset, outdir: str | Path, *, dpi: int = DPI, animation: bool = False) -> list[Path]:
    """W2, the envelope, t*, min W2 and mass figures, then the token snapshots (t* among the times)
    and animation."""
    paths: list[Path] = []
    for draw in (plot_w2, plot_envelope, plot_t_star, plot_min_w2, plot_mass):
        try:
            paths += draw(ds, outdir, dpi=dpi)
        except NothingToPlot as err:  # e.g. no converged t*: that figure alone is left out
            warnings.warn(FigureWarning(f"a figure is left out: {err}"), stacklevel=2)
    if "ladder_N" in ds.variables and ds.sizes.get("level", 0) > 1:
        paths += plot_ladder(ds, outdir, dpi=dpi)
    second = ("x_zero", "β = ∞ (zero temperature)")
    return paths + token_figures(ds, outdir, animation=animation, dpi=dpi, mark="t_star", second=second)


def sweep_figures(ds: xr.Dataset, outdir: str | Path, *, dpi: int = DPI) -> list[Path]:
    """A sweep's t* and min W2 against beta: median over `seed` with the min-max spread, one series
    per value of the other grid axes (e.g. N), and the reference a(beta) scaled to the data.

    Needs `t_star` and `min_w2` with a `beta` dim.  Writes sweep.png / .pdf.
    """

    def reference(ax: Axes, var: str, betas: np.ndarray) -> None:
        mins = positive(ds["min_w2"].values)
        if var != "min_w2" or not np.isfinite(mins).any():
            return
        bb = np.geomspace(betas.min(), betas.max(), 100)
        level = float(np.nanmedian(mins)) / float(np.median(temperature_scale(betas)))
        ax.plot(
            bb, level * temperature_scale(bb), color="0.5", ls=":", lw=2, label="∝ √(log(β+1)/β) (reference)"
        )

    shown = ["t_star", "min_w2"]
    return plot_sweep(
        ds,
        outdir,
        shown,
        x="beta",
        log_y={q for q in shown if QUANTITIES[q].kind == "distance"},  # distances on a log scale
        labels={"t_star": r"$t^*(\beta) = \mathrm{argmin}_t\, W_2$", "min_w2": r"$\mathrm{min}_t W_2$"},
        x_label="inverse temperature β",
        decorate=reference,
        title=r"Sweep: time of closest approach $t^*$ and $\mathrm{min}_t W_2$ against $\beta$",
        dpi=dpi,
    )
