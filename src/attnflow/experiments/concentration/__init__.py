"""`concentration`: W2(rho^beta_t, Pi_# rho_0) against t for several beta, converged in N.

`experiment` holds its config, the inputs made from it (`concentration_inputs`), run and summary
(EXPERIMENT); `levels` the units of work (one (beta, N) level), the inputs' record and a ladder's
record; `zero` the zero-temperature curve; `graded` init = graded's search and clouds; `evidence`
what a run gives the claims table (each beta's quantities with their errors, the time-step probe);
`figures` its figures and captions; `presets` its named presets.
"""

from .dataset import summarize
from .experiment import EXPERIMENT, LADDER_KEYS, ConcentrationConfig, concentration_inputs, run

__all__ = ["EXPERIMENT", "LADDER_KEYS", "ConcentrationConfig", "concentration_inputs", "run", "summarize"]
