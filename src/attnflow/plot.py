"""Figures and animations from experiment Datasets (never from live objects).

Every figure is written as PNG and PDF and is readable in greyscale: lines differ by style and
marker as well as colour, and beta is coloured with a sequential colormap (dark = small beta).
Matplotlib is imported inside the functions and used through `matplotlib.figure.Figure` with the
Agg canvas, so no pyplot state is created or leaked and `import attnflow.plot` stays light.

Schemas (coords, variables) are those of `attnflow.experiments`; see DESIGN.md.
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ._checks import check_positive
from .report import write_report

if TYPE_CHECKING:
    import xarray as xr
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from mpl_toolkits.mplot3d import Axes3D

__all__ = [
    "animate",
    "plot_heads",
    "plot_layers",
    "plot_mass",
    "plot_min_w2",
    "plot_resolution",
    "plot_run",
    "plot_snapshots",
    "plot_sweep",
    "plot_t_star",
    "plot_w2",
    "plot_zero_temperature",
    "write_report",
]

DPI = 150
BETA_CMAP = "viridis"  # sequential, luminance increases with beta: readable in greyscale
SERIES_CMAP = "cividis"  # for other ordered series (N in sweeps)
LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
CMAP_LO, CMAP_SPAN = 0.05, 0.72  # part of the colormap used: no near-white lines
LEGEND_MAX = 10  # more series than this: a colorbar instead of a legend

# ---------------------------------------------------------------------------------------------
# helpers


def _check_ds(ds: Any) -> None:
    if not (hasattr(ds, "data_vars") and hasattr(ds, "attrs") and hasattr(ds, "sizes")):
        raise TypeError(f"ds must be an xarray.Dataset, got {type(ds).__name__}")


def _require(ds: xr.Dataset, names: Sequence[str], what: str, dims: dict[str, tuple] | None = None) -> None:
    """ValueError naming the missing variables (or wrong dims) that figure `what` needs."""
    _check_ds(ds)
    missing = [n for n in names if n not in ds.variables]
    if missing:
        raise ValueError(
            f"{what} needs variable(s) {missing} in ds, which has variables {sorted(map(str, ds.data_vars))}"
        )
    for name, want in (dims or {}).items():
        if name in ds.variables and set(ds[name].dims) != set(want):
            raise ValueError(
                f"{what} needs ds[{name!r}] with dims {want}, got {ds[name].dims}"
                + ("; for a sweep with extra dims (seed, N) use plot_sweep" if "beta" in want else "")
            )


def _json_attr(ds: xr.Dataset, key: str) -> dict:
    """A JSON-string attribute as a dict ({} when absent or unreadable)."""
    raw = ds.attrs.get(key, "{}")
    if isinstance(raw, dict):
        return raw
    try:
        val = json.loads(raw)
    except (TypeError, ValueError):
        return {}
    return val if isinstance(val, dict) else {}


def _config_value(ds: xr.Dataset, *keys: str) -> Any:
    cfg = _json_attr(ds, "config")
    for k in keys:
        if k in cfg:
            return cfg[k]
    return None


def _fmt(v: Any) -> str:
    if isinstance(v, float | np.floating):
        return "∞" if math.isinf(v) and v > 0 else f"{float(v):.4g}"
    return str(v)


def _beta_label(b: float) -> str:
    return "β = ∞" if math.isinf(b) else f"β = {b:g}"


def _values_label(name: str, values: Any) -> str:
    v = list(np.asarray(values).ravel())
    if len(v) <= 4:
        return f"{name} ∈ {{{', '.join(_fmt(x.item() if hasattr(x, 'item') else x) for x in v)}}}"
    return f"{name} = {_fmt(v[0])}…{_fmt(v[-1])} ({len(v)})"


def _run_title(ds: xr.Dataset, what: str) -> str:
    """Figure title: what is shown and what was run (experiment, N, d, beta, seed; swept values for
    dims of a sweep or of the resolution ladder)."""
    parts = [str(ds.attrs.get("experiment", "?"))]
    if "N" in ds.dims and "N" in ds.coords:
        parts.append(_values_label("N", ds["N"].values))
    else:
        N = _config_value(ds, "N", "n_tokens", "n")
        if N is not None and not isinstance(N, list | dict):
            parts.append(f"N = {N}")
    d = ds.sizes.get("dim") or _config_value(ds, "d", "dim")
    if d is not None:
        parts.append(f"d = {d}")
    if "beta" in ds.coords and ds.sizes.get("beta", 0) > 0:
        b = np.asarray(ds["beta"].values, dtype=float)
        parts.append(_beta_label(b[0]) if b.size == 1 else f"β = {_fmt(b.min())}…{_fmt(b.max())} ({b.size})")
    grid = _json_attr(ds, "grid")
    for k, vals in grid.items():
        if k not in ("N", "beta", "seed") and isinstance(vals, list):
            parts.append(_values_label(k, vals))
    if "seed" in ds.dims:
        parts.append(f"{ds.sizes['seed']} seeds")
    else:
        seed = ds.attrs.get("seed", _config_value(ds, "seed"))
        if seed is not None:
            parts.append(f"seed {seed}")
    return f"{what}\n" + ", ".join(parts)


def _new_figure(nrows: int, ncols: int, size: tuple[float, float], **subplot_kw: Any):
    """A Figure on an Agg canvas (no pyplot) and its (nrows, ncols) array of axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False, subplot_kw=subplot_kw or None)
    return fig, axes


def _save(fig: Figure, outdir: str | Path, stem: str, dpi: int) -> list[Path]:
    """Write fig as outdir/stem.png and outdir/stem.pdf; returns both paths."""
    dpi = int(check_positive(dpi, "dpi", integer=True))
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    paths = [outdir / f"{stem}.png", outdir / f"{stem}.pdf"]
    fig.savefig(paths[0], dpi=dpi)
    fig.savefig(paths[1])
    fig.clear()
    return paths


def _series_styles(n: int, cmap: str = BETA_CMAP) -> list[dict[str, Any]]:
    """n line styles: sequential colour (by rank), cycling line style and marker."""
    from matplotlib import colormaps

    cm = colormaps[cmap]
    out = []
    for i in range(n):
        frac = 0.0 if n == 1 else i / (n - 1)
        out.append(
            {
                "color": cm(CMAP_LO + CMAP_SPAN * frac),
                "linestyle": LINESTYLES[i % len(LINESTYLES)],
                "marker": MARKERS[i % len(MARKERS)],
            }
        )
    return out


def _beta_legend(fig: Figure, ax: Axes, betas: np.ndarray, cmap: str = BETA_CMAP, label: str = "β") -> None:
    """A legend outside the axes for few series; for many, a discrete colorbar (one swatch per
    beta) and a legend of the other entries (zero temperature, t*, fits)."""
    handles, labels = ax.get_legend_handles_labels()
    if len(betas) <= LEGEND_MAX:
        fig.legend(handles, labels, loc="outside right upper", fontsize="small")
        return
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import BoundaryNorm, ListedColormap

    n = len(betas)
    colors = ListedColormap([s["color"] for s in _series_styles(n, cmap)])
    sm = ScalarMappable(BoundaryNorm(np.arange(n + 1) - 0.5, n), colors)
    cb = fig.colorbar(sm, ax=ax)
    ticks = np.unique(np.linspace(0, n - 1, min(n, 6)).round().astype(int))
    cb.set_ticks(ticks.tolist())
    cb.set_ticklabels([_fmt(float(betas[i])) for i in ticks])
    cb.set_label(label)
    beta_labels = {_beta_label(float(b)) for b in betas}
    rest = [(h, lab) for h, lab in zip(handles, labels, strict=True) if lab not in beta_labels]
    if rest:
        ax.legend(*zip(*rest, strict=True), fontsize="small", loc="best")


def _positive(a: Any) -> np.ndarray:
    """Values for a log axis: non-positive and non-finite -> NaN (a gap, not a crash)."""
    a = np.asarray(a, dtype=float).copy()
    a[~(np.isfinite(a) & (a > 0))] = np.nan
    return a


def _markevery(T: int) -> int:
    return max(1, T // 8)


def _pick(fit: Any, keys: Sequence[str]) -> float | None:
    """The first of `keys` present in a fit dict, as a finite float (None otherwise)."""
    if not isinstance(fit, dict):
        return None
    for k in keys:
        v = fit.get(k)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
    return None


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


def _concentration_a(beta: np.ndarray) -> np.ndarray:
    """The theorem's finite-temperature scale a(beta) = sqrt(log(beta + 1) / beta)."""
    beta = np.asarray(beta, dtype=float)
    return np.sqrt(np.log1p(beta) / beta)


# ---------------------------------------------------------------------------------------------
# concentration figures


def _theorem_bound_curves(ax: Axes, ds: xr.Dataset, t, betas, styles, w2) -> None:
    """Thin dotted curves K1 a(beta) exp(C1 t) + K2 exp(-c t) from attrs["fits"]["theorem_bound"],
    with the y range kept to the data's (the bound grows without limit)."""
    fit = _json_attr(ds, "fits").get("theorem_bound")
    K1, K2, C1, c = (_pick(fit, (k,)) for k in ("K1", "K2", "C1", "c"))
    if K1 is None or K2 is None or C1 is None or c is None:
        return
    first = True
    for i, b in enumerate(betas):
        if not (np.isfinite(b) and b > 0):
            continue
        curve = K1 * _concentration_a(b) * np.exp(C1 * t) + K2 * np.exp(-c * t)
        lab = r"fitted bound $K_1 a(\beta) e^{C_1 t} + K_2 e^{-c t}$" if first else None
        ax.plot(t, curve, color=styles[i]["color"], lw=1.0, ls=(0, (1, 1.5)), alpha=0.9, label=lab)
        first = False
    data = _positive(w2)
    if "w2_zero" in ds.variables:
        data = np.concatenate([data.ravel(), _positive(ds["w2_zero"].values)])
    if np.isfinite(data).any():
        ax.set_ylim(np.nanmin(data) / 2, np.nanmax(data) * 2)


def plot_w2(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """W2(rho^beta_t, Pi_# rho_0) against t (log y), one line per beta, the zero-temperature curve,
    t*(beta) marked and the fitted theorem bound (attrs["fits"]["theorem_bound"] = {K1, K2, C1, c})
    when present; a second panel with the synchronous coupling bound when present.

    Needs `w2` (beta, time); uses `w2_zero` (time), `coupling_bound` (beta, time), `t_star`,
    `min_w2` (beta) when present.  Writes w2.png and w2.pdf in outdir.
    """
    _require(ds, ["w2"], "plot_w2", {"w2": ("beta", "time")})
    t = np.asarray(ds["time"].values, dtype=float)
    betas = np.asarray(ds["beta"].values, dtype=float)
    styles = _series_styles(len(betas))
    has_bound = "coupling_bound" in ds.variables
    fig, axes = _new_figure(1, 2 if has_bound else 1, (11 if has_bound else 6.5, 4.6))
    panels = [("w2", r"exact $W_2(\rho^\beta_t,\, \Pi_\#\rho_0)$")]
    if has_bound:
        panels.append(("coupling_bound", r"coupling bound (an upper bound on $W_2$)"))
    for ax, (var, subtitle) in zip(axes[0], panels, strict=True):
        vals = ds[var].transpose("beta", "time").values
        for i, b in enumerate(betas):
            ax.plot(t, _positive(vals[i]), label=_beta_label(b), markevery=_markevery(len(t)), **styles[i])
        if "w2_zero" in ds.variables and var == "w2":
            ax.plot(
                t,
                _positive(ds["w2_zero"].values),
                color="black",
                lw=2.2,
                ls=(0, (6, 2)),
                label="β = ∞ (zero temperature)",
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
            ax.plot(
                ts,
                _positive(mins),
                ls="",
                marker="*",
                ms=13,
                mfc="white",
                mec="black",
                mew=1.3,
                label=r"$t^*(\beta)$, minimum over t",
                zorder=5,
            )
        ax.set_yscale("log", nonpositive="mask")
        ax.set_xlabel("time t")
        ax.set_ylabel(
            r"$W_2$, chordal cost $|x-y|^2$ (log scale)" if var == "w2" else "coupling bound (log scale)"
        )
        ax.set_title(subtitle, fontsize="medium")
        ax.grid(True, which="both", alpha=0.3)
    _beta_legend(fig, axes[0][0], betas)
    fig.suptitle(
        _run_title(ds, r"Distance $W_2(\rho^\beta_t,\, \Pi_\#\rho_0)$ to the zero-temperature limit")
    )
    return _save(fig, outdir, "w2", dpi)


def plot_t_star(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """t*(beta) against log beta, with its plateau (t_star_lo, t_star_hi) as error bars and the fit
    t* = a + b log beta from attrs["fits"]["t_star"] = {a, b, a_err, b_err} when present.

    Needs `t_star` (beta).  Writes t_star.png and t_star.pdf.
    """
    _require(ds, ["t_star"], "plot_t_star", {"t_star": ("beta",)})
    betas = np.asarray(ds["beta"].values, dtype=float)
    ts = np.asarray(ds["t_star"].values, dtype=float)
    ok = np.isfinite(betas) & np.isfinite(ts)
    if not ok.any():
        raise ValueError("plot_t_star: no finite (beta, t_star) pair to plot")
    fig, axes = _new_figure(1, 1, (6.5, 4.6))
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
    fit = _json_attr(ds, "fits").get("t_star")
    a, b, b_err = (_pick(fit, k) for k in (("a", "intercept"), ("b", "slope"), ("b_err", "slope_err")))
    if a is not None and b is not None:
        bb = np.geomspace(betas[ok].min(), betas[ok].max(), 100)
        err = f" ± {_fmt(b_err)}" if b_err is not None else ""
        ax.plot(
            bb,
            a + b * np.log(bb),
            color="0.35",
            ls="--",
            lw=1.8,
            label=f"fit t* = a + b log β:  a = {_fmt(a)}, b = {_fmt(b)}{err}",
        )
    ax.set_xscale("log")
    ax.set_xlabel("inverse temperature β (log scale)")
    ax.set_ylabel(r"$t^*(\beta) = \mathrm{argmin}_t\, W_2$")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.suptitle(_run_title(ds, "Time of closest approach t*(β) against log β (theory: linear)"))
    return _save(fig, outdir, "t_star", dpi)


def plot_min_w2(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """min_t W2 against beta (log-log) with the reference a(beta) = sqrt(log(beta+1)/beta) (scaled
    to the data) and the fit min W2 = prefactor * a^exponent from attrs["fits"]["min_w2"].

    Needs `min_w2` (beta).  Writes min_w2.png and min_w2.pdf.
    """
    _require(ds, ["min_w2"], "plot_min_w2", {"min_w2": ("beta",)})
    betas = np.asarray(ds["beta"].values, dtype=float)
    m = _positive(ds["min_w2"].values)
    ok = np.isfinite(betas) & np.isfinite(m)
    if not ok.any():
        raise ValueError("plot_min_w2: no finite positive (beta, min_w2) pair to plot")
    fig, axes = _new_figure(1, 1, (6.5, 4.6))
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
    ref = _concentration_a(bb)
    scale = math.exp(float(np.mean(np.log(m[ok]) - np.log(_concentration_a(betas[ok])))))
    ax.plot(
        bb,
        scale * ref,
        color="0.5",
        ls=":",
        lw=2,
        label=rf"reference {_fmt(scale)}$\,\sqrt{{\log(\beta+1)/\beta}}$",
    )
    fit = _json_attr(ds, "fits").get("min_w2")
    p, C, p_err = (_pick(fit, k) for k in (("exponent", "p"), ("prefactor", "C"), ("exponent_err", "p_err")))
    if p is not None and C is not None:
        err = f" ± {_fmt(p_err)}" if p_err is not None else ""
        ax.plot(
            bb,
            C * ref**p,
            color="0.25",
            ls="--",
            lw=1.8,
            label=f"fit C·a(β)^p:  C = {_fmt(C)}, p = {_fmt(p)}{err}",
        )
    ax.set_xscale("log")
    ax.set_yscale("log", nonpositive="mask")
    ax.set_xlabel("inverse temperature β (log scale)")
    ax.set_ylabel(r"$\mathrm{min}_t W_2$ (log scale)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.suptitle(
        _run_title(ds, r"Closest approach $\mathrm{min}_t W_2(\rho^\beta_t, \Pi_\#\rho_0)$ against $\beta$")
    )
    return _save(fig, outdir, "min_w2", dpi)


def plot_mass(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """Mass fractions near the top eigenspaces of A and V against t, one line per beta; a Lyapunov
    panel (log y) when `lyapunov` is present; terminal times marked when `terminal_time` is.

    Needs `mass_A`, `mass_V` (beta, time); uses `mass_V_magnitude`, `lyapunov` (beta, time),
    `terminal_time` (beta).  Writes mass.png and mass.pdf.
    """
    dims = {v: ("beta", "time") for v in ("mass_A", "mass_V", "mass_V_magnitude", "lyapunov")}
    _require(ds, ["mass_A", "mass_V"], "plot_mass", dims)
    t = np.asarray(ds["time"].values, dtype=float)
    betas = np.asarray(ds["beta"].values, dtype=float)
    styles = _series_styles(len(betas))
    eps = _config_value(ds, "eps", "epsilon")
    within = f"within ε = {_fmt(eps)}" if isinstance(eps, int | float) else "within ε"
    panels = [
        ("mass_A", f"mass {within} of A's top eigenspace"),
        ("mass_V", f"mass {within} of V's top eigenspace (largest Re)"),
    ]
    if "mass_V_magnitude" in ds.variables:
        panels.append(("mass_V_magnitude", f"mass {within} of V's top eigenspace (largest |λ|)"))
    if "lyapunov" in ds.variables:
        panels.append(("lyapunov", r"Lyapunov functional $\int |P_1^\perp x|^2\, d\rho_t$"))
    fig, axes = _new_figure(1, len(panels), (4.3 * len(panels) + 0.8, 4.4))
    tt = np.asarray(ds["terminal_time"].values, dtype=float) if "terminal_time" in ds.variables else None
    for ax, (var, subtitle) in zip(axes[0], panels, strict=True):
        vals = ds[var].transpose("beta", "time").values
        for i, b in enumerate(betas):
            y = _positive(vals[i]) if var == "lyapunov" else vals[i]
            ax.plot(t, y, label=_beta_label(b), markevery=_markevery(len(t)), **styles[i])
            if tt is not None and var != "lyapunov" and np.isfinite(tt[i]):
                ax.axvline(tt[i], color=styles[i]["color"], ls=styles[i]["linestyle"], lw=0.9, alpha=0.8)
        if var == "lyapunov" and "lyapunov_zero" in ds.variables and ds["lyapunov_zero"].dims == ("time",):
            ax.plot(
                t,
                _positive(ds["lyapunov_zero"].values),
                color="black",
                lw=2.2,
                ls=(0, (6, 2)),
                label="β = ∞ (zero temperature)",
            )
        ax.set_xlabel("time t")
        if var == "lyapunov":
            ax.set_yscale("log", nonpositive="mask")
            ax.set_ylabel(r"$\int |P_1^\perp x|^2\, d\rho_t$ (log scale)")
        else:
            ax.set_ylim(-0.03, 1.03)
            ax.set_ylabel("fraction of tokens")
        ax.set_title(subtitle, fontsize="medium")
        ax.grid(True, alpha=0.3)
    _beta_legend(fig, axes[0][0], betas)
    what = "Mass near the top eigenspaces of A and V"
    if tt is not None:
        what += " (vertical lines: terminal times)"
    fig.suptitle(_run_title(ds, what))
    return _save(fig, outdir, "mass", dpi)


# ---------------------------------------------------------------------------------------------
# tokens: snapshots and animation


def _select_positions(
    ds: xr.Dataset, beta: float | None, var: str = "x"
) -> tuple[np.ndarray, np.ndarray, str]:
    """(times (T,), positions (T, n, d), label) of ds[var] at the chosen beta.

    beta None: the largest finite beta.  A beta not in the coordinate is a ValueError.
    """
    _require(ds, [var], "token figures")
    x = ds[var]
    if "beta" in x.dims:
        betas = np.asarray(ds["beta"].values, dtype=float)
        if beta is None:
            fin = np.flatnonzero(np.isfinite(betas))
            i = int(fin[np.argmax(betas[fin])]) if fin.size else len(betas) - 1
        else:
            b = float(beta)
            close = np.flatnonzero(np.isclose(betas, b, rtol=1e-9, atol=0) | (betas == b))
            if close.size == 0:
                raise ValueError(f"beta = {beta!r} is not in ds['beta'] (values {betas.tolist()})")
            i = int(close[0])
        x = x.isel(beta=i)
        label = _beta_label(float(betas[i]))
    else:
        label = (
            "β = ∞ (zero temperature)" if var == "x_zero" or "zero" in str(ds.attrs.get("experiment")) else ""
        )
    if set(x.dims) != {"time", "token", "dim"}:
        raise ValueError(f"ds[{var!r}] must have dims (beta,) time, token, dim; got {ds[var].dims}")
    X = np.asarray(x.transpose("time", "token", "dim").values, dtype=float)
    if X.shape[1] == 0:
        raise ValueError(f"ds[{var!r}] holds no tokens (token dimension has size 0)")
    return np.asarray(ds["time"].values, dtype=float), X, label


def _directions(ds: xr.Dataset, X: np.ndarray, want: int) -> tuple[np.ndarray, list[str]]:
    """`want` orthonormal directions (d, want) with labels: A's top eigenvectors from `basis_A`,
    completed by the principal axes of the token cloud orthogonal to them."""
    d = X.shape[-1]
    want = min(want, d)
    cols, labels = [], []
    if "basis_A" in ds.variables:
        Bv = ds["basis_A"]
        other = [dd for dd in Bv.dims if dd != "dim"]
        Bm = np.asarray(Bv.transpose("dim", *other).values, dtype=float).reshape(d, -1)
        for j in range(min(Bm.shape[1], want)):
            cols.append(Bm[:, j] / np.linalg.norm(Bm[:, j]))
            labels.append(f"u{j + 1}")
    U = np.array(cols).T if cols else np.zeros((d, 0))
    if len(cols) < want:
        R = X.reshape(-1, d)
        R = R - (R @ U) @ U.T
        _, _, Vt = np.linalg.svd(R, full_matrices=False)
        for j in range(want - len(cols)):
            v = Vt[j] - U @ (U.T @ Vt[j])
            U = np.column_stack([U, v / np.linalg.norm(v)])
            labels.append(f"w{j + 1}")
    return U, labels


def _hemisphere_groups(X0: np.ndarray, u: np.ndarray) -> list[tuple[np.ndarray, dict[str, Any]]]:
    """Tokens split by the sign of <x_i(0), u1>: filled circles and open triangles (greyscale-safe).

    Each group: (mask (N,), keyword arguments of `ax.plot` for its markers).
    """
    s = X0 @ u >= 0
    dots = {"ls": "", "ms": 4}
    return [
        (s, {**dots, "marker": "o", "mec": "#1f3b73", "mfc": "#1f3b73", "label": "⟨x(0), u1⟩ ≥ 0"}),
        (~s, {**dots, "marker": "^", "mec": "#b2520e", "mfc": "white", "label": "⟨x(0), u1⟩ < 0"}),
    ]


def _default_time_indices(t: np.ndarray, t_star: float | None, n: int = 4) -> list[int]:
    """Indices of n snapshot times: first, nearest t*, a middle one, last."""
    T = len(t)
    idx = {0, T - 1, T // 2}
    if t_star is not None and np.isfinite(t_star):
        idx.add(int(np.argmin(np.abs(t - t_star))))
    for k in np.linspace(0, T - 1, n).round().astype(int):
        if len(idx) >= min(n, T):
            break
        idx.add(int(k))
    return sorted(idx)


def _time_indices(t: np.ndarray, times: Sequence[float] | None, t_star: float | None) -> list[int]:
    if times is None:
        return _default_time_indices(t, t_star)
    tt = np.atleast_1d(np.asarray(times, dtype=float))
    if tt.ndim != 1 or tt.size == 0 or not np.all(np.isfinite(tt)):
        raise ValueError(f"times must be a non-empty 1-D sequence of finite times, got {times!r}")
    return sorted({int(np.argmin(np.abs(t - s))) for s in tt})


def _v_direction(ds: xr.Dataset, d: int) -> np.ndarray | None:
    """V's top eigenvector (d,) from `basis_V` (dim, kv) when present (terminal runs), else None."""
    if "basis_V" not in ds.variables or "dim" not in ds["basis_V"].dims:
        return None
    Bv = ds["basis_V"]
    M = np.asarray(Bv.transpose("dim", *[dd for dd in Bv.dims if dd != "dim"]).values, dtype=float)
    M = M.reshape(d, -1)
    if M.shape[1] == 0 or not np.all(np.isfinite(M[:, 0])) or np.linalg.norm(M[:, 0]) == 0:
        return None
    return M[:, 0] / np.linalg.norm(M[:, 0])


V_STYLE: dict[str, Any] = {"ls": "", "marker": "D", "ms": 8, "mfc": "none", "mec": "0.35", "mew": 1.2}


def _sphere_axes(ax: Axes3D, U: np.ndarray, labels: list[str], v: np.ndarray | None = None) -> None:
    """A 3-D axes with a light wireframe sphere and the axes +-u_k drawn through it (only A's
    eigenvectors u_k; the principal axis w1 when there are none); +-v1 (V's top) when given."""
    n_u = max(sum(lab.startswith("u") for lab in labels), 1)
    U, labels = U[:, :n_u], labels[:n_u]
    g = np.linspace(0, 2 * np.pi, 37)
    for lat in np.linspace(-60, 60, 5) * np.pi / 180:
        ax.plot(
            np.cos(g) * np.cos(lat),
            np.sin(g) * np.cos(lat),
            np.full_like(g, np.sin(lat)),
            color="0.85",
            lw=0.6,
        )
    h = np.linspace(-np.pi / 2, np.pi / 2, 19)
    for lon in np.linspace(0, np.pi, 4, endpoint=False):
        ax.plot(np.cos(h) * np.cos(lon), np.cos(h) * np.sin(lon), np.sin(h), color="0.85", lw=0.6)
        ax.plot(-np.cos(h) * np.cos(lon), -np.cos(h) * np.sin(lon), np.sin(h), color="0.85", lw=0.6)
    for j, (lab, ls) in enumerate(zip(labels, ("-", "--", ":"), strict=False)):
        u = 1.25 * U[:, j]
        ax.plot([-u[0], u[0]], [-u[1], u[1]], [-u[2], u[2]], color="black", lw=1.6 if j == 0 else 1.0, ls=ls)
        ax.text(*(1.1 * u), f"±{lab}", fontsize=8, bbox={"fc": "white", "ec": "none", "alpha": 0.7, "pad": 1})
    if U.shape[1] and labels[0] == "u1":
        u = U[:, 0]
        ax.plot(
            [u[0], -u[0]],
            [u[1], -u[1]],
            [u[2], -u[2]],
            ls="",
            marker="*",
            ms=11,
            mfc="none",
            mec="black",
            mew=0.9,
        )
    if v is not None:
        w = 1.25 * v
        ax.plot([-w[0], w[0]], [-w[1], w[1]], [-w[2], w[2]], color="0.45", lw=1.2, ls="-.")
        ax.plot([v[0], -v[0]], [v[1], -v[1]], [v[2], -v[2]], label="±v1 (top of V)", **V_STYLE)
        ax.text(*(1.1 * w), "±v1", fontsize=8, bbox={"fc": "white", "ec": "none", "alpha": 0.7, "pad": 1})
    ax.set_xlim(-1, 1)
    ax.set_ylim(-1, 1)
    ax.set_zlim(-1, 1)
    ax.set_box_aspect((1, 1, 1))
    for axis in (ax.xaxis, ax.yaxis, ax.zaxis):
        axis.set_ticks([-1, 0, 1])
    ax.set_xlabel("$x_1$", labelpad=-8)
    ax.set_ylabel("$x_2$", labelpad=-8)
    ax.zaxis.set_rotate_label(False)
    ax.set_zlabel("$x_3$", labelpad=-8)
    ax.tick_params(labelsize=6, pad=-2)
    if U.shape[1]:
        ax.view_init(elev=20, azim=float(np.degrees(np.arctan2(U[1, 0], U[0, 0]))) + 40.0)


def _plane_axes(ax: Axes, li: str, lj: str, v: np.ndarray | None = None) -> None:
    """Unit circle, axes labelled <x, li>, <x, lj>; v: V's top eigenvector in plane coordinates."""
    if v is not None:
        ax.plot([v[0], -v[0]], [v[1], -v[1]], label="±v1 (top of V), projected", **V_STYLE)
    g = np.linspace(0, 2 * np.pi, 200)
    ax.plot(np.cos(g), np.sin(g), color="0.8", lw=0.8)
    ax.axhline(0, color="0.85", lw=0.6)
    ax.axvline(0, color="0.85", lw=0.6)
    ax.set_xlim(-1.08, 1.08)
    ax.set_ylim(-1.08, 1.08)
    ax.set_aspect("equal")
    ax.set_xlabel(f"⟨x, {li}⟩")
    ax.set_ylabel(f"⟨x, {lj}⟩")


def _planes(labels: list[str]) -> list[tuple[int, int]]:
    n = len(labels)
    return [(i, j) for i in range(n) for j in range(i + 1, n)][:3]


def plot_snapshots(
    ds: xr.Dataset,
    outdir: str | Path,
    beta: float | None = None,
    times: Sequence[float] | None = None,
    dpi: int = DPI,
) -> list[Path]:
    """Tokens at chosen times, one panel per time (one row per plane for d > 3).

    d = 3: 3-D scatter on the sphere with A's top eigenvectors (`basis_A`) drawn as axes.  d != 3:
    projections onto the planes spanned by pairs of A's top eigenvectors (completed by principal
    axes of the cloud when basis_A has fewer than three).  Tokens are marked by the sign of
    <x_i(0), u1> so clusters can be followed in greyscale; V's top eigenvector is marked (diamonds)
    when `basis_V` is present.  With `x_zero` present a second row
    (d = 3) shows the zero-temperature flow at the same times.

    Needs `x` ((beta,) time, token, dim).  beta: which beta (default: largest finite); times:
    nearest saved times (default: start, t*, middle, end).  Writes snapshots.png / .pdf.
    """
    t, X, label = _select_positions(ds, beta)
    t_key = None  # t* (concentration) or the terminal time, shown when times is None
    for name in ("t_star", "terminal_time"):
        if t_key is None and name in ds.variables and ds[name].dims == ("beta",) and label.startswith("β = "):
            betas = np.asarray(ds["beta"].values, dtype=float)
            bsel = betas[np.flatnonzero([_beta_label(b) == label for b in betas])[0]]
            t_key = float(ds[name].sel(beta=bsel).values)
    idx = _time_indices(t, times, t_key)
    v = _v_direction(ds, X.shape[-1])
    d = X.shape[-1]
    rows = [(X, label)]
    if "x_zero" in ds.variables and ds["x_zero"].sizes.get("token", 0) == X.shape[1]:
        rows.append((_select_positions(ds, None, "x_zero")[1], "β = ∞ (zero temperature)"))
    U, labels = _directions(ds, X, 3)
    groups = _hemisphere_groups(X[0], U[:, 0])
    size = 3.2
    if d == 3:
        fig, _ = _new_figure(1, 1, (size * len(idx) + 0.4, size * len(rows) + 0.8))
        fig.clear()
        for r, (Xr, lab) in enumerate(rows):
            for c, k in enumerate(idx):
                ax = fig.add_subplot(len(rows), len(idx), r * len(idx) + c + 1, projection="3d")
                _sphere_axes(ax, U, labels, v)
                for mask, st in groups:
                    P = Xr[k][mask]
                    ax.plot(P[:, 0], P[:, 1], P[:, 2], **st, alpha=0.9)
                ax.set_title(f"{lab}, t = {t[k]:.3g}", fontsize="medium")
        fig.axes[0].legend(loc="upper left", fontsize="x-small", framealpha=0.9)
    else:
        planes = _planes(labels)
        fig, axes = _new_figure(len(planes), len(idx), (size * len(idx) + 0.4, size * len(planes) + 0.8))
        for r, (i, j) in enumerate(planes):
            for c, k in enumerate(idx):
                ax = axes[r][c]
                _plane_axes(ax, labels[i], labels[j], None if v is None else v @ U[:, [i, j]])
                for mask, st in groups:
                    P = X[k][mask] @ U[:, [i, j]]
                    ax.plot(P[:, 0], P[:, 1], **st, alpha=0.9)
                if r == 0:
                    ax.set_title(f"{label}, t = {t[k]:.3g}", fontsize="medium")
        axes[0][0].legend(loc="lower left", fontsize="x-small", framealpha=0.9)
    what = f"Tokens on $S^{{{d - 1}}}$ ({X.shape[1]} shown)"
    if d != 3:
        what += ": projections onto planes of A's top eigenvectors u_k (w_k: principal axes ⊥ u)"
    fig.suptitle(_run_title(ds, what))
    return _save(fig, outdir, "snapshots", dpi)


def animate(
    ds: xr.Dataset,
    path: str | Path,
    beta: float | None = None,
    fps: int = 8,
    dpi: int = 100,
) -> list[Path]:
    """Animation of the tokens, one frame per saved time: a GIF (PillowWriter) always, and an MP4
    next to it (same stem) when ffmpeg is on the PATH.

    d = 3: 3-D scatter on the sphere with A's top eigenvectors; otherwise the projection onto the
    plane of the two leading directions (u1, u2 or principal axes).  Needs `x`; beta as in
    `plot_snapshots`.  path: the .gif file.  Returns the written paths.
    """
    from matplotlib.animation import FFMpegWriter, PillowWriter

    path = Path(path)
    if path.suffix.lower() != ".gif":
        raise ValueError(f"path must name a .gif file, got {str(path)!r}")
    fps = int(check_positive(fps, "fps", integer=True))
    dpi = int(check_positive(dpi, "dpi", integer=True))
    t, X, label = _select_positions(ds, beta)
    d = X.shape[-1]
    U, labels = _directions(ds, X, 3 if d == 3 else 2)
    groups = _hemisphere_groups(X[0], U[:, 0])
    v = _v_direction(ds, d)
    if d == 3:
        fig, _ = _new_figure(1, 1, (5.0, 5.2))
        fig.clear()
        ax = fig.add_subplot(1, 1, 1, projection="3d")
        _sphere_axes(ax, U, labels, v)
    else:
        fig, axes = _new_figure(1, 1, (5.0, 5.2))
        ax = axes[0][0]
        _plane_axes(ax, labels[0], labels[1], None if v is None else v @ U[:, :2])
    lines = []
    for _, st in groups:
        (ln,) = ax.plot([], [], **st)
        lines.append(ln)
    ax.legend(loc="upper left", fontsize="x-small")
    title = fig.suptitle("", fontsize="medium")
    N = _config_value(ds, "N", "n_tokens", "n")
    shown = f"{X.shape[1]} of N = {N} tokens" if isinstance(N, int) else f"{X.shape[1]} tokens"
    head = f"{ds.attrs.get('experiment', '')}: {shown} on $S^{{{d - 1}}}$, {label}".lstrip(": ")

    def draw(k: int) -> None:
        for ln, (mask, _) in zip(lines, groups, strict=True):
            P = X[k][mask]
            if d == 3:
                ln.set_data_3d(P[:, 0], P[:, 1], P[:, 2])
            else:
                Q = P @ U[:, :2]
                ln.set_data(Q[:, 0], Q[:, 1])
        title.set_text(f"{head}\nt = {t[k]:.4g}  (frame {k + 1}/{len(t)})")

    path.parent.mkdir(parents=True, exist_ok=True)
    writers: list[tuple[Any, Path]] = [(PillowWriter(fps=fps), path)]
    if shutil.which("ffmpeg"):
        writers.append((FFMpegWriter(fps=fps), path.with_suffix(".mp4")))
    written = []
    for writer, p in writers:
        with writer.saving(fig, str(p), dpi):
            for k in range(len(t)):
                draw(k)
                writer.grab_frame()
        written.append(p)
    fig.clear()
    return written


# ---------------------------------------------------------------------------------------------
# other experiments


def plot_zero_temperature(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """Zero-temperature convergence: W2(rho_t, Pi_# rho_0) against t (log y) with lines of slope
    -fitted, -guaranteed (gamma / 2||B||) and -c* from attrs["fits"], each drawn through the data
    point at mid-time; a Lyapunov panel when `lyapunov` is present.

    Needs `w2` (time).  Writes zero_temperature.png / .pdf.
    """
    _require(ds, ["w2"], "plot_zero_temperature", {"w2": ("time",), "lyapunov": ("time",)})
    t = np.asarray(ds["time"].values, dtype=float)
    w = _positive(ds["w2"].values)
    has_lyap = "lyapunov" in ds.variables
    fig, axes = _new_figure(1, 2 if has_lyap else 1, (11 if has_lyap else 6.5, 4.6))
    ax = axes[0][0]
    ax.plot(
        t,
        w,
        color="black",
        lw=2,
        marker="o",
        markevery=_markevery(len(t)),
        label=r"$W_2(\rho_t, \Pi_\#\rho_0)$, exact",
    )
    fits = _json_attr(ds, "fits")
    fin = np.flatnonzero(np.isfinite(w))
    if fin.size:
        k0 = int(fin[len(fin) // 2])
        for key, ls, name in (
            ("fitted", "--", "fitted"),
            ("guaranteed", ":", "guaranteed γ/(2‖B‖)"),
            ("c_star", "-.", "predicted c*"),
        ):
            rate = fits.get(key)
            if isinstance(rate, int | float) and math.isfinite(rate):
                err = (
                    f" ± {_fmt(float(fits['fitted_err']))}"
                    if key == "fitted" and "fitted_err" in fits
                    else ""
                )
                ax.plot(
                    t,
                    w[k0] * np.exp(-rate * (t - t[k0])),
                    color="0.4",
                    ls=ls,
                    lw=1.5,
                    label=f"slope −{_fmt(float(rate))}{err} ({name})",
                )
        ax.set_ylim(np.nanmin(w[fin]) / 3, np.nanmax(w[fin]) * 3)
    ax.set_yscale("log", nonpositive="mask")
    ax.set_xlabel("time t")
    ax.set_ylabel(r"$W_2$, chordal (log scale)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    if has_lyap:
        ax2 = axes[0][1]
        ax2.plot(
            t,
            _positive(ds["lyapunov"].values),
            color="black",
            ls="-",
            marker="s",
            markevery=_markevery(len(t)),
        )
        ax2.set_yscale("log", nonpositive="mask")
        ax2.set_xlabel("time t")
        ax2.set_ylabel(r"$\int |P_1^\perp x|^2\, d\rho_t$ (log scale)")
        ax2.set_title("Lyapunov functional", fontsize="medium")
        ax2.grid(True, which="both", alpha=0.3)
    fig.suptitle(
        _run_title(ds, r"Zero temperature ($\beta = \infty$): exponential convergence to $\Pi_\#\rho_0$")
    )
    return _save(fig, outdir, "zero_temperature", dpi)


def plot_resolution(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """Mean-field resolution: min W2 and t* against N (log x), one line per beta; N_needed against
    beta with the scale beta^((d-1)/2) when present.

    Needs `min_w2`, `t_star` (beta, N).  Writes resolution.png / .pdf.
    """
    dims = {"min_w2": ("beta", "N"), "t_star": ("beta", "N"), "N_needed": ("beta",)}
    _require(ds, ["min_w2", "t_star"], "plot_resolution", dims)
    Ns = np.asarray(ds["N"].values, dtype=float)
    betas = np.asarray(ds["beta"].values, dtype=float)
    styles = _series_styles(len(betas))
    has_needed = "N_needed" in ds.variables
    fig, axes = _new_figure(1, 3 if has_needed else 2, (15 if has_needed else 10.5, 4.6))
    for ax, var, ylab in (
        (axes[0][0], "min_w2", r"$\mathrm{min}_t W_2$ (log scale)"),
        (axes[0][1], "t_star", r"$t^*$"),
    ):
        vals = ds[var].transpose("beta", "N").values
        for i, b in enumerate(betas):
            ax.plot(Ns, _positive(vals[i]) if var == "min_w2" else vals[i], label=_beta_label(b), **styles[i])
        ax.set_xscale("log")
        if var == "min_w2":
            ax.set_yscale("log", nonpositive="mask")
        ax.set_xlabel("number of tokens N (log scale)")
        ax.set_ylabel(ylab)
        ax.set_title(
            "closest approach to Π#ρ₀" if var == "min_w2" else "time of closest approach", fontsize="medium"
        )
        ax.grid(True, which="both", alpha=0.3)
    _beta_legend(fig, axes[0][0], betas)
    if has_needed:
        ax = axes[0][2]
        need = _positive(ds["N_needed"].values)
        ax.plot(
            betas, need, ls="", marker="o", ms=8, color="black", mfc="white", label="N needed (converged)"
        )
        d = ds.sizes.get("dim") or _config_value(ds, "d", "dim")
        ok = np.isfinite(need) & np.isfinite(betas)
        if isinstance(d, int) and ok.any():
            ref = betas ** ((d - 1) / 2)
            c = math.exp(float(np.mean(np.log(need[ok]) - np.log(ref[ok]))))
            ax.plot(betas, c * ref, color="0.4", ls="--", label=f"{_fmt(c)}·β^((d−1)/2), d = {d}")
        ax.axhline(Ns.max(), color="0.6", ls=":", lw=1.2, label=f"largest N tried ({Ns.max():g})")
        nc = ~np.isfinite(need)
        if nc.any():
            ax.plot(
                betas[nc],
                np.full(nc.sum(), Ns.max() * 1.6),
                ls="",
                marker="^",
                ms=9,
                color="0.3",
                label=f"not converged: N needed > {Ns.max():g}",
            )
        ax.set_xscale("log")
        ax.set_yscale("log", nonpositive="mask")
        ax.set_xlabel("inverse temperature β (log scale)")
        ax.set_ylabel("N needed (log scale)")
        ax.set_title("tokens needed for mean-field resolution", fontsize="medium")
        ax.legend(fontsize="small")
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(_run_title(ds, "Mean-field resolution: results against the number of tokens N"))
    return _save(fig, outdir, "resolution", dpi)


def plot_layers(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """Transformer layers as Euler steps: error against the step h = T/L (log-log) with the fitted
    order from attrs["fits"]["order"] drawn through the smallest-h point.

    Needs `error` (L) and `h` (L).  Writes layers.png / .pdf.
    """
    _require(ds, ["error", "h"], "plot_layers", {"error": ("L",), "h": ("L",)})
    h = np.asarray(ds["h"].values, dtype=float)
    e = _positive(ds["error"].values)
    fig, axes = _new_figure(1, 1, (6.5, 4.6))
    ax = axes[0][0]
    ax.plot(
        h,
        e,
        ls="-",
        marker="o",
        color="black",
        mfc="white",
        ms=7,
        label=r"$\mathrm{max}_i\, |x_i^L - x_i(T)|$",
    )
    order = _json_attr(ds, "fits").get("order")
    ok = np.flatnonzero(np.isfinite(e) & np.isfinite(h) & (h > 0))
    if isinstance(order, int | float) and ok.size:
        k = ok[np.argmin(h[ok])]
        hh = np.geomspace(h[ok].min(), h[ok].max(), 50)
        err = _json_attr(ds, "fits").get("order_err")
        lab = f"fitted order {_fmt(float(order))}" + (f" ± {_fmt(float(err))}" if err is not None else "")
        ax.plot(hh, e[k] * (hh / h[k]) ** order, color="0.45", ls="--", label=lab)
    ax.set_xscale("log")
    ax.set_yscale("log", nonpositive="mask")
    ax.set_xlabel("step h = T / L (log scale)")
    ax.set_ylabel("error against a fine ODE reference (log scale)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    for hk, ek, Lk in zip(h, e, np.asarray(ds["L"].values), strict=True):
        if np.isfinite(ek):
            ax.annotate(
                f"L = {Lk}", (hk, ek), textcoords="offset points", xytext=(6, -10), fontsize="x-small"
            )
    fig.suptitle(_run_title(ds, "Layers as explicit Euler steps with renormalisation"))
    return _save(fig, outdir, "layers", dpi)


# ---------------------------------------------------------------------------------------------
# pretrained heads

HEADS_DIMS = ("head", "time")
# the whole layer: thick black, drawn under the heads so that equal curves stay visible
WHOLE_LAYER_STYLE = {"color": "black", "linestyle": "-", "marker": "o", "lw": 3.2, "ms": 7, "zorder": 1.5}


def _heads_title(ds: xr.Dataset, what: str) -> str:
    """Title of the heads figures: what, then checkpoint, layer, N tokens, beta_eff scale, text."""
    ck = _config_value(ds, "checkpoint") or ds.attrs.get("checkpoint", "?")
    name = Path(str(ck)).name or str(ck)
    layer = _config_value(ds, "layer")
    n = ds.sizes.get("token")
    parts = [f"heads: checkpoint {name}", f"layer {layer if layer is not None else '?'}"]
    if n:
        parts.append(f"N = {n} tokens")
    if "beta_eff" in ds.variables:
        b = np.unique(np.asarray(ds["beta_eff"].values, dtype=float))
        if b.size == 1:
            parts.append(f"β = {_fmt(float(b[0]))}")
    scale = _config_value(ds, "beta_scale")
    if isinstance(scale, int | float) and scale != 1:
        parts.append(f"({_fmt(float(scale))} β_eff)")
    text = _config_value(ds, "text")
    if isinstance(text, str):
        parts.append(f"“{text if len(text) <= 48 else text[:45] + '…'}”")
    return f"{what}\n" + ", ".join(parts)


def _log_axis_plain_ticks(ax: Axes) -> None:
    """Log y axis; tick labels as plain numbers (readable when the data span less than a decade)."""
    from matplotlib.ticker import FuncFormatter

    ax.set_yscale("log", nonpositive="mask")
    plain = FuncFormatter(lambda v, _: f"{v:.3g}")
    ax.yaxis.set_major_formatter(plain)
    lo, hi = ax.get_ylim()
    if hi / lo < 10:
        ax.yaxis.set_minor_formatter(plain)


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
    _require(ds, need, "plot_heads", dims)
    t = np.asarray(ds["time"].values, dtype=float)
    heads = [int(h) for h in ds["head"].values]
    others = [h for h in heads if h != -1]
    styles = dict(zip(others, _series_styles(len(others), SERIES_CMAP), strict=True))
    beta = ds["beta_eff"] if "beta_eff" in ds.variables else None
    if beta is not None and np.unique(np.asarray(beta.values, dtype=float)).size == 1:
        beta = None  # one beta for all: it is in the title

    def label(h: int) -> str:
        name = "whole layer (head = −1)" if h == -1 else f"head {h}"
        return name if beta is None else f"{name}, β = {_fmt(float(beta.sel(head=h)))}"

    eps = _config_value(ds, "eps")
    within = f"within ε = {_fmt(eps)} rad" if isinstance(eps, int | float) else "within ε"
    panels = [
        ("mass_S", "mass near the top eigenspace of (A+Aᵀ)/2", f"fraction of tokens {within}"),
        ("mass_V", "mass near V's top eigenspace (largest Re)", f"fraction of tokens {within}"),
        ("w2_pi_S", r"exact $W_2(\rho_t,\, (\Pi_S)_\#\rho_0)$", r"$W_2$, chordal (log scale)"),
        ("diameter", "diameter of the cloud", r"largest $|x_i - x_j|$"),
    ]
    has_model = "w2_model" in ds.variables
    if has_model:
        panels.insert(3, ("w2_model", "W2 to the model's next-layer states (comparison)", r"$W_2$, chordal"))
    ncols = 3 if len(panels) > 4 else 2
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = _new_figure(nrows, ncols, (4.4 * ncols + 1.8, 3.9 * nrows + 0.6))
    flat = [ax for row in axes for ax in row]
    for ax, (var, subtitle, ylab) in zip(flat, panels, strict=False):
        vals = ds[var].transpose(*HEADS_DIMS)
        for h in heads:
            y = np.asarray(vals.sel(head=h).values, dtype=float)
            if var == "w2_pi_S":
                y = _positive(y)
            st = WHOLE_LAYER_STYLE if h == -1 else {**styles[h], "lw": 1.4, "ms": 4}
            ax.plot(t, y, label=label(h), markevery=_markevery(len(t)), **st)
        if var == "w2_model":
            n_lines = len(ax.get_lines())
            if "w2_model_ref" in ds.variables:
                ref = float(ds["w2_model_ref"].values)
                ax.axhline(ref, color="0.45", ls=(0, (1, 1.5)), lw=1.4, label=f"W2(ρ₀, model) = {_fmt(ref)}")
            if "t_model" in ds.variables and "w2_model_min" in ds.variables:
                ax.plot(
                    np.asarray(ds["t_model"].values, dtype=float),
                    np.asarray(ds["w2_model_min"].values, dtype=float),
                    ls="",
                    marker="*",
                    ms=12,
                    mfc="white",
                    mec="black",
                    mew=1.2,
                    zorder=5,
                    label="smallest over t",
                )
            extra = ax.get_lines()[n_lines:]
            if extra:
                ax.legend(extra, [ln.get_label() for ln in extra], fontsize="x-small", loc="best")
        if var == "w2_pi_S":
            _log_axis_plain_ticks(ax)
        elif var.startswith("mass"):
            ax.set_ylim(-0.03, 1.03)
        ax.set_xlabel("time t")
        ax.set_ylabel(ylab)
        ax.set_title(subtitle, fontsize="medium")
        ax.grid(True, which="both", alpha=0.3)
    for ax in flat[len(panels) :]:
        ax.set_axis_off()
    handles, labels = flat[0].get_legend_handles_labels()
    if len(flat) > len(panels):  # the legend in the free panel
        flat[-1].legend(handles, labels, loc="center", fontsize="small", title="one line per attention")
    else:
        fig.legend(handles, labels, loc="outside right upper", fontsize="small")
    what = "Heads of a pretrained layer on a sentence's tokens (pure attention at β_eff)"
    if has_model:
        what += "; W2 to the model is a comparison, not a test"
    fig.suptitle(_heads_title(ds, what))
    return _save(fig, outdir, "heads", dpi)


# ---------------------------------------------------------------------------------------------
# sweeps


def plot_sweep(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """A sweep's t* and min W2 against beta: median over `seed` with the min-max spread as a band
    and error bars, one series per value of the other dims (e.g. N).

    Needs `t_star` and `min_w2` with a `beta` dim; `seed` (spread) and any other dims (series)
    are optional.  Writes sweep.png / .pdf.
    """
    _require(ds, ["t_star", "min_w2"], "plot_sweep")
    for v in ("t_star", "min_w2"):
        if "beta" not in ds[v].dims:
            raise ValueError(f"plot_sweep needs ds[{v!r}] with a 'beta' dim, got dims {ds[v].dims}")
        if set(ds[v].dims) != set(ds["t_star"].dims):
            raise ValueError(
                f"plot_sweep: t_star and min_w2 must share dims, got {ds['t_star'].dims} and {ds[v].dims}"
            )
    dims = ds["t_star"].dims
    series_dims = [dd for dd in dims if dd not in ("beta", "seed")]
    combos = list(itertools.product(*[range(ds.sizes[dd]) for dd in series_dims]))
    betas = np.asarray(ds["beta"].values, dtype=float)
    styles = _series_styles(len(combos), SERIES_CMAP)
    nseed = ds.sizes.get("seed", 1) if "seed" in dims else 1
    fig, axes = _new_figure(1, 2, (11.5, 4.8))
    for ci, combo in enumerate(combos):
        sel = dict(zip(series_dims, combo, strict=True))
        lab = ", ".join(f"{dd} = {_fmt(ds[dd].values[i].item())}" for dd, i in sel.items()) or "all"
        for ax, var in zip(axes[0], ("t_star", "min_w2"), strict=True):
            a = ds[var].isel(sel)
            a = a.transpose("beta", *(["seed"] if "seed" in dims else []))
            vals = np.asarray(a.values, dtype=float).reshape(len(betas), -1)
            if var == "min_w2":
                vals = _positive(vals)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns give NaN, wanted
                med, lo, hi = np.nanmedian(vals, 1), np.nanmin(vals, 1), np.nanmax(vals, 1)
            st = styles[ci]
            ax.errorbar(
                betas,
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
                ax.fill_between(betas, lo, hi, color=st["color"], alpha=0.15, lw=0)
    finite = betas[np.isfinite(betas) & (betas > 0)]
    ax_t, ax_m = axes[0]
    if finite.size:
        mins = _positive(ds["min_w2"].values)
        if np.isfinite(mins).any():
            bb = np.geomspace(finite.min(), finite.max(), 100)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                level = float(np.nanmedian(mins)) / float(np.median(_concentration_a(finite)))
            ax_m.plot(
                bb,
                level * _concentration_a(bb),
                color="0.5",
                ls=":",
                lw=2,
                label="∝ √(log(β+1)/β) (reference)",
            )
    spread = f"median over {nseed} seeds, bars and band: min–max" if nseed > 1 else "single seed"
    for ax, ylab in (
        (ax_t, r"$t^*(\beta) = \mathrm{argmin}_t\, W_2$"),
        (ax_m, r"$\mathrm{min}_t W_2$ (log scale)"),
    ):
        ax.set_xscale("log")
        ax.set_xlabel("inverse temperature β (log scale)")
        ax.set_ylabel(ylab)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small", title=spread, title_fontsize="x-small")
    ax_m.set_yscale("log", nonpositive="mask")
    fig.suptitle(
        _run_title(ds, r"Sweep: time of closest approach $t^*$ and $\mathrm{min}_t W_2$ against $\beta$")
    )
    return _save(fig, outdir, "sweep", dpi)


# ---------------------------------------------------------------------------------------------
# everything for one run

_PLOTTERS: dict[str, tuple[Callable[..., list[Path]], ...]] = {
    "concentration": (plot_w2, plot_t_star, plot_min_w2, plot_mass, plot_snapshots),
    "terminal": (plot_mass, plot_snapshots),
    "resolution": (plot_resolution,),
    "zero-temperature": (plot_zero_temperature, plot_snapshots),
    "layers": (plot_layers,),
    "heads": (plot_heads,),
}


def _experiment_key(ds: xr.Dataset) -> str:
    name = ds.attrs.get("experiment")
    if not isinstance(name, str) or not name:
        raise ValueError(
            "ds.attrs['experiment'] must name the experiment (e.g. 'concentration'); it is missing"
        )
    key = name.strip().lower().replace("_", "-")
    if key not in _PLOTTERS:
        raise ValueError(f"no figures known for experiment {name!r}; known: {sorted(_PLOTTERS)}")
    return key


def plot_run(ds: xr.Dataset, outdir: str | Path, animation: bool = False, dpi: int = DPI) -> list[Path]:
    """Every figure that applies to ds.attrs["experiment"], as PNG and PDF in outdir.

    A Dataset with extra sweep dims (`seed`, `N`) on `t_star` gets the sweep figure.  Token
    snapshots are skipped when the run kept no tokens (`x` absent).  animation=True also writes
    tokens.gif (and tokens.mp4 with ffmpeg).  Returns the written paths, PNG before PDF.
    """
    _check_ds(ds)
    key = _experiment_key(ds)
    sweep_dims = {"seed", "N"} if key != "resolution" else {"seed"}
    if "t_star" in ds.variables and sweep_dims & set(ds["t_star"].dims):
        return plot_sweep(ds, outdir, dpi=dpi)
    has_tokens = "x" in ds.variables and ds["x"].sizes.get("token", 0) > 0
    paths: list[Path] = []
    for fn in _PLOTTERS[key]:
        if fn is plot_snapshots and not has_tokens:
            continue
        paths += fn(ds, outdir, dpi=dpi)
    if animation and has_tokens:
        paths += animate(ds, Path(outdir) / "tokens.gif")
    return paths
