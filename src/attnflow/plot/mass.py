"""The mass figure: the fraction of tokens near the top eigenspaces of A and V against t, one line
per beta (drawn by the terminal and the concentration experiments)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .._text import format_value
from .style import (
    DPI,
    ZERO_TEMPERATURE_STYLE,
    beta_legend,
    beta_line,
    beta_status,
    config_value,
    markevery,
    new_figure,
    positive,
    require,
    run_title,
    save,
    series_styles,
)

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["MASS_CAPTION", "plot_mass"]

#: caption of `plot_mass`
MASS_CAPTION = (
    "Mass near the top eigenspaces",
    "Fraction of tokens within ε of the top eigenspaces of A and of V against t.",
)


def plot_mass(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """Mass fractions near the top eigenspaces of A and V against t, one line per beta; a Lyapunov
    panel (log y) when `lyapunov` is present; terminal times marked when `terminal_time` is.

    Needs `mass_A`, `mass_V` (beta, time); uses `mass_V_magnitude`, `lyapunov` (beta, time),
    `terminal_time` (beta).  Writes mass.png and mass.pdf.
    """
    dims = {v: ("beta", "time") for v in ("mass_A", "mass_V", "mass_V_magnitude", "lyapunov")}
    require(ds, ["mass_A", "mass_V"], "plot_mass", dims)
    t = np.asarray(ds["time"].values, dtype=float)
    betas = np.asarray(ds["beta"].values, dtype=float)
    styles, status = series_styles(len(betas)), beta_status(ds)
    eps = config_value(ds, "eps", "epsilon")
    within = f"within ε = {format_value(eps)}" if isinstance(eps, int | float) else "within ε"
    panels = [
        ("mass_A", f"mass {within} of A's top eigenspace"),
        ("mass_V", f"mass {within} of V's top eigenspace (largest Re)"),
    ]
    if "mass_V_magnitude" in ds.variables:
        panels.append(("mass_V_magnitude", f"mass {within} of V's top eigenspace (largest |λ|)"))
    if "lyapunov" in ds.variables:
        panels.append(("lyapunov", r"Lyapunov functional $\int |P_1^\perp x|^2\, d\rho_t$"))
    fig, axes = new_figure(1, len(panels), (4.3 * len(panels) + 0.8, 4.4))
    tt = np.asarray(ds["terminal_time"].values, dtype=float) if "terminal_time" in ds.variables else None
    for ax, (var, subtitle) in zip(axes[0], panels, strict=True):
        vals = ds[var].transpose("beta", "time").values
        for i, b in enumerate(betas):
            y = positive(vals[i]) if var == "lyapunov" else vals[i]
            label, style = beta_line(float(b), styles[i], str(status[i]))
            ax.plot(t, y, label=label, markevery=markevery(len(t)), **style)
            if tt is not None and var != "lyapunov" and np.isfinite(tt[i]):
                ax.axvline(tt[i], color=styles[i]["color"], ls=styles[i]["linestyle"], lw=0.9, alpha=0.8)
        if var == "lyapunov" and "lyapunov_zero" in ds.variables and ds["lyapunov_zero"].dims == ("time",):
            ax.plot(
                t,
                positive(ds["lyapunov_zero"].values),
                label="β = ∞ (zero temperature)",
                **ZERO_TEMPERATURE_STYLE,
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
    beta_legend(fig, axes[0][0], betas)
    what = "Mass near the top eigenspaces of A and V"
    if tt is not None:
        what += " (vertical lines: terminal times)"
    fig.suptitle(run_title(ds, what))
    return save(fig, outdir, "mass", dpi)
