"""A config turned into typed, frozen inputs, once per run: the one place that reads the model keys
(`weights`, `d`, `init`, `density`, ...) and the integrator keys of a config.

    model = model_inputs(config)      # ModelInputs: the Attention at beta = 1 (random weights drawn
    model.at(beta)                    # once), its spectrum, d, rho_0 and a one-line description;
                                      # the Dynamics of the flow keys (heads, mask, layer_norm, ...):
                                      # at(beta) is the model to simulate (its Attention when plain)
    model.rho0.nodes(N, seed)         # Nodes: X (N, d) and weights (N,) or None (equal weights)
    solver = integration(config)      # Integration: the integrator, kernel, dtype, device, threads
    simulate(X0, model.at(beta), times, weights=..., **solver.kwargs())

An experiment's run calls these once and passes the objects down: its levels, parts, figures and
summaries never see the config.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from ..attention import WEIGHTS, Attention, Spectrum, WeightsFamily
from ..flow import Dynamics, Redraw
from ..measures import DISCRETISATIONS, MEASURES, Density, Discretisation, Nodes
from ..measures.densities import DensityFn
from .model import FLOW_FIELDS, ModelConfig, flow_fields, weights_attention

if TYPE_CHECKING:
    from ..dynamics.separatrix import SeparatrixSearch
    from ..dynamics.sources import SourceSearch
    from .config import SimulationConfig

__all__ = ["InitialMeasure", "Integration", "ModelInputs", "SimulateKeywords", "integration", "model_inputs"]


@dataclass(frozen=True)
class InitialMeasure:
    """rho_0 of a run: a density (MEASURES) made into tokens by a discretisation (DISCRETISATIONS).

    nodes(N, seed) -> Nodes for any N and seed; a per-beta discretisation (init = graded) builds its
    nodes at each beta with `graded_nodes`, and its beta-free stand-in (`without_beta`, quadrature)
    serves where beta plays no part (the zero-temperature cloud).
    """

    density: Density
    init: Discretisation

    @property
    def per_beta(self) -> bool:
        return self.init.per_beta

    @property
    def density_fn(self) -> DensityFn | None:
        """f for the quadratures, X (N, d) -> (N,) up to a constant; None for the uniform law."""
        return None if self.density.is_uniform else self.density.unnormalised()

    def nodes(self, N: int, seed: int) -> Nodes:
        """rho_0 as N tokens (the seed draws them where the discretisation is random)."""
        return self.init.nodes(N, self.density, seed)

    def without_beta(self) -> InitialMeasure:
        """This measure, or for a per-beta discretisation the same density on quadrature nodes."""
        return InitialMeasure(self.density, DISCRETISATIONS["quadrature"]) if self.per_beta else self

    def search(
        self, att: Attention, t_max: float, kernel: str, device: str | None = None
    ) -> SeparatrixSearch | SourceSearch:
        """init = graded: the separatrices of the flow of att up to t_max (d = 2:
        `mean_field_quadrature`'s search from its default brackets; d = 3: `sphere_quadrature`'s
        sources and separatrix, on `device`), weighted by this density."""
        if att.d == 3:
            from ..dynamics.sources import sphere_quadrature

            found = sphere_quadrature(att, t_max, 0, density=self.density_fn, kernel=kernel, device=device)
            return found[2]
        from ..dynamics.separatrix import mean_field_quadrature

        return mean_field_quadrature(att, t_max, 0, density=self.density_fn, kernel=kernel)[2]

    def graded_nodes(
        self, att: Attention, t_max: float, level: int, search: SeparatrixSearch | SourceSearch
    ) -> Nodes:
        """init = graded: the nodes of grading level `level` toward what `search` located."""
        from ..dynamics.separatrix import SeparatrixSearch, mean_field_quadrature
        from ..dynamics.sources import sphere_quadrature

        if isinstance(search, SeparatrixSearch):
            X, w, _ = mean_field_quadrature(att, t_max, level, search=search, density=self.density_fn)
        else:
            X, w, _ = sphere_quadrature(att, t_max, level, search=search, density=self.density_fn)
        return Nodes(X, w)


@dataclass(frozen=True, eq=False)
class ModelInputs:
    """The weights and rho_0 of a run: `attention` at beta = 1 (drawn once; head 0 of several),
    `rho0`, a one-line `description` for attrs and titles, and the `dynamics` of the flow keys
    (Dynamics(attention) for configs without them). `at(beta)` gives the model to simulate at any
    beta: the Attention (inf allowed) when the dynamics is the paper's flow, else the Dynamics."""

    attention: Attention
    rho0: InitialMeasure
    description: str
    dynamics: Dynamics | None = None

    @property
    def flow(self) -> Dynamics:
        """The run's Dynamics (beta = 1)."""
        return self.dynamics if self.dynamics is not None else Dynamics(self.attention)

    def theorem(self) -> tuple[bool, str]:
        """Whether the paper's theorem applies to the run's model, and if not why (Dynamics)."""
        return self.flow.theorem_applies()

    @property
    def d(self) -> int:
        return self.attention.d

    @property
    def spectrum(self) -> Spectrum:
        return self.attention.spectrum()

    @property
    def u1(self) -> np.ndarray:
        """A's top eigenvector (d,): the mean direction of a von Mises-Fisher rho_0."""
        return self.spectrum.top.basis[:, 0]

    def head_at(self, beta: float) -> Attention:
        """The run's Attention (head 0) at inverse temperature beta (inf allowed)."""
        return self.attention.with_beta(beta)

    def at(self, beta: float) -> Attention | Dynamics:
        """The run's model at inverse temperature beta (the same weights): its Attention when the
        dynamics is the paper's flow, else its Dynamics."""
        if self.flow.single is not None:
            return self.attention.with_beta(beta)
        return self.flow.with_beta(beta)


def model_inputs(config: ModelConfig) -> ModelInputs:
    """The ModelInputs of a config (its keys were checked, and its weights made, when it was made)."""
    family = WEIGHTS.get(config.weights)
    att = weights_attention(config)
    label = config.weights if family is None else family.label(**{k: getattr(config, k) for k in family.keys})
    u1 = att.spectrum().top.basis[:, 0]
    measure = MEASURES[config.density]
    params = {p: u1 if p == "mean" else getattr(config, p) for p in measure.parameters}
    rho0 = InitialMeasure(measure.bind(att.d, **params), DISCRETISATIONS[config.init])
    dynamics = flow_of(config, att, family)
    description = describe(label, att.d, rho0)
    if dynamics.single is None:
        description += f"; model {dynamics.describe()}"
    return ModelInputs(att, rho0, description, dynamics)


#: the flow keys passed to Dynamics as they are (FLOW_FIELDS marked FlowKey(dynamics=True))
FLOW_KEYS = tuple(f.name for f in FLOW_FIELDS if f.key.dynamics)


def flow_of(config: ModelConfig, att: Attention, family: WeightsFamily | None) -> Dynamics:
    """The Dynamics of a config's flow keys (FlowConfig; absent keys: the paper's flow) with head 0
    `att`: heads h >= 1 drawn from a drawn family (else copies of att), redrawn every `redraw`."""
    H = int(getattr(config, "heads", 1))
    keys = {k: getattr(config, k) for k in family.keys} if family is not None else {}
    d = att.d

    def heads_of(k: int) -> list[Attention]:
        if family is None:
            return [att] * H
        return [att if (h, k) == (0, 0) else family.head(d, keys, h, k) for h in range(H)]

    period = getattr(config, "redraw", None)
    redraw = None
    if period is not None and family is not None and family.drawn:
        redraw = Redraw(float(period), heads_of, "redrawn")
    options = {f.name: getattr(config, f.name) for f in flow_fields(type(config)) if f.key.dynamics}
    return Dynamics(heads_of(0), redraw=redraw, **options)


def describe(weights: str, d: int, rho0: InitialMeasure) -> str:
    """One line naming the weights and rho_0: 'weights worked-example, d = 3; rho_0 uniform as
    uniform tokens'."""
    density = rho0.density
    words = [density.family.title]
    if "mean" in density.params:
        words[0] += " around u_1"
    words += [f"{p} = {v:g}" for p, v in density.params.items() if p != "mean"]
    return f"weights {weights}, d = {d}; rho_0 {', '.join(words)} as {rho0.init.name} tokens"


# ------------------------------------------------------------------------------------ integrator


class SimulateKeywords(TypedDict):
    """The keywords of `simulate` an `Integration` sets (`Integration.kwargs`)."""

    method: str
    dt: float
    kernel: str
    dtype: str
    device: str
    options: dict[str, float | str] | None
    threads: int
    seed: int


@dataclass(frozen=True)
class Integration:
    """How a run integrates the finite-temperature flow (a SimulationConfig's keys): for `simulate`."""

    method: str
    dt: float
    kernel: str
    dtype: str
    device: str
    rtol: float
    atol: float
    threads: int
    seed: int = 0  # the seed of the noise (a Dynamics with noise > 0)

    def kwargs(self) -> SimulateKeywords:
        """Keywords of `attnflow.dynamics.integrate.simulate` (the tolerances go in `options`, for the
        adaptive method only)."""
        adaptive = self.method == "adaptive"
        return {
            "method": self.method,
            "dt": self.dt,
            "kernel": self.kernel,
            "dtype": self.dtype,
            "device": self.device,
            "options": {"rtol": self.rtol, "atol": self.atol} if adaptive else None,
            "threads": self.threads,
            "seed": self.seed,
        }

    def tighter(self, factor: float = 10.0) -> Integration:
        """The same integrator made more accurate, to measure the time-step error of a run: the
        adaptive method's rtol and atol divided by `factor`, a fixed step divided by 2; in float64
        (a float32 run's rounding is part of its error, and float32 cannot take a smaller rtol)."""
        if self.method == "adaptive":
            return replace(self, rtol=self.rtol / factor, atol=self.atol / factor, dtype="float64")
        return replace(self, dt=self.dt / 2.0, dtype="float64")

    @property
    def label(self) -> str:
        """The integrator in words, for attrs."""
        if self.method == "adaptive":
            return f"adaptive Dormand-Prince 5(4), rtol={self.rtol:g}, atol={self.atol:g}"
        return f"{self.method}, dt={self.dt:g}"


def integration(config: SimulationConfig) -> Integration:
    """The Integration of a SimulationConfig."""
    return Integration(
        config.integrator,
        config.dt,
        config.kernel,
        config.dtype,
        config.device,
        config.rtol,
        config.atol,
        config.threads,
        config.seed,
    )
