"""Figures of the `concentration` experiment: W2 against t, t*(beta), min W2 against beta, its sweeps.

Drawn from a run's Dataset (schema: `attnflow.experiments.concentration`) with the pieces of
`attnflow.plot`; the mass figure is `terminal.plot_mass`, the tokens `plot.token_figures`.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._text import format_value, format_with_error
from ...io import json_attr
from ...plot import (
    DPI,
    TOKEN_CAPTIONS,
    FigureWarning,
    NothingToPlot,
    beta_label,
    beta_legend,
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
from ...plot.style import LEGEND_MAX, STAR_STYLE, ZERO_TEMPERATURE_STYLE
from ...science.convergence import QUANTITIES
from ...science.fits import temperature_scale
from ..terminal import MASS_CAPTION, plot_mass

if TYPE_CHECKING:
    import xarray as xr
    from matplotlib.axes import Axes

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
BOUND_STYLE: dict[str, Any] = {"lw": 1.0, "ls": (0, (4, 2)), "alpha": 0.9}
BOUND_LABEL = r"bound $K_1 a(\beta) e^{C_1 t} + K_2 e^{-c t}$ (row bound_envelope)"
#: how an under-resolved beta's curve is drawn: faded, the word in its label
UNDER_RESOLVED: dict[str, Any] = {"alpha": 0.35}


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


def _param(fit: dict, key: str, sign: float = 1.0) -> str:
    """A fitted parameter with its error, to the digits the error supports."""
    value, error = fit.get(key), fit.get(f"{key}_err")
    if not isinstance(value, int | float):
        return "—"
    if not isinstance(error, int | float):
        return format_value(sign * value, 3)
    v, e = format_with_error(sign * value, error)
    return f"{v} ± {e}"


def _fit_lines(ax: Axes, row: dict, fits: dict[str, tuple[Any, Any]]) -> None:
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


def envelope(ds: xr.Dataset) -> tuple[dict[str, float], list[float]] | None:
    """The bound that holds: the constants K1, C1, K2, c of the claims row bound_envelope (the
    smallest, uniform in beta, under which every curve converged in N lies) and the betas it was
    decided on; None when the row has no constants."""
    row = claim_row(ds, "bound_envelope")
    k = row.get("constants") or {}
    if any(pick(k, (name,)) is None for name in ("K1", "C1", "K2", "c")):
        return None
    return {name: float(k[name]) for name in ("K1", "C1", "K2", "c")}, [
        float(b) for b in row.get("betas") or []
    ]


def bound_curve(k: dict[str, float], beta: float, t: np.ndarray) -> np.ndarray:
    """Theorem 1's bound K1 a(beta) e^{C1 t} + K2 e^{-c t} with the envelope's constants."""
    return k["K1"] * temperature_scale(beta) * np.exp(k["C1"] * t) + k["K2"] * np.exp(-k["c"] * t)


def _status(ds: xr.Dataset, n: int) -> np.ndarray:
    return np.asarray(ds["status"].values, dtype=str) if "status" in ds.variables else np.full(n, "")


def _bound_lines(ax: Axes, ds: xr.Dataset, t: np.ndarray, betas: np.ndarray, styles: list) -> list:
    """The envelope's bound over t for each beta it was decided on, thin dashed in the beta's
    colour: the one curve called a bound (never a fit). Returns the lines drawn."""
    found = envelope(ds)
    if found is None:
        return []
    k, used = found
    lines: list = []
    for i, b in enumerate(betas):
        if float(b) in used:
            label = BOUND_LABEL if not lines else None
            style = {**BOUND_STYLE, "color": styles[i]["color"], "gid": f"bound beta={b:g}"}
            lines += ax.plot(t, bound_curve(k, float(b), t), label=label, **style)
    return lines


def _data_range(ax: Axes, *curves: np.ndarray) -> None:
    """y limits (log axis) just around the data, so that neither a growing bound nor a margin
    leaves half the panel empty."""
    data = np.concatenate([positive(c).ravel() for c in curves])
    if np.isfinite(data).any():
        lo, hi = np.nanmin(data), np.nanmax(data)
        ax.set_ylim(lo / (hi / lo) ** 0.06, hi * (hi / lo) ** 0.12)


def _w2_panel(ax: Axes, ds: xr.Dataset, var: str, styles: list) -> None:
    """One panel of plot_w2: a line per beta (an under-resolved one faded, so named), and on the
    exact W2 the zero-temperature curve, the envelope's bound and t*(beta)."""
    t = np.asarray(ds["time"].values, dtype=float)
    betas = np.asarray(ds["beta"].values, dtype=float)
    status = _status(ds, betas.size)
    vals = ds[var].transpose("beta", "time").values
    for i, b in enumerate(betas):
        under = status[i] == "under-resolved"
        label = beta_label(b) + (" (under-resolved)" if under else "")
        style = {**styles[i], **(UNDER_RESOLVED if under else {})}
        ax.plot(t, positive(vals[i]), label=label, markevery=markevery(len(t)), **style)
    if (status == "under-resolved").any() and betas.size > LEGEND_MAX:  # the betas are in a colorbar
        ax.plot([], [], color="0.4", label="faded: under-resolved β", **UNDER_RESOLVED)
    curves = [vals]
    if var == "w2" and "w2_zero" in ds.variables:
        ax.plot(t, positive(ds["w2_zero"].values), label="β = ∞ (zero temperature)", **ZERO_TEMPERATURE_STYLE)
        curves.append(np.asarray(ds["w2_zero"].values, dtype=float))
    if var == "w2":
        _bound_lines(ax, ds, t, betas, styles)
    if var == "w2" and "t_star" in ds.variables and np.isfinite(ds["t_star"].values).any():
        ts = np.asarray(ds["t_star"].values, dtype=float)
        mins = (
            np.asarray(ds["min_w2"].values, dtype=float)
            if "min_w2" in ds.variables
            else np.array([np.interp(s, t, vals[i]) for i, s in enumerate(ts)])
        )
        for i in range(betas.size):  # small stars in each beta's colour: close ones stay apart
            star = {**STAR_STYLE, "mfc": styles[i]["color"]}
            ax.plot(ts[i : i + 1], positive(mins[i : i + 1]), ms=10, mew=0.8, **star)
        ax.plot([], [], ms=10, mew=0.8, label=r"$t^*(\beta)$, minimum over t", **STAR_STYLE)
    ax.set_yscale("log", nonpositive="mask")
    _data_range(ax, *curves)
    plain_log_ticks(ax.yaxis)


def plot_w2(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """W2(rho^beta_t, Pi_# rho_0) against t (log y), one line per beta (under-resolved ones faded),
    the zero-temperature curve, t*(beta) marked and Theorem 1's bound with the envelope's constants
    (claims row bound_envelope) for the betas it holds on; a second panel with the synchronous
    coupling bound when present. No fitted curve is drawn: the one curve called a bound is the
    envelope, under which every converged curve lies.

    Needs `w2` (beta, time); uses `w2_zero` (time), `coupling_bound` (beta, time), `t_star`,
    `min_w2`, `status` (beta) when present.  Writes w2.png and w2.pdf in outdir.
    """
    require(ds, ["w2"], "plot_w2", {"w2": ("beta", "time")})
    betas = np.asarray(ds["beta"].values, dtype=float)
    styles = series_styles(len(betas))
    has_bound = "coupling_bound" in ds.variables
    fig, axes = new_figure(1, 2 if has_bound else 1, (11 if has_bound else 6.5, 4.6))
    panels = [("w2", r"exact $W_2(\rho^\beta_t,\, \Pi_\#\rho_0)$")]
    if has_bound:
        panels.append(("coupling_bound", r"coupling bound (an upper bound on $W_2$)"))
    for ax, (var, subtitle) in zip(axes[0], panels, strict=True):
        _w2_panel(ax, ds, var, styles)
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
    found = envelope(ds)
    if found is None:
        return []
    k, used = found
    t = np.asarray(ds["time"].values, dtype=float)
    betas = np.asarray(ds["beta"].values, dtype=float)
    styles = series_styles(len(betas))
    fig, axes = new_figure(1, 1, (9.5, 5.0))
    ax = axes[0][0]
    w2 = ds["w2"].transpose("beta", "time").values
    for i, b in enumerate(betas):
        if float(b) in used:
            ax.plot(t, positive(w2[i]), label=beta_label(b), color=styles[i]["color"], lw=1.8)
    _bound_lines(ax, ds, t, betas, styles)
    curves = [w2[[i for i, b in enumerate(betas) if float(b) in used]]]
    if "w2_zero" in ds.variables:
        ax.plot(t, positive(ds["w2_zero"].values), label="β = ∞ (zero temperature)", **ZERO_TEMPERATURE_STYLE)
        curves.append(np.asarray(ds["w2_zero"].values, dtype=float))
    floor = rf"$K_2 e^{{-ct}}$, c = {format_value(k['c'])}"
    ax.plot(t, k["K2"] * np.exp(-k["c"] * t), color="0.4", lw=1.0, ls=":", label=floor)
    ax.set_yscale("log", nonpositive="mask")
    _data_range(ax, *curves)
    plain_log_ticks(ax.yaxis)
    ax.set_xlabel("time t")
    ax.set_ylabel(r"$W_2(\rho^\beta_t, \Pi_\#\rho_0)$ (log scale)")
    ax.grid(True, which="both", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", fontsize="small")
    ax.set_title(
        f"K₁ = {format_value(k['K1'], 3)}, C₁ = {format_value(k['C1'], 3)}, K₂ = {format_value(k['K2'], 3)}, "
        f"c = γ/(2‖B‖) = {format_value(k['c'], 3)}",
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
