"""`metastability`: how long N tokens stay concentrated, mapped in (beta, N); its two branches.

docs/math.md, "Why concentration lasts longer than guaranteed": a cluster at u_1 is held by the tail
of the measure near y* = B^T u_1 / |B^T u_1|. For N tokens that tail is gone after about
log N / lambda, so the finite-N departure grows like a log N + b, while the mean-field departure
grows like (delta / lambda) beta: the metastable time of N tokens is about the smaller of the two.
Per point (cloud kind, beta, N) the departure t_depart: the first time after the mass within eps of
an atom +-u_1 of Pi_# rho_0 has passed 1/2 of the atom's mass that it falls below it again, read
between saved times; for random clouds over several seeds (one kernel call), with their spread.
Then the fits: a log N + b per beta, the mean-field branch t_mf(beta), the crossover N*(beta).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal, Self, TypeVar

import numpy as np
from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from ...io import json_attr
from ...measures import DISCRETISATIONS
from ...progress import Reporter
from ...science.curves import FORMED
from ..common import warn_assumptions
from ..config import Angle, Betas, SimulationConfig
from ..inputs import InitialMeasure, integration, model_inputs
from ..model import (
    WEIGHTS_HELP,
    Init,
    ModelConfig,
    check_init,
    init_choice,
    model_dimension,
    weights_attention,
)
from ..parts import part_name
from ..registry import Experiment, doc_summary
from ..units import Unit, Units
from .branches import BranchRules, MeanFieldRun, branch_fits, read_mean_field, result_store
from .figures import CAPTIONS
from .points import LEVEL, MetastabilityInputs, point_part
from .readings import STATUSES, assemble, timestep_error

if TYPE_CHECKING:
    import xarray as xr

    from ...attention import Attention

#: an item of a list key (Ns, seeds: int; inits: str)
_Item = TypeVar("_Item", int, str)

#: the default betas: log-spaced from 10 to 1000, denser where the branches cross (beta ~ 20 to 40
#: in the d = 2 worked example)
DEFAULT_BETAS = [10.0, 17.8, 31.6, 56.2, 100.0, 316.0, 1000.0]
#: the analysis keys: they change the fits, not what a point computes
ANALYSIS_KEYS = ("tol", "branch_gap", "mean_field")


class MetastabilityConfig(SimulationConfig, ModelConfig):
    """Config of the `metastability` experiment."""

    experiment: Literal["metastability"] = "metastability"
    # the clouds are `inits` (a grid axis), not one init: ModelConfig's key is fixed here to a
    # discretisation every d and density has, so that its checks pass, and is no config key
    init: ClassVar[str] = "uniform"  # type: ignore[misc]
    weights: str = Field("worked-example-2d", description=WEIGHTS_HELP)
    inits: list[Init] = Field(
        ["quadrature", "uniform"],
        description="the cloud kinds of the map, DISCRETISATIONS names: "
        + ", ".join(init_choice(n) for n in DISCRETISATIONS if not DISCRETISATIONS[n].per_beta)
        + "; a seeded kind makes one cloud per seed",
    )
    betas: Betas = Field(DEFAULT_BETAS, description="inverse temperatures beta (finite, > 0)")
    Ns: list[PositiveInt] = Field(
        [2**k for k in range(8, 17)], description="numbers of tokens N of the map (at least 2 each)"
    )
    seeds: list[NonNegativeInt] = Field(
        [0, 1, 2, 3], description="seeds of the random clouds (one kernel call per point for all)"
    )
    eps: Angle = Field(0.1, description="angle (radians) defining 'near' an atom +-u_1 and V's eigenspace")
    dt_save: PositiveFloat = Field(
        0.05, description="spacing of the saved times (departures read between them)"
    )
    margin: float = Field(
        1.5,
        ge=1.0,
        description="a point's horizon: margin x the larger prediction (log N/lambda, delta beta/lambda)",
    )
    t_max: PositiveFloat | None = Field(
        None, description="largest horizon of any point (unset: the predictions alone decide)"
    )
    chunk: PositiveFloat = Field(2.0, description="time integrated between two looks at the clusters")
    tol: PositiveFloat = Field(
        0.02, lt=1.0, description="a departure stopped growing with N when the two largest N agree within tol"
    )
    branch_gap: NonNegativeFloat = Field(
        1.0, description="finite-N fit: points at least this far below the mean-field departure"
    )
    mean_field: str | None = Field(
        None,
        description="a concentration run (folder) whose converged t_depart give the mean-field branch "
        "(unset: the heuristic slope delta/lambda, its intercept fitted to the map)",
    )
    rtol: PositiveFloat = Field(
        1e-5, description="relative tolerance of the adaptive integrator (every token held to it)"
    )
    atol: PositiveFloat = Field(1e-7, description="absolute tolerance of the adaptive integrator")
    time_step_probe: bool = Field(
        True, description="each beta's middle-N point again at 10x tighter tolerances: the time-step error"
    )

    @field_validator("Ns", "seeds", "inits")
    @classmethod
    def _distinct(cls, v: list[_Item]) -> list[_Item]:
        if not v or len(set(v)) != len(v):
            raise ValueError(f"must be a non-empty list of distinct values, got {v}")
        return sorted(v) if isinstance(v[0], int) else v

    @field_validator("Ns")
    @classmethod
    def _Ns(cls, v: list[int]) -> list[int]:
        if v[0] < 2:
            raise ValueError(f"every N must be at least 2 (two atoms, one token each), got {v[0]}")
        return v

    @model_validator(mode="after")
    def _map(self) -> Self:
        d = model_dimension(self)
        for name in self.inits:
            try:
                check_init(self.model_copy(update={"init": name}), d)
            except ValueError as err:
                raise ValueError(f"inits: {err}") from None
        att = weights_attention(self)
        problem = weights_problem(att)
        if problem:
            raise ValueError(
                f"weights = {self.weights}: {problem}; metastability times the departure of the clusters "
                "at the two atoms +-u_1 of Pi_# rho_0 and needs a one-dimensional top eigenspace of A with "
                "a gap: use other weights (`attnflow check` gives the numbers)"
            )
        check_point_sizes(self, att, d)
        if self.mean_field is not None:
            result_store(self.mean_field)
        return self


def weights_problem(att: Attention) -> str | None:
    """What keeps the weights from a map of departures (None: nothing): A's top eigenspace must be
    one line (the two atoms +-u_1), its eigenvalue not defective (Pi exists), and the gap must give
    lambda, the rate at which the flow drains its source (`claims.weights_data`; the finite-N
    branch's prediction log N / lambda)."""
    from ...science.claims import weights_data

    sp = att.spectrum()
    if sp.top.basis.shape[1] != 1:
        return f"A's top eigenspace has dimension {sp.top.basis.shape[1]} (not a line)"
    if not np.all(np.isfinite(sp.top_projector)):
        return "A's top eigenvalue is defective (Pi is not defined)"
    lam = weights_data(att).lam
    if not (math.isfinite(lam) and lam > 0):
        return "A has no spectral gap, so lambda (the rate the flow drains its source) is not defined"
    return None


#: more saved times than this in one point is refused when the config is made (horizon / dt_save)
MAX_POINT_TIMES = 10**7


def check_point_sizes(config: MetastabilityConfig, att: Attention, d: int) -> None:
    """The longest point's saved times (its horizon over dt_save) stay within MAX_POINT_TIMES, and
    one chunk of the largest point (seeds x N x d positions at chunk / dt_save times) within the
    memory of this machine: else ValueError naming dt_save, t_max, chunk or Ns."""
    from ..._checks import check_saved_memory
    from ...science.claims import weights_data

    w = weights_data(att)
    predicted = max(math.log(config.Ns[-1]) / w.lam, w.departure_slope * config.betas[-1], config.chunk)
    horizon = min(config.t_max or math.inf, config.margin * predicted)
    if not horizon / config.dt_save <= MAX_POINT_TIMES:
        raise ValueError(
            f"dt_save = {config.dt_save:g}: the longest point runs to t = {horizon:.4g} (margin x the larger "
            f"prediction, capped by t_max), {horizon / config.dt_save:.3g} saved times, more than "
            f"{MAX_POINT_TIMES:.0e}: raise dt_save or set a smaller t_max"
        )
    n_chunk = math.ceil(config.chunk / config.dt_save) + 1
    fix = f"chunk = {config.chunk:g} and dt_save = {config.dt_save:g} keep {n_chunk} times; lower Ns or seeds"
    check_saved_memory(n_chunk, (len(config.seeds), config.Ns[-1], d), 8, fix=fix, machine=True)


PRESETS = {
    "metastability-tiny": {
        "weights": "worked-example-2d",
        "betas": [15.0, 30.0, 100.0],
        "Ns": [32, 64, 128],
        "seeds": [0, 1],
        "dt_save": 0.1,
        "chunk": 3.0,
    },
}


def metastability_inputs(config: MetastabilityConfig) -> MetastabilityInputs:
    """The run's inputs, made from its config once."""
    from ...science.claims import weights_data

    model = model_inputs(config)
    density = model.rho0.density
    clouds = {name: InitialMeasure(density, DISCRETISATIONS[name]) for name in config.inits}
    return MetastabilityInputs(
        model=model,
        solver=integration(config),
        clouds=clouds,
        betas=tuple(config.betas),
        Ns=tuple(config.Ns),
        seeds=tuple(config.seeds),
        weights=weights_data(model.attention),
        eps=config.eps,
        dt_save=config.dt_save,
        margin=config.margin,
        t_cap=math.inf if config.t_max is None else config.t_max,
        chunk=config.chunk,
    )


def _rules(config: MetastabilityConfig) -> BranchRules:
    kinds = tuple(k for k in config.inits if not DISCRETISATIONS[k].seeded)
    return BranchRules(config.dt_save, config.tol, config.branch_gap, kinds)


def run(config: MetastabilityConfig, out: Path | None = None, progress: Reporter | None = None) -> xr.Dataset:
    """Every point of the map (a part of the run folder each), then the branches' fits."""
    reporter = progress or Reporter()
    units = Units(config, EXPERIMENT.part_keys, out, reporter)
    inputs = metastability_inputs(config)
    mean_field: MeanFieldRun | None = read_mean_field(config.mean_field) if config.mean_field else None
    warn_assumptions(inputs.model.attention, reporter)
    points = [(k, b, N) for k in inputs.clouds for b in inputs.betas for N in inputs.Ns]
    units.plan(
        len(points),
        f"metastability: {len(inputs.betas)} betas x {len(inputs.Ns)} N x {len(inputs.clouds)} kinds",
    )
    parts = {}
    for kind, beta, N in points:
        compute = partial(point_part, inputs, kind, beta, N, reporter)
        unit = Unit(part_name(init=kind, beta=beta, N=N), compute, timing=f"{kind}_beta={beta:g}_N={N}_s")
        parts[(kind, beta, N)] = units.run(unit)
    kinds = {name: rho0.init.seeded for name, rho0 in inputs.clouds.items()}
    t0 = time.perf_counter()
    probe = _time_step_probe(inputs, config, units, parts)
    units.timings["time_step_probe_s"] = time.perf_counter() - t0
    ds = assemble(kinds, inputs.betas, inputs.Ns, inputs.seeds, parts, probe.errors)
    fits = branch_fits(ds, _rules(config), inputs.weights, mean_field)
    units.finish(
        ds,
        kernel=config.kernel,
        integrator=inputs.solver.label + ", every token within the tolerance (max norm)",
        model=inputs.model.description.rsplit(" as ", 1)[0]
        + " as "
        + " and ".join(inputs.clouds)
        + " clouds",
        fits=fits,
        time_step=probe.record(),
        solver={name: json_attr(p, "solver", []) for name, p in _named(parts).items()},
    )
    _long_names(ds, config.eps)
    return ds


@dataclass(frozen=True)
class TimeStepProbe:
    """The time-step probe of a run: per beta, one point (kind, N) again with a tighter integrator;
    errors: beta -> the largest change of a cloud's departure (readings.timestep_error)."""

    kind: str
    N: int
    solver: str
    errors: dict[float, float]

    def record(self) -> dict[str, object]:
        return {
            "init": self.kind,
            "N": self.N,
            "solver": self.solver,
            "errors": {f"{b:g}": e for b, e in self.errors.items()},
        }


def _time_step_probe(
    inputs: MetastabilityInputs,
    config: MetastabilityConfig,
    units: Units,
    parts: dict[tuple[str, float, int], xr.Dataset],
) -> TimeStepProbe:
    """Each beta's point of the middle N (of the first deterministic kind, else the first kind)
    again with 10x tighter tolerances (parts `..._timestep`); none with time_step_probe = false."""
    deterministic = [k for k in config.inits if not DISCRETISATIONS[k].seeded]
    kind = (deterministic or config.inits)[0]
    N = inputs.Ns[len(inputs.Ns) // 2]
    tight = inputs.solver.tighter()
    errors: dict[float, float] = {}
    if config.time_step_probe:
        for beta in inputs.betas:
            compute = partial(point_part, inputs, kind, beta, N, units.reporter, tight)
            name = f"{part_name(init=kind, beta=beta, N=N)}_timestep"
            errors[beta] = timestep_error(parts[(kind, beta, N)], units.run(Unit(name, compute)))
    return TimeStepProbe(kind, N, tight.label + ", max norm", errors)


def _named(parts: dict[tuple[str, float, int], xr.Dataset]) -> dict[str, xr.Dataset]:
    return {part_name(init=k, beta=b, N=N): p for (k, b, N), p in parts.items()}


def _long_names(ds: xr.Dataset, eps: float) -> None:
    ds["t_depart"].attrs["long_name"] = (
        f"departure: mass within {eps:g} rad of an atom +-u_1 falls below {LEVEL:g} of the atom's mass "
        f"after reaching {FORMED:g} (mean over the clouds that departed)"
    )
    ds["t_depart_error"].attrs["long_name"] = "its error: the seeds' standard error and the save grid's bias"
    ds["t_depart_spread"].attrs["long_name"] = "standard deviation of the departure over seeds"
    ds["departed"].attrs["long_name"] = "fraction of the point's clouds whose cluster departed"
    ds["t_end"].attrs["long_name"] = "time integrated to (the point stops once its clusters departed)"
    ds["horizon"].attrs["long_name"] = "largest time the point would have been integrated to"
    ds["status"].attrs["long_name"] = "; ".join(f"{k}: {v}" for k, v in STATUSES.items())


# -------------------------------------------------------------------------------------- summary


def summarize(ds: xr.Dataset) -> dict[str, object]:
    """The practitioner's law, the mean-field branch, per cloud kind the finite-N fits per beta and
    the map of departures."""
    from .summary import summary

    return summary(ds)


def figures(
    ds: xr.Dataset, outdir: str | Path, *, dpi: int | None = None, animation: bool = False
) -> list[Path]:
    """The heatmap of departures, the branches against log N, the crossover N*(beta)."""
    from ...plot import DPI
    from .figures import draw

    return draw(ds, Path(outdir), dpi=dpi or DPI)


EXPERIMENT = Experiment(
    name="metastability",
    description=doc_summary(__doc__),
    Config=MetastabilityConfig,
    run=run,
    summarize=summarize,
    figures=figures,
    captions=CAPTIONS,
    presets=PRESETS,
    part_keys=("betas", "Ns", "inits", *ANALYSIS_KEYS),
)
