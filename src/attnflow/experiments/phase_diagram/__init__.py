"""`phase-diagram`: clusters over (t, beta), many clouds per point (`experiment`: config, presets,
inputs, run, summary, EXPERIMENT; `figures`: the heatmaps)."""

from ...science.clusters import GLPR_EPS
from .experiment import (
    CURVES,
    EXPERIMENT,
    PRESETS,
    VARY_KEYS,
    PhaseDiagramConfig,
    PhaseInputs,
    first_time,
    measure,
    panels,
    phase_inputs,
    run,
    summarize,
)
from .figures import CAPTIONS, figures

__all__ = [
    "CAPTIONS",
    "CURVES",
    "EXPERIMENT",
    "GLPR_EPS",
    "PRESETS",
    "VARY_KEYS",
    "PhaseDiagramConfig",
    "PhaseInputs",
    "figures",
    "first_time",
    "measure",
    "panels",
    "phase_inputs",
    "run",
    "summarize",
]
