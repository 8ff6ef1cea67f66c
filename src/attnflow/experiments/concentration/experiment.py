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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, field_validator, model_validator

from ...io import json_attr
from ...progress import Reporter
from ...science.claims import BetaData, ClaimData
from ...science.convergence import (
    QUANTITIES,
    STATUSES,
    LadderRules,
    LevelReading,
    converged_window,
    curve_quantities,
    judge_ladder,
)
from ...science.metrics import RESOLUTION_OK
from ...science.uncertainty import Measured
from ..common import base_attrs, finite_or_none, fit_or_reason, time_grid, warn_assumptions
from ..config import Angle, Seed, SimulationConfig, check_betas
from ..inputs import integration, model_inputs
from ..model import FlowConfig, weights_attention
from ..needs import INVERTIBLE_B, LIMIT, Need
from ..parts import cached_part, fingerprint, part_done, part_name
from ..registry import Experiment, doc_summary
from .evidence import TimeStepProbe, beta_evidence, claim_data, time_step_probe
from .figures import CAPTIONS, figures, sweep_figures
from .levels import (
    CURVES,
    Cloud,
    CloudCache,
    ConcentrationInputs,
    Ladder,
    Simulations,
    batch_betas,
    departure_time,
    graded_clouds,
    meanfield_level,
    reduce_level,
    separatrix_part,
    zero_temperature,
)
from .presets import PRESETS

# the keys of the N ladder: they choose which levels run, not what one level computes
LADDER_KEYS = frozenset({"betas", "N", "N_min", "N_max", "tol", "streak", "curve_atol", "curve_rtol"})


class ConcentrationConfig(SimulationConfig, FlowConfig):
    """Config of the `concentration` experiment (the default of `attnflow run`)."""

    experiment: Literal["concentration"] = "concentration"
    graded_init: ClassVar[bool] = True  # init = graded: rho_0 per beta, N_min..N_max its levels
    # W2 to Pi_# rho_0 of one head's A, and the zero-temperature curve beside the finite betas
    needs: ClassVar[tuple[Need, ...]] = (INVERTIBLE_B, LIMIT)
    one_head: ClassVar[bool] = True
    betas: list[PositiveFloat] = Field(
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

    @field_validator("betas")
    @classmethod
    def _betas(cls, v: list[float]) -> list[float]:
        return check_betas(v)

    def saved_cloud(self) -> tuple[int, int]:
        return max(1, len(self.seeds)), super().saved_cloud()[1]

    @model_validator(mode="after")
    def _ladder(self):
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


@dataclass(frozen=True, eq=False)
class _Run:
    """What the ladders of one run share: its inputs, run folder and fingerprint, reporter, the
    beta-free clouds, the simulations, the zero-temperature reference curve (or None), and the cost
    of each level of a ladder in the units of the overall bar (`level_costs`)."""

    inputs: ConcentrationInputs
    out: Path | None
    fp: str
    reporter: Reporter
    clouds: CloudCache
    simulations: Simulations
    w2_zero: np.ndarray | None
    costs: tuple[float, ...]

    def part(self, name: str, compute: Callable[[], Any]) -> Any:
        return cached_part(self.out, name, self.fp, compute, self.reporter)


def _zero_part(inputs: ConcentrationInputs, clouds: CloudCache) -> Any:
    return zero_temperature(inputs, clouds[inputs.Ns[0]])


def level_costs(inputs: ConcentrationInputs) -> tuple[float, ...]:
    """The cost of each planned level of a ladder, N^2 (the attention's pairs: what a level's time
    grows like): the overall bar advances by it, so that its ETA weighs the slow last levels."""
    return tuple(float(N) ** 2 for N in inputs.Ns)


def _batched(inputs: ConcentrationInputs, out: Path | None, fp: str) -> bool:
    """Whether the betas run together: a small fixed-N, fixed-step run (batch_betas) with a level
    left to compute."""
    if inputs.auto or not batch_betas(inputs, inputs.Ns[0]):
        return False
    names = [part_name(beta=b, N=inputs.Ns[0]) for b in inputs.betas]
    return not all(part_done(out, n, fp) for n in names)


def run(config: ConcentrationConfig, out: Path | None = None, progress: Reporter | None = None):
    """Run the experiment; with `out`, every finished (beta, N) level is kept in out/parts, and with
    init = graded every beta's separatrix search."""
    reporter = progress or Reporter()
    start = time.perf_counter()
    inputs = concentration_inputs(config)
    warn_assumptions(inputs.model.attention, reporter)
    fp = fingerprint(config, exclude=set(EXPERIMENT.part_keys))
    clouds = CloudCache(inputs)
    costs = level_costs(inputs)  # the zero-temperature part and the time-step probe: a first level each
    reporter.overall(
        2 * costs[0] + len(inputs.betas) * sum(costs),
        f"concentration: {len(inputs.betas)} betas, N = {config.N}",
    )
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    zero = cached_part(out, "zero", fp, partial(_zero_part, inputs, clouds), reporter)
    zero_info = json_attr(zero, "zero", {})
    w2_zero = zero.w2_zero.values if zero_info.get("kind", "").startswith("N = infinity") else None
    timings["zero_temperature_s"] = time.perf_counter() - t0
    reporter.advance(costs[0])
    simulations = Simulations(inputs, reporter, batched=_batched(inputs, out, fp))
    shared = _Run(inputs, out, fp, reporter, clouds, simulations, w2_zero, costs)
    ladders = []
    for beta in inputs.betas:
        t0 = time.perf_counter()
        ladders.append(_ladder(shared, beta))
        timings[f"beta={beta:g}_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    probe = _time_step_probe(shared, ladders)
    timings["time_step_probe_s"] = time.perf_counter() - t0
    reporter.advance(costs[0])
    evidence = [beta_evidence(inputs, lad, probe) for lad in ladders]
    ds = _assemble(inputs, ladders, zero, evidence)
    if inputs.model.theorem()[0] and not inputs.meanfield:  # (a mean-field run stores no tokens)
        ds["x_zero"] = (("time", "token", "dim"), _tokens_at_zero_temperature(inputs, ladders[0].cloud, ds))
    timings["total_s"] = time.perf_counter() - start
    claims = claim_data(inputs, evidence, zero, zero_info)
    ds.attrs = base_attrs(config, reporter, timings, **_attrs(inputs, ds, ladders, claims, probe, zero_info))
    _long_names(ds, inputs.eps, zero_info, inputs.model.theorem())
    return ds


def _level(shared: _Run, clouds: Mapping[int, Cloud], beta: float, N: int) -> Any:
    """The part of level N at beta: its trajectory, reduced."""
    cloud = clouds[N]
    return reduce_level(shared.inputs, beta, cloud, shared.simulations.level(beta, cloud))


def _time_step_probe(shared: _Run, ladders: list[Ladder]) -> TimeStepProbe:
    """The time-step error probe: the largest beta's first level again, with tighter tolerances
    (a part of the run folder, `..._timestep`)."""
    from .levels import simulate_level

    inputs = shared.inputs
    lad = max(ladders, key=lambda lad: lad.beta)
    base = lad.parts[0]
    N = int(base.attrs["N"])
    if inputs.meanfield:  # level 0 again at the tighter tolerances
        tighter = inputs.solver.tighter()
        probe = partial(meanfield_level, inputs, lad.beta, 0, tighter, shared.reporter)
        part = shared.part(f"{part_name(beta=lad.beta, level=0)}_timestep", probe)
        return time_step_probe(inputs, base, part, shared.w2_zero, tighter.label)
    cloud = lad.clouds[N]
    tight = inputs.solver.tighter()

    def compute() -> Any:
        run = simulate_level(inputs, lad.beta, cloud, shared.reporter, solver=tight)
        return reduce_level(inputs, lad.beta, cloud, run)

    part = shared.part(f"{part_name(beta=lad.beta, N=N)}_timestep", compute)
    return time_step_probe(inputs, base, part, shared.w2_zero, tight.label)


def _reading(inputs: ConcentrationInputs, parts: list[Any], w2_zero: np.ndarray | None) -> LevelReading:
    """What the latest level of a ladder says: its curve inside the window where it agrees with the
    level before (the first level: its whole curve, the reference of the second), that coarser curve
    read in the same window, its resolution ratio and departure time."""
    times, part = inputs.times, parts[-1]
    w2 = part.w2.values.mean(axis=0)
    t_end, previous = None, None
    if len(parts) > 1:
        coarse = parts[-2].w2.values.mean(axis=0)
        t_end = converged_window(times, w2, coarse, inputs.curve_atol, inputs.curve_rtol)
        previous = curve_quantities(times, coarse, t_end, band=inputs.band, reference=w2_zero)
    depart = departure_time(times, part.mass_A.values.mean(axis=0))
    return LevelReading(
        N=int(part.attrs["N"]),
        quantities=curve_quantities(times, w2, t_end, band=inputs.band, reference=w2_zero),
        ratio=float(part.attrs["resolution_ratio"]),
        previous=previous,
        times={"t_depart": depart.t},
        bias={"t_depart": depart.bias},
    )


def _ladder(shared: _Run, beta: float) -> Ladder:
    """The ladder of one beta: levels until the verdict says stop (graded levels: until converged or
    the last node count <= N_max, see graded_clouds; the others: converged, or 2 N > N_max)."""
    inputs, reporter = shared.inputs, shared.reporter
    if inputs.meanfield:
        return _meanfield_ladder(shared, beta)
    search, Ns = None, inputs.Ns
    clouds: Mapping[int, Cloud] = shared.clouds
    if inputs.graded:  # the levels are the grading's: their N are node counts, known once searched
        compute = partial(separatrix_part, inputs, beta, reporter)
        search = shared.part(f"{part_name(beta=beta)}_separatrix", compute)
        graded = {c.N: c for c in graded_clouds(inputs, beta, search)}
        clouds, Ns = graded, tuple(graded)
    parts: list[Any] = []
    readings: list[LevelReading] = []
    costs = shared.costs
    for N in Ns:
        parts.append(shared.part(part_name(beta=beta, N=N), partial(_level, shared, clouds, beta, N)))
        readings.append(_reading(inputs, parts, shared.w2_zero))
        decision = judge_ladder(readings, inputs.rules)
        reporter.info(_level_line(beta, N, readings[-1], decision.status))
        reporter.advance(costs[len(parts) - 1] if len(parts) <= len(costs) else 0.0)
        if (decision.status == "converged") if inputs.graded else decision.done:
            break
    reporter.advance(sum(costs[len(parts) :]))  # the levels a converged ladder skips
    if decision.status == "under-resolved":
        reporter.warn(_under_resolved(inputs, beta, parts[-1]))
    return Ladder(beta, tuple(parts), tuple(r.quantities for r in readings), decision, clouds, search)


#: init = meanfield: the most refinement levels of one beta (each halves the spacings)
MEANFIELD_LEVELS = 4


def _meanfield_ladder(shared: _Run, beta: float) -> Ladder:
    """init = meanfield: levels 0, 1, ... of the mean-field flow at beta, until the verdict says
    converged, the next level's node count would pass N_max, or MEANFIELD_LEVELS."""
    inputs, reporter = shared.inputs, shared.reporter
    parts: list[Any] = []
    readings: list[LevelReading] = []
    for level in range(MEANFIELD_LEVELS):
        compute = partial(meanfield_level, inputs, beta, level, inputs.solver, reporter)
        parts.append(shared.part(part_name(beta=beta, level=level), compute))
        readings.append(_reading(inputs, parts, shared.w2_zero))
        decision = judge_ladder(readings, inputs.rules)
        reporter.info(_level_line(beta, readings[-1].N, readings[-1], decision.status))
        reporter.advance(shared.costs[level] if level < len(shared.costs) else 0.0)
        if decision.status == "converged" or 2 * readings[-1].N > inputs.rules.N_max:
            break
    reporter.advance(sum(shared.costs[len(parts) :]))
    return Ladder(beta, tuple(parts), tuple(r.quantities for r in readings), decision, {}, None)


def _separatrix_record(search: Any) -> dict[str, Any]:
    """What summary.json says of one beta's separatrix search (init = graded)."""
    return {
        "angles": [float(a) for a in search.angles.values],
        "width": float(search.attrs["width"]),
        "passes": len(json_attr(search, "passes", [])),
        "search_s": float(search.attrs["wall_s"]),
    }


def _level_line(beta: float, N: int, reading: LevelReading, status: str) -> str:
    q = reading.quantities
    edge = " (at the window's end)" if q.edge else ""
    return (
        f"beta = {beta:g}, N = {N}: converged window t <= {q.t_end:.3g}, min W2 = {q.min_w2:.4g} at "
        f"t* = {q.t_star:.3g}{edge}, band entry {q.t_entry:.3g}; resolution ratio {reading.ratio:.3g}; "
        f"{status}"
    )


def _under_resolved(inputs: ConcentrationInputs, beta: float, part: Any) -> str:
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


def _tokens_at_zero_temperature(inputs: ConcentrationInputs, c: Cloud, ds) -> np.ndarray:
    """The stored tokens of the first beta's last level (its cloud c) under the exact zero-temperature
    flow (it is local: the kept tokens alone give their own paths)."""
    from ...dynamics.zero_temperature import simulate_zero_temperature

    X = c.X0[0][c.keep][: ds.sizes["token"]]
    if not len(X):  # n_keep = 0: no token is stored
        return np.zeros((len(inputs.times), 0, inputs.model.d), dtype=np.float32)
    return simulate_zero_temperature(X, inputs.model.head_at(math.inf), inputs.times).x.astype(np.float32)


#: the columns of the ladder table (beta, level): N, the window's end, the windowed quantities, ratio
LADDER_COLUMNS = ("N", "window", *(q for q, spec in QUANTITIES.items() if spec.windowed), "ratio")


def _ladder_table(ladders: list[Ladder]) -> dict[str, Any]:
    """ladder_<column> (beta, level) for LADDER_COLUMNS, NaN where a beta ran fewer levels."""
    L = max(len(lad.parts) for lad in ladders)
    table = {k: np.full((len(ladders), L), np.nan) for k in LADDER_COLUMNS}
    for i, lad in enumerate(ladders):
        for j, (p, q) in enumerate(zip(lad.parts, lad.quantities, strict=True)):
            row = {"N": p.attrs["N"], "window": q.t_end, "ratio": p.attrs["resolution_ratio"]}
            for k in LADDER_COLUMNS:
                table[k][i, j] = row[k] if k in row else getattr(q, k)
    return {f"ladder_{k}": (("beta", "level"), v) for k, v in table.items()}


def _per_beta_variables(evidence: list[BetaData]) -> dict[str, Any]:
    """The per-beta variables of the Dataset: each quantity's value, N -> infinity estimate is not
    here (see _assemble), total error and convergence flag; the near-minimal band; the curve's error."""
    data: dict[str, Any] = {}
    for key in QUANTITIES:
        q = [e.quantities[key] for e in evidence]
        data[f"{key}_error"] = (("beta",), [m.error for m in q])
        data[f"{key}_converged"] = (("beta",), np.array([m.usable for m in q], dtype=bool))
    data["t_star_lo"] = (("beta",), [e.t_band[0] for e in evidence])
    data["t_star_hi"] = (("beta",), [e.t_band[1] for e in evidence])
    data["w2_error"] = (("beta", "time"), np.stack([e.w2_error for e in evidence]))
    return data


def _assemble(inputs: ConcentrationInputs, ladders: list[Ladder], zero: Any, evidence: list[BetaData]):
    """One Dataset: the final level's curves per beta, the ladder per beta and level."""
    import xarray as xr

    finals = [lad.parts[-1] for lad in ladders]
    decisions = [lad.decision for lad in ladders]
    n_tok = min(p.sizes["token"] for p in finals)
    # the headline scalars first (sweeps list the first few of a point's scalars)
    data: dict[str, Any] = {k: (("beta",), [d.quantities[k]["value"] for d in decisions]) for k in QUANTITIES}
    data["N_used"] = (("beta",), [d.N for d in decisions])
    data["resolution_ratio"] = (("beta",), [float(p.attrs["resolution_ratio"]) for p in finals])
    data["status"] = (("beta",), np.array([d.status for d in decisions], dtype=str))
    for key in QUANTITIES:
        data[f"{key}_estimate"] = (("beta",), [d.quantities[key]["estimate"] for d in decisions])
    data.update(_per_beta_variables(evidence))
    for name in CURVES:
        per = np.stack([p[name].values for p in finals])  # (beta, seed, time)
        data[name] = (("beta", "time"), per.mean(axis=1))
        if per.shape[1] > 1:
            data[f"{name}_seed_std"] = (("beta", "time"), per.std(axis=1, ddof=1))
    data["x"] = (("beta", "time", "token", "dim"), np.stack([p.x.values[:, :n_tok] for p in finals]))
    data.update(_ladder_table(ladders))
    basis = inputs.model.spectrum.top.basis
    data["basis_A"] = (("dim", "k"), basis)
    coords = {
        "beta": [lad.beta for lad in ladders],
        "time": inputs.times,
        "level": np.arange(max(len(lad.parts) for lad in ladders)),
        "token": np.arange(n_tok),
    }
    ds = xr.Dataset(data, coords=coords).merge(zero.drop_attrs())
    return ds.assign_coords(dim=np.arange(basis.shape[0]))


def _convergence(ladders: list[Ladder], claims: ClaimData) -> dict[str, Any]:
    """beta -> its convergence record for attrs["convergence"]: status, N, levels, ratio, and per
    quantity its value, estimate, error (the total), converged, reason, tol and error parts."""
    out = {}
    for lad, ev in zip(ladders, claims.betas, strict=True):
        decision = lad.decision
        out[f"{lad.beta:g}"] = {
            "status": decision.status,
            "N": decision.N,
            "levels": [int(p.attrs["N"]) for p in lad.parts],
            "resolution_ratio": float(lad.parts[-1].attrs["resolution_ratio"]),
            **{k: _quantity_record(ev.quantities[k], decision.quantities[k]) for k in QUANTITIES},
        }
    return out


def _quantity_record(q: Measured, ladder: Mapping[str, Any]) -> dict[str, Any]:
    """A quantity in attrs["convergence"]: its Measured record and the ladder's N -> infinity estimate."""
    return {**q.to_dict(), "estimate": finite_or_none(ladder["estimate"])}


def _theorem_bound(inputs: ConcentrationInputs, ds, claims: ClaimData) -> dict:
    """The fit of Theorem 1's bound over the converged betas, before the terminal phase (or why not)."""
    from ...science.fits import fit_theorem_bound

    conv = [b.beta for b in claims.betas if b.status == "converged"]
    depart = [b.quantities["t_depart"].value for b in claims.betas]
    t_cut = np.nanmin(depart) if conv and np.isfinite(depart).any() else inputs.t_max
    sel = ds.time.values < t_cut
    if len(conv) < 2 or sel.sum() < 3:
        return {"error": "needs >= 2 converged betas and 3 saved times before the terminal phase"}
    idx = [list(ds.beta.values).index(b) for b in conv]
    w2 = np.maximum(ds.w2.values[idx][:, sel], 1e-300)
    bound = fit_or_reason(fit_theorem_bound, ds.time.values[sel], w2, conv)
    return {**bound, "betas": conv, "t_before": float(t_cut)}


def _attrs(
    inputs: ConcentrationInputs,
    ds,
    ladders: list[Ladder],
    claims: ClaimData,
    probe: TimeStepProbe,
    zero_info: dict,
) -> dict[str, Any]:
    """The run's attrs beyond base_attrs: fits and the claims table over converged betas, convergence
    per beta, the time-step probe, the solver infos, the model, the separatrix searches; every
    theorem row "not applicable" when the model is not the theorem's (several heads, a mask, usa,
    another layer norm, noise: its bound is then not fitted) or the weights fail assumption 1 (e.g.
    symmetric = false: W2 is then measured to the limit of the spectral projector)."""
    from ...science.assumptions import FAILS, check_assumptions
    from ...science.claims import claims_table, not_applicable

    rows = [row.to_dict() for row in claims_table(claims)]
    applies, why = inputs.model.theorem()
    first = check_assumptions(inputs.model.attention)[0]
    if not applies:
        rows = not_applicable(rows, why)
    elif first.status == FAILS:
        rows = not_applicable(
            rows, f"assumption 1 of the theorem fails: {first.reason} It says nothing here."
        )
    fits: dict[str, Any] = {"claims_betas": {r["key"]: r["betas"] for r in rows}}
    fits["theorem_bound"] = (
        _theorem_bound(inputs, ds, claims) if applies else {"error": f"not applicable: {why}"}
    )
    solver = [json_attr(lad.parts[-1], "solver", {}) for lad in ladders]
    kernel = inputs.solver.kernel
    if kernel == "auto":
        kernel = f"auto -> {', '.join(sorted({s.get('kernel', '?') for s in solver}))}"
    return {
        "kernel": kernel,
        "integrator": inputs.solver.label,
        "solver": solver,
        "fits": fits,
        "claims": rows,
        "convergence": _convergence(ladders, claims),
        "time_step": probe.to_dict(),
        "zero": zero_info,
        "model": inputs.model.description,
        "theorem": {"applies": applies, "reason": why},
        "separatrices": {
            f"{lad.beta:g}": _separatrix_record(lad.search) for lad in ladders if lad.search is not None
        },
    }


def _long_names(ds, eps: float, zero_info: dict, theorem: tuple[bool, str]) -> None:
    beyond = "" if theorem[0] else " of head 0's A, a reference only (the theorem does not apply)"
    long = {
        "w2": f"exact W2(rho^beta_t, Pi_# rho_0), chordal cost{beyond}",
        "coupling_bound": "synchronous coupling UPPER BOUND on W2(rho^beta_t, Pi_# rho_0)",
        "w2_zero": f"W2(rho^inf_t, Pi_# rho_0) of the zero-temperature flow ({zero_info.get('kind')})",
        "mass_A": f"mass within {eps:g} rad of A's top eigenspace",
        "mass_V": f"mass within {eps:g} rad of V's top eigenspace",
        "x": "positions of a seeded subset of tokens (float32), at the last level",
        "status": f"{' | '.join(STATUSES)} (attnflow.science.convergence)",
    }
    for k, v in long.items():
        if k in ds.variables:
            ds[k].attrs["long_name"] = v


def _headline(ds, key: str, beta: float) -> Any:
    """One per-beta quantity of the summary: {value, error, converged} (its total error and its own
    convergence), or the bare value for a Dataset written before they were stored."""
    value = finite_or_none(ds[key].sel(beta=beta))
    if f"{key}_converged" not in ds.variables:
        return value
    return {
        "value": value,
        "error": finite_or_none(ds[f"{key}_error"].sel(beta=beta)),
        "converged": bool(ds[f"{key}_converged"].sel(beta=beta)),
    }


def summarize(ds) -> dict[str, Any]:
    """Headline numbers: per beta the status, N, t*, min W2 (each with its error and its own
    convergence); the claims table; the time-step probe; timing."""
    cfg = json_attr(ds, "config", {})
    conv = json_attr(ds, "convergence", {})
    headline = [k for k, q in QUANTITIES.items() if q.headline]
    per_beta = {
        f"{b:g}": {
            "status": str(ds.status.sel(beta=b).values),
            "N": int(ds.N_used.sel(beta=b)),
            **{k: _headline(ds, k, b) for k in headline},
            "resolution_ratio": finite_or_none(ds.resolution_ratio.sel(beta=b)),
        }
        for b in ds.beta.values.tolist()
    }
    zero = json_attr(ds, "zero", {})
    return {
        "experiment": cfg.get("experiment"),
        "model": ds.attrs.get("model"),
        "N": cfg.get("N"),
        "per_beta": per_beta,
        "claims": json_attr(ds, "claims", []),
        "convergence": conv,
        "time_step": json_attr(ds, "time_step", {}),
        "zero_temperature": {
            k: zero.get(k) for k in ("kind", "reason", "guaranteed", "c_star", "local_rates") if k in zero
        },
        "separatrices": json_attr(ds, "separatrices", {}),
        "theorem": json_attr(ds, "theorem", {"applies": True, "reason": ""}),
        "warnings": json_attr(ds, "warnings", []),
        "wall_time_s": json_attr(ds, "timings", {}).get("total_s"),
    }


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
