"""What users choose by name for rho_0: its density (`MEASURES`) and how it becomes tokens
(`DISCRETISATIONS`, the experiments' `init` key).

    MEASURES         "uniform", "vmf": a family of densities w.r.t. the uniform law, with its
                     sampler, its density up to a constant and normalised, its parameters and the
                     dimensions d it exists in
    DISCRETISATIONS  "uniform" (i.i.d. samples), "fibonacci", "quadrature", "graded", "meanfield":
                     the dimensions and densities each carries, and its nodes and weights for any N and seed

Adding a density is its functions (`densities`, `sampling`) and one line of MEASURES (or
`register(family)` at run time), its parameters declared there (`Parameter`: the experiments' config
keys of the same name are made from them); adding a discretisation is its nodes function and one line
of DISCRETISATIONS. `family.bind(d, **params)` gives a `Density` (one rho_0) and
`discretisation.nodes(N, density, seed)` its `Nodes`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from .._checks import SeedLike
from .densities import DensityFn, uniform_density, vmf_density, vmf_normaliser, vmf_pair_sup
from .quadrature import fibonacci_sphere, quadrature
from .sampling import sample_uniform, sample_vmf

__all__ = [
    "DISCRETISATIONS",
    "MEASURES",
    "Density",
    "DensityFamily",
    "Dims",
    "Discretisation",
    "Nodes",
    "Parameter",
    "or_list",
    "register",
    "registered",
    "unregister",
]


def or_list(names: Iterable[object]) -> str:
    """'a', 'a or b', 'a, b or c': choices for messages and descriptions."""
    words = [str(n) for n in names]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


@dataclass(frozen=True)
class Dims:
    """The dimensions d (tokens on S^{d-1}) where something exists.

    `d in dims`; str(dims): "d = 3", "d = 2 or 3", "d >= 2".

    Attributes
    ----------
    only : tuple of int
        The listed dimensions, or every d >= 2 when none is listed.
    """

    only: tuple[int, ...] = ()

    def __contains__(self, d: object) -> bool:
        return isinstance(d, int) and (d in self.only if self.only else d >= 2)

    def __str__(self) -> str:
        return f"d = {or_list(self.only)}" if self.only else "d >= 2"


ANY_D = Dims()


# ------------------------------------------------------------------------------------ densities


@dataclass(frozen=True)
class Parameter:
    """A number that a density family takes, given by the experiments as a config key of its name.

    Attributes
    ----------
    name : str
        The keyword of the family's functions and the config key.
    default : float
        Its value when the config leaves it unset.
    description : str
        What it is, a few words ("concentration"): the config's description adds the family.
    gt : float or None
        The value it must exceed (None: any number).
    """

    name: str
    default: float
    description: str
    gt: float | None = None


@dataclass(frozen=True)
class DensityFamily:
    """A named family of densities of rho_0 w.r.t. the uniform law on S^{d-1} (an entry of MEASURES).

    The functions are each called with (d, **params).

    Attributes
    ----------
    name, title, description : str
        Its key, its name in words ("von Mises-Fisher"), and what it is.
    parameters : tuple of str
        The keywords its functions take besides d (e.g. "mean" (d,), "kappa").
    dims : Dims
        Where it exists.
    positive : str
        Why it has the strictly positive Lipschitz density of Assumption 3 (one sentence).
    sample : callable
        sample(N, d, seed, **params) -> (N, d).
    density : callable
        density(d, **params) -> f, X (N, d) -> (N,) up to a constant with max 1.
    normaliser : callable
        normaliser(d, **params) -> Z = integral f dsigma (sigma the uniform probability).
    pair_sup : callable
        pair_sup(d, **params) -> sup_x f(x) + f(-x) (a bound for truncation errors).
    keys : tuple of Parameter
        Those of its parameters that a config gives, by the same name (all but "mean": the
        experiments take A's top eigenvector u_1).
    """

    name: str
    title: str
    description: str
    parameters: tuple[str, ...]
    dims: Dims
    positive: str
    sample: Callable[..., np.ndarray]
    density: Callable[..., DensityFn]
    normaliser: Callable[..., float]
    pair_sup: Callable[..., float]
    keys: tuple[Parameter, ...] = ()

    def bind(self, d: int, **params: Any) -> Density:
        """This family in dimension d with its parameters: one rho_0 (ValueError naming what is wrong)."""
        if d not in self.dims:
            raise ValueError(f"density = {self.name} exists for {self.dims} only, not d = {d}")
        missing = [p for p in self.parameters if p not in params]
        extra = [p for p in params if p not in self.parameters]
        if missing or extra:
            takes = or_list(self.parameters) if self.parameters else "none"
            raise ValueError(
                f"density = {self.name} takes the parameters {takes}; got {', '.join(params) or 'none'}"
            )
        return Density(self, int(d), dict(params))


@dataclass(frozen=True, eq=False)
class Density:
    """One rho_0: a DensityFamily in dimension d with its parameters (`family.bind(d, **params)`).

    Attributes
    ----------
    family : DensityFamily
    d : int
    params : mapping
        The keywords of the family's functions besides d.
    """

    family: DensityFamily
    d: int
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.family.name

    @property
    def is_uniform(self) -> bool:
        return self.family.name == "uniform"

    def sample(self, N: int, seed: SeedLike) -> np.ndarray:
        """N i.i.d. points of rho_0, (N, d)."""
        return self.family.sample(N, self.d, seed, **self.params)

    def unnormalised(self) -> DensityFn:
        """f up to its constant (max 1): X (N, d) -> (N,), what quadrature weights take."""
        return self.family.density(self.d, **self.params)

    def normaliser(self) -> float:
        """Z = integral f dsigma, sigma the uniform probability on S^{d-1}."""
        return float(self.family.normaliser(self.d, **self.params))

    def normalised(self) -> DensityFn:
        """f / Z: X (N, d) -> (N,), a probability density w.r.t. the uniform probability."""
        f, Z = self.unnormalised(), self.normaliser()

        def g(X: np.ndarray) -> np.ndarray:
            return f(X) / Z

        return g

    def pair_sup(self) -> float:
        """sup_x (f(x) + f(-x)) / Z of the normalised density."""
        return float(self.family.pair_sup(self.d, **self.params)) / self.normaliser()


def _sample_uniform(N: int, d: int, seed: SeedLike) -> np.ndarray:
    return sample_uniform(N, d, seed=seed)


def _sample_vmf(N: int, d: int, seed: SeedLike, *, mean: Any, kappa: float) -> np.ndarray:
    return sample_vmf(N, mean, kappa, seed=seed)


def _vmf_density(d: int, *, mean: Any, kappa: float) -> DensityFn:
    return vmf_density(mean, kappa)


def _vmf_normaliser(d: int, *, mean: Any, kappa: float) -> float:
    return vmf_normaliser(d, kappa)


def _vmf_pair_sup(d: int, *, mean: Any, kappa: float) -> float:
    return vmf_pair_sup(d, kappa)


def _one(d: int) -> float:
    return 1.0


def _two(d: int) -> float:
    return 2.0


_measures: dict[str, DensityFamily] = {}


def _families(*families: DensityFamily) -> Mapping[str, DensityFamily]:
    _measures.update((f.name, f) for f in families)
    return MappingProxyType(_measures)


#: the densities of rho_0 by name (the experiments' `density` key)
MEASURES: Mapping[str, DensityFamily] = _families(
    DensityFamily(
        "uniform", "uniform", "uniform", (), ANY_D, "Uniform rho_0 has a constant positive density.",
        _sample_uniform, uniform_density, _one, _two,
    ),
    DensityFamily(
        "vmf", "von Mises-Fisher", "von Mises-Fisher around u_1, concentration kappa", ("mean", "kappa"),
        ANY_D, "von Mises-Fisher rho_0 has a positive smooth density exp(kappa <m, x>).",
        _sample_vmf, _vmf_density, _vmf_normaliser, _vmf_pair_sup,
        keys=(Parameter("kappa", 2.0, "concentration", gt=0),),
    ),
)  # fmt: skip
_SHIPPED = tuple(MEASURES)


def register(family: DensityFamily) -> None:
    """Add a density family to MEASURES (after the others); ValueError where its name is taken.
    (The experiments' `density` choices are those of import time: a family registered later is for
    the functions that take a MEASURES name, `family.bind` and the discretisations.)"""
    if not isinstance(family, DensityFamily):
        raise TypeError(f"register takes a DensityFamily, got {type(family).__name__}")
    if family.name in MEASURES:
        raise ValueError(f"density {family.name!r} is taken: choose another name")
    _measures[family.name] = family


def unregister(name: str) -> None:
    """Remove a density family added by `register` (the shipped ones stay)."""
    if name in _SHIPPED or name not in MEASURES:
        raise ValueError(f"{name!r} is not a density added by register")
    del _measures[name]


@contextmanager
def registered(family: DensityFamily) -> Iterator[DensityFamily]:
    """`register(family)` for the duration of a with-block."""
    register(family)
    try:
        yield family
    finally:
        unregister(family.name)


# ------------------------------------------------------------------------------- discretisations


@dataclass(frozen=True)
class Nodes:
    """rho_0 as tokens.

    Attributes
    ----------
    X : array (N, d)
        Unit rows.
    weights : array (N,) or None
        Summing to 1, or None for equal weights.
    """

    X: np.ndarray
    weights: np.ndarray | None


@dataclass(frozen=True)
class Discretisation:
    """A named way to make tokens of rho_0 (an entry of DISCRETISATIONS, the `init` key).

    Attributes
    ----------
    name, summary : str
        Its key; a few words for the config's description.
    dims : Dims
        Where it exists.
    densities : tuple of str
        The MEASURES it carries (empty: all).
    seeded : bool
        Whether the seed draws it.
    per_beta : bool
        Built at each beta by the flow's separatrices
        (`attnflow.dynamics.separatrix.mean_field_quadrature`), so `build` is None.
    build : callable or None
        build(N, density, seed) -> Nodes.
    """

    name: str
    summary: str
    dims: Dims
    densities: tuple[str, ...]
    seeded: bool
    per_beta: bool
    build: Callable[[int, Density, SeedLike], Nodes] | None

    def carries(self, density: str) -> bool:
        return not self.densities or density in self.densities

    def nodes(self, N: int, density: Density, seed: SeedLike = None) -> Nodes:
        """N tokens of `density` (ValueError where this discretisation does not exist)."""
        if density.d not in self.dims:
            raise ValueError(f"init = {self.name} exists for {self.dims} only, not d = {density.d}")
        if not self.carries(density.name):
            raise ValueError(f"init = {self.name} carries density = {or_list(self.densities)} only")
        if self.build is None:
            raise ValueError(
                f"init = {self.name} depends on beta: build its nodes with mean_field_quadrature"
            )
        return self.build(N, density, seed)


def _iid(N: int, density: Density, seed: SeedLike) -> Nodes:
    return Nodes(density.sample(N, seed), None)


def _fibonacci(N: int, density: Density, seed: SeedLike) -> Nodes:
    return Nodes(fibonacci_sphere(N), None)


def _quadrature(N: int, density: Density, seed: SeedLike) -> Nodes:
    """Deterministic nodes; equal weights (None) for the uniform law, else w_i ∝ f(x_i)."""
    if density.is_uniform:
        return Nodes(quadrature(N, density.d)[0], None)
    return Nodes(*quadrature(N, density.d, density.unnormalised()))


#: how rho_0 becomes tokens, by name (the experiments' `init` key)
DISCRETISATIONS: Mapping[str, Discretisation] = MappingProxyType({
    "uniform": Discretisation("uniform", "i.i.d., seeded", ANY_D, (), True, False, _iid),
    "fibonacci": Discretisation("fibonacci", "lattice", Dims((3,)), ("uniform",), False, False, _fibonacci),
    "quadrature": Discretisation(
        "quadrature",
        "deterministic nodes with weights (equispaced d = 2, Fibonacci d = 3, quasi-Monte Carlo d >= 4)",
        ANY_D,
        (),
        False,
        False,
        _quadrature,
    ),
    "graded": Discretisation(
        "graded",
        "nodes graded toward the separatrices (d = 3: the sources and the separatrix) at each beta",
        Dims((2, 3)), (), False, True, None,
    ),
    "meanfield": Discretisation(
        "meanfield", "the mean-field measure with its exponentially small tail kept, at each beta",
        Dims((2,)), (), False, True, None,
    ),
})  # fmt: skip
