"""simulate's arguments, one place per concern: the solver settings of each method (`options`),
several Attention (or Dynamics) objects differing in beta (`Temperatures`) and the noise's seed.

Kept apart from integrate.py (the set-up and the run) so that each stays small.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._checks import check_positive
from ..attention import Attention
from ..flow import Dynamics, check_model
from ..kernels import plain

# the solver settings of each method (simulate's `options`) with their defaults; first_step None:
# chosen by the Hairer-Norsett-Wanner starting-step rule; norm: how the tokens' local errors make the
# step's error (steppers.ERROR_NORMS)
_FIXED_OPTIONS: dict[str, Any] = {"max_steps": 10_000_000}
_ADAPTIVE_OPTIONS: dict[str, Any] = {
    "rtol": 1e-6,
    "atol": 1e-9,
    "max_steps": 10_000_000,
    "first_step": None,
    "norm": "rms",
}
#: the adaptive method's error norms over the tokens (steppers._error_norm)
ERROR_NORMS = ("rms", "max")
OPTIONS: dict[str, dict[str, Any]] = {
    "euler": _FIXED_OPTIONS,
    "heun": _FIXED_OPTIONS,
    "rk4": _FIXED_OPTIONS,
    "adaptive": _ADAPTIVE_OPTIONS,
}


@dataclass(frozen=True)
class Temperatures:
    """Who moves the clouds: the Attention or Dynamics (the first of a list; a Dynamics that is the
    paper's flow is its Attention) and one beta per cloud in place of att.beta (None: att.beta for
    every cloud)."""

    att: Attention | Dynamics
    betas: list[float] | None = None

    @property
    def count(self) -> int | None:
        """The number of clouds the betas ask for (None: any)."""
        return None if self.betas is None else len(self.betas)

    def collapsed(self) -> Temperatures:
        """One beta for all: att at that beta, no per-cloud betas."""
        if self.betas is not None and len(set(self.betas)) == 1:
            return Temperatures(self.att.with_beta(self.betas[0]))
        return self


def check_attentions(att: object) -> Temperatures:
    """One Attention or Dynamics, or a non-empty list of them that differ only in beta (one per
    cloud). A Dynamics that is the paper's flow (`Dynamics.single`) is its Attention."""
    if isinstance(att, (Attention, Dynamics)):
        return Temperatures(plain(att))
    if not isinstance(att, Sequence) or isinstance(att, str) or not att:
        return Temperatures(check_model(att))  # the TypeError naming what was expected
    atts = [plain(check_model(a, f"att[{i}]")) for i, a in enumerate(att)]
    first = atts[0]
    for i, a in enumerate(atts[1:], start=1):
        why = _difference(first, a)
        if why:
            raise ValueError(
                f"att[{i}] has another {why} than att[0]: a list of Attention (or Dynamics) objects may "
                "differ only in beta (build it as [att.with_beta(b) for b in betas])"
            )
    betas = [a.beta for a in atts]
    if len(set(betas)) > 1 and not all(math.isfinite(b) for b in betas):
        raise ValueError(
            f"att: a list mixing beta = inf with other betas cannot run in one call, got {betas}"
        )
    return Temperatures(first, betas)


def _difference(first: Attention | Dynamics, other: Attention | Dynamics) -> str | None:
    """What differs between two models besides beta (None: nothing)."""
    if type(first) is not type(other):
        return "kind of model (an Attention and a Dynamics)"
    if isinstance(first, Dynamics):
        return first.same_but_beta(other)  # type: ignore[arg-type]
    for m in ("Q", "K", "V"):
        if not np.array_equal(getattr(other, m), getattr(first, m)):
            return m
    return None


def noise_seed(seed: object) -> int:
    """The seed of the noise's generator: an int >= 0 (None: 0), or an int drawn from a NumPy
    Generator; ValueError naming `seed` otherwise."""
    if seed is None:
        return 0
    if isinstance(seed, np.random.Generator):
        return int(seed.integers(2**63 - 1))
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2**63:
        raise ValueError(f"seed must be an integer in [0, 2^63), a numpy Generator or None, got {seed!r}")
    return int(seed)


def solver_options(method: str, options: object) -> dict[str, Any]:
    """`options` for `method` completed with the defaults of OPTIONS[method], each checked; a key the
    method does not take is a ValueError naming it."""
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise TypeError(f"options must be a dict of solver settings or None, got {type(options).__name__}")
    allowed = OPTIONS[method]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(
            f"options {unknown} are not settings of method {method!r}, which takes {sorted(allowed)}"
        )
    out: dict[str, Any] = {**allowed, **options}
    for key in ("rtol", "atol"):
        if key in out:
            out[key] = check_positive(out[key], f"options['{key}']")
    out["max_steps"] = int(check_positive(out["max_steps"], "options['max_steps']", integer=True))
    if out.get("first_step") is not None:
        out["first_step"] = check_positive(out["first_step"], "options['first_step']")
    if "norm" in out and out["norm"] not in ERROR_NORMS:
        raise ValueError(f"options['norm'] must be one of {list(ERROR_NORMS)}, got {out['norm']!r}")
    return out
