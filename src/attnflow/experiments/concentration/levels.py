"""The units of work of `concentration`: one (beta, N) level, the zero-temperature reference, and
(init = graded) the separatrix search of one beta.

A level simulates rho_0 with N tokens (one cloud, or one per seed in one kernel call) at one beta and
reduces the trajectory to W2(rho_t, Pi_# rho_0) and the diagnostics; every level is a part of the
run folder, so a ladder that is interrupted, or extended to a larger N_max, resumes. With init =
graded the search is a part too: a resumed run grades its nodes from the stored separatrices.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...io import to_json
from ...progress import Reporter
from ..common import simulate_kwargs, token_subset, torch_threads, unit_float64
from ..model import attention_of, density_of, initial_measure

# Up to this N a fixed-step run integrates all betas in one kernel call per stage: 1.9x faster at
# N = 64, 1.4x at 128, no gain from N = 600 on (benchmarks/betas.py).  Adaptive runs never do: the
# clouds would share the steps of the largest beta.
BATCH_BETAS_MAX_N = 128


@dataclass(frozen=True)
class Cloud:
    """rho_0 with N tokens: X0 (M, N, d) (M = number of seeds), weights (N,) or None, Pi(X0), kept
    token indices, and the resolution ratio's s = max_i |B^T x_i|."""

    N: int
    X0: np.ndarray
    weights: np.ndarray | None
    PiX0: np.ndarray
    keep: np.ndarray
    seeds: list[int]


def make_cloud(config: Any, N: int, measure: tuple[np.ndarray, np.ndarray] | None = None) -> Cloud:
    """The initial measure of `config` with N tokens (one cloud per seed), or the given one: measure =
    (X (N, d), weights (N,)), as init = graded builds it."""
    from ...dynamics.zero_temperature import project

    att = attention_of(config, 1.0)
    seeds = list(config.seeds) or [config.seed]
    X: list[np.ndarray] = []
    w = None if measure is None else measure[1]
    for s in seeds if measure is None else []:
        Xs, w = initial_measure(config, N, att, s)
        X.append(Xs)
    X0 = np.stack(X) if measure is None else measure[0][None]
    PiX0 = np.stack([project(x, att) for x in X0])
    keep = token_subset(N, config.n_keep, config.seed)
    return Cloud(N, X0, w, PiX0, keep, seeds)


def separatrix_part(config: Any, beta: float, reporter: Reporter):
    """init = graded: the separatrices of the flow at beta (separatrix.mean_field_quadrature's search
    from its default brackets, rho_0's density, up to t_max) as a Dataset: angles (separatrix,),
    brackets (separatrix, end) in radians; attrs width (the widest bracket), passes (JSON), wall_s."""
    import xarray as xr

    from ...dynamics.separatrix import mean_field_quadrature

    att = attention_of(config, beta)
    start = time.perf_counter()
    with torch_threads(config.threads), reporter.task(f"beta = {beta:g}: separatrix search"):
        density = density_of(config, att)
        res = mean_field_quadrature(att, config.t_max, 0, density=density, kernel=config.kernel)[2]
    return xr.Dataset(
        {"angles": (("separatrix",), res.angles), "brackets": (("separatrix", "end"), res.brackets)},
        attrs={
            "beta": beta,
            "width": res.width,
            "passes": to_json(res.passes),
            "wall_s": time.perf_counter() - start,
        },
    )


def graded_clouds(config: Any, beta: float, search: Any) -> Iterator[Cloud]:
    """init = graded: the clouds of levels 0, 1, 2, ... at beta, graded toward the separatrices of
    `search` (a separatrix_part); level 0 always, then each level whose node count is <= N_max."""
    from ...dynamics.separatrix import SeparatrixSearch, mean_field_quadrature

    found = SeparatrixSearch(search.angles.values, search.brackets.values)
    att = attention_of(config, beta)
    density = density_of(config, att)
    for level in itertools.count():
        X, w, _ = mean_field_quadrature(att, config.t_max, level, search=found, density=density)
        if level and len(w) > config.N_max:
            return
        yield make_cloud(config, len(w), (X, w))


def _squeeze(cloud: Cloud, a: np.ndarray) -> np.ndarray:
    """A batch of one cloud as that cloud (simulate keeps (N, d) and (M, N, d) apart)."""
    return a[0] if len(cloud.seeds) == 1 else a


def simulate_level(config: Any, beta: float, cloud: Cloud, times: np.ndarray, reporter: Reporter):
    """The trajectory of `cloud` at inverse temperature beta: x (T, M, N, d) float64 unit rows."""
    from ...dynamics.integrate import simulate

    label = f"beta = {beta:g}, N = {cloud.N}"
    with torch_threads(config.threads), reporter.task(label, total=float(times[-1])) as cb:
        traj = simulate(
            _squeeze(cloud, cloud.X0),
            attention_of(config, beta),
            times,
            weights=cloud.weights,
            progress=cb,
            **simulate_kwargs(config),
        )
    x = unit_float64(traj.x)
    return (x[:, None] if len(cloud.seeds) == 1 else x), traj.info


def reduce_level(config: Any, beta: float, cloud: Cloud, times: np.ndarray, x: np.ndarray, info: dict):
    """The per-level Dataset: W2 and diagnostics against t per seed, kept tokens of the first seed."""
    import xarray as xr

    from ...science import metrics
    from ...transport.wasserstein import w2_to_target

    sp = attention_of(config, 1.0).spectrum()
    w = cloud.weights
    per_seed: dict[str, list[np.ndarray]] = {
        k: [] for k in ("w2", "coupling_bound", "lyapunov", "mass_A", "mass_V")
    }
    for m in range(len(cloud.seeds)):
        xm = x[:, m]
        per_seed["w2"].append(w2_to_target(xm, cloud.PiX0[m], weights=w).values)
        per_seed["coupling_bound"].append(np.asarray(metrics.coupling_bound(xm, cloud.PiX0[m], weights=w)))
        per_seed["lyapunov"].append(np.asarray(metrics.lyapunov(xm, sp.top_projector, weights=w)))
        per_seed["mass_A"].append(np.asarray(metrics.subspace_mass(xm, sp.top.basis, config.eps, weights=w)))
        per_seed["mass_V"].append(
            np.asarray(metrics.subspace_mass(xm, sp.v_top_real.basis, config.eps, weights=w))
        )
    data: dict[str, Any] = {k: (("seed", "time"), np.stack(v)) for k, v in per_seed.items()}
    data["x"] = (("time", "token", "dim"), x[:, 0, cloud.keep].astype(np.float32))
    ratio = resolution_ratio_of(config, beta, cloud)
    solver = {k: v for k, v in info.items() if isinstance(v, int | float | str | dict)}
    return xr.Dataset(
        data,
        coords={"seed": cloud.seeds, "time": times},
        attrs={"solver": to_json(solver), "N": cloud.N, "beta": beta, "resolution_ratio": ratio},
    )


def resolution_ratio_of(config: Any, beta: float, cloud: Cloud) -> float:
    """spacing(N) sqrt(beta max_i |B^T x_i|) of the cloud (metrics.resolution_ratio); init = graded:
    with the largest gap between nodes as the spacing (2^-level kernel widths), not 2 pi / N."""
    from ...measures.sphere import spacing
    from ...science.metrics import resolution_ratio

    att = attention_of(config, 1.0)
    ratio = float(resolution_ratio(cloud.N, att.d, beta, B=att.B, X=cloud.X0))
    if config.init == "graded":
        theta = np.sort(np.arctan2(cloud.X0[0, :, 1], cloud.X0[0, :, 0]))
        gap = float(np.max(np.diff(theta, append=theta[0] + 2.0 * math.pi)))
        ratio *= gap / spacing(cloud.N, 2)
    return ratio


def departure_time(times: np.ndarray, mass: np.ndarray, level: float = 0.5) -> float:
    """First time after mass (T,) has reached `level` that it falls below it again (NaN if never)."""
    above = np.flatnonzero(mass >= level)
    if above.size == 0:
        return math.nan
    below = np.flatnonzero((mass < level) & (np.arange(mass.size) > above[0]))
    return float(times[below[0]]) if below.size else math.nan


def batch_betas(config: Any, N: int, betas: list[float]) -> bool:
    """Whether `betas` go through one kernel call per stage (where that is measured faster)."""
    return config.integrator != "adaptive" and N <= BATCH_BETAS_MAX_N and len(betas) > 1 and not config.seeds


def betas_together(
    config: Any, betas: list[float], cloud: Cloud, times: np.ndarray, reporter: Reporter
) -> Callable[[float], tuple[np.ndarray, dict]]:
    """beta -> (x, info) from ONE run of all `betas` (made on first use). The batch is always every
    beta of the config, in a full run and on resume alike, so a resumed run is bit-identical."""
    from ...dynamics.integrate import simulate

    runs: dict[float, tuple[np.ndarray, dict]] = {}

    def get(beta: float) -> tuple[np.ndarray, dict]:
        if not runs:
            label = f"betas {betas[0]:g}..{betas[-1]:g} together, N = {cloud.N}"
            with torch_threads(config.threads), reporter.task(label, total=float(times[-1])) as cb:
                tr = simulate(
                    cloud.X0[0],
                    [attention_of(config, b) for b in betas],
                    times,
                    weights=cloud.weights,
                    progress=cb,
                    **simulate_kwargs(config),
                )
            x = unit_float64(tr.x)
            for i, b in enumerate(betas):
                runs[b] = (x[:, i][:, None], {**tr.info, "beta": b, "betas_together": len(betas)})
        return runs[beta]

    return get


def zero_temperature(config: Any, times: np.ndarray, cloud: Cloud) -> tuple[Any, dict]:
    """The zero-temperature W2 curve: the exact N = infinity reference where it exists (d = 2, 3;
    symmetric A with a one-dimensional top eigenspace; rho_0 uniform or von Mises-Fisher), else the
    exact flow of the cloud (labelled so). Returns (Dataset with w2_zero (time), info)."""
    import xarray as xr

    from ...dynamics.reference import local_rates, reference_w2
    from ...dynamics.zero_temperature import simulate_zero_temperature
    from ...science.assumptions import reference_rates
    from ...transport.wasserstein import w2_to_target

    att = attention_of(config, math.inf)
    info: dict[str, Any] = {
        k: float(v) for k, v in reference_rates(att).items() if isinstance(v, int | float)
    }
    try:
        if not config.zero_reference:
            raise ValueError("it was not asked for (zero_reference = false)")
        rho0: Any = "uniform"
        kw: dict[str, Any] = {}
        if config.density == "vmf":
            rho0, kw = "vmf", {"mean": att.spectrum().top.basis[:, 0], "kappa": config.kappa}
        ref = reference_w2(att, times, rho0, rtol=1e-3, **kw)
        w2 = ref.w2
        info.update(kind="N = infinity reference", local_rates=local_rates(ref.times, ref.w2, ref.w2_err))
    except ValueError as err:
        traj = simulate_zero_temperature(cloud.X0[0], att, times)
        w2 = w2_to_target(traj.x, cloud.PiX0[0], weights=cloud.weights).values
        info.update(kind=f"exact flow of the N = {cloud.N} cloud", reason=f"no N = infinity reference: {err}")
    ds = xr.Dataset({"w2_zero": (("time",), np.asarray(w2))}, coords={"time": times})
    ds.attrs["zero"] = to_json(info)
    return ds, info
