"""The mean-field flow on S^1 (d = 2) at finite beta, with exponentially small masses kept exactly
(MATH.md, "Why concentration lasts longer than guaranteed"; the method is described in `_flow`).

The parts: the field in the angle (`circle_field`), rho_0's graded quadrature toward the
separatrices (`tail`), the Eulerian patches at the separatrices (`patch`) and their Chebyshev tools
(`chebyshev`); the settings, the result and the set-up of a run (`_setup`), one step and its
bookkeeping (`_step`), the entry point and its passes (`_flow`).
"""

from ._flow import simulate_mean_field_circle
from ._setup import MeanFieldSettings, MeanFieldTrajectory, initial_separatrices

__all__ = ["MeanFieldSettings", "MeanFieldTrajectory", "initial_separatrices", "simulate_mean_field_circle"]
