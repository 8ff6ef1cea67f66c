"""Figures of the `concentration` experiment: W2 against t, t*(beta), min W2 against beta, its sweeps.

Drawn from a run's Dataset (schema: `attnflow.experiments.concentration`) with the pieces of
`attnflow.plot`; the mass figure is `terminal.plot_mass`, the tokens `plot.token_figures`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._text import format_value
from ...io import json_attr
from ...plot import (
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
from ...plot.style import STAR_STYLE, ZERO_TEMPERATURE_STYLE
from ...science.convergence import QUANTITIES
from ...science.fits import temperature_scale
from ..terminal import MASS_CAPTION, plot_mass

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
        "t*(β) against log β (or, where only it converged in N, the entry time into the near-minimal "
        "band), filled when converged in N, open when not; bars: the N-convergence error; dashed: "
        "the fit a + b log β over the converged betas (claims table).",
    ),
    "min_w2": (
        "Closest approach min_t W₂ against β",
        "min_t W₂ against β (log-log), filled when converged in N; the reference √(log(β+1)/β) and the "
        "fit C a(β)^p over the converged betas (claims table).",
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


# how each convergence status is drawn (attnflow.science.convergence.STATUSES)
STATUS_STYLE: dict[str, dict[str, Any]] = {
    "converged": {"marker": "o", "mfc": "black", "color": "black", "label": "converged in N"},
    "resolved": {"marker": "o", "mfc": "white", "color": "0.35", "label": "resolved, not converged in N"},
    "under-resolved": {
        "marker": "x",
        "mfc": "none",
        "color": "0.55",
        "label": "under-resolved (N too small)",
    },
}


def _claim(ds: xr.Dataset, starts: str) -> dict:
    """The claims-table row whose claim starts with `starts` ({} when absent)."""
    for row in json_attr(ds, "claims", []) or []:
        if str(row.get("claim", "")).startswith(starts):
            return row
    return {}


def _by_status(ax: Axes, ds: xr.Dataset, betas: np.ndarray, y: np.ndarray, err: np.ndarray | None) -> None:
    """Points (with error bars) drawn by convergence status; statuses absent: all as resolved."""
    status = (
        np.asarray(ds["status"].values, dtype=str)
        if "status" in ds.variables
        else np.full(betas.size, "resolved")
    )
    for name, style in STATUS_STYLE.items():
        sel = (status == name) & np.isfinite(y)
        if sel.any():
            e = None if err is None else np.where(np.isfinite(err[sel]), err[sel], 0.0)
            ax.errorbar(betas[sel], y[sel], yerr=e, ls="", ms=7, capsize=4, **style)


def _fit_line(ax: Axes, row: dict, betas: np.ndarray, curve, text: str) -> None:
    """The claims row's fitted line over the betas it used, labelled with its numbers and verdict."""
    used = np.asarray(row.get("betas") or [], dtype=float)
    if used.size < 2 or not row.get("measured"):
        return
    bb = np.geomspace(used.min(), used.max(), 100)
    ax.plot(bb, curve(bb, row["measured"]), color="0.3", ls="--", lw=1.8, label=f"{text}: {row['verdict']}")


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
    """The claims' time against log beta: t*(beta) (or the entry time into the near-minimal band where
    only that converged), drawn by convergence status with its N-error, and the fit a + b log beta
    over the converged betas from the claims table. Needs `t_star` (beta). Writes t_star.png / .pdf."""
    require(ds, ["t_star"], "plot_t_star", {"t_star": ("beta",)})
    row = _claim(ds, "t*(beta)") or _claim(ds, "the entry time")
    key = row.get("quantity", "t_star")
    key = key if key in ds.variables else "t_star"
    betas = np.asarray(ds["beta"].values, dtype=float)
    ts = np.asarray(ds[key].values, dtype=float)
    if not np.isfinite(ts).any():
        raise ValueError(f"plot_t_star: no finite {key} to plot")
    fig, axes = new_figure(1, 1, (6.5, 4.6))
    ax = axes[0][0]
    err = np.asarray(ds[f"{key}_error"].values, dtype=float) if f"{key}_error" in ds.variables else None
    _by_status(ax, ds, betas, ts, err)
    m, e = row.get("measured") or {}, row.get("error") or {}
    text = f"fit a + b log β, b = {format_value(m.get('b'))} ± {format_value(e.get('b'))}"
    _fit_line(ax, row, betas, lambda bb, mm: mm["a"] + mm["b"] * np.log(bb), text)
    ax.set_xscale("log")
    ax.set_xlabel("inverse temperature β (log scale)")
    ax.set_ylabel(
        r"$t^*(\beta) = \mathrm{argmin}_t\, W_2$" if key == "t_star" else "entry time into the band"
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.suptitle(run_title(ds, "Time of closest approach against log β (theory: linear)"))
    return save(fig, outdir, "t_star", dpi)


def plot_min_w2(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """min_t W2 against beta (log-log) by convergence status with its N-error, the reference
    a(beta) = sqrt(log(beta+1)/beta) scaled to the data, and the fit C a(beta)^p over the converged
    betas from the claims table. Needs `min_w2` (beta). Writes min_w2.png and min_w2.pdf."""
    require(ds, ["min_w2"], "plot_min_w2", {"min_w2": ("beta",)})
    betas = np.asarray(ds["beta"].values, dtype=float)
    m = positive(ds["min_w2"].values)
    ok = np.isfinite(betas) & np.isfinite(m)
    if not ok.any():
        raise ValueError("plot_min_w2: no finite positive (beta, min_w2) pair to plot")
    fig, axes = new_figure(1, 1, (6.5, 4.6))
    ax = axes[0][0]
    err = np.asarray(ds["min_w2_error"].values, dtype=float) if "min_w2_error" in ds.variables else None
    _by_status(ax, ds, betas, m, err)
    bb = np.geomspace(betas[ok].min(), betas[ok].max(), 100)
    scale = math.exp(float(np.mean(np.log(m[ok]) - np.log(temperature_scale(betas[ok])))))
    ax.plot(
        bb,
        scale * temperature_scale(bb),
        color="0.5",
        ls=":",
        lw=2,
        label=rf"reference {format_value(scale)}$\,\sqrt{{\log(\beta+1)/\beta}}$",
    )
    row = _claim(ds, "min_t W2")
    mm, e = row.get("measured") or {}, row.get("error") or {}
    text = f"fit C·a(β)^p, p = {format_value(mm.get('p'))} ± {format_value(e.get('p'))}"
    _fit_line(ax, row, betas, lambda b, f: f["C"] * temperature_scale(b) ** f["p"], text)
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
            N = ds["ladder_N"].values[i]
            y = np.asarray(ds[var].values[i], dtype=float)
            ok = np.isfinite(N) & np.isfinite(y)
            ax.plot(N[ok], y[ok], label=beta_label(b), **styles[i])
        ax.set_xscale("log", base=2)
        ax.set_xlabel("number of tokens N (log scale)")
        ax.set_ylabel(label)
        if var == "ladder_min_w2":
            ax.set_yscale("log", nonpositive="mask")
        ax.grid(True, which="both", alpha=0.3)
    beta_legend(fig, axes[0][0], betas)
    fig.suptitle(run_title(ds, "Convergence in N: the doubling ladder"))
    return save(fig, outdir, "ladder", dpi)


def figures(ds: xr.Dataset, outdir: str | Path, *, dpi: int = DPI, animation: bool = False) -> list[Path]:
    """W2, t*, min W2 and mass figures, then the token snapshots (t* among the times) and animation."""
    paths: list[Path] = []
    for draw in (plot_w2, plot_t_star, plot_min_w2, plot_mass):
        paths += draw(ds, outdir, dpi=dpi)
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
