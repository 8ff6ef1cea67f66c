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
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, field_validator, model_validator

from ...io import json_attr
from ...progress import Reporter
from ..common import (
    base_attrs,
    finite_or_none,
    fit_or_reason,
    integrator_label,
    time_grid,
    warn_assumptions,
)
from ..config import Angle, SimulationConfig, check_betas
from ..model import ModelConfig, attention_of, describe_model
from ..parts import cached_part, fingerprint, part_done, part_name
from ..registry import Experiment, doc_summary
from .figures import CAPTIONS, figures, sweep_figures
from .levels import (
    Cloud,
    batch_betas,
    betas_together,
    departure_time,
    graded_clouds,
    make_cloud,
    reduce_level,
    separatrix_part,
    simulate_level,
    zero_temperature,
)
from .presets import PRESETS

# the keys of the N ladder: they choose which levels run, not what one level computes
LADDER_KEYS = frozenset({"betas", "N", "N_min", "N_max", "tol", "streak", "curve_atol", "curve_rtol"})


class ConcentrationConfig(SimulationConfig, ModelConfig):
    """Config of the `concentration` experiment (the default of `attnflow run`)."""

    experiment: Literal["concentration"] = "concentration"
    graded_init: ClassVar[bool] = True  # init = graded: rho_0 per beta, N_min..N_max its levels
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
    seeds: list[NonNegativeInt] = Field(
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

    @model_validator(mode="after")
    def _ladder(self):
        if self.N_min > self.N_max:
            raise ValueError(f"N_min = {self.N_min} must not exceed N_max = {self.N_max}")
        if self.seeds and self.init != "uniform":
            raise ValueError(f"seeds are random clouds: they need init = uniform, not {self.init}")
        if self.init == "graded" and self.N != "auto":
            raise ValueError(
                f'init = graded sets N per beta (the node counts of its levels): use N = "auto", not '
                f"N = {self.N}"
            )
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct, got {self.seeds}")
        return self


def _levels(config: ConcentrationConfig) -> list[int]:
    if config.N != "auto":
        return [int(config.N)]
    Ns = [config.N_min]
    while Ns[-1] * 2 <= config.N_max:
        Ns.append(Ns[-1] * 2)
    return Ns


def run(config: ConcentrationConfig, out: Path | None = None, progress: Reporter | None = None):
    """Run the experiment; with `out`, every finished (beta, N) level is kept in out/parts, and with
    init = graded every beta's separatrix search."""
    from ...science.convergence import CurveQuantities, converged_window, curve_quantities, judge_ladder
    from ...science.metrics import RESOLUTION_OK

    reporter = progress or Reporter()
    start = time.perf_counter()
    warn_assumptions(attention_of(config, 1.0), reporter)
    times = time_grid(config.t_max, config.dt_save)
    fp = fingerprint(config, exclude=set(EXPERIMENT.part_keys))
    Ns = _levels(config)
    graded = config.init == "graded"
    # init = graded: rho_0 depends on beta; a cloud that does not (zero temperature) uses quadrature
    base = config.model_copy(update={"init": "quadrature"}) if graded else config
    clouds: dict[int, Cloud] = {}

    def cloud(N: int) -> Cloud:
        if N not in clouds:
            clouds[N] = make_cloud(base, N)
        return clouds[N]

    reporter.overall(len(config.betas) + 1, f"concentration: {len(config.betas)} betas, N = {config.N}")
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    zero = cached_part(out, "zero", fp, lambda: zero_temperature(config, times, cloud(Ns[0]))[0], reporter)
    zero_info = json_attr(zero, "zero", {})
    w2_zero = zero.w2_zero.values if zero_info.get("kind", "").startswith("N = infinity") else None
    timings["zero_temperature_s"] = time.perf_counter() - t0
    reporter.advance()

    together = None
    if config.N != "auto" and batch_betas(config, Ns[0], config.betas):
        names = [part_name(beta=b, N=Ns[0]) for b in config.betas]
        if not all(part_done(out, n, fp) for n in names):
            together = betas_together(config, config.betas, cloud(Ns[0]), times, reporter)

    results, searches, first = {}, {}, None  # first: the cloud of the first beta's last level
    for beta in config.betas:
        t0 = time.perf_counter()
        levels, decision = [], None
        quantities: list[CurveQuantities] = []
        previous: list[CurveQuantities | None] = []
        if graded:  # the levels are the grading's: their N are node counts, known once the search is done

            def search(beta: float = beta) -> Any:
                return separatrix_part(config, beta, reporter)

            searches[beta] = cached_part(out, f"{part_name(beta=beta)}_separatrix", fp, search, reporter)
            ladder = [(c.N, lambda c=c: c) for c in graded_clouds(config, beta, searches[beta])]
        else:
            ladder = [(N, lambda N=N: cloud(N)) for N in Ns]
        for k, (N, this) in enumerate(ladder):

            def compute(beta=beta, this=this):
                x, info = (
                    together(beta) if together else simulate_level(config, beta, this(), times, reporter)
                )
                return reduce_level(config, beta, this(), times, x, info)

            part = cached_part(out, part_name(beta=beta, N=N), fp, compute, reporter)
            levels.append(part)
            w2 = part.w2.values.mean(axis=0)
            if k == 0:  # its whole curve: a ladder's first level is the reference of the second
                t_end = None
            else:
                coarse = levels[-2].w2.values.mean(axis=0)
                t_end = converged_window(times, w2, coarse, config.curve_atol, config.curve_rtol)
            quantities.append(
                curve_quantities(times, w2, t_end, band=config.t_star_rel_tol, reference=w2_zero)
            )
            previous.append(  # the coarser level read where the two curves agree
                None
                if k == 0
                else curve_quantities(times, coarse, t_end, band=config.t_star_rel_tol, reference=w2_zero)
            )
            departures = [departure_time(times, p.mass_A.values.mean(axis=0)) for p in levels]
            decision = judge_ladder(
                [p.attrs["N"] for p in levels],
                quantities,
                config.dt_save,
                float(times[-1]),
                float(part.attrs["resolution_ratio"]),
                RESOLUTION_OK,
                config.N_max if config.N == "auto" else int(config.N),
                config.tol,
                config.streak,
                extra_times={"t_depart": departures},
                previous=previous,
            )
            reporter.info(
                _level_line(beta, N, quantities[-1], decision.status, float(part.attrs["resolution_ratio"]))
            )
            # graded levels stop at the last node count <= N_max (graded_clouds), not at 2 N > N_max
            if (decision.status == "converged") if graded else decision.done:
                break
        assert decision is not None
        if decision.status == "under-resolved":
            reporter.warn(_under_resolved(config, beta, levels[-1]))
        results[beta] = (levels, quantities, decision)
        first = first or ladder[len(levels) - 1][1]()
        timings[f"beta={beta:g}_s"] = time.perf_counter() - t0
        reporter.advance()
    assert first is not None
    ds = _assemble(config, times, results, zero, zero_info)
    ds["x_zero"] = (("time", "token", "dim"), _tokens_at_zero_temperature(config, times, first, ds))
    timings["total_s"] = time.perf_counter() - start
    separatrices = {f"{b:g}": _separatrix_record(s) for b, s in searches.items()}
    _attach(ds, config, reporter, timings, results, zero_info, separatrices)
    return ds


def _separatrix_record(search: Any) -> dict[str, Any]:
    """What summary.json says of one beta's separatrix search (init = graded)."""
    return {
        "angles": [float(a) for a in search.angles.values],
        "width": float(search.attrs["width"]),
        "passes": len(json_attr(search, "passes", [])),
        "search_s": float(search.attrs["wall_s"]),
    }


def _level_line(beta: float, N: int, q: Any, status: str, ratio: float) -> str:
    edge = " (at the window's end)" if q.edge else ""
    return (
        f"beta = {beta:g}, N = {N}: converged window t <= {q.t_end:.3g}, min W2 = {q.min_w2:.4g} at "
        f"t* = {q.t_star:.3g}{edge}, band entry {q.t_entry:.3g}; resolution ratio {ratio:.3g}; {status}"
    )


def _under_resolved(config: ConcentrationConfig, beta: float, part: Any) -> str:
    from ...science.metrics import RESOLUTION_OK, tokens_for_ratio
    from ..model import attention_of

    att = attention_of(config, 1.0)
    need = tokens_for_ratio(att.d, beta, att.norm_B)
    return (
        f"beta = {beta:g} is under-resolved at N = {part.attrs['N']}: resolution ratio "
        f"{part.attrs['resolution_ratio']:.3g} >= {RESOLUTION_OK:g} (token spacing against the kernel "
        f"width 1/sqrt(beta |B^T x|)). The N-particle system then follows an argmax over tokens, not the "
        f"mean-field equation; its t* and min W2 are left out of the fits. About N = {need} tokens "
        f'give ratio {RESOLUTION_OK:g} (N = "auto" with N_max >= {need}).'
    )


def _tokens_at_zero_temperature(config, times, c: Cloud, ds) -> np.ndarray:
    """The stored tokens of the first beta's last level (its cloud c) under the exact zero-temperature
    flow (it is local: the kept tokens alone give their own paths)."""
    from ...dynamics.zero_temperature import simulate_zero_temperature
    from ..model import attention_of

    X = c.X0[0][c.keep][: ds.sizes["token"]]
    return simulate_zero_temperature(X, attention_of(config, math.inf), times).x.astype(np.float32)


def _assemble(config, times, results, zero, zero_info):
    """One Dataset: the final level's curves per beta, the ladder per beta and level."""
    import xarray as xr

    from ..model import attention_of

    betas = list(results)
    L = max(len(r[0]) for r in results.values())
    finals = [r[0][-1] for r in results.values()]
    n_tok = min(p.sizes["token"] for p in finals)
    data: dict[str, Any] = {}
    rs = list(results.values())
    # the headline scalars first (sweeps list the first few of a point's scalars)
    for key in ("t_star", "min_w2", "t_entry", "t_depart", "t_dev"):
        data[key] = (("beta",), [r[2].quantities[key]["value"] for r in rs])
    data["N_used"] = (("beta",), [r[2].N for r in rs])
    data["resolution_ratio"] = (("beta",), [float(r[0][-1].attrs["resolution_ratio"]) for r in rs])
    data["status"] = (("beta",), np.array([r[2].status for r in rs], dtype=str))
    for key in ("t_star", "min_w2", "t_entry", "t_depart", "t_dev"):
        data[f"{key}_estimate"] = (("beta",), [r[2].quantities[key]["estimate"] for r in rs])
        data[f"{key}_error"] = (("beta",), [r[2].quantities[key]["error"] for r in rs])
    for name in ("w2", "coupling_bound", "lyapunov", "mass_A", "mass_V"):
        per = np.stack([p[name].values for p in finals])  # (beta, seed, time)
        data[name] = (("beta", "time"), per.mean(axis=1))
        if per.shape[1] > 1:
            data[f"{name}_seed_std"] = (("beta", "time"), per.std(axis=1, ddof=1))
    data["x"] = (("beta", "time", "token", "dim"), np.stack([p.x.values[:, :n_tok] for p in finals]))
    names = ("N", "window", "t_star", "min_w2", "t_entry", "t_dev", "ratio")
    ladder = {k: np.full((len(betas), L), np.nan) for k in names}
    for i, (levels, qs, _) in enumerate(rs):
        for j, (p, q) in enumerate(zip(levels, qs, strict=True)):
            row = (p.attrs["N"], q.t_end, q.t_star, q.min_w2, q.t_entry, q.t_dev, p.attrs["resolution_ratio"])
            for k, v in zip(names, row, strict=True):
                ladder[k][i, j] = v
    for k, v in ladder.items():
        data[f"ladder_{k}"] = (("beta", "level"), v)
    sp = attention_of(config, 1.0).spectrum()
    data["basis_A"] = (("dim", "k"), sp.top.basis)
    ds = xr.Dataset(
        data, coords={"beta": betas, "time": times, "level": np.arange(L), "token": np.arange(n_tok)}
    )
    ds = ds.merge(zero.drop_attrs())
    return ds.assign_coords(dim=np.arange(sp.top.basis.shape[0]))


def _per_beta_record(ds, decision) -> dict[str, Any]:
    q = {k: dict(v) for k, v in decision.quantities.items()}
    seed_std = ds.get("w2_seed_std")
    if seed_std is not None:
        q["min_w2"]["seed_spread"] = float(np.nanmin(seed_std.values))
    return q


def _attach(ds, config, reporter, timings, results, zero_info, separatrices) -> None:
    """Fits and the claims table over converged betas, convergence per beta, attrs, long names."""
    from ...science.claims import claims_table
    from ...science.fits import fit_theorem_bound

    per_beta, convergence = {}, {}
    for i, (beta, (levels, _, decision)) in enumerate(results.items()):
        rec = _per_beta_record(ds, decision)
        rec.update(
            status=decision.status,
            w2_initial=float(ds.w2.values[i, 0]),
            mass_V_final=float(ds.mass_V.values[i, -1]),
        )
        per_beta[beta] = rec
        convergence[f"{beta:g}"] = {
            "status": decision.status,
            "N": decision.N,
            "levels": [int(p.attrs["N"]) for p in levels],
            "resolution_ratio": float(levels[-1].attrs["resolution_ratio"]),
            **{
                k: {kk: v.get(kk) for kk in ("value", "estimate", "error", "converged", "reason")}
                for k, v in rec.items()
                if isinstance(v, dict)
            },
        }
    claims = claims_table(per_beta, config.dt_save, zero_info if zero_info.get("local_rates") else None)
    fits: dict[str, Any] = {"claims_betas": {c["claim"]: c["betas"] for c in claims}}
    conv = [b for b, r in per_beta.items() if r["status"] == "converged"]
    depart = [r["t_depart"]["value"] for r in per_beta.values()]
    t_cut = np.nanmin(depart) if conv and np.isfinite(depart).any() else config.t_max
    sel = ds.time.values < t_cut
    if len(conv) >= 2 and sel.sum() >= 3:  # only converged betas, only before the terminal phase
        idx = [list(results).index(b) for b in conv]
        bound = fit_or_reason(
            fit_theorem_bound, ds.time.values[sel], np.maximum(ds.w2.values[idx][:, sel], 1e-300), conv
        )
        fits["theorem_bound"] = {**bound, "betas": conv, "t_before": float(t_cut)}
    else:
        fits["theorem_bound"] = {
            "error": "needs >= 2 converged betas and 3 saved times before the terminal phase"
        }
    solver = [json_attr(levels[-1], "solver", {}) for levels, _, _ in results.values()]
    kernels = sorted({s.get("kernel", "?") for s in solver})
    ds.attrs = base_attrs(
        config,
        reporter,
        timings,
        kernel=f"{config.kernel} -> {', '.join(kernels)}" if config.kernel == "auto" else config.kernel,
        integrator=integrator_label(config),
        solver=solver,
        fits=fits,
        claims=claims,
        convergence=convergence,
        zero=zero_info,
        model=describe_model(config),
        separatrices=separatrices,
    )
    long = {
        "w2": "exact W2(rho^beta_t, Pi_# rho_0), chordal cost",
        "coupling_bound": "synchronous coupling UPPER BOUND on W2(rho^beta_t, Pi_# rho_0)",
        "w2_zero": f"W2(rho^inf_t, Pi_# rho_0) of the zero-temperature flow ({zero_info.get('kind')})",
        "mass_A": f"mass within {config.eps:g} rad of A's top eigenspace",
        "mass_V": f"mass within {config.eps:g} rad of V's top eigenspace",
        "x": "positions of a seeded subset of tokens (float32), at the last level",
        "status": "converged | resolved | under-resolved (attnflow.science.convergence)",
    }
    for k, v in long.items():
        ds[k].attrs["long_name"] = v


def summarize(ds) -> dict[str, Any]:
    """Headline numbers: per beta the status, N, t*, min W2; the claims table; timing."""
    cfg = json_attr(ds, "config", {})
    conv = json_attr(ds, "convergence", {})
    per_beta = {
        f"{b:g}": {
            "status": str(ds.status.sel(beta=b).values),
            "N": int(ds.N_used.sel(beta=b)),
            "t_star": finite_or_none(ds.t_star.sel(beta=b)),
            "min_w2": finite_or_none(ds.min_w2.sel(beta=b)),
            "t_entry": finite_or_none(ds.t_entry.sel(beta=b)),
            "t_depart": finite_or_none(ds.t_depart.sel(beta=b)),
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
        "zero_temperature": {
            k: zero.get(k) for k in ("kind", "guaranteed", "c_star", "local_rates") if k in zero
        },
        "separatrices": json_attr(ds, "separatrices", {}),
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
)
