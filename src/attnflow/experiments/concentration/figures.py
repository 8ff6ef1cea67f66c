"""Figures of the `concentration` experiment: W2 against t, t*(beta), min W2 against beta, its sweeps.

Drawn from a run's Dataset (schema: `attnflow.experiments.concentration`) with the pieces of
`attnflow.plot`; the mass figure is `terminal.plot_mass`, the tokens `plot.token_figures`.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._text import format_value
from ...io import json_attr
from ...plot import (
    DPI,
    TOKEN_CAPTIONS,
    FigureWarning,
    NothingToPlot,
    beta_label,
    beta_legend,
    fits_of,
    markevery,
    new_figure,
    pick,
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
        "zero temperature; grey dotted: the fitted bound K₁a(β)e^{C₁t} + K₂e^{-ct}. Right: the "
        "synchronous coupling bound (an upper bound only).",
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


# how each convergence is drawn: a quantity converged in N, a resolved beta whose quantity did not
# converge, an under-resolved beta (attnflow.science.convergence.STATUSES)
STATUS_STYLE: dict[str, dict[str, Any]] = {
    "converged": {"marker": "o", "mfc": "black", "color": "black", "label": "converged in N"},
    "resolved": {"marker": "o", "mfc": "white", "color": "0.35", "label": "not converged in N"},
    "under-resolved": {
        "marker": "x",
        "mfc": "none",
        "color": "0.55",
        "label": "under-resolved (N too small)",
    },
}
FIT_STYLES: tuple[dict[str, Any], ...] = (
    {"color": "0.25", "ls": "--"},
    {"color": "0.45", "ls": "-."},
    {"color": "0.6", "ls": ":"},
)
BOUND_STYLE: dict[str, Any] = {"color": "0.45", "lw": 1.0, "ls": (0, (1, 1.5)), "alpha": 0.9}


def claim_row(ds: xr.Dataset, key: str) -> dict:
    """The claims-table row with this key ({} when absent): rows are found by their stable key."""
    for row in json_attr(ds, "claims", []) or []:
        if isinstance(row, dict) and row.get("key") == key:
            return row
    return {}


def _drawn_as(ds: xr.Dataset, key: str, n: int) -> np.ndarray:
    """How each beta's `key` is drawn: "converged" where that quantity converged in N, "resolved"
    where it did not, "under-resolved" where the beta is; by the beta's status for a Dataset without
    per-quantity flags."""
    status = np.full(n, "resolved")
    if "status" in ds.variables:
        status = np.asarray(ds["status"].values, dtype=str)
    if f"{key}_converged" not in ds.variables:
        return status
    ok = np.asarray(ds[f"{key}_converged"].values, dtype=bool)
    return np.where(status == "under-resolved", status, np.where(ok, "converged", "resolved"))


def _by_status(ax: Axes, ds: xr.Dataset, key: str, y: np.ndarray, err: np.ndarray | None) -> None:
    """The points of quantity `key` (with error bars) drawn by their own convergence (_drawn_as)."""
    betas = np.asarray(ds["beta"].values, dtype=float)
    drawn = _drawn_as(ds, key, betas.size)
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


def _regimes(ax: Axes, ds: xr.Dataset, row: dict, y: np.ndarray) -> None:
    """Mark the betas the row flags as without a metastable phase and left out of its fits."""
    used = set(row.get("betas") or [])
    flagged = {float(b) for b in (row.get("regimes") or {})} - used
    for b, v in zip(np.asarray(ds["beta"].values, dtype=float), y, strict=True):
        if b in flagged and np.isfinite(v):
            ax.annotate(
                "no metastable phase\n(not in the fits)",
                (b, v),
                xytext=(8, -4),
                textcoords="offset points",
                fontsize="x-small",
                color="0.35",
                va="top",
            )


def _fit_lines(ax: Axes, row: dict, fits: dict[str, tuple[str, Any]]) -> None:
    """The row's fits over the betas it used: name -> (label, curve(beta, fit)), with their rms."""
    used = np.asarray(row.get("betas") or [], dtype=float)
    found = row.get("fits") or {}
    if used.size < 2:
        return
    bb = np.geomspace(used.min(), used.max(), 100)
    for style, (name, (label, curve)) in zip(FIT_STYLES, fits.items(), strict=False):
        f = found.get(name)
        if not isinstance(f, dict) or f.get("rms") is None:
            continue
        ax.plot(bb, curve(bb, f), lw=1.6, label=f"{label}, rms {format_value(f['rms'], 2)}", **style)


def _theorem_bound_curves(ax: Axes, ds: xr.Dataset, t, betas, w2) -> None:
    """Thin grey dotted curves K1 a(beta) exp(C1 t) + K2 exp(-c t) from attrs["fits"]["theorem_bound"]
    (one style for all: the betas' colours are the data's), with the y range kept to the data's
    (the bound grows without limit)."""
    fit = fits_of(ds).get("theorem_bound")
    K1, K2, C1, c = (pick(fit, (k,)) for k in ("K1", "K2", "C1", "c"))
    if K1 is None or K2 is None or C1 is None or c is None:
        return
    for i, b in enumerate(betas):
        if not (np.isfinite(b) and b > 0):
            continue
        curve = K1 * temperature_scale(b) * np.exp(C1 * t) + K2 * np.exp(-c * t)
        lab = r"fitted bound $K_1 a(\beta) e^{C_1 t} + K_2 e^{-c t}$" if i == 0 else None
        ax.plot(t, curve, label=lab, **BOUND_STYLE)
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
            _theorem_bound_curves(ax, ds, t, betas, vals)
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


def plot_envelope(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """The curves converged in N under Theorem 1's bound with the envelope's constants (claims row
    bound_envelope: K1, C1, K2, c), each bound in its curve's colour, with the zero-temperature curve
    and K2 e^{-c t}. Needs `w2` (beta, time) and a decided envelope; writes nothing (returns []) when
    the row has no constants. Writes envelope.png."""
    require(ds, ["w2"], "plot_envelope", {"w2": ("beta", "time")})
    k = claim_row(ds, "bound_envelope").get("constants") or {}
    if any(pick(k, (name,)) is None for name in ("K1", "C1", "K2", "c")):
        return []
    K1, C1, K2, c = (float(k[name]) for name in ("K1", "C1", "K2", "c"))
    t = np.asarray(ds["time"].values, dtype=float)
    betas = np.asarray(ds["beta"].values, dtype=float)
    used = set(claim_row(ds, "bound_envelope").get("betas") or [])
    styles = series_styles(len(betas))
    fig, axes = new_figure(1, 1, (9.5, 5.0))
    ax = axes[0][0]
    w2 = ds["w2"].transpose("beta", "time").values
    for i, b in enumerate(betas):
        if float(b) not in used:
            continue
        ax.plot(t, positive(w2[i]), label=beta_label(b), color=styles[i]["color"], lw=1.8)
        bound = K1 * temperature_scale(b) * np.exp(C1 * t) + K2 * np.exp(-c * t)
        ax.plot(t, bound, color=styles[i]["color"], lw=1.1, ls="--")
    if "w2_zero" in ds.variables:
        ax.plot(t, positive(ds["w2_zero"].values), label="β = ∞ (zero temperature)", **ZERO_TEMPERATURE_STYLE)
    floor = rf"$K_2 e^{{-ct}}$, c = {format_value(c)}"
    ax.plot(t, K2 * np.exp(-c * t), color="0.4", lw=1.0, ls=":", label=floor)
    ax.plot([], [], color="0.3", lw=1.1, ls="--", label="bound, dashed (each β's colour)")
    data = positive(w2[[i for i, b in enumerate(betas) if float(b) in used]])
    if np.isfinite(data).any():
        ax.set_ylim(np.nanmin(data) / 2, min(np.nanmax(data) * 3, 10.0))
    ax.set_yscale("log", nonpositive="mask")
    ax.set_xlabel("time t")
    ax.set_ylabel(r"$W_2(\rho^\beta_t, \Pi_\#\rho_0)$ (log scale)")
    ax.grid(True, which="both", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", fontsize="small")
    ax.set_title(
        f"K₁ = {format_value(K1, 3)}, C₁ = {format_value(C1, 3)}, K₂ = {format_value(K2, 3)}, "
        f"c = γ/(2‖B‖) = {format_value(c, 3)}",
        fontsize="medium",
    )
    fig.suptitle(run_title(ds, r"Converged curves under the bound $K_1 a(\beta) e^{C_1 t} + K_2 e^{-ct}$"))
    return save(fig, outdir, "envelope", dpi)


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
        "log_beta": ("a + b log β", lambda bb, f: f["a"] + f["b"] * np.log(bb)),
        "beta": ("a + b β", lambda bb, f: f["a"] + f["b"] * bb),
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
    k = claim_row(ds, "bound_envelope").get("constants") or {}
    if any(pick(k, (name,)) is None for name in ("K1", "C1", "K2", "c")):
        return
    bb = np.geomspace(betas.min(), betas.max(), 60)
    t = np.linspace(0.0, float(ds["time"].values[-1]) * 4, 4000)
    vals = [
        float(np.min(k["K1"] * temperature_scale(b) * np.exp(k["C1"] * t) + k["K2"] * np.exp(-k["c"] * t)))
        for b in bb
    ]
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
        "a_power": ("C a(β)^p", lambda b, f: np.exp(f["a"]) * temperature_scale(b) ** f["b"]),
        "beta_power": ("C β^-q", lambda b, f: np.exp(f["a"]) * b ** f["b"]),
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
