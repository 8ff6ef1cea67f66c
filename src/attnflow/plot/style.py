"""The house style of every figure: colours, line styles and markers, titles, legends, saving.

Every figure is written as PNG (and as PDF when asked: `figure_formats`) and is readable in
greyscale: lines differ by style and marker as well as colour, and beta is coloured with a
sequential colormap (dark = small beta). Matplotlib is imported inside the functions and used
through `matplotlib.figure.Figure` with the Agg canvas, so no pyplot state is created or leaked and
`import attnflow.plot` stays light.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from .._checks import check_positive
from .._text import format_value
from ..io import json_attr

if TYPE_CHECKING:
    import xarray as xr
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis
    from matplotlib.figure import Figure

DPI = 150
BETA_CMAP = "viridis"  # sequential, luminance increases with beta: readable in greyscale
SERIES_CMAP = "cividis"  # for other ordered series (N in sweeps, heads)
LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
CMAP_LO, CMAP_SPAN = 0.05, 0.72  # part of the colormap used: no near-white lines
LEGEND_MAX = 10  # more series than this: a colorbar instead of a legend
ZERO_TEMPERATURE_STYLE: dict[str, Any] = {"color": "black", "lw": 2.2, "ls": (0, (6, 2))}
STAR_STYLE: dict[str, Any] = {"ls": "", "marker": "*", "mfc": "white", "mec": "black", "zorder": 5}
#: the file formats `save` can write; PNG always comes first (the report shows it)
FORMATS = ("png", "pdf")
# what `save` writes when not told: PNG only (a quick look); `figure_formats("png", "pdf")` for a paper
_formats: ContextVar[tuple[str, ...]] = ContextVar("attnflow_figure_formats", default=("png",))


class NothingToPlot(ValueError):
    """A figure whose data are all missing (e.g. no finite t* in a run whose betas are all
    under-resolved): the figures of a run leave it out, with a FigureWarning, and draw the others."""


class FigureWarning(UserWarning):
    """A figure of a run was left out (`NothingToPlot`)."""


def check_ds(ds: object) -> None:
    """TypeError unless ds is an xarray Dataset."""
    if not (hasattr(ds, "data_vars") and hasattr(ds, "attrs") and hasattr(ds, "sizes")):
        raise TypeError(f"ds must be an xarray.Dataset, got {type(ds).__name__}")


def require(ds: xr.Dataset, names: Sequence[str], what: str, dims: dict[str, tuple] | None = None) -> None:
    """ValueError naming the missing variables (or wrong dims) that figure `what` needs."""
    check_ds(ds)
    missing = [n for n in names if n not in ds.variables]
    if missing:
        raise ValueError(
            f"{what} needs variable(s) {missing} in ds, which has variables {sorted(map(str, ds.data_vars))}"
        )
    for name, want in (dims or {}).items():
        if name in ds.variables and set(ds[name].dims) != set(want):
            raise ValueError(
                f"{what} needs ds[{name!r}] with dims {want}, got {ds[name].dims}"
                + ("; a sweep's Dataset (extra dims: seed, N) goes to plot_sweep" if "beta" in want else "")
            )


def config_value(ds: xr.Dataset, *keys: str) -> Any:
    """The first of `keys` in the run's config (attrs["config"]), None when absent."""
    cfg = json_attr(ds, "config", {})
    if isinstance(cfg, dict):
        for k in keys:
            if k in cfg:
                return cfg[k]
    return None


def fits_of(ds: xr.Dataset) -> dict[str, Any]:
    """attrs["fits"] as a dict ({} when absent)."""
    fits = json_attr(ds, "fits", {})
    return fits if isinstance(fits, dict) else {}


def beta_label(b: float) -> str:
    return "β = ∞" if math.isinf(b) else f"β = {b:g}"


def values_label(name: str, values: ArrayLike) -> str:
    v = [x.item() if hasattr(x, "item") else x for x in np.asarray(values).ravel()]
    if len(v) == 1:
        return f"{name} = {format_value(v[0])}"
    if len(v) <= 4:
        return f"{name} ∈ {{{', '.join(format_value(x) for x in v)}}}"
    return f"{name} = {format_value(v[0])}…{format_value(v[-1])} ({len(v)})"


def run_title(ds: xr.Dataset, what: str) -> str:
    """Figure title: what is shown and what was run (experiment, N (the N used where the run chose it
    per beta: `N_used`), d, beta, seed; swept values for dims of a sweep or of the resolution ladder)."""
    parts = [str(ds.attrs.get("experiment", "?"))]
    if "N" in ds.dims and "N" in ds.coords:
        parts.append(values_label("N", ds["N"].values))
    elif "N_used" in ds.variables and ds["N_used"].ndim == 1:  # the N each beta ended at (N = auto)
        parts.append(values_label("N", np.unique(np.asarray(ds["N_used"].values, dtype=int))))
    else:
        N = config_value(ds, "N", "n_tokens", "n")
        if N is not None and not isinstance(N, list | dict):
            parts.append(f"N = {N}")
    d = ds.sizes.get("dim") or config_value(ds, "d", "dim")
    if d is not None:
        parts.append(f"d = {d}")
    if "beta" in ds.coords and ds.sizes.get("beta", 0) > 0:
        b = np.asarray(ds["beta"].values, dtype=float)
        parts.append(
            beta_label(b[0])
            if b.size == 1
            else f"β = {format_value(b.min())}…{format_value(b.max())} ({b.size})"
        )
    grid = json_attr(ds, "grid", {})
    for k, vals in grid.items():
        if k not in ("N", "beta", "seed") and isinstance(vals, list):
            parts.append(values_label(k, vals))
    if "seed" in ds.dims:
        parts.append(f"{ds.sizes['seed']} seeds")
    else:
        seed = ds.attrs.get("seed", config_value(ds, "seed"))
        if seed is not None:
            parts.append(f"seed {seed}")
    return f"{what}\n" + ", ".join(parts) + _under_resolved_note(ds)


def _under_resolved_note(ds: xr.Dataset) -> str:
    """A third title line naming the under-resolved betas (faded in the figure), or ""."""
    if "beta" not in ds.coords:
        return ""
    status = beta_status(ds)
    under = np.asarray(ds["beta"].values, dtype=float)[status == "under-resolved"]
    if under.size == 0:
        return ""
    which = "every β" if under.size == status.size else values_label("β", under)
    return f"\n{which} under-resolved (N too small: not the mean-field limit)"


def new_figure(nrows: int, ncols: int, size: tuple[float, float], **subplot_kw: object):
    """A Figure on an Agg canvas (no pyplot) and its (nrows, ncols) array of axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False, subplot_kw=subplot_kw or None)
    return fig, axes


def check_formats(formats: object) -> tuple[str, ...]:
    """("png", ...) from a sequence of FORMATS names; PNG is always written, first."""
    if isinstance(formats, str) or not isinstance(formats, Sequence):
        raise TypeError(f"formats must be a sequence of names from {FORMATS}, got {formats!r}")
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise ValueError(f"formats: {bad} unknown; choose from {FORMATS}")
    return tuple(f for f in FORMATS if f == "png" or f in formats)


@contextmanager
def figure_formats(*formats: str) -> Iterator[tuple[str, ...]]:
    """Within the block, `save` (so every experiment's figures) writes these formats: e.g.
    `with figure_formats("png", "pdf"): plot_run(ds, out)`. Outside, PNG only."""
    token = _formats.set(check_formats(formats))
    try:
        yield _formats.get()
    finally:
        _formats.reset(token)


def save(
    fig: Figure, outdir: str | Path, stem: str, dpi: int, formats: Sequence[str] | None = None
) -> list[Path]:
    """Write fig as outdir/stem.png, and outdir/stem.pdf when "pdf" is in `formats` (default: those
    of the enclosing `figure_formats`, PNG only outside one); returns the written paths.

    The layout is computed once, for the PNG, and kept for the PDF (a second layout pass would cost
    as much as drawing the figure again).
    """
    dpi = int(check_positive(dpi, "dpi", integer=True))
    formats = _formats.get() if formats is None else check_formats(formats)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    paths = [outdir / f"{stem}.{ext}" for ext in formats]
    fig.savefig(paths[0], dpi=dpi)
    if len(paths) > 1:
        freeze_layout(fig)
        for path in paths[1:]:
            fig.savefig(path)
    fig.clear()
    return paths


def freeze_layout(fig: Figure) -> None:
    """Keep fig's current layout (axes, legends and colorbars where the last draw put them) for
    every later draw: no layout engine, so no layout pass (which costs about one draw) per save."""
    from matplotlib import rc_context

    with rc_context({"figure.autolayout": False, "figure.constrained_layout.use": False}):
        fig.set_layout_engine(None)


def series_styles(n: int, cmap: str = BETA_CMAP) -> list[dict[str, Any]]:
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


def beta_legend(fig: Figure, ax: Axes, betas: np.ndarray, cmap: str = BETA_CMAP, label: str = "β") -> None:
    """A legend outside the axes for few series; for many, a discrete colorbar (one swatch per
    beta) and a legend of the other entries (zero temperature, t*, fits)."""
    handles, labels = ax.get_legend_handles_labels()
    if len(betas) <= LEGEND_MAX:
        fig.legend(handles, labels, loc="outside right center", fontsize="small")
        return
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import BoundaryNorm, ListedColormap

    n = len(betas)
    colors = ListedColormap([s["color"] for s in series_styles(n, cmap)])
    sm = ScalarMappable(BoundaryNorm(np.arange(n + 1) - 0.5, n), colors)
    cb = fig.colorbar(sm, ax=ax)
    ticks = np.unique(np.linspace(0, n - 1, min(n, 6)).round().astype(int))
    cb.set_ticks(ticks.tolist())
    cb.set_ticklabels([format_value(float(betas[i])) for i in ticks])
    cb.set_label(label)
    beta_labels = {beta_label(float(b)) for b in betas}
    # a beta's own line (its label may add its status: "β = 20 (under-resolved)") is in the colorbar
    rest = [(h, lab) for h, lab in zip(handles, labels, strict=True) if lab.split(" (")[0] not in beta_labels]
    if rest:
        ax.legend(*zip(*rest, strict=True), fontsize="small", loc="best")


#: how an under-resolved beta's curve is drawn: faded, the word in its label and in the title
UNDER_RESOLVED: dict[str, Any] = {"alpha": 0.35}


def beta_status(ds: xr.Dataset) -> np.ndarray:
    """Each beta's status (beta,) of str ("converged", "resolved", "under-resolved"; "" unknown)."""
    n = ds.sizes.get("beta", 0)
    if "status" in ds.variables and ds["status"].dims == ("beta",):
        return np.asarray(ds["status"].values, dtype=str)
    return np.full(n, "")


def beta_line(beta: float, style: dict[str, Any], status: str) -> tuple[str, dict[str, Any]]:
    """The label and line style of one beta's curve: an under-resolved one faded and so named."""
    if status == "under-resolved":
        return beta_label(beta) + " (under-resolved)", {**style, **UNDER_RESOLVED}
    return beta_label(beta), style


def beta_curves(
    ax: Axes,
    t: np.ndarray,
    values: np.ndarray,
    betas: np.ndarray,
    log: bool = False,
    status: ArrayLike | None = None,
) -> list:
    """One line per beta: values (n_beta, T) against t, styled by `series_styles`; status (n_beta,)
    of str or None: an "under-resolved" beta's line is faded and so labelled. Returns the styles."""
    styles = series_styles(len(betas))
    status = np.full(len(betas), "") if status is None else np.asarray(status, dtype=str)
    for i, b in enumerate(betas):
        y = positive(values[i]) if log else values[i]
        label, style = beta_line(float(b), styles[i], str(status[i]))
        ax.plot(t, y, label=label, markevery=markevery(len(t)), **style)
    if log:
        ax.set_yscale("log", nonpositive="mask")
    return styles


def positive(a: ArrayLike) -> np.ndarray:
    """Values for a log axis: non-positive and non-finite -> NaN (a gap, not a crash)."""
    a = np.asarray(a, dtype=float).copy()
    a[~(np.isfinite(a) & (a > 0))] = np.nan
    return a


def markevery(T: int) -> int:
    return max(1, T // 8)


def pick(fit: object, keys: Sequence[str]) -> float | None:
    """The first of `keys` present in a fit dict, as a finite float (None otherwise)."""
    if not isinstance(fit, dict):
        return None
    for k in keys:
        v = fit.get(k)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
    return None


def ticks_at(axis: Axis, values: Sequence[float] | np.ndarray, max_labels: int = 8) -> None:
    """Major ticks of `axis` (ax.xaxis or ax.yaxis, log or linear) at the data's own values (the
    step sizes, the Ns of a ladder), labelled as plain numbers, at most max_labels of them (every
    k-th value); the minor ticks stay, without labels, so no two labels overlap."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    v = np.unique(np.asarray([x for x in values if np.isfinite(x) and x > 0], dtype=float))
    if v.size == 0:
        return
    step = max(1, math.ceil(v.size / max_labels))
    v = v[::-1][::step][::-1]  # keep the largest value
    axis.set_major_locator(FixedLocator(v.tolist()))
    axis.set_major_formatter(FuncFormatter(lambda x, _: _tick_text(float(x))))
    axis.set_minor_formatter(NullFormatter())


def _tick_text(x: float) -> str:
    """A tick label: whole numbers in full (1024, not 1.02e+03), others to 3 digits."""
    return str(int(x)) if x.is_integer() and abs(x) < 1e7 else format_value(x, 3)


def log_axis_plain_ticks(ax: Axes) -> None:
    """Log y axis; tick labels as plain numbers (readable when the data span less than a decade)."""
    from matplotlib.ticker import FuncFormatter

    ax.set_yscale("log", nonpositive="mask")
    plain = FuncFormatter(lambda v, _: f"{v:.3g}")
    ax.yaxis.set_major_formatter(plain)
    lo, hi = ax.get_ylim()
    if hi / lo < 10:
        ax.yaxis.set_minor_formatter(plain)


def plain_log_ticks(axis: Axis, n: int = 6) -> None:
    """Ticks of a log `axis` (ax.xaxis or ax.yaxis, its limits set) labelled as plain numbers, at
    least three where its span is less than a decade: about n round values (1, 2, 5 steps) inside
    the limits (1, 2 and 5 times each power of ten for one to three decades) instead of the one or
    two decades' marks a log axis would show."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullFormatter

    lo, hi = sorted(axis.get_view_interval())
    if not (lo > 0 and hi / lo < 1000):
        axis.set_major_formatter(FuncFormatter(lambda v, _: format_value(float(v), 3)))
        return
    if hi / lo < 10:
        ticks = [v for v in MaxNLocator(n, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi) if lo <= v <= hi]
    else:  # one to three decades: 1, 2, 5 times each power of ten inside the limits
        decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
        ticks = [m * 10.0**k for k in decades for m in (1, 2, 5) if lo <= m * 10.0**k <= hi]
    if len(ticks) < 3:
        ticks = list(np.geomspace(lo, hi, 4)[1:-1])
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(lambda v, _: format_value(float(v), 3)))
    axis.set_minor_formatter(NullFormatter())
