"""Figures of the `concentration` experiment: W2 against t, t*(beta), min W2 against beta, its sweeps.

Drawn from a run's Dataset (schema: `attnflow.experiments.concentration`) with the pieces of
`attnflow.plot`; the mass figure is `terminal.plot_mass`, the tokens `plot.token_figures`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .._text import format_value
from ..fits import temperature_scale
from ..plot import (
    DPI,
    TOKEN_CAPTIONS,
    beta_label,
    beta_legend,
    fits_of,
    markevery,
    new_figure,
    pick,
    plot_sweep,
    positive,
    require,
    run_title,
    save,
    series_styles,
    token_figures,
)
from ..plot.style import STAR_STYLE, ZERO_TEMPERATURE_STYLE
from .terminal import MASS_CAPTION, plot_mass

if TYPE_CHECKING:
    import xarray as xr
    from matplotlib.axes import Axes

CAPTIONS: dict[str, tuple[str, str]] = {
    "w2": (
        "Distance to the zero-temperature limit",
        "Exact W₂(ρ_t^β, Π#ρ₀) against t (log scale), one line per β; stars mark t*(β); thick dashed: "
        "zero temperature. Right: the synchronous coupling bound (an upper bound only).",
    ),
    "t_star": (
        "Time of closest approach t*(β)",
        "Time of closest approach t*(β) against log β, with its plateau and the linear fit in log β.",
    ),
    "min_w2": (
        "Closest approach min_t W₂ against β",
        "min_t W₂ against β (log-log) with the reference √(log(β+1)/β) and the fitted power of it.",
    ),
    "mass": MASS_CAPTION,
    **TOKEN_CAPTIONS,
    "sweep": (
        "Sweep over β, N and seeds",
        "Sweep: t* and min W₂ against β, median over seeds with the min–max spread, per N.",
    ),
}


def _mark_under_resolved(ax: Axes, ds: xr.Dataset, betas: np.ndarray, y: np.ndarray) -> None:
    """Cross out points whose resolution ratio spacing(N, d) * sqrt(beta) is >= 1 (MATH.md)."""
    if "resolution_ratio" not in ds.variables or ds["resolution_ratio"].dims != ("beta",):
        return
    bad = np.asarray(ds["resolution_ratio"].values, dtype=float) >= 1
    if bad.any():
        ax.plot(
            betas[bad],
            y[bad],
            ls="",
            marker="x",
            ms=12,
            mew=2,
            color="0.2",
            label="under-resolved: spacing·√β ≥ 1 (N too small)",
        )


def _theorem_bound_curves(ax: Axes, ds: xr.Dataset, t, betas, styles, w2) -> None:
    """Thin dotted curves K1 a(beta) exp(C1 t) + K2 exp(-c t) from attrs["fits"]["theorem_bound"],
    with the y range kept to the data's (the bound grows without limit)."""
    fit = fits_of(ds).get("theorem_bound")
    K1, K2, C1, c = (pick(fit, (k,)) for k in ("K1", "K2", "C1", "c"))
    if K1 is None or K2 is None or C1 is None or c is None:
        return
    first = True
    for i, b in enumerate(betas):
        if not (np.isfinite(b) and b > 0):
            continue
        curve = K1 * temperature_scale(b) * np.exp(C1 * t) + K2 * np.exp(-c * t)
        lab = r"fitted bound $K_1 a(\beta) e^{C_1 t} + K_2 e^{-c t}$" if first else None
        ax.plot(t, curve, color=styles[i]["color"], lw=1.0, ls=(0, (1, 1.5)), alpha=0.9, label=lab)
        first = False
    data = positive(w2)
    if "w2_zero" in ds.variables:
        data = np.concatenate([data.ravel(), positive(ds["w2_zero"].values)])
    if np.isfinite(data).any():
        ax.set_ylim(np.nanmin(data) / 2, np.nanmax(data) * 2)


def plot_w2(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """W2(rho^beta_t, Pi_# rho_0) against t (log y), one line per beta, the zero-temperature curve,
    t*(beta) marked and the fitted theorem bound (attrs["fits"]["theorem_bound"] = {K1, K2, C1, c})
    when present; a second panel with the synchronous coupling bound when present.

    Needs `w2` (beta, time); uses `w2_zero` (time), `coupling_bound` (beta, time), `t_star`,
    `min_w2` (beta) when present.  Writes w2.png and w2.pdf in outdir.
    """
    require(ds, ["w2"], "plot_w2", {"w2": ("beta", "time")})
    t = np.asarray(ds["time"].values, dtype=float)
    betas = np.asarray(ds["beta"].values, dtype=float)
    styles = series_styles(len(betas))
    has_bound = "coupling_bound" in ds.variables
    fig, axes = new_figure(1, 2 if has_bound else 1, (11 if has_bound else 6.5, 4.6))
    panels = [("w2", r"exact $W_2(\rho^\beta_t,\, \Pi_\#\rho_0)$")]
    if has_bound:
        panels.append(("coupling_bound", r"coupling bound (an upper bound on $W_2$)"))
    for ax, (var, subtitle) in zip(axes[0], panels, strict=True):
        vals = ds[var].transpose("beta", "time").values
        for i, b in enumerate(betas):
            ax.plot(t, positive(vals[i]), label=beta_label(b), markevery=markevery(len(t)), **styles[i])
        if "w2_zero" in ds.variables and var == "w2":
            ax.plot(
                t, positive(ds["w2_zero"].values), label="β = ∞ (zero temperature)", **ZERO_TEMPERATURE_STYLE
            )
        if var == "w2":
            _theorem_bound_curves(ax, ds, t, betas, styles, vals)
        if var == "w2" and "t_star" in ds.variables:
            ts = np.asarray(ds["t_star"].values, dtype=float)
            mins = (
                np.asarray(ds["min_w2"].values, dtype=float)
                if "min_w2" in ds.variables
                else np.array([np.interp(s, t, vals[i]) for i, s in enumerate(ts)])
            )
            ax.plot(ts, positive(mins), ms=13, mew=1.3, label=r"$t^*(\beta)$, minimum over t", **STAR_STYLE)
        ax.set_yscale("log", nonpositive="mask")
        ax.set_xlabel("time t")
        ax.set_ylabel(
            r"$W_2$, chordal cost $|x-y|^2$ (log scale)" if var == "w2" else "coupling bound (log scale)"
        )
        ax.set_title(subtitle, fontsize="medium")
        ax.grid(True, which="both", alpha=0.3)
    beta_legend(fig, axes[0][0], betas)
    fig.suptitle(run_title(ds, r"Distance $W_2(\rho^\beta_t,\, \Pi_\#\rho_0)$ to the zero-temperature limit"))
    return save(fig, outdir, "w2", dpi)


def plot_t_star(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """t*(beta) against log beta, with its plateau (t_star_lo, t_star_hi) as error bars and the fit
    t* = a + b log beta from attrs["fits"]["t_star"] = {a, b, a_err, b_err} when present.

    Needs `t_star` (beta).  Writes t_star.png and t_star.pdf.
    """
    require(ds, ["t_star"], "plot_t_star", {"t_star": ("beta",)})
    betas = np.asarray(ds["beta"].values, dtype=float)
    ts = np.asarray(ds["t_star"].values, dtype=float)
    ok = np.isfinite(betas) & np.isfinite(ts)
    if not ok.any():
        raise ValueError("plot_t_star: no finite (beta, t_star) pair to plot")
    fig, axes = new_figure(1, 1, (6.5, 4.6))
    ax = axes[0][0]
    yerr = None
    if "t_star_lo" in ds.variables and "t_star_hi" in ds.variables:
        lo = np.asarray(ds["t_star_lo"].values, dtype=float)
        hi = np.asarray(ds["t_star_hi"].values, dtype=float)
        yerr = np.vstack([np.clip(ts - lo, 0, None), np.clip(hi - ts, 0, None)])[:, ok]
    ax.errorbar(
        betas[ok],
        ts[ok],
        yerr=yerr,
        ls="",
        marker="o",
        ms=7,
        color="black",
        mfc="white",
        capsize=4,
        label="t*(β) (bars: plateau within tolerance of the minimum)",
    )
    _mark_under_resolved(ax, ds, betas, ts)
    fit = fits_of(ds).get("t_star")
    a, b, b_err = (pick(fit, k) for k in (("a", "intercept"), ("b", "slope"), ("b_err", "slope_err")))
    if a is not None and b is not None:
        bb = np.geomspace(betas[ok].min(), betas[ok].max(), 100)
        err = f" ± {format_value(b_err)}" if b_err is not None else ""
        ax.plot(
            bb,
            a + b * np.log(bb),
            color="0.35",
            ls="--",
            lw=1.8,
            label=f"fit t* = a + b log β:  a = {format_value(a)}, b = {format_value(b)}{err}",
        )
    ax.set_xscale("log")
    ax.set_xlabel("inverse temperature β (log scale)")
    ax.set_ylabel(r"$t^*(\beta) = \mathrm{argmin}_t\, W_2$")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.suptitle(run_title(ds, "Time of closest approach t*(β) against log β (theory: linear)"))
    return save(fig, outdir, "t_star", dpi)


def plot_min_w2(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """min_t W2 against beta (log-log) with the reference a(beta) = sqrt(log(beta+1)/beta) (scaled
    to the data) and the fit min W2 = prefactor * a^exponent from attrs["fits"]["min_w2"].

    Needs `min_w2` (beta).  Writes min_w2.png and min_w2.pdf.
    """
    require(ds, ["min_w2"], "plot_min_w2", {"min_w2": ("beta",)})
    betas = np.asarray(ds["beta"].values, dtype=float)
    m = positive(ds["min_w2"].values)
    ok = np.isfinite(betas) & np.isfinite(m)
    if not ok.any():
        raise ValueError("plot_min_w2: no finite positive (beta, min_w2) pair to plot")
    fig, axes = new_figure(1, 1, (6.5, 4.6))
    ax = axes[0][0]
    ax.plot(
        betas[ok],
        m[ok],
        ls="-",
        marker="o",
        ms=7,
        color="black",
        mfc="white",
        label=r"$\mathrm{min}_t$ $W_2(\rho^\beta_t,\, \Pi_\#\rho_0)$",
    )
    _mark_under_resolved(ax, ds, betas, m)
    bb = np.geomspace(betas[ok].min(), betas[ok].max(), 100)
    ref = temperature_scale(bb)
    scale = math.exp(float(np.mean(np.log(m[ok]) - np.log(temperature_scale(betas[ok])))))
    ax.plot(
        bb,
        scale * ref,
        color="0.5",
        ls=":",
        lw=2,
        label=rf"reference {format_value(scale)}$\,\sqrt{{\log(\beta+1)/\beta}}$",
    )
    fit = fits_of(ds).get("min_w2")
    p, C, p_err = (pick(fit, k) for k in (("exponent", "p"), ("prefactor", "C"), ("exponent_err", "p_err")))
    if p is not None and C is not None:
        err = f" ± {format_value(p_err)}" if p_err is not None else ""
        ax.plot(
            bb,
            C * ref**p,
            color="0.25",
            ls="--",
            lw=1.8,
            label=f"fit C·a(β)^p:  C = {format_value(C)}, p = {format_value(p)}{err}",
        )
    ax.set_xscale("log")
    ax.set_yscale("log", nonpositive="mask")
    ax.set_xlabel("inverse temperature β (log scale)")
    ax.set_ylabel(r"$\mathrm{min}_t W_2$ (log scale)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.suptitle(
        run_title(ds, r"Closest approach $\mathrm{min}_t W_2(\rho^\beta_t, \Pi_\#\rho_0)$ against $\beta$")
    )
    return save(fig, outdir, "min_w2", dpi)


def figures(ds: xr.Dataset, outdir: str | Path, *, dpi: int = DPI, animation: bool = False) -> list[Path]:
    """W2, t*, min W2 and mass figures, then the token snapshots (t* among the times) and animation."""
    paths: list[Path] = []
    for draw in (plot_w2, plot_t_star, plot_min_w2, plot_mass):
        paths += draw(ds, outdir, dpi=dpi)
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

    return plot_sweep(
        ds,
        outdir,
        ["t_star", "min_w2"],
        x="beta",
        log_y={"min_w2"},
        labels={"t_star": r"$t^*(\beta) = \mathrm{argmin}_t\, W_2$", "min_w2": r"$\mathrm{min}_t W_2$"},
        x_label="inverse temperature β",
        decorate=reference,
        title=r"Sweep: time of closest approach $t^*$ and $\mathrm{min}_t W_2$ against $\beta$",
        dpi=dpi,
    )
