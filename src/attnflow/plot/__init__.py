"""Figures from Datasets (never from live objects): the house style and the generic drawings.

`style`: colours, markers, titles, legends, saving as PNG (and PDF inside `figure_formats`).
`tokens`: snapshots of the tokens on the sphere and their animation.
`sweep`: the generic figure of a sweep (every per-point number against a grid axis).
`regime`: a model's layers on the (t, beta) plane beside the window t <~ log beta.

Each experiment draws its own figures in its module (`attnflow.experiments`), with these pieces;
`attnflow.experiments.plot_run` draws every figure of a run. Matplotlib is imported inside the
functions: `import attnflow.plot` stays light.
"""

from __future__ import annotations

from .animation import animate, token_figures
from .regime import plot_regime
from .style import (
    BETA_CMAP,
    DPI,
    FORMATS,
    SERIES_CMAP,
    FigureWarning,
    NothingToPlot,
    beta_curves,
    beta_label,
    beta_legend,
    config_value,
    figure_formats,
    fits_of,
    log_axis_plain_ticks,
    markevery,
    new_figure,
    pick,
    plain_log_ticks,
    positive,
    require,
    run_title,
    save,
    series_styles,
    ticks_at,
)
from .sweep import SWEEP_CAPTIONS, plot_sweep, sweep_variables
from .tokens import TOKEN_CAPTIONS, has_tokens, plot_snapshots

__all__ = [
    "BETA_CMAP",
    "DPI",
    "FORMATS",
    "SERIES_CMAP",
    "SWEEP_CAPTIONS",
    "TOKEN_CAPTIONS",
    "FigureWarning",
    "NothingToPlot",
    "animate",
    "beta_curves",
    "beta_label",
    "beta_legend",
    "config_value",
    "figure_formats",
    "fits_of",
    "has_tokens",
    "log_axis_plain_ticks",
    "markevery",
    "new_figure",
    "pick",
    "plain_log_ticks",
    "plot_regime",
    "plot_snapshots",
    "plot_sweep",
    "positive",
    "require",
    "run_title",
    "save",
    "series_styles",
    "sweep_variables",
    "ticks_at",
    "token_figures",
]
