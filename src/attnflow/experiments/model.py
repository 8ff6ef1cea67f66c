"""The weights Q, K, V and the initial measure rho_0 of a run: config keys shared by the experiments
that integrate the flow, and the two functions that build them.

    weights = "worked-example"      d = 3 example of docs/math.md (the default)
              "worked-example-2d"   d = 2 example of docs/math.md
              "random"              seeded by `weights_seed`, dimension `d` (default 3); V = S B^{-T}
                                    with S symmetric (the theorem applies) unless symmetric = false
              "path/to/file.npz"    arrays Q, K, V (d x d)
    init    = "uniform"     N i.i.d. tokens from rho_0 (seeded), equal weights
              "fibonacci"   the Fibonacci lattice on S^2 (d = 3 only), equal weights
              "quadrature"  deterministic nodes (equispaced on S^1, Fibonacci on S^2) whose weights
                            carry rho_0 (docs/math.md, "Weighted measures")
              "graded"      d = 2, `concentration` only: nodes graded logarithmically toward the
                            separatrices of the flow at each beta (attnflow.dynamics.separatrix), weights
                            carrying rho_0; the levels of the N ladder are the grading's levels
    density = "uniform" or "vmf" (von Mises-Fisher of concentration `kappa` around A's top
              eigenvector u_1): rho_0 itself.

d follows from the weights; a key that does not exist in that d is a config error naming it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np
from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from .config import ExperimentConfig

if TYPE_CHECKING:
    from ..attention import Attention

NAMED_WEIGHTS = {"worked-example": 3, "worked-example-2d": 2, "random": None}
RANDOM_D = 3  # dimension of weights = "random" when `d` is not given
INITS = ("uniform", "fibonacci", "quadrature", "graded")
QUADRATURE_D = (2, 3)  # dimensions with deterministic nodes (sphere.quadrature)


class ModelConfig(ExperimentConfig):
    """Keys of the weights (Q, K, V) and of rho_0, shared by every experiment that runs the flow."""

    weights: str = Field(
        "worked-example",
        description="Q, K, V: worked-example (d = 3), worked-example-2d, random (weights_seed, d, "
        "symmetric) or a path to an .npz holding Q, K, V",
    )
    d: PositiveInt | None = Field(
        None, description="dimension of weights = random (default 3); other weights fix d themselves"
    )
    weights_seed: NonNegativeInt = Field(0, description="seed of weights = random")
    symmetric: bool = Field(
        True, description="weights = random: A = V B^T symmetric with a gap (the theorem applies)"
    )
    init: Literal["uniform", "fibonacci", "quadrature", "graded"] = Field(
        "uniform",
        description="rho_0 as tokens: uniform (i.i.d., seeded), fibonacci (lattice, d = 3), "
        "quadrature (deterministic nodes with weights, d = 2 or 3) or graded (nodes graded toward "
        "the separatrices at each beta, d = 2, concentration only)",
    )
    density: Literal["uniform", "vmf"] = Field(
        "uniform", description="rho_0: uniform, or vmf (von Mises-Fisher around u_1, concentration kappa)"
    )
    kappa: PositiveFloat = Field(2.0, description="concentration of density = vmf")

    # whether the experiment builds rho_0 per beta (init = graded): set by the experiments that do
    graded_init: ClassVar[bool] = False

    @model_validator(mode="after")
    def _model_keys(self):
        d = model_dimension(self)  # loads an .npz once, with its errors
        if self.init == "fibonacci" and d != 3:
            raise ValueError(
                f"init = fibonacci is the Fibonacci lattice on S^2 (d = 3); these weights have d = {d}"
            )
        if self.init == "quadrature" and d not in QUADRATURE_D:
            raise ValueError(
                f"init = quadrature has nodes for d = 2 (equispaced) and d = 3 (Fibonacci) only; these "
                f"weights have d = {d}: use init = uniform"
            )
        if self.init == "graded" and d != 2:
            raise ValueError(
                f"init = graded grades nodes toward the separatrices on S^1 (d = 2); these weights have "
                f"d = {d}: use init = quadrature"
            )
        if self.init == "graded" and not self.graded_init:
            raise ValueError(
                f"init = graded builds rho_0 per beta, which only the concentration experiment does; "
                f"{getattr(self, 'experiment', 'this experiment')} needs init = quadrature or uniform"
            )
        if self.init == "fibonacci" and self.density != "uniform":
            raise ValueError(
                "init = fibonacci is a uniform lattice: for density = vmf use init = quadrature or uniform"
            )
        return self


def model_dimension(config: ModelConfig) -> int:
    """d of the run's weights (ValueError naming `weights` or `d` when they disagree)."""
    name = config.weights
    if name in NAMED_WEIGHTS:
        fixed = NAMED_WEIGHTS[name]
        if fixed is None:
            return config.d or RANDOM_D
        if config.d is not None and config.d != fixed:
            raise ValueError(
                f"weights = {name} has d = {fixed}; d = {config.d} contradicts it (leave d unset)"
            )
        return fixed
    if config.d is not None:
        raise ValueError(f"d is set by the weights file {name}; leave d unset")
    return _loaded(name).d


def _loaded(path: str) -> Attention:
    """The weights of the file `path`, as it holds them now (the cache is keyed by its content, the
    digest the parts' fingerprint covers: an edited file is read again)."""
    from ..io import content_digest

    if not Path(path).is_file():
        raise ValueError(
            f"weights = {path!r}: no such file; use worked-example, worked-example-2d, random or a path "
            "to an .npz holding Q, K, V"
        )
    return _load(path, content_digest(path))


@lru_cache(maxsize=8)
def _load(path: str, digest: str) -> Attention:
    from ..attention import load_attention

    return load_attention(path)


def attention_of(config: ModelConfig, beta: float) -> Attention:
    """The run's Attention at inverse temperature beta (inf allowed)."""
    from ..attention import random_attention, worked_example

    name = config.weights
    if name == "worked-example":
        att = worked_example(1.0, d=3)
    elif name == "worked-example-2d":
        att = worked_example(1.0, d=2)
    elif name == "random":
        att = random_attention(model_dimension(config), config.weights_seed, symmetric=config.symmetric)
    else:
        att = _loaded(name)
    return att.with_beta(beta)


def describe_model(config: ModelConfig) -> str:
    """One line naming the weights and rho_0, for attrs and titles."""
    d = model_dimension(config)
    w = config.weights
    if w == "random":
        w = f"random (seed {config.weights_seed}, {'symmetric A' if config.symmetric else 'fully random'})"
    rho = (
        "uniform" if config.density == "uniform" else f"von Mises-Fisher around u_1, kappa = {config.kappa:g}"
    )
    return f"weights {w}, d = {d}; rho_0 {rho} as {config.init} tokens"


def initial_measure(
    config: ModelConfig, N: int, att: Attention, seed: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """rho_0 as (X0 (N, d), weights (N,) or None for equal weights)."""
    from ..measures.sphere import fibonacci_sphere, quadrature, sample_uniform, sample_vmf

    d = att.d
    u1 = att.spectrum().top.basis[:, 0]
    if config.init == "graded":
        raise ValueError("init = graded depends on beta: build rho_0 with separatrix.mean_field_quadrature")
    if config.init == "quadrature":
        X, w = quadrature(N, d, density_of(config, att))
        return X, (None if config.density == "uniform" else w)
    if config.init == "fibonacci":
        return fibonacci_sphere(N), None
    if config.density == "vmf":
        return sample_vmf(N, u1, config.kappa, seed=seed), None
    return sample_uniform(N, d, seed=seed), None


def density_of(config: ModelConfig, att: Attention) -> Callable[[np.ndarray], np.ndarray] | None:
    """rho_0's density w.r.t. the uniform law, X (N, d) -> (N,), for the quadratures (None: uniform)."""
    from ..measures.sphere import vmf_density

    if config.density == "uniform":
        return None
    return vmf_density(att.spectrum().top.basis[:, 0], config.kappa)


def density_area(d: int) -> float:
    """Surface area of S^{d-1}."""
    return 2.0 * math.pi ** (d / 2.0) / math.gamma(d / 2.0)
