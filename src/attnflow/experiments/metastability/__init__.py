"""`metastability`: the metastable time of N tokens mapped in (beta, N), and its two branches.

`experiment` holds its config, inputs (`metastability_inputs`), run, summary and EXPERIMENT; `points`
the unit of work (one point: a cloud kind, beta and N, integrated only as far as its clusters'
departure); `readings` what the points' parts say (each cloud's departure, a point's statistics);
`branches` the fits (finite-N branch per beta, the mean-field branch, the crossover); `summary` and
`figures` what a run shows.
"""

from .experiment import EXPERIMENT, MetastabilityConfig, metastability_inputs, run, summarize

__all__ = ["EXPERIMENT", "MetastabilityConfig", "metastability_inputs", "run", "summarize"]
