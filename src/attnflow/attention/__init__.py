"""Single-head attention weights on the sphere: B = Q^T K, A = V B^T and their spectra (MATH.md);
the worked examples, seeded random weights (ENSEMBLES) and weights from a file; WEIGHTS, the named
ones. `core` holds Attention and its spectra, `weights` the worked examples, the random weights and
WEIGHTS, `files` the weights read from an .npz (`load_attention`); every name is importable from here.
"""

from .core import (
    COND_B_MAX,
    MAX_ENTRY,
    SYMMETRY_TOL,
    TOP_TOL,
    Attention,
    EigenSpace,
    Spectrum,
    attention_from_A,
    check_attention,
    spectrum_of,
    top_eigenspace,
)
from .files import load_attention
from .weights import (
    COND_SPREAD,
    ENSEMBLES,
    GPT2_STD,
    MAX_DRAWN_D,
    MIN_GAP,
    WEIGHTS,
    WeightsFamily,
    ensemble_attention,
    random_attention,
    worked_example,
)

__all__ = [
    "COND_B_MAX",
    "COND_SPREAD",
    "ENSEMBLES",
    "GPT2_STD",
    "MAX_DRAWN_D",
    "MAX_ENTRY",
    "MIN_GAP",
    "SYMMETRY_TOL",
    "TOP_TOL",
    "WEIGHTS",
    "Attention",
    "EigenSpace",
    "Spectrum",
    "WeightsFamily",
    "attention_from_A",
    "check_attention",
    "ensemble_attention",
    "load_attention",
    "random_attention",
    "spectrum_of",
    "top_eigenspace",
    "worked_example",
]
