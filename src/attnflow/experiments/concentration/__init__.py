"""`concentration`: W2(rho^beta_t, Pi_# rho_0) against t for several beta, converged in N.

`experiment` holds its config, run and summary (EXPERIMENT); `levels` the units of work (one
(beta, N) level, the zero-temperature curve, the separatrix search); `figures` its figures and
captions; `presets` its named presets.
"""

from .experiment import EXPERIMENT, LADDER_KEYS, ConcentrationConfig, run, summarize

__all__ = ["EXPERIMENT", "LADDER_KEYS", "ConcentrationConfig", "run", "summarize"]
