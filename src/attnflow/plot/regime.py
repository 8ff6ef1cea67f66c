"""The regime figure of `attnflow heads --text ... --figure`: each layer of a model on the (t, beta)
plane, t_l the time integrated after layer l and beta_l its heads' median fitted beta, beside the
theorem's window t <~ log beta (the region beta >= e^t, shaded).  Drawn from the plain numbers of
`attnflow.pretrained.regime` (a dict), not from live objects."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .style import DPI, NothingToPlot, new_figure, save

__all__ = ["plot_regime"]


def plot_regime(regime: Mapping[str, Any], path: str | Path, title: str = "", dpi: int = DPI) -> Path:
    """Draw `regime` (`Regime.to_dict()`, "times" and "beta_layers" per layer) to the PNG `path`."""
    t = np.asarray(regime["times"], dtype=float)
    beta = np.asarray([np.nan if b is None else b for b in regime["beta_layers"]], dtype=float)
    ok = np.isfinite(beta) & (beta > 0)
    if not ok.any():
        raise NothingToPlot("no layer has a fitted beta: nothing to place on the (t, beta) plane")
    fig, axes = new_figure(1, 1, (6.0, 4.2))
    ax = axes[0, 0]
    hi = max(float(t.max()), float(np.log(beta[ok].max()))) * 1.15 + 0.1
    grid = np.linspace(0.0, hi, 200)
    top = max(float(beta[ok].max()), float(np.exp(hi))) * 1.5
    ax.fill_between(grid, np.exp(grid), top, color="0.88", label="window t <~ log beta")
    ax.plot(grid, np.exp(grid), color="black", lw=1.2, ls="--", label="t = log beta")
    ax.plot(t[ok], beta[ok], "o-", color="tab:blue", ms=4, lw=1, label="layer l: (t_l, beta_l)")
    for k in np.flatnonzero(ok)[:: max(1, int(ok.sum()) // 10)]:
        ax.annotate(str(regime.get("layers", range(len(t)))[k]), (t[k], beta[k]), fontsize=7, xytext=(3, 3),
                    textcoords="offset points")  # fmt: skip
    ax.set_yscale("log")
    ax.set_xlim(0.0, hi)
    ax.set_ylim(min(0.8, float(beta[ok].min()) / 1.5), top)
    ax.set_xlabel("t (integrated step sum h_l)")
    ax.set_ylabel("beta (median fitted, per layer)")
    ax.set_title(title or "layers against the window t <~ log beta", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    path = Path(path)
    (written,) = save(fig, path.parent, path.stem, dpi, formats=("png",))
    return written
