"""`concentration`: W2(rho^beta_t, Pi_# rho_0) against t for several beta (docs/math.md, Theorem 1).

The worked example of docs/math.md in d = 3 (Q = I, K = diag(3, 1, 1/3), A = [[0,0,1],[0,-1/2,0],[1,0,0]],
V = A B^{-T}), rho_0 uniform. For every beta: the exact W2 to Pi_# rho_0 (two atoms +-u_1), the
synchronous coupling bound (an upper bound), the Lyapunov functional, the mass near the top
eigenspaces of A and V, t*(beta) and min_t W2; once: the zero-temperature curve. Fits: t* against
log beta, min W2 against a(beta) = sqrt(log(beta+1)/beta), the zero-temperature decay rate next to
the guaranteed rate gamma/(2||B||) and the prediction c*.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, field_validator

from ..io import json_attr, to_json
from ..progress import Reporter
from ._common import (
    base_attrs,
    finite_or_none,
    fit_or_reason,
    initial_cloud,
    integrator_label,
    simulate_kwargs,
    time_grid,
    token_subset,
    torch_threads,
    unit_float64,
)
from ._config import (
    Angle,
    SimulationConfig,
    cached_part,
    check_betas,
    fingerprint,
    part_done,
    part_name,
)
from ._registry import Experiment, doc_summary
from .concentration_figures import CAPTIONS, figures, sweep_figures

# Below this mean-field resolution ratio (token spacing / softmax angular scale) N counts as enough.
RATIO_OK = 1.0
# Up to this N a fixed-step run integrates all betas in one kernel call per stage: 1.9x faster at
# N = 64, 1.4x at 128, no gain from N = 600 on (benchmarks/betas.py).  Adaptive runs never do: the
# clouds would share the steps of the largest beta.
BATCH_BETAS_MAX_N = 128


class ConcentrationConfig(SimulationConfig):
    """Config of the `concentration` experiment (the default of `attnflow run`)."""

    experiment: Literal["concentration"] = "concentration"
    betas: list[PositiveFloat] = Field(
        [10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0], description="inverse temperatures beta (finite, > 0)"
    )
    N: PositiveInt = Field(600, description="number of tokens")
    init: Literal["uniform", "fibonacci"] = Field(
        "uniform", description="initial cloud: uniform (i.i.d., seeded) or fibonacci (quasi-uniform lattice)"
    )
    t_max: PositiveFloat = Field(12.0, description="final time (t* grows like log beta; late phase after it)")
    dt_save: PositiveFloat = Field(0.1, description="spacing of the saved times (resolution of t*)")
    eps: Angle = Field(0.1, description="angle (radians) defining 'near' an eigenspace for mass_A/V")
    n_keep: NonNegativeInt = Field(
        200, description="tokens whose positions are stored (snapshots, animation)"
    )
    t_star_rel_tol: PositiveFloat = Field(
        0.05, description="plateau of t*: times with W2 <= min W2 (1 + tol)"
    )

    @field_validator("betas")
    @classmethod
    def _betas(cls, v: list[float]) -> list[float]:
        return check_betas(v)


PRESETS = {
    # N-converged in d = 3 for beta <= 3000 needs N >> 4 pi beta (MATH.md): a machine with a GPU.
    "concentration-converged": {"N": 100_000, "init": "fibonacci", "n_keep": 500, "threads": 0},
    # seconds on a laptop: the tests and examples/quickstart.py use it
    "concentration-tiny": {
        "betas": [10.0, 100.0],
        "N": 64,
        "t_max": 4.0,
        "dt_save": 0.2,
        "n_keep": 16,
        "integrator": "rk4",
        "dt": 0.05,
    },
}


def resolution_report(N: int, d: int, betas: list[float], reporter: Reporter) -> np.ndarray:
    """Mean-field resolution ratio per beta (MATH.md), printed; a warning when N is too small."""
    from ..metrics import resolution_ratio
    from ..sphere import spacing

    ratios = np.array([resolution_ratio(N, d, b) for b in betas])
    for b, r in zip(betas, ratios, strict=True):
        reporter.info(f"beta = {b:g}: mean-field resolution ratio spacing*sqrt(beta) = {r:.3g} (want << 1)")
    bad = [b for b, r in zip(betas, ratios, strict=True) if r >= RATIO_OK]
    if bad:
        area = 2.0 * math.pi ** (d / 2.0) / math.gamma(d / 2.0)
        need = math.ceil(area * (max(betas) / 0.25) ** ((d - 1) / 2.0))  # ratio 0.5
        reporter.warn(
            f"N = {N} is too small for beta >= {min(bad):g}: token spacing {spacing(N, d):.3g} is not "
            f"below the softmax resolution beta^(-1/2) (ratio {ratios[-1]:.3g} at beta = {max(betas):g}). "
            f"The N-particle system then follows an argmax over tokens, not the mean-field equation, "
            f"and the curves of large beta coincide. Mean-field needs N >> beta^((d-1)/2): about "
            f"N = {need} for ratio 0.5 at beta = {max(betas):g} (see the concentration-converged preset)."
        )
    return ratios


def _beta_part(
    config: ConcentrationConfig,
    beta: float,
    X0: np.ndarray,
    PiX0: np.ndarray,
    times: np.ndarray,
    keep: np.ndarray,
    spaces: dict[str, np.ndarray],
    reporter: Reporter,
    together: Callable[[float], Any] | None = None,
):
    """Simulate at one beta and reduce the trajectory to the per-beta variables (a Dataset).

    together: where given, returns this beta's trajectory from a run of all betas in one batch.
    """
    import xarray as xr

    from .. import metrics
    from ..fits import t_star
    from ..integrate import simulate
    from ..model import worked_example
    from ..wasserstein import w2_to_target

    if together is not None:
        traj = together(beta)
    else:
        with torch_threads(config.threads), reporter.task(f"beta = {beta:g}", total=float(times[-1])) as cb:
            traj = simulate(X0, worked_example(beta), times, progress=cb, **simulate_kwargs(config))
    Xt = unit_float64(traj.x)
    w2 = w2_to_target(Xt, PiX0).values
    ts = t_star(times, w2, rel_tol=config.t_star_rel_tol)
    per_time = {
        "w2": w2,
        "coupling_bound": metrics.coupling_bound(Xt, PiX0),
        "lyapunov": metrics.lyapunov(Xt, spaces["P1"]),
        "mass_A": metrics.subspace_mass(Xt, spaces["A"], config.eps),
        "mass_V": metrics.subspace_mass(Xt, spaces["V"], config.eps),
    }
    data: dict[str, Any] = {k: (("beta", "time"), np.asarray(v)[None]) for k, v in per_time.items()}
    data["t_star"] = (("beta",), [ts.t_star])
    data["t_star_lo"] = (("beta",), [ts.t_lo])
    data["t_star_hi"] = (("beta",), [ts.t_hi])
    data["min_w2"] = (("beta",), [ts.w2_min])
    data["x"] = (("beta", "time", "token", "dim"), Xt[:, keep].astype(np.float32)[None])
    info = {k: v for k, v in traj.info.items() if isinstance(v, (int, float, str, dict))}
    return xr.Dataset(
        data,
        coords={"beta": [beta], "time": times},
        attrs={"solver": to_json(info), "t_star_notes": ts.notes},
    )


def _batch_betas(config: ConcentrationConfig, betas: list[float]) -> bool:
    """Whether `betas` go through one kernel call per stage (where that is measured faster)."""
    return (
        config.integrator != "adaptive"
        and config.N <= BATCH_BETAS_MAX_N
        and len(betas) > 1
    )


def _betas_together(
    config: ConcentrationConfig, betas: list[float], X0, times, reporter: Reporter
) -> Callable[[float], Any]:
    """beta -> its trajectory, from one run of all `betas` (made on the first call, then reused)."""
    from ..integrate import simulate
    from ..model import worked_example
    from ..trajectory import Trajectory

    runs: dict[float, Trajectory] = {}

    def get(beta: float) -> Trajectory:
        if not runs:
            label = f"betas {betas[0]:g}..{betas[-1]:g} together"
            with torch_threads(config.threads), reporter.task(label, total=float(times[-1])) as cb:
                atts = [worked_example(b) for b in betas]
                tr = simulate(X0, atts, times, progress=cb, **simulate_kwargs(config))
            for i, b in enumerate(betas):
                info = {**tr.info, "beta": b, "betas_together": len(betas)}
                runs[b] = Trajectory(t=tr.t, x=tr.x[:, i], info=info)
        return runs[beta]

    return get


def _zero_part(config: ConcentrationConfig, X0, PiX0, times, keep, P1):
    """The zero-temperature curve on the same initial cloud (exact flow)."""
    import xarray as xr

    from .. import metrics
    from ..model import worked_example
    from ..wasserstein import w2_to_target
    from ..zero_temperature import simulate_zero_temperature

    traj = simulate_zero_temperature(X0, worked_example(math.inf), times)
    return xr.Dataset(
        {
            "w2_zero": (("time",), w2_to_target(traj.x, PiX0).values),
            "lyapunov_zero": (("time",), np.asarray(metrics.lyapunov(traj.x, P1))),
            "x_zero": (("time", "token", "dim"), traj.x[:, keep].astype(np.float32)),
        },
        coords={"time": times},
    )


def reference_rates(att) -> dict[str, float]:
    """gamma/(2||B||) (guaranteed) and c* (MATH.md, Corollary 2), from attnflow.assumptions."""
    from ..assumptions import reference_rates as rates

    return {k: float(v) for k, v in rates(att).items() if isinstance(v, (int, float))}


def run(config: ConcentrationConfig, out: Path | None = None, progress: Reporter | None = None):
    """Run the experiment; with `out`, finished betas are kept in out/parts and reused on a rerun."""
    import xarray as xr

    from ..fits import fit_t_star, fit_theorem_bound
    from ..model import worked_example
    from ..zero_temperature import project

    reporter = progress or Reporter()
    start = time.perf_counter()
    att = worked_example(1.0)
    sp = att.spectrum()
    d = att.d
    ratios = resolution_report(config.N, d, config.betas, reporter)
    X0 = initial_cloud(config.init, config.N, d, config.seed)
    PiX0 = project(X0, att)
    times = time_grid(config.t_max, config.dt_save)
    keep = token_subset(config.N, config.n_keep, config.seed)
    spaces = {"A": sp.top.basis, "V": sp.v_top_real.basis, "P1": sp.top_projector}

    fp = fingerprint(config, exclude={"betas"})
    reporter.overall(len(config.betas) + 1, f"concentration: {len(config.betas)} betas, N = {config.N}")
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    zero = cached_part(
        out, "zero", fp, lambda: _zero_part(config, X0, PiX0, times, keep, sp.top_projector), reporter
    )
    timings["zero_temperature_s"] = time.perf_counter() - t0
    reporter.advance()
    parts = []
    together = None
    if _batch_betas(config, config.betas):  # small fixed-step runs: the betas still to do in one batch
        todo = [b for b in config.betas if not part_done(out, part_name(beta=b), fp)]
        if _batch_betas(config, todo):
            together = _betas_together(config, todo, X0, times, reporter)
    for beta in config.betas:
        t0 = time.perf_counter()
        part = cached_part(
            out,
            part_name(beta=beta),
            fp,
            partial(_beta_part, config, beta, X0, PiX0, times, keep, spaces, reporter, together),
            reporter,
        )
        timings[f"beta={beta:g}_s"] = time.perf_counter() - t0
        parts.append(part)
        reporter.advance()
        reporter.info(
            f"beta = {beta:g}: t* = {float(part.t_star[0]):.3g}, min W2 = {float(part.min_w2[0]):.4g}"
        )

    solver = [json_attr(p, "solver", {}) for p in parts]
    ds = xr.concat([p.drop_attrs() for p in parts], dim="beta")
    ds = ds.merge(zero.drop_attrs())
    ds["resolution_ratio"] = (("beta",), ratios)
    ds["basis_A"] = (("dim", "k"), sp.top.basis)
    ds = ds.assign_coords(dim=np.arange(d), token=keep)

    betas = np.asarray(config.betas)
    fits: dict[str, Any] = {
        # weights: half the near-minimal plateau, at least half a saved-time step
        "t_star": fit_or_reason(fit_t_star, betas, ds.t_star.values, sigma=_t_star_sigma(ds, config.dt_save)),
        "min_w2": _power_fit(betas, ds.min_w2.values),
        "zero_temperature_rate": _rate_fit(times, ds.w2_zero.values, att),
    }
    if "a" in fits["t_star"]:
        fits["t_star"]["sigma"] = _t_star_sigma(ds, config.dt_save).tolist()
    if len(betas) >= 2:
        fits["theorem_bound"] = fit_or_reason(
            fit_theorem_bound, times, np.maximum(ds.w2.values, 1e-300), betas
        )
    timings["total_s"] = time.perf_counter() - start
    kernels = sorted({s.get("kernel", "?") for s in solver})
    ds.attrs = base_attrs(
        config,
        reporter,
        timings,
        kernel=f"{config.kernel} -> {', '.join(kernels)}" if config.kernel == "auto" else config.kernel,
        integrator=integrator_label(config),
        solver=solver,
        fits=fits,
        model="worked example of MATH.md, d = 3: Q = I, K = diag(3,1,1/3), A = [[0,0,1],[0,-1/2,0],[1,0,0]]",
    )
    ds["w2"].attrs["long_name"] = "exact W2(rho^beta_t, Pi_# rho_0), chordal cost"
    ds["coupling_bound"].attrs["long_name"] = "synchronous coupling UPPER BOUND on W2(rho^beta_t, Pi_# rho_0)"
    ds["w2_zero"].attrs["long_name"] = "exact W2(rho^inf_t, Pi_# rho_0) of the zero-temperature flow"
    ds["mass_A"].attrs["long_name"] = f"fraction of tokens within {config.eps:g} rad of A's top eigenspace"
    ds["mass_V"].attrs["long_name"] = f"fraction of tokens within {config.eps:g} rad of V's top eigenspace"
    ds["x"].attrs["long_name"] = "positions of a seeded subset of tokens (float32)"
    return ds


def _t_star_sigma(ds, dt_save: float) -> np.ndarray:
    return np.maximum(0.5 * (ds.t_star_hi.values - ds.t_star_lo.values), 0.5 * dt_save)


def _power_fit(betas: np.ndarray, min_w2: np.ndarray) -> dict[str, Any]:
    from ..fits import fit_min_w2

    f = fit_or_reason(fit_min_w2, betas, min_w2)
    if "p" in f:  # the names of the dataset schema next to those of attnflow.fits
        f.update(exponent=f["p"], exponent_err=f["p_err"], prefactor=f["C"])
    return f


def _rate_fit(times: np.ndarray, w2_zero: np.ndarray, att) -> dict[str, Any]:
    from ..fits import fit_decay_rate

    f = fit_or_reason(fit_decay_rate, times, w2_zero, tail=0.5)
    out: dict[str, Any] = {"fit": f}
    if "rate" in f:
        out.update(fitted=f["rate"], fitted_err=f["rate_err"])
    try:
        out.update(reference_rates(att))
    except ValueError as err:
        out["reference_error"] = str(err)
    return out


def summarize(ds) -> dict[str, Any]:
    """Headline numbers: t*, min W2 and resolution per beta; fits; zero-temperature rates; timing."""
    fits = json_attr(ds, "fits", {})
    cfg = json_attr(ds, "config", {})
    per_beta = {
        f"{b:g}": {
            "t_star": finite_or_none(ds.t_star.sel(beta=b)),
            "min_w2": finite_or_none(ds.min_w2.sel(beta=b)),
            "resolution_ratio": finite_or_none(ds.resolution_ratio.sel(beta=b)),
        }
        for b in ds.beta.values.tolist()
    }
    tf, mf, zr = fits.get("t_star", {}), fits.get("min_w2", {}), fits.get("zero_temperature_rate", {})
    return {
        "experiment": "concentration",
        "N": cfg.get("N"),
        "init": cfg.get("init"),
        "per_beta": per_beta,
        "t_star_fit": {k: tf.get(k) for k in ("a", "b", "a_err", "b_err", "r2")} if "a" in tf else tf,
        "min_w2_fit": {k: mf.get(k) for k in ("exponent", "exponent_err", "prefactor", "r2")}
        if "exponent" in mf
        else mf,
        "zero_temperature_rate": {k: zr.get(k) for k in ("fitted", "fitted_err", "guaranteed", "c_star")},
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
)
