"""What an experiment needs of its weights Q, K, V, checked when its config is made.

Each experiment's config class lists its needs as data (`needs`, a tuple of `Need`); the config
check computes each once from the run's Attention (cheap: d x d spectra, the same Attention the run
then uses) and refuses the config in one line: the weights, what fails with its numbers, what the
experiment needs it for, and what to do (a weights option, another experiment that runs without
it, `attnflow check` for the numbers of a weights file).

    INVERTIBLE_B   B = Q^T K invertible: the zero-temperature flow moves at speed 1/|B^T x|
    LIMIT          the limit Pi of the zero-temperature flow exists: A symmetric, or A's top
                   eigenvalues real and not defective (the spectral projector, docs/math.md)
    REFERENCE      the N = infinity reference exists (d = 2 or 3, A symmetric, a one-dimensional top
                   eigenspace): for configs with init = quadrature only
    SOURCES        d = 3 with init = graded: A symmetric with distinct eigenvalues, B and V symmetric
                   under the reflection through u_2^perp (dynamics.sources locates the sources there)

A new need is a function Attention -> problem (or None) and one `Need` line here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..attention import COND_B_MAX, WEIGHTS
from ..dynamics.reference import reference_problem
from ..dynamics.sources import sources_problem
from ..dynamics.zero_temperature import limit_problem
from ..measures.registry import or_list

if TYPE_CHECKING:
    from ..attention import Attention


class WeightsKeys(Protocol):
    """What the needs read of a config (experiments.model.ModelConfig has it; a Protocol, so that
    this module, which model.py imports, imports nothing of the experiments)."""

    weights: str
    symmetric: bool


__all__ = ["INVERTIBLE_B", "LIMIT", "NEEDS", "REFERENCE", "SOURCES", "Need", "check_needs", "needs_of"]


@dataclass(frozen=True)
class Need:
    """One condition an experiment puts on its weights.

    name: a stable key ("invertible-B"); what: the condition in words ("an invertible B = Q^T K");
    why: what of the experiment depends on it; problem(att) -> None when met, else what fails with
    its numbers; when(config) -> whether the need applies to a config (None: always).
    """

    name: str
    what: str
    why: str
    problem: Callable[[Attention], str | None]
    when: Callable[[WeightsKeys], bool] | None = None

    def applies(self, config: WeightsKeys) -> bool:
        return self.when is None or bool(self.when(config))


def _singular_B(att: Attention) -> str | None:
    if att.cond_B <= COND_B_MAX:
        return None
    return f"B = Q^T K is singular (condition number {att.cond_B:.3g} > {COND_B_MAX:.0e})"


def _quadrature(config: WeightsKeys) -> bool:
    return getattr(config, "init", None) == "quadrature"


INVERTIBLE_B = Need(
    "invertible-B",
    "an invertible B = Q^T K",
    "the zero-temperature flow moves at speed 1/|B^T x|",
    _singular_B,
)
LIMIT = Need(
    "limit",
    "the limit Pi of the zero-temperature flow",
    "W2 is measured to Pi_# rho_0",
    limit_problem,
)
REFERENCE = Need(
    "reference",
    "the N = infinity reference",
    "init = quadrature shows the reference alone",
    reference_problem,
    _quadrature,
)
SOURCES = Need(
    "sources",
    "the symmetry that locates the sources in d = 3",
    "init = graded grades rho_0 toward the flow's sources and separatrix",
    sources_problem,
    lambda config: getattr(config, "init", None) == "graded",
)
#: every need by name
NEEDS = {need.name: need for need in (INVERTIBLE_B, LIMIT, REFERENCE, SOURCES)}


def needs_of(Config: type) -> tuple[Need, ...]:
    """The needs a config class declares (none for a config without weights)."""
    return tuple(getattr(Config, "needs", ()))


def check_needs(config: WeightsKeys, att: Attention) -> None:
    """ValueError (one line) naming the first need of config's experiment that `att` misses."""
    for need in needs_of(type(config)):
        if not need.applies(config):
            continue
        problem = need.problem(att)
        if problem is not None:
            raise ValueError(_refusal(config, need, problem))


def _refusal(config: WeightsKeys, need: Need, problem: str) -> str:
    experiment = getattr(config, "experiment", "this experiment")
    fixes = _weights_fixes(config, need) + _other_experiments(need)
    weights = config.weights
    where = f"; `attnflow check {weights}` gives the numbers" if weights not in WEIGHTS else ""
    return (
        f"weights = {weights}: {problem}, and {experiment} needs {need.what} ({need.why}): "
        f"use {or_list(fixes)}{where}"
    )


def _weights_fixes(config: WeightsKeys, need: Need) -> list[str]:
    """What to change of the weights keys."""
    if need is SOURCES:
        return ["init = quadrature", "other weights"]
    if config.weights not in WEIGHTS:
        return ["other weights"]
    if "symmetric" in WEIGHTS[config.weights].keys and not config.symmetric:
        return ["symmetric = true", "another weights_seed"]
    if need is REFERENCE:
        return ["init = fibonacci or uniform (a token cloud)"]

    return ["other weights"]


def _other_experiments(need: Need) -> list[str]:
    """The experiments that run without `need` (every experiment with weights imported: only on a
    refusal)."""
    from . import REGISTRY

    others = [
        f"the {name} experiment"
        for name, exp in REGISTRY.items()
        if "weights" in exp.Config.model_fields and need not in needs_of(exp.Config)
    ]
    return others
