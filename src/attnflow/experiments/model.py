"""The config keys of the weights Q, K, V and of the initial measure rho_0, shared by the experiments
that integrate the flow; their choices, descriptions and checks come from the registries.

    weights = a name of attnflow.attention.WEIGHTS:
              "worked-example"      d = 3 example of docs/math.md (the default)
              "worked-example-2d"   d = 2 example of docs/math.md
              "random"              seeded by `weights_seed`, dimension `d` (default 3), of the law
                                    `ensemble`: "conditioned" (V = S B^{-T} with S symmetric, the
                                    theorem applies, unless symmetric = false), "gaussian" (N(0, 1/d)),
                                    "goe" (Q = I, K and V symmetric Gaussian), "gpt2-init" (N(0, 0.02^2))
              "identity"            Q = K = V = I in dimension `d` (default 3)
              or "path/to/file.npz" arrays Q, K, V (d x d)
    init    = a name of attnflow.measures.DISCRETISATIONS:
              "uniform"     N i.i.d. tokens from rho_0 (seeded), equal weights
              "fibonacci"   the Fibonacci lattice on S^2 (d = 3 only), equal weights
              "quadrature"  deterministic nodes (equispaced on S^1, Fibonacci on S^2) whose weights
                            carry rho_0 (docs/math.md, "Weighted measures")
              "graded"      `concentration` only: nodes graded logarithmically toward the separatrices
                            of the flow at each beta (d = 2, attnflow.dynamics.separatrix; d = 3 toward
                            the sources and the separatrix, attnflow.dynamics.sources: uniform rho_0 and
                            weights symmetric under the reflection through u_2^perp), weights carrying
                            rho_0; the levels of the N ladder are the grading's levels
              "meanfield"   d = 2, `concentration` only: the mean-field measure with its exponentially
                            small tail kept (attnflow.science.meanfield); its refinement levels are the
                            ladder's, N their initial node counts
    density = a name of attnflow.measures.MEASURES: "uniform" or "vmf" (von Mises-Fisher of
              concentration `kappa` around A's top eigenvector u_1): rho_0 itself. A density's
              parameters are config keys of the same name, except its mean direction (u_1), made
              from their declarations in MEASURES (`Parameter`, `density_keys`).

d follows from the weights; a key that does not exist in that d is a config error naming it. The
weights are made (drawn, or read) when the config is made, once per distinct value of these keys
(`weights_attention`): their entries must stay in float64's range, and they must meet what the
experiment needs of them (its `needs`, attnflow.experiments.needs), else the config is refused in one
line. `attnflow.experiments.inputs` turns these keys into objects, once per run.

`FlowConfig` adds the keys of the model beyond the single head (attnflow.flow.Dynamics, of the same
names): its fields marked `FlowKey`, read as one table by FLOW_FIELDS (name, type, default,
description, whether it departs from the paper's flow, whether the phase diagram may vary it, whether
it is a keyword of Dynamics), from which the run's Dynamics, `flow_departures` and the phase
diagram's `vary` choices follow. Drawn weights
(weights = random) give `heads` independent draws and, with `redraw = T`, fresh draws every T units
of time; other weights give `heads` copies of their one head (averaged: the flow of one head).
Keys added after 0.1 enter the parts' fingerprint only when set to another value than their default
(`NEW_KEY`), so that run folders made before them are reused.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal, Self

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, create_model, model_validator

from .._threads import blas_threads
from ..attention import ENSEMBLES, WEIGHTS, Attention
from ..flow import LAYER_NORMS, MASKS, NOISE_KINDS, NORMALIZATIONS, USA_TIMES
from ..measures import DISCRETISATIONS, MEASURES
from ..measures.registry import or_list
from .config import ExperimentConfig, Seed
from .needs import Need, check_needs

if TYPE_CHECKING:
    from pydantic import BaseModel
    from pydantic.json_schema import JsonDict

    Init = str
    DensityName = str
    Ensemble = str
    Mask = str
    Normalization = str
    LayerNorm = str
    UsaTime = str
    NoiseKind = str
else:
    Init = Literal[tuple(DISCRETISATIONS)]
    DensityName = Literal[tuple(MEASURES)]
    Ensemble = Literal[ENSEMBLES]
    Mask = Literal[MASKS]
    Normalization = Literal[NORMALIZATIONS]
    LayerNorm = Literal[LAYER_NORMS]
    UsaTime = Literal[USA_TIMES]
    NoiseKind = Literal[NOISE_KINDS]

#: the extra of a key added after 0.1: it enters a part's fingerprint only when not at its default
NEW_KEY: JsonDict = {"fingerprint": "when-set"}


@dataclass(frozen=True)
class FlowKey:
    """The mark of a flow key, a FlowConfig field `Annotated[type, FlowKey(...)]`. departs: another
    value than its default departs from the paper's flow (`flow_departures`), for drawn weights only
    where drawn_only (copies of one head are one head); vary: the phase diagram may vary it
    (VARY_KEYS); dynamics: a keyword of attnflow.flow.Dynamics, passed as is (FLOW_KEYS; heads and
    redraw become heads and a Redraw in `inputs.flow_of`)."""

    departs: bool = False
    drawn_only: bool = False
    vary: bool = True
    dynamics: bool = True


@dataclass(frozen=True)
class FlowField:
    """One row of FLOW_FIELDS: a flow key's name, type, default, description and FlowKey."""

    name: str
    type: object  # the annotation (with its bounds), as pydantic reads it
    default: object
    description: str
    key: FlowKey


#: the experiment that builds rho_0 per beta (a discretisation with per_beta)
PER_BETA_EXPERIMENT = "concentration"
_FILE = "a path to an .npz holding Q, K, V"


def _weights_choice(name: str) -> str:
    family = WEIGHTS[name]
    return f"{name} (d = {family.d})" if family.d else f"{name} ({', '.join(('d', *family.keys))})"


def init_choice(name: str) -> str:
    """`name (what it is, where it exists)` of a discretisation, for descriptions."""
    entry = DISCRETISATIONS[name]
    words = [entry.summary, *([str(entry.dims)] if entry.dims.only else [])]
    words += [f"{PER_BETA_EXPERIMENT} only"] if entry.per_beta else []
    return f"{name} ({', '.join(words)})"


WEIGHTS_HELP = f"Q, K, V: {', '.join(_weights_choice(n) for n in WEIGHTS)} or {_FILE}"
INIT_HELP = f"rho_0 as tokens: {or_list(init_choice(n) for n in DISCRETISATIONS)}"
DENSITY_HELP = "rho_0: " + or_list(
    f"{n} ({f.description})" if f.parameters else n for n, f in MEASURES.items()
)


class _Keys(ExperimentConfig):
    """The keys of the weights and the names of rho_0 (ModelConfig adds the densities' parameters)."""

    weights: str = Field("worked-example", description=WEIGHTS_HELP)
    d: PositiveInt | None = Field(
        None, description="dimension of weights = random (default 3); other weights fix d themselves"
    )
    weights_seed: Seed = Field(0, description="seed of weights = random")
    symmetric: bool = Field(
        True, description="weights = random, ensemble = conditioned: A = V B^T symmetric with a gap"
    )
    ensemble: Ensemble = Field(
        "conditioned",
        description="weights = random: conditioned (B well conditioned, A = S symmetric unless symmetric "
        "= false), gaussian (Q, K, V ~ N(0, 1/d)), goe (Q = I, K, V symmetric Gaussian) or gpt2-init "
        "(N(0, 0.02^2))",
        json_schema_extra=NEW_KEY,
    )
    init: Init = Field("uniform", description=INIT_HELP)
    density: DensityName = Field("uniform", description=DENSITY_HELP)


def density_keys() -> dict[str, tuple[type[float], object]]:
    """The parameters of the densities of MEASURES (their `keys`) as config fields, name -> (type,
    Field), each name once (declared alike by every family that takes it)."""
    fields: dict[str, tuple[type[float], object]] = {}
    for p in {p.name: p for f in MEASURES.values() for p in f.keys}.values():
        families = or_list(n for n, f in MEASURES.items() if p in f.keys)
        description = f"{p.description} of density = {families}"
        fields[p.name] = (type(p.default), Field(p.default, gt=p.gt, description=description))
    return fields


if TYPE_CHECKING:
    _DensityKeys = _Keys
else:  # a class made from MEASURES, between the other keys and ModelConfig: the keys keep their order
    _DensityKeys = create_model("_DensityKeys", __base__=_Keys, __module__=__name__, **density_keys())


class ModelConfig(_DensityKeys):
    """Keys of the weights (Q, K, V) and of rho_0, shared by every experiment that runs the flow (the
    parameters of the densities, e.g. `kappa`, made from their declarations in MEASURES)."""

    # whether the experiment builds rho_0 per beta (init = graded): set by the experiments that do
    graded_init: ClassVar[bool] = False
    #: what the experiment needs of its weights (attnflow.experiments.needs), checked when it is made
    needs: ClassVar[tuple[Need, ...]] = ()

    def saved_cloud(self) -> tuple[int, int]:
        return 1, model_dimension(self)

    @model_validator(mode="after")
    def _model_keys(self) -> Self:
        check_init(self, model_dimension(self))  # loads an .npz once, with its errors
        if self.ensemble != "conditioned" and self.weights != "random":
            raise ValueError(
                f"ensemble = {self.ensemble} is the law of weights = random; weights = {self.weights} are "
                "not drawn (leave ensemble unset, or use weights = random)"
            )
        with blas_threads(1):  # d x d linear algebra: fastest on one thread, and on a busy machine
            att = weights_attention(self)
            check_needs(self, att)
            check_scores(self, att)
        return self


class FlowConfig(ModelConfig):
    """The keys of the model beyond the single head (attnflow.flow.Dynamics), for the experiments
    that integrate the finite-temperature flow."""

    heads: Annotated[PositiveInt, FlowKey(departs=True, drawn_only=True, dynamics=False)] = Field(
        1,
        description="attention heads, averaged (W_O^h = I/H): independent draws of weights = random, "
        "copies of the one head of other weights",
        json_schema_extra=NEW_KEY,
    )
    mask: Annotated[Mask, FlowKey(departs=True)] = Field(
        "none", description="none, or causal: token i attends to j <= i", json_schema_extra=NEW_KEY
    )
    normalization: Annotated[Normalization, FlowKey(departs=True)] = Field(
        "softmax",
        description="softmax, usa (unnormalised attention exp(beta x^T B y) / N), hardmax (each token "
        "attends to its maximisers of x^T B y; beta plays no part) or localmax (to those within sensitivity)",
        json_schema_extra=NEW_KEY,
    )
    sensitivity: Annotated[NonNegativeFloat, FlowKey()] = Field(
        0.0,
        description="normalization = localmax: its alignment sensitivity r > 0 (the tokens within r of "
        "the maximal score x^T B y count)",
        json_schema_extra=NEW_KEY,
    )
    usa_time: Annotated[UsaTime, FlowKey()] = Field(
        "model",
        description="normalization = usa: the model's own time, or rescaled by e^(-beta max ||B_h||)",
        json_schema_extra=NEW_KEY,
    )
    layer_norm: Annotated[LayerNorm, FlowKey(departs=True)] = Field(
        "post",
        description="post (the flow on the sphere), pre or peri (tokens in R^d, measured on x/|x|), ngpt",
        json_schema_extra=NEW_KEY,
    )
    alpha: Annotated[PositiveFloat, FlowKey()] = Field(
        1.0, description="layer_norm = ngpt: its step alpha", json_schema_extra=NEW_KEY
    )
    noise: Annotated[NonNegativeFloat, FlowKey(departs=True)] = Field(
        0.0,
        description="sigma of the noise sigma P_x^perp o dW (seeded by seed; a fixed-step integrator)",
        json_schema_extra=NEW_KEY,
    )
    noise_kind: Annotated[NoiseKind, FlowKey()] = Field(
        "independent",
        description="independent (one Brownian motion per token), or common (one rotation of the whole "
        "cloud, sigma o dW x with W on so(d)); needs noise > 0",
        json_schema_extra=NEW_KEY,
    )
    redraw: Annotated[PositiveFloat | None, FlowKey(departs=True, dynamics=False)] = Field(
        None,
        description="weights = random: fresh weights every redraw units of time (unset: fixed weights)",
        json_schema_extra=NEW_KEY,
    )

    # whether the experiment measures against one head's A (Pi, its eigenspaces): set by those that do
    one_head: ClassVar[bool] = False

    @model_validator(mode="after")
    def _flow_keys(self) -> Self:
        check_flow(self)
        return self


def flow_fields(config_class: type[BaseModel]) -> tuple[FlowField, ...]:
    """The flow keys of a config class, in its order: its fields marked FlowKey (a subclass may add
    its own)."""
    out = []
    for name, f in config_class.model_fields.items():
        keys = [m for m in f.metadata if isinstance(m, FlowKey)]
        bounds = [m for m in f.metadata if not isinstance(m, FlowKey)]
        kind = Annotated[(f.annotation, *bounds)] if bounds else f.annotation  # type: ignore[valid-type]
        out += [FlowField(name, kind, f.default, f.description or "", key) for key in keys]
    return tuple(out)


#: the flow keys of FlowConfig: the one table of the model's variants beyond the single head, from
#: which the run's Dynamics (FLOW_KEYS), flow_departures, the phase diagram's VARY_KEYS and the
#: descriptions of `attnflow list` are read
FLOW_FIELDS = flow_fields(FlowConfig)


def check_flow(config: FlowConfig) -> None:
    """The flow keys fit the weights, the integrator and the experiment: else ValueError naming them."""
    drawn = config.weights in WEIGHTS and WEIGHTS[config.weights].drawn
    if config.redraw is not None and not drawn:
        raise ValueError(
            f"redraw = {config.redraw:g} draws fresh weights; weights = {config.weights} are not drawn "
            "(use weights = random, or leave redraw unset)"
        )
    if config.noise > 0 and getattr(config, "integrator", None) == "adaptive":
        raise ValueError(
            f"noise = {config.noise:g} needs a fixed-step integrator (euler, heun or rk4, step dt), not "
            "integrator = adaptive"
        )
    if (config.normalization == "localmax") != (config.sensitivity > 0):
        raise ValueError(
            f"sensitivity = {config.sensitivity:g} with normalization = {config.normalization}: localmax "
            "needs sensitivity > 0 (sensitivity = 0 is hardmax), and only localmax takes one"
        )
    kernel, departs = getattr(config, "kernel", "auto"), flow_departures(config)
    if departs and kernel not in ("auto", "fused", "blocked", "sdpa"):
        raise ValueError(
            f"kernel = {kernel} computes one softmax head on the sphere; with {', '.join(departs)} use "
            "kernel = auto, fused, blocked or sdpa"
        )
    if config.noise_kind != "independent" and config.noise == 0:
        raise ValueError(
            f"noise_kind = {config.noise_kind} needs noise > 0 (sigma of the noise), got noise = 0"
        )
    if config.init in ("graded", "meanfield") and flow_departures(config):
        raise ValueError(
            f"init = {config.init} grades rho_0 toward the separatrices of one softmax head's flow; with "
            f"{', '.join(flow_departures(config))} use init = quadrature or uniform"
        )
    if config.one_head and drawn and (config.heads > 1 or config.redraw is not None):
        experiment = getattr(config, "experiment", "this experiment")
        what = f"heads = {config.heads} distinct heads" if config.heads > 1 else f"redraw = {config.redraw:g}"
        raise ValueError(
            f"{experiment} measures against one head's A (Pi, its eigenspaces); {what} of weights = random "
            "have no such A: use the phase-diagram experiment"
        )


#: the largest attention score beta ||B|| a run computes with, by arithmetic: the softmax subtracts
#: each row's maximum, but the scores themselves must be numbers (beta = 1e308 made NaN at once)
MAX_SCORE = {"float64": 1e300, "float32": 1e36}


def check_scores(config: ModelConfig, att: Attention) -> None:
    """The config's inverse temperatures (`betas` or `beta`) keep beta ||B|| within MAX_SCORE of its
    dtype: else ValueError naming the key and the largest beta that fits."""
    key = "betas" if hasattr(config, "betas") else "beta"
    value = getattr(config, key, None)
    betas = [b for b in (value if isinstance(value, list) else [value]) if isinstance(b, int | float)]
    dtype = getattr(config, "dtype", "float64")
    limit = MAX_SCORE.get(dtype, MAX_SCORE["float64"])
    if betas and max(betas) * att.norm_B > limit:
        raise ValueError(
            f"{key}: beta = {max(betas):g} with ||B|| = {att.norm_B:.3g} makes attention scores of "
            f"{max(betas) * att.norm_B:.3g}, beyond what {dtype} computes with ({limit:.0e}): use beta <= "
            f"{limit / att.norm_B:.3g}"
        )


def model_dimension(config: ModelConfig) -> int:
    """d of the run's weights (ValueError naming `weights` or `d` when they disagree)."""
    family = WEIGHTS.get(config.weights)
    if family is not None:
        return family.dimension(config.d)
    if config.d is not None:
        raise ValueError(f"d is set by the weights file {config.weights}; leave d unset")
    return weights_file(config.weights).d


def weights_attention(config: ModelConfig) -> Attention:
    """The Attention (beta = 1) of the config's weights keys: a file's as `weights_file` reads it, a
    family's made once per distinct value of its keys (`drawn_attention`); ValueError naming `weights`
    when its B or A leaves float64's range."""
    family = WEIGHTS.get(config.weights)
    if family is None:
        att = weights_file(config.weights)
    else:
        keys = tuple((k, getattr(config, k)) for k in family.keys)
        att = drawn_attention(config.weights, model_dimension(config), keys)
    try:
        att.B, att.A  # noqa: B018 - computed (and cached on att) here: their range is checked
    except ValueError as err:
        raise ValueError(f"weights = {config.weights}: {err}") from None
    return att


@lru_cache(maxsize=8)
def drawn_attention(name: str, d: int, keys: tuple[tuple[str, object], ...]) -> Attention:
    """The Attention of the WEIGHTS family `name` in d with its keys, made once."""
    return WEIGHTS[name].build(d, **dict(keys))


def weights_file(path: str) -> Attention:
    """The Attention (beta = 1) of weights = path, as the file holds it now: read once per content (the
    cache is keyed by the digest the parts' fingerprint covers, so an edited file is read again);
    ValueError naming `weights`."""
    from ..io import content_digest
    from ..io.paths import not_a_file

    if (why := not_a_file(path)) is not None:
        raise ValueError(f"weights = {path!r}: {why}; use {or_list(WEIGHTS)} or {_FILE}")
    return _weights_of(path, content_digest(path))


@lru_cache(maxsize=8)
def _weights_of(path: str, digest: str) -> Attention:
    from ..attention import load_attention

    return load_attention(path)


def check_init(config: ModelConfig, d: int) -> None:
    """density and init exist in d, init carries the density, and a per-beta init runs only where
    the experiment builds rho_0 per beta: else ValueError naming the key and what to use instead."""
    density, init = MEASURES[config.density], DISCRETISATIONS[config.init]
    if d not in density.dims:
        raise ValueError(
            f"density = {density.name} exists for {density.dims} only; these weights have d = {d}"
        )
    usable = [
        n
        for n, e in DISCRETISATIONS.items()
        if d in e.dims and e.carries(density.name) and (config.graded_init or not e.per_beta)
    ]
    others = or_list([n for n in usable if n != init.name] or ["uniform"])
    if d not in init.dims:
        raise ValueError(
            f"init = {init.name} ({init.summary}) exists for {init.dims} only; these weights have d = {d}: "
            f"use init = {others}"
        )
    if init.per_beta and not config.graded_init:
        experiment = getattr(config, "experiment", "this experiment")
        raise ValueError(
            f"init = {init.name} builds rho_0 per beta, which only the {PER_BETA_EXPERIMENT} experiment "
            f"does; {experiment} needs init = {others}"
        )
    if init.name == "graded" and d == 3 and density.name != "uniform":
        raise ValueError(
            f"init = graded in d = 3 carries density = uniform only (its search uses the symmetry x -> -x): "
            f"for density = {density.name} use init = {others}"
        )
    if not init.carries(density.name):
        raise ValueError(
            f"init = {init.name} carries density = {or_list(init.densities)} only: for density = "
            f"{density.name} use init = {others}"
        )


def flow_departures(config: FlowConfig) -> list[str]:
    """The flow keys of a config that depart from the paper's flow, as `key = value` (empty: none):
    those marked FlowKey(departs=True) at another value than their default (drawn_only: for drawn
    weights only)."""
    drawn = config.weights in WEIGHTS and WEIGHTS[config.weights].drawn
    return [
        f"{f.name} = {getattr(config, f.name)}"
        for f in flow_fields(type(config))
        if f.key.departs and getattr(config, f.name) != f.default and (drawn or not f.key.drawn_only)
    ]
