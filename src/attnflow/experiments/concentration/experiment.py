"""`concentration`: W2(rho^beta_t, Pi_# rho_0) against t for several beta, converged in N
(docs/math.md, Theorem 1).

Any weights (`weights`: the d = 3 or d = 2 worked example, random, an .npz) and any rho_0 (`init`,
`density`). For every beta: the exact W2 to Pi_# rho_0, the synchronous coupling bound (an upper
bound), the Lyapunov functional, the mass near the top eigenspaces of A and V; t*, min W2, the entry
time into the near-minimal band and the departure time. With `N = "auto"` each beta runs a doubling
ladder N_min, 2 N_min, ... until those quantities converge in N (attnflow.science.convergence), and gets a
status: converged, resolved or under-resolved. Fits and the claims table use converged betas only.
Once: the zero-temperature curve, at N = infinity where an exact reference exists.
"""

from __future__ import annotations

import math
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal, Self

import numpy as np
from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from ...io import json_attr
from ...progress import Reporter
from ...science.convergence import (
    LadderRules,
    LevelReading,
    converged_window,
    curve_gap,
    curve_quantities,
    judge_ladder,
)
from ...science.metrics import RESOLUTION_OK
from ..common import time_grid, warn_assumptions
from ..config import Angle, Betas, Seed, SimulationConfig
from ..inputs import integration, model_inputs
from ..model import FlowConfig, weights_attention
from ..needs import INVERTIBLE_B, LIMIT, SOURCES, Need
from ..parts import part_name
from ..registry import Experiment, doc_summary
from ..units import Unit, Units
from .dataset import (
    assemble,
    long_names,
    run_attrs,
    summarize,
    tokens_at_zero_temperature,
)
from .evidence import TimeStepProbe, beta_evidence, claim_data, time_step_probe
from .figures import CAPTIONS, figures, sweep_figures
from .levels import (
    CloudCache,
    ConcentrationInputs,
    Ladder,
    Simulations,
    batch_betas,
    departure_time,
    located_of,
)
from .presets import PRESETS
from .strategies import LadderRun, Levels, levels_for
from .zero import ZeroInfo, zero_temperature

if TYPE_CHECKING:
    import xarray as xr

# the keys of the N ladder: they choose which levels run, not what one level computes
LADDER_KEYS = frozenset({"betas", "N", "N_min", "N_max", "tol", "streak", "curve_atol", "curve_rtol"})


class ConcentrationConfig(SimulationConfig, FlowConfig):
    """Config of the `concentration` experiment (the default of `attnflow run`)."""

    experiment: Literal["concentration"] = "concentration"
    graded_init: ClassVar[bool] = True  # init = graded: rho_0 per beta, N_min..N_max its levels
    # W2 to Pi_# rho_0 of one head's A, and the zero-temperature curve beside the finite betas
    needs: ClassVar[tuple[Need, ...]] = (INVERTIBLE_B, LIMIT, SOURCES)
    one_head: ClassVar[bool] = True
    betas: Betas = Field(
        [10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0], description="inverse temperatures beta (finite, > 0)"
    )
    N: PositiveInt | Literal["auto"] = Field(
        600, description='number of tokens, or "auto": a doubling ladder N_min..N_max until converged'
    )
    N_min: PositiveInt = Field(
        256, description="N = auto: first level of the ladder (init = graded: level 0's node count)"
    )
    N_max: PositiveInt = Field(16384, description="N = auto: largest level of the ladder")
    tol: PositiveFloat = Field(0.02, description="N = auto: largest relative change of a converged quantity")
    streak: PositiveInt = Field(2, description="N = auto: doublings in a row that must stay within tol")
    curve_atol: PositiveFloat = Field(5e-3, description="two levels' W2 curves agree within atol + rtol W2")
    curve_rtol: PositiveFloat = Field(0.02, description="see curve_atol")
    seeds: list[Seed] = Field(
        [], description="several random clouds in one kernel call (init = uniform); empty: one, `seed`"
    )
    t_max: PositiveFloat = Field(12.0, description="final time (t* grows like log beta; late phase after it)")
    dt_save: PositiveFloat = Field(0.1, description="spacing of the saved times (resolution of t*)")
    eps: Angle = Field(0.1, description="angle (radians) defining 'near' an eigenspace for mass_A/V")
    n_keep: NonNegativeInt = Field(
        200, description="tokens whose positions are stored (snapshots, animation)"
    )
    t_star_rel_tol: PositiveFloat = Field(0.05, description="near-minimal band: W2 <= min W2 (1 + tol)")
    zero_reference: bool = Field(
        True,
        description="zero-temperature curve at N = infinity (adaptive cubature: seconds to a minute) where "
        "it exists; false: the exact flow of the cloud",
    )
    workers: PositiveInt = Field(
        1,
        le=64,
        description="processes computing ahead the levels every ladder needs (init = meanfield: levels 0 "
        "and 1 of every beta, and the time-step probe); 1: all in this process",
    )

    def saved_cloud(self) -> tuple[int, int]:
        return max(1, len(self.seeds)), super().saved_cloud()[1]

    @model_validator(mode="after")
    def _ladder(self) -> Self:
        if self.N_min > self.N_max:
            raise ValueError(f"N_min = {self.N_min} must not exceed N_max = {self.N_max}")
        if self.seeds and self.init != "uniform":
            raise ValueError(f"seeds are random clouds: they need init = uniform, not {self.init}")
        if self.init in ("graded", "meanfield") and self.N != "auto":
            raise ValueError(
                f"init = {self.init} sets N per beta (the node counts of its levels): use N = "
                f'"auto", not N = {self.N}'
            )
        if self.init == "meanfield":
            top = weights_attention(self).spectrum().top.basis.shape[1]
            if top != 1:
                raise ValueError(
                    f"init = meanfield measures W2 to the two atoms +-u_1 of Pi_# rho_0: A's top eigenspace "
                    f"must be a line, it has dimension {top} (use init = graded or quadrature)"
                )
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct, got {self.seeds}")
        return self


def _levels(config: ConcentrationConfig) -> tuple[int, ...]:
    if config.N != "auto":
        return (int(config.N),)
    Ns = [config.N_min]
    while Ns[-1] * 2 <= config.N_max:
        Ns.append(Ns[-1] * 2)
    return tuple(Ns)


def concentration_inputs(config: ConcentrationConfig) -> ConcentrationInputs:
    """The run's inputs, made from its config once."""
    times = time_grid(config.t_max, config.dt_save)
    rules = LadderRules(
        dt=config.dt_save,
        t_max=float(times[-1]),
        N_max=config.N_max if config.N == "auto" else int(config.N),
        tol=config.tol,
        streak=config.streak,
        ratio_ok=RESOLUTION_OK,
    )
    return ConcentrationInputs(
        model=model_inputs(config),
        solver=integration(config),
        times=times,
        betas=tuple(config.betas),
        Ns=_levels(config),
        auto=config.N == "auto",
        seeds=tuple(config.seeds),
        seed=config.seed,
        n_keep=config.n_keep,
        eps=config.eps,
        t_max=config.t_max,
        rules=rules,
        curve_atol=config.curve_atol,
        curve_rtol=config.curve_rtol,
        band=config.t_star_rel_tol,
        zero_reference=config.zero_reference,
    )


def _zero_part(inputs: ConcentrationInputs, clouds: CloudCache) -> xr.Dataset:
    return zero_temperature(inputs, clouds[inputs.Ns[0]])


def level_costs(inputs: ConcentrationInputs) -> tuple[float, ...]:
    """The cost of each planned level of a ladder, N^2 (the attention's pairs: what a level's time
    grows like): the overall bar advances by it, so that its ETA weighs the slow last levels."""
    return tuple(float(N) ** 2 for N in inputs.Ns)


def _batched(inputs: ConcentrationInputs, units: Units) -> bool:
    """Whether the betas run together: a small fixed-N, fixed-step run (batch_betas) with a level
    left to compute."""
    if inputs.auto or not batch_betas(inputs, inputs.Ns[0]):
        return False
    return not all(units.done(part_name(beta=b, N=inputs.Ns[0])) for b in inputs.betas)


def prepare(
    config: ConcentrationConfig, out: Path | None, reporter: Reporter, planned: bool = True
) -> tuple[LadderRun, Levels, xr.Dataset]:
    """What the ladders of a run share, its levels' strategy and its zero-temperature part (computed,
    or read back from out/parts); planned: the overall progress bar started and the assumptions
    warned about (a run, not a worker computing levels ahead, `ahead.py`)."""
    units = Units(config, EXPERIMENT.part_keys, out, reporter)
    inputs = concentration_inputs(config)
    levels = levels_for(inputs)
    clouds = CloudCache(inputs)
    costs = level_costs(inputs)  # the zero-temperature part and the time-step probe: a first level each
    if planned:
        warn_assumptions(inputs.model.attention, reporter)
        units.plan(
            2 * costs[0] + len(inputs.betas) * sum(costs),
            f"concentration: {len(inputs.betas)} betas, N = {config.N}",
        )
    zero_unit = Unit("zero", partial(_zero_part, inputs, clouds), costs[0], "zero_temperature_s")
    zero = units.run(zero_unit)
    zero_info: ZeroInfo = json_attr(zero, "zero", {})
    w2_zero = zero.w2_zero.values if zero_info.get("kind", "").startswith("N = infinity") else None
    simulations = Simulations(inputs, reporter, batched=_batched(inputs, units))
    return LadderRun(inputs, units, clouds, simulations, w2_zero, costs), levels, zero


def run(config: ConcentrationConfig, out: Path | None = None, progress: Reporter | None = None) -> xr.Dataset:
    """Run the experiment; with `out`, every finished (beta, N) level is kept in out/parts, and with
    init = graded every beta's separatrix search; with `workers` > 1 the levels every ladder needs
    are computed first on that many processes (`ahead.py`)."""
    from .ahead import compute_ahead

    reporter = progress or Reporter()
    shared, levels, zero = prepare(config, out, reporter)
    inputs, units = shared.inputs, shared.units
    zero_info: ZeroInfo = json_attr(zero, "zero", {})
    if out is not None and config.workers > 1:
        compute_ahead(config, config.workers, out, shared, levels, prepare)
    ladders = []
    for beta in inputs.betas:
        t0 = time.perf_counter()
        ladders.append(_ladder(shared, levels, beta))
        units.timings[f"beta={beta:g}_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    probe = _time_step_probe(shared, levels, ladders)
    units.timings["time_step_probe_s"] = time.perf_counter() - t0
    evidence = [beta_evidence(inputs, lad, probe) for lad in ladders]
    ds = assemble(inputs, ladders, zero, evidence)
    if inputs.model.theorem()[0] and levels.tokens:  # (a mean-field run stores no tokens)
        ds["x_zero"] = (("time", "token", "dim"), tokens_at_zero_temperature(inputs, ladders[0].cloud, ds))
    claims = claim_data(inputs, evidence, zero, zero_info)
    units.finish(ds, **run_attrs(inputs, ds, ladders, claims, probe, zero_info))
    long_names(ds, inputs.eps, zero_info, inputs.model.theorem())
    return ds


def _time_step_probe(shared: LadderRun, levels: Levels, ladders: list[Ladder]) -> TimeStepProbe:
    """The time-step error probe: the largest beta's first level again, with tighter tolerances
    (a part of the run folder, `..._timestep`)."""
    lad = max(ladders, key=lambda lad: lad.beta)
    unit, label = levels.probe(shared, lad)
    return time_step_probe(shared.inputs, lad.parts[0], shared.units.run(unit), shared.w2_zero, label)


def _reading(
    inputs: ConcentrationInputs, parts: list[xr.Dataset], w2_zero: np.ndarray | None
) -> LevelReading:
    """What the latest level of a ladder says: its curve inside the window where it agrees with the
    level before (the first level: its whole curve, the reference of the second), that coarser curve
    read in the same window, its resolution ratio and departure time."""
    times, part = inputs.times, parts[-1]
    w2 = part.w2.values.mean(axis=0)
    t_end, previous, coarse = None, None, None
    if len(parts) > 1:
        coarse = parts[-2].w2.values.mean(axis=0)
        t_end = converged_window(times, w2, coarse, inputs.curve_atol, inputs.curve_rtol)
        previous = curve_quantities(
            times, coarse, t_end, band=inputs.band, reference=w2_zero, located=located_of(parts[-2])
        )
    depart = departure_time(times, part.mass_A.values.mean(axis=0), located_of(part))
    q = curve_quantities(times, w2, t_end, band=inputs.band, reference=w2_zero, located=located_of(part))
    return LevelReading(
        N=int(part.attrs["N"]),
        quantities=q,
        ratio=float(part.attrs["resolution_ratio"]),
        previous=previous,
        times={"t_depart": depart.t},
        bias={"t_depart": depart.bias},
        gap=math.nan if coarse is None else curve_gap(times, w2, coarse, q.t_lo, q.t_hi),
    )


def _ladder(shared: LadderRun, levels: Levels, beta: float) -> Ladder:
    """The ladder of one beta: its levels (`levels.plan`) until its strategy says stop."""
    inputs, reporter = shared.inputs, shared.units.reporter
    plan = levels.plan(shared, beta)
    parts: list[xr.Dataset] = []
    readings: list[LevelReading] = []
    for unit in plan.units:
        parts.append(shared.units.run(unit))
        readings.append(_reading(inputs, parts, shared.w2_zero))
        decision = judge_ladder(readings, inputs.rules)
        reporter.info(_level_line(beta, readings[-1].N, readings[-1], decision.status))
        if levels.stop(decision, readings[-1], inputs):
            break
    reporter.advance(sum(shared.costs[len(parts) :]))  # the levels a converged ladder skips
    if levels.tokens and decision.status == "under-resolved":
        reporter.warn(_under_resolved(inputs, beta, parts[-1]))
    quantities = tuple(r.quantities for r in readings)
    return Ladder(beta, tuple(parts), quantities, decision, plan.clouds, plan.search)


def _level_line(beta: float, N: int, reading: LevelReading, status: str) -> str:
    """The progress line of a level: its window (the first level has none: nothing compared yet),
    its minimum and the beta's status so far."""
    q = reading.quantities
    edge = " (at the window's end)" if q.edge else ""
    window = (
        "first level (no window: nothing to compare with yet)"
        if reading.previous is None
        else f"agrees with the level before up to t = {q.t_end:.3g}"
    )
    return (
        f"beta = {beta:g}, N = {N}: {window}; min W2 = {q.min_w2:.4g} at t* = {q.t_star:.3g}{edge}, band "
        f"entry {q.t_entry:.3g}; resolution ratio {reading.ratio:.3g}; {status}"
    )


def _under_resolved(inputs: ConcentrationInputs, beta: float, part: xr.Dataset) -> str:
    from ...science.metrics import RESOLUTION_OK, tokens_for_ratio

    att = inputs.model.attention
    need = tokens_for_ratio(att.d, beta, att.norm_B)
    return (
        f"beta = {beta:g} is under-resolved at N = {part.attrs['N']}: resolution ratio "
        f"{part.attrs['resolution_ratio']:.3g} >= {RESOLUTION_OK:g} (token spacing against the kernel "
        f"width 1/sqrt(beta |B^T x|)). The N-particle system then follows an argmax over tokens, not the "
        f"mean-field equation; its t* and min W2 are left out of the fits. About N = {need} tokens "
        f'give ratio {RESOLUTION_OK:g} (N = "auto" with N_max >= {need}).'
    )


EXPERIMENT = Experiment(
    name="concentration",
    description=doc_summary(__doc__),
    Config=ConcentrationConfig,
    run=run,
    summarize=summarize,
    figures=figures,
    captions=CAPTIONS,
    presets=PRESETS,
    sweep_figures=sweep_figures,
    part_keys=tuple(sorted(LADDER_KEYS)),
    # a point's verdict on N before its numbers: an under-resolved t* is not a result
    sweep_columns=("status", "N_used", "resolution_ratio", "t_star", "min_w2"),
)
