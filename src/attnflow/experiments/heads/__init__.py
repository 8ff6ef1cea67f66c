"""`heads`: a pretrained model's attention heads moving the real tokens of a sentence.

`experiment` holds its config and presets, the inputs made from it (`heads_inputs`), the units of
work (one part per head and the whole layer), run and summary (EXPERIMENT); `figures` its figure
(`plot_heads`) and WHOLE_LAYER, the `head` coordinate of the whole layer.
"""

from .experiment import (
    EXPERIMENT,
    PI_UNDEFINED_TOL,
    PRESETS,
    HeadsConfig,
    HeadsInputs,
    heads_inputs,
    layer_dynamics,
    pi_symmetric,
    resolve_checkpoint,
    run,
    summarize,
)
from .figures import HEADS_DIMS, WHOLE_LAYER, WHOLE_LAYER_STYLE, figures, plot_heads

__all__ = [
    "EXPERIMENT",
    "HEADS_DIMS",
    "PI_UNDEFINED_TOL",
    "PRESETS",
    "WHOLE_LAYER",
    "WHOLE_LAYER_STYLE",
    "HeadsConfig",
    "HeadsInputs",
    "figures",
    "heads_inputs",
    "layer_dynamics",
    "pi_symmetric",
    "plot_heads",
    "resolve_checkpoint",
    "run",
    "summarize",
]
