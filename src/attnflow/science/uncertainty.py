"""Honest uncertainties of per-beta quantities: what a number about the theorem is worth.

The error of a quantity q of one beta (t*, min W2, a crossing time) is the sum of

- `N`: the last difference between levels of its N ladder (`attnflow.science.convergence`);
- `time_step`: how far q moves when the integration is repeated with tighter tolerances (10x, or
  half the fixed step) on one probe level (`time_step_change`);
- `grid`: where the time was read: the root tolerance of a time located on the continuous
  solution (`attnflow.science.located`), the saved step for one read off the samples
  (`attnflow.science.curves`), the cubic-against-parabola difference for min W2's value;
- `flatness` (the time of a minimum only): the half-width of the band W2 <= (1 + tol) min W2 with
  tol the relative error of min W2 itself: the times the curve cannot be told from its minimum at;
- `seeds` (random clouds only): the standard error of the mean over the seeds.

These are estimates of biases, not independent random errors: they add (not in quadrature). A
quantity without a finite N error (one level) has no finite error and is not converged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, SupportsFloat

import numpy as np

from .curves import Minimum, band

__all__ = ["ERROR_PARTS", "Measured", "finite", "flatness", "measured", "time_step_change"]

#: the parts of an error, in the order they are listed
ERROR_PARTS = ("N", "time_step", "grid", "flatness", "seeds")


def finite(x: SupportsFloat | str | None) -> float:
    """x as a finite float, NaN where it is None, not a number or not finite."""
    if x is None:
        return math.nan
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v if math.isfinite(v) else math.nan


@dataclass(frozen=True)
class Measured:
    """A per-beta quantity with its error: value, error (the sum of `parts`, name -> error, ERROR_PARTS),
    converged (in N, judged at `tol`, the largest change allowed between doublings, absolute) and why
    not (`reason`)."""

    value: float
    error: float
    converged: bool
    reason: str = ""
    tol: float = math.nan
    parts: Mapping[str, float] = field(default_factory=dict)

    @property
    def usable(self) -> bool:
        """Converged with a finite value and error: a number about the theorem."""
        return self.converged and math.isfinite(self.value) and math.isfinite(self.error)

    def to_dict(self) -> dict[str, object]:
        """{value, error, converged, reason, tol, error_parts} with None for undefined numbers."""

        def plain(x: float) -> float | None:
            return float(x) if math.isfinite(x) else None

        return {
            "value": plain(self.value),
            "error": plain(self.error),
            "converged": bool(self.converged),
            "reason": self.reason,
            "tol": plain(self.tol),
            "error_parts": {k: plain(v) for k, v in self.parts.items()},
        }


def measured(
    record: Mapping[str, Any], time_step: float = 0.0, flat: float = 0.0, seeds: float = 0.0
) -> Measured:
    """A quantity of judge_ladder (record: {value, error, converged, reason, tol, grid}) with its
    time-step error, flatness and seed spread added."""
    parts = {
        "N": finite(record.get("error")),
        "time_step": finite(time_step),
        "grid": finite(record.get("grid", 0.0)),
        "flatness": finite(flat),
        "seeds": finite(seeds),
    }
    known = [v for k, v in parts.items() if k != "N" and math.isfinite(v)]
    total = parts["N"] + sum(known)
    return Measured(
        value=finite(record.get("value")),
        error=total,
        converged=bool(record.get("converged")),
        reason=str(record.get("reason") or ""),
        tol=finite(record.get("tol")),
        parts=parts,
    )


def time_step_change(kind: str, base: float, tight: float, value: float) -> float:
    """The time-step error of a quantity of this kind at `value`, from a probe that measured it as
    `base` with the run's integration and `tight` with tighter tolerances: |tight - base| for a time;
    for a distance the same relative change, times |value| (NaN where the probe has no value)."""
    base, tight, value = finite(base), finite(tight), finite(value)
    change = abs(tight - base)
    if kind == "time":
        return change
    return change / abs(base) * abs(value) if base else math.nan


def flatness(t: np.ndarray, w: np.ndarray, minimum: Minimum, error: float) -> float:
    """The half-width of the band around `minimum` of the curve w (T,) on t (T,) where w stays within
    `error` of the minimum value (its own error): the uncertainty of the minimum's time that its
    flatness causes. 0 without a finite positive error."""
    if not (math.isfinite(error) and error > 0 and minimum.value > 0) or minimum.edge:
        return 0.0
    return band(t, w, minimum, error / minimum.value).half_width
