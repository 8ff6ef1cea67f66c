"""simulate's arguments, one place per concern: the solver settings of each method (`options`),
several Attention objects differing in beta, and the deprecated flat keywords.

Kept apart from integrate.py (the steppers and the run) so that each stays small.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._checks import check_positive
from ..attention import Attention, check_attention

# the solver settings of each method (simulate's `options`) with their defaults; first_step None:
# chosen by the Hairer-Norsett-Wanner starting-step rule
_FIXED_OPTIONS: dict[str, Any] = {"max_steps": 10_000_000}
_ADAPTIVE_OPTIONS: dict[str, Any] = {"rtol": 1e-6, "atol": 1e-9, "max_steps": 10_000_000, "first_step": None}
OPTIONS: dict[str, dict[str, Any]] = {
    "euler": _FIXED_OPTIONS,
    "heun": _FIXED_OPTIONS,
    "rk4": _FIXED_OPTIONS,
    "adaptive": _ADAPTIVE_OPTIONS,
}
DEPRECATED_KEYWORDS = ("rtol", "atol", "max_steps", "betas")  # simulate's old flat parameters


def check_betas(betas: Any, X0n) -> Any:
    """betas as a 1-D float64 array of finite values > 0 matching the batch of X0n."""
    try:
        arr = np.asarray(betas, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"betas must be a sequence of numbers, got {betas!r}") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"betas must be a non-empty 1-D sequence, got shape {arr.shape}")
    if not (np.isfinite(arr).all() and (arr > 0).all()):
        raise ValueError(f"every beta in betas must be finite and > 0, got {arr.tolist()}")
    if X0n.ndim == 3 and X0n.shape[0] != arr.size:
        raise ValueError(f"X0 holds {X0n.shape[0]} clouds but betas has {arr.size} entries")
    return arr


def check_attentions(att: Any) -> tuple[Attention, list[float] | None]:
    """One Attention, or a non-empty list of Attention objects that differ only in beta (one per
    cloud).  Returns (the first, the list's betas or None)."""
    if isinstance(att, Attention):
        return att, None
    if not isinstance(att, Sequence) or isinstance(att, str) or not att:
        return check_attention(att), None  # the TypeError naming what was expected
    atts = [check_attention(a, f"att[{i}]") for i, a in enumerate(att)]
    first = atts[0]
    for i, a in enumerate(atts[1:], start=1):
        for m in ("Q", "K", "V"):
            if not np.array_equal(getattr(a, m), getattr(first, m)):
                raise ValueError(
                    f"att[{i}] has another {m} than att[0]: a list of Attention objects may differ "
                    "only in beta (build it as [att.with_beta(b) for b in betas])"
                )
    betas = [a.beta for a in atts]
    if len(set(betas)) > 1 and not all(math.isfinite(b) for b in betas):
        raise ValueError(
            f"att: a list mixing beta = inf with other betas cannot run in one call, got {betas}"
        )
    return first, betas


def solver_options(method: str, options: Any) -> dict[str, Any]:
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
    out = {**allowed, **options}
    for key in ("rtol", "atol"):
        if key in out:
            out[key] = check_positive(out[key], f"options['{key}']")
    out["max_steps"] = int(check_positive(out["max_steps"], "options['max_steps']", integer=True))
    if out.get("first_step") is not None:
        out["first_step"] = check_positive(out["first_step"], "options['first_step']")
    return out


def deprecated_keywords(method: str, options: Any, kw: dict[str, Any]) -> tuple[Any, Any]:
    """(options, betas) with simulate's old flat rtol=, atol=, max_steps= and betas= folded in, each
    with a DeprecationWarning; any other keyword is a TypeError as Python gives it."""
    for key in kw:
        if key not in DEPRECATED_KEYWORDS:
            raise TypeError(f"simulate() got an unexpected keyword argument {key!r}")
    flat = {k: kw[k] for k in ("rtol", "atol", "max_steps") if k in kw}
    if flat:
        warnings.warn(
            f"simulate({', '.join(f'{k}=' for k in flat)}...) is deprecated: pass the solver settings "
            f"together, options={{{', '.join(repr(k) + ': ...' for k in flat)}}}",
            DeprecationWarning,
            stacklevel=3,
        )
        options = {} if options is None else dict(options)
        clash = sorted(set(flat) & set(options))
        if clash:
            raise ValueError(f"{clash} given both flat and in options: give them in options only")
        # as before: the flat tolerances were ignored by the fixed-step methods
        options.update({k: v for k, v in flat.items() if k in OPTIONS[method]})
    betas = kw.get("betas")
    if betas is not None:
        warnings.warn(
            "simulate(betas=...) is deprecated: it overrides att.beta; pass one Attention per cloud, "
            "simulate(X0, [att.with_beta(b) for b in betas], times)",
            DeprecationWarning,
            stacklevel=3,
        )
    return options, betas
