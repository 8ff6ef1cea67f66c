"""The low-temperature kernel (`kernel="truncated"`): for each row only the keys near its maximum,
with a certified bound on what is dropped (the method is described in `_kernel`).

The kernel itself, gathering and evaluating the cells (`_kernel`); the geometry of a cloud and what
the kernel would cost (`_geometry`); the geometry kept while the tokens move less than its margin
(`_moves`).
"""

from ._geometry import (
    DEFAULT_CUTOFF,
    Geometry,
    candidate_counts,
    candidate_pairs,
    cloud_geometry,
    kept_radius,
    sample_size,
    sampled_counts,
)
from ._kernel import velocity_truncated
from ._moves import MARGIN
from ._moves import clear as forget_geometry

__all__ = [
    "DEFAULT_CUTOFF",
    "MARGIN",
    "Geometry",
    "candidate_counts",
    "candidate_pairs",
    "cloud_geometry",
    "forget_geometry",
    "kept_radius",
    "sample_size",
    "sampled_counts",
    "velocity_truncated",
]
