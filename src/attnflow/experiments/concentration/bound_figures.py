"""W2 against t under Theorem 1's bound, the `concentration` figures w2.png and envelope.png: the
bound drawn is the one the claims row bound_envelope decides (`envelope`), never a fit, and an
under-resolved beta's curve is faded and named (UNDER_RESOLVED)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, cast

import numpy as np

from ..._text import format_value
from ...io import json_attr
from ...plot import (
    DPI,
    beta_label,
    beta_legend,
    markevery,
    new_figure,
    pick,
    plain_log_ticks,
    positive,
    require,
    run_title,
    save,
    series_styles,
)
from ...plot.style import (
    LEGEND_MAX,
    STAR_STYLE,
    UNDER_RESOLVED,
    ZERO_TEMPERATURE_STYLE,
    beta_line,
    beta_status,
)
from ...science.convergence import EDGE_STEPS
from ...science.fits import temperature_scale

if TYPE_CHECKING:
    import xarray as xr
    from matplotlib.axes import Axes
    from matplotlib.lines import Line2D


class BoundStyle(TypedDict):
    """Keywords of `Axes.plot` for the bound's lines (their colour is the beta's)."""

    lw: float
    ls: tuple[int, tuple[int, int]]
    alpha: float


BOUND_STYLE: BoundStyle = {"lw": 1.0, "ls": (0, (4, 2)), "alpha": 0.9}
BOUND_LABEL = r"bound $K_1 a(\beta) e^{C_1 t} + K_2 e^{-c t}$ (row bound_envelope)"


class ClaimRow(TypedDict, total=False):
    """A row of attrs["claims"] as read back (`science.claims`), the fields the figures read: the
    betas its fits used, its fits by name, the betas left out and why, the regime of each beta, the
    constants of a bound."""

    key: str
    betas: list[float]
    fits: dict[str, dict[str, float | None]]
    left_out: dict[str, str]
    regimes: dict[str, str]
    constants: dict[str, float | None]


def claim_row(ds: xr.Dataset, key: str) -> ClaimRow:
    """The claims-table row with this key ({} when absent): rows are found by their stable key."""
    for row in json_attr(ds, "claims", []) or []:
        if isinstance(row, dict) and row.get("key") == key:
            return cast("ClaimRow", row)
    return {}


def envelope(ds: xr.Dataset) -> tuple[dict[str, float], list[float]] | None:
    """The bound that holds: the constants K1, C1, K2, c of the claims row bound_envelope (the
    smallest, uniform in beta, under which every curve converged in N lies) and the betas it was
    decided on; None when the row has no constants."""
    row = claim_row(ds, "bound_envelope")
    k = row.get("constants") or {}
    constants = {name: v for name in ("K1", "C1", "K2", "c") if (v := pick(k, (name,))) is not None}
    if len(constants) < 4:
        return None
    return constants, [float(b) for b in row.get("betas") or []]


def drawn_as(ds: xr.Dataset, key: str, n: int) -> np.ndarray:
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


def bound_curve(k: dict[str, float], beta: float, t: np.ndarray) -> np.ndarray:
    """Theorem 1's bound K1 a(beta) e^{C1 t} + K2 e^{-c t} with the envelope's constants."""
    return k["K1"] * temperature_scale(beta) * np.exp(k["C1"] * t) + k["K2"] * np.exp(-k["c"] * t)


def _bound_lines(
    ax: Axes, ds: xr.Dataset, t: np.ndarray, betas: np.ndarray, styles: Sequence[dict[str, object]]
) -> list[Line2D]:
    """The envelope's bound over t for each beta it was decided on, thin dashed in the beta's
    colour: the one curve called a bound (never a fit). Returns the lines drawn."""
    found = envelope(ds)
    if found is None:
        return []
    k, used = found
    lines: list[Line2D] = []
    for i, b in enumerate(betas):
        if float(b) in used:
            label = BOUND_LABEL if not lines else None
            color, gid = styles[i]["color"], f"bound beta={b:g}"
            lines += ax.plot(t, bound_curve(k, float(b), t), label=label, color=color, gid=gid, **BOUND_STYLE)
    return lines


def _data_range(ax: Axes, *curves: np.ndarray) -> None:
    """y limits (log axis) just around the data, so that neither a growing bound nor a margin
    leaves half the panel empty."""
    data = np.concatenate([positive(c).ravel() for c in curves])
    if np.isfinite(data).any():
        lo, hi = np.nanmin(data), np.nanmax(data)
        ax.set_ylim(lo / (hi / lo) ** 0.06, hi * (hi / lo) ** 0.12)


def _w2_panel(ax: Axes, ds: xr.Dataset, var: str, styles: Sequence[dict[str, object]]) -> None:
    """One panel of plot_w2: a line per beta (an under-resolved one faded, so named), and on the
    exact W2 the zero-temperature curve, the envelope's bound and t*(beta)."""
    t = np.asarray(ds["time"].values, dtype=float)
    betas = np.asarray(ds["beta"].values, dtype=float)
    status = beta_status(ds)
    vals = ds[var].transpose("beta", "time").values
    for i, b in enumerate(betas):
        label, style = beta_line(float(b), styles[i], str(status[i]))
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
        edge = t[max(0, t.size - 1 - EDGE_STEPS)]  # a least value this near t_max is no minimum
        drawn = drawn_as(ds, "t_star", betas.size)
        for i in range(betas.size):  # small stars in each beta's colour: close ones stay apart
            if ts[i] >= edge:  # the curve still falls at t_max: no star where there is no minimum
                continue
            star = {**STAR_STYLE, "mfc": styles[i]["color"]}
            if drawn[i] != "converged":  # hollow: a t* not converged in N (faded where the beta is not)
                star = {**star, "mfc": "none", "mec": styles[i]["color"]}
            if drawn[i] == "under-resolved":
                star = {**star, **UNDER_RESOLVED}
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
    # the coupling bound needs each token's own Pi(x_0): a mean-field run has none (all NaN)
    has_bound = "coupling_bound" in ds.variables and bool(np.isfinite(ds["coupling_bound"].values).any())
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
