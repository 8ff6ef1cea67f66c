"""The levels of a beta's ladder, one strategy per kind of rho_0 (`levels_for`):

- `SampledLevels` (uniform, fibonacci, quadrature, ...): the beta-free clouds of N = N_min, 2 N_min,
  ... (one N when it is fixed), until the verdict is done (converged, or 2 N > N_max);
- `GradedLevels` (init = graded): the beta's separatrix search first (a part too), then the clouds
  graded toward its separatrices, levels 0, 1, ..., until converged;
- `MeanFieldLevels` (init = meanfield): levels 0, 1, ... of the mean-field flow (no tokens), until
  converged, the next level's node count would pass N_max, or MEANFIELD_LEVELS.

Each makes the units of a ladder (`experiments.units`: a part of the run folder each), says when
the ladder stops, and makes the time-step probe of its largest beta (its first level again at
tighter tolerances).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ...science.convergence import LadderDecision, LevelReading
from ..parts import part_name
from ..units import Unit, Units
from .graded import graded_clouds, separatrix_part
from .levels import (
    Cloud,
    CloudCache,
    ConcentrationInputs,
    Ladder,
    Simulations,
    reduce_level,
    simulate_level,
)
from .meanfield import meanfield_level

if TYPE_CHECKING:
    import xarray as xr

    from ..inputs import Integration

__all__ = [
    "MEANFIELD_LEVELS",
    "GradedLevels",
    "LadderRun",
    "Levels",
    "MeanFieldLevels",
    "Plan",
    "SampledLevels",
    "levels_for",
]

#: init = meanfield: the most refinement levels of one beta (each halves the spacings)
MEANFIELD_LEVELS = 4


@dataclass(frozen=True, eq=False)
class LadderRun:
    """What the ladders of one run share: its inputs, its units (run folder, reporter), the
    beta-free clouds, the simulations, the zero-temperature reference curve (or None), and the cost
    of each level of a ladder in the units of the overall bar (`level_costs`)."""

    inputs: ConcentrationInputs
    units: Units
    clouds: CloudCache
    simulations: Simulations
    w2_zero: np.ndarray | None
    costs: tuple[float, ...]

    def cost(self, level: int) -> float:
        """The overall bar's share of the level-th level of a ladder (0 past the planned levels)."""
        return self.costs[level] if level < len(self.costs) else 0.0


@dataclass(frozen=True)
class Plan:
    """The levels of one beta's ladder: their units, in order (the ladder runs them until its
    strategy says stop), the clouds by N (empty for the mean-field flow) and the separatrix search
    (or None)."""

    units: Iterator[Unit]
    clouds: Mapping[int, Cloud]
    search: xr.Dataset | None = None


class Levels(Protocol):
    """How the levels of a ladder are made for one kind of rho_0. `tokens`: whether its levels are
    token clouds (their tokens stored, an under-resolved level warned about)."""

    tokens: bool

    def plan(self, shared: LadderRun, beta: float) -> Plan:
        """The levels of beta's ladder."""
        ...

    def stop(self, decision: LadderDecision, reading: LevelReading, inputs: ConcentrationInputs) -> bool:
        """Whether the ladder stops after the level read `reading`, judged `decision`."""
        ...

    def probe(self, shared: LadderRun, lad: Ladder) -> tuple[Unit, str]:
        """The time-step probe's unit (the first level of `lad` again at tighter tolerances) and its
        integrator's label."""
        ...

    def ahead(self, shared: LadderRun, beta: float, probe: bool) -> list[Unit]:
        """The units of beta's ladder that run whatever the levels say (and, with `probe`, the
        time-step probe's), the costliest first: those a run with several workers computes first
        (`ahead.py`)."""
        ...


def _level(shared: LadderRun, clouds: Mapping[int, Cloud], beta: float, N: int) -> xr.Dataset:
    """The part of level N at beta: its trajectory, reduced."""
    cloud = clouds[N]
    return reduce_level(shared.inputs, beta, cloud, shared.simulations.level(beta, cloud), shared.w2_zero)


def _cloud_units(
    shared: LadderRun, clouds: Mapping[int, Cloud], Ns: tuple[int, ...], beta: float
) -> Iterator[Unit]:
    """The units of the levels N in Ns at beta, of the clouds `clouds` (by N)."""
    for i, N in enumerate(Ns):
        yield Unit(part_name(beta=beta, N=N), partial(_level, shared, clouds, beta, N), shared.cost(i))


def _tight_level(shared: LadderRun, cloud: Cloud, beta: float, tight: Integration) -> xr.Dataset:
    """The level of `cloud` at beta again with the integrator `tight`, reduced."""
    run = simulate_level(shared.inputs, beta, cloud, shared.units.reporter, solver=tight)
    return reduce_level(shared.inputs, beta, cloud, run, shared.w2_zero)


class SampledLevels:
    """rho_0 free of beta: the ladder's levels are the clouds of its N (module docstring)."""

    tokens = True

    def plan(self, shared: LadderRun, beta: float) -> Plan:
        return Plan(_cloud_units(shared, shared.clouds, shared.inputs.Ns, beta), shared.clouds)

    def stop(self, decision: LadderDecision, reading: LevelReading, inputs: ConcentrationInputs) -> bool:
        return decision.done

    def ahead(self, shared: LadderRun, beta: float, probe: bool) -> list[Unit]:
        return []  # the levels' clouds are shared or searched first: none is computed ahead

    def probe(self, shared: LadderRun, lad: Ladder) -> tuple[Unit, str]:
        N = int(lad.parts[0].attrs["N"])
        tight = shared.inputs.solver.tighter()
        compute = partial(_tight_level, shared, lad.clouds[N], lad.beta, tight)
        return Unit(f"{part_name(beta=lad.beta, N=N)}_timestep", compute, shared.costs[0]), tight.label


class GradedLevels(SampledLevels):
    """init = graded: the levels are the grading's, their N node counts known once the beta's
    separatrices are searched (a part of the run folder, `..._separatrix`)."""

    def plan(self, shared: LadderRun, beta: float) -> Plan:
        inputs, units = shared.inputs, shared.units
        compute = partial(separatrix_part, inputs, beta, units.reporter)
        search = units.run(Unit(f"{part_name(beta=beta)}_separatrix", compute, cost=0.0))
        graded = {c.N: c for c in graded_clouds(inputs, beta, search)}
        return Plan(_cloud_units(shared, graded, tuple(graded), beta), graded, search)

    def stop(self, decision: LadderDecision, reading: LevelReading, inputs: ConcentrationInputs) -> bool:
        return decision.status == "converged"


class MeanFieldLevels:
    """init = meanfield: the levels are the mean-field flow's refinements (module docstring)."""

    tokens = False

    def plan(self, shared: LadderRun, beta: float) -> Plan:
        inputs, reporter = shared.inputs, shared.units.reporter

        def units() -> Iterator[Unit]:
            for level in range(MEANFIELD_LEVELS):
                compute = partial(
                    meanfield_level, inputs, beta, level, inputs.solver, reporter, shared.w2_zero
                )
                yield Unit(part_name(beta=beta, level=level), compute, shared.cost(level))

        return Plan(units(), {})

    def stop(self, decision: LadderDecision, reading: LevelReading, inputs: ConcentrationInputs) -> bool:
        return decision.status == "converged" or 2 * reading.N > inputs.rules.N_max

    def probe(self, shared: LadderRun, lad: Ladder) -> tuple[Unit, str]:
        return _meanfield_probe(shared, lad.beta)

    def ahead(self, shared: LadderRun, beta: float, probe: bool) -> list[Unit]:
        """The probe (level 0 at tighter tolerances), level 1, level 0: a ladder compares two
        levels at least."""
        units = self.plan(shared, beta).units
        first = [next(units), next(units)]
        return ([_meanfield_probe(shared, beta)[0]] if probe else []) + first[::-1]


def _meanfield_probe(shared: LadderRun, beta: float) -> tuple[Unit, str]:
    """init = meanfield: level 0 of beta at the tighter tolerances, and their label."""
    inputs = shared.inputs
    tight = inputs.solver.tighter()
    compute = partial(meanfield_level, inputs, beta, 0, tight, shared.units.reporter, shared.w2_zero)
    return Unit(f"{part_name(beta=beta, level=0)}_timestep", compute, shared.costs[0]), tight.label


def levels_for(inputs: ConcentrationInputs) -> Levels:
    """The strategy of the run's rho_0: mean-field, graded or sampled levels."""
    if inputs.meanfield:
        return MeanFieldLevels()
    if inputs.graded:
        return GradedLevels()
    return SampledLevels()
