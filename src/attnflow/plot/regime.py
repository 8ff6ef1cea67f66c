"""The regime figure of `attnflow heads --text ... --figure`: each layer of a model on the (t, beta)
plane, t_l the time integrated after layer l and beta_l its heads' median fitted beta, beside the
theorem's window t <~ log beta (the region beta >= e^t, shaded).  Drawn from the plain numbers of
`attnflow.pretrained.regime` (a dict), not from live objects."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .style import DPI, NothingToPlot, new_figure, save

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["plot_regime"]


def _panel(ax: Axes, t: np.ndarray, beta: np.ndarray, labels: Sequence[object], title: str) -> None:
    """The layers at (t, beta) and the window beta >= e^t, on axes limited to the data."""
    hi = max(float(t.max()) * 1.08, 0.5)
    lo_b, hi_b = float(beta.min()) / 3, float(beta.max()) * 30
    grid = np.linspace(0.0, hi, 200)
    ax.fill_between(
        grid, np.exp(grid), hi_b, where=np.exp(grid) < hi_b, color="0.88", label="window t <~ log beta"
    )
    ax.plot(grid, np.exp(grid), color="black", lw=1.2, ls="--", label="t = log beta")
    ax.plot(t, beta, "o-", color="tab:blue", ms=3.5, lw=1, label="layer l at (t_l, beta_l)")
    for k in range(0, len(t), max(1, len(t) // 8)):
        ax.annotate(str(labels[k]), (t[k], beta[k]), fontsize=7, xytext=(2, 4), textcoords="offset points")
    ax.set_yscale("log")
    ax.set_xlim(0.0, hi)
    ax.set_ylim(lo_b, hi_b)
    ax.set_xlabel("t (integrated steps)")
    ax.set_title(title, fontsize=9)


def plot_regime(regime: Mapping[str, Any], path: str | Path, title: str = "", dpi: int = DPI) -> Path:
    """Draw `regime` (`Regime.to_dict()`: "times", "beta_layers", "layers") to the PNG `path`: all
    layers on the left, on the right the same from layer 1 on (t - h_0: the first step acts on the
    embeddings)."""
    t = np.asarray(regime["times"], dtype=float)
    beta = np.asarray([np.nan if b is None else b for b in regime["beta_layers"]], dtype=float)
    ok = np.isfinite(beta) & (beta > 0)
    if not ok.any():
        raise NothingToPlot("no layer has a fitted beta: nothing to place on the (t, beta) plane")
    labels = list(regime.get("layers", range(len(t))))
    fig, axes = new_figure(1, 2, (9.0, 3.8))
    idx = np.flatnonzero(ok)
    _panel(axes[0, 0], t[idx], beta[idx], [labels[k] for k in idx], "every layer")
    rest = idx[idx >= 1]
    if rest.size:
        _panel(axes[0, 1], t[rest] - t[0], beta[rest], [labels[k] for k in rest], "from layer 1 on (t - h_0)")
    axes[0, 0].set_ylabel("beta (median fitted over the heads)")
    axes[0, 0].legend(fontsize=7, loc="upper right")
    fig.suptitle(title or "layers against the window t <~ log beta", fontsize=10)
    path = Path(path)
    (written,) = save(fig, path.parent, path.stem, dpi, formats=("png",))
    return written
