"""init = meanfield: one level of a beta's ladder as the mean-field flow on S^1 with its tail kept
(attnflow.science.meanfield), reduced to the per-level Dataset of `levels.reduce_level`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ...io import to_json
from ...progress import Reporter
from ..common import DataVariables, torch_threads
from ..inputs import Integration
from .levels import ConcentrationInputs

if TYPE_CHECKING:
    import xarray as xr

    from ...attention import Attention

#: the saved measures of a mean-field run: (angles (N_t,), log-weights (N_t,)) per time
States = Sequence[tuple[np.ndarray, np.ndarray]]


def meanfield_level(
    inputs: ConcentrationInputs,
    beta: float,
    level: int,
    solver: Integration,
    reporter: Reporter,
    reference: np.ndarray | None = None,
) -> xr.Dataset:
    """init = meanfield: level `level` at beta as the per-level Dataset of `reduce_level` (one
    "seed", no stored tokens): W2 to Pi_# rho_0, the masses and the Lyapunov function of the
    mean-field measure (science.meanfield.mean_field_circle, tolerances the solver's); the coupling
    bound needs each token's own Pi(x_0) and is NaN. attrs N: 2 pi / h, the equispaced count of the
    level's spacing h far from the separatrices (each level doubles it, as the ladder's Richardson
    estimates need); nodes: its initial node count; located: its times located among dense states
    (reference: the zero-temperature curve of t_dev, or None)."""
    import xarray as xr

    from ...dynamics.meanfield import MeanFieldSettings
    from ...science.meanfield import mean_field_circle

    att = inputs.model.attention.with_beta(beta)
    settings = MeanFieldSettings(rtol=solver.rtol, atol=solver.atol)
    with torch_threads(solver.threads), reporter.task(f"beta = {beta:g}, level {level}", total=1.0):
        c = mean_field_circle(
            att,
            inputs.times,
            level=level,
            density=inputs.model.rho0.density_fn,
            settings=settings,
            eps=inputs.eps,
            keep_states=True,
            band=inputs.band,
            reference=reference,
        )
    assert c.trajectory is not None
    P = inputs.model.spectrum.top_projector
    curves = {
        "w2": c.w2,
        "coupling_bound": np.full(c.t.size, np.nan),
        "lyapunov": _measure_lyapunov(c.trajectory.states, P),
        "log_energy": _measure_energy(c.trajectory.states, att),
        "clusters": np.full(c.t.size, np.nan),  # (the worked example's weights: nothing is predicted)
        "mass_A": c.mass_A,
        "mass_V": c.mass_V,
    }
    data: DataVariables = {k: (("seed", "time"), np.asarray(v, dtype=float)[None]) for k, v in curves.items()}
    data["x"] = (("time", "token", "dim"), np.zeros((c.t.size, 0, 2), dtype=np.float32))
    ratio = _node_ratio(c.trajectory.states[0][0], beta, att.B)
    passes = [{k: v for k, v in p.items() if isinstance(v, int | float | str)} for p in c.info["passes"]]
    solver_info = {
        "method": "meanfield",
        "level": level,
        "passes": passes,
        "field_evals": c.info["field_evals"],
        "wall_s": c.info["wall_s"],
        "max_nodes": int(c.n_nodes.max()),
    }
    return xr.Dataset(
        data,
        coords={"seed": [inputs.seed], "time": inputs.times},
        attrs={
            "solver": to_json(solver_info),
            "N": round(2.0 * math.pi / (c.info["h"] * 2**level)) * 2**level,
            "nodes": int(c.n_nodes[0]),
            "beta": beta,
            "resolution_ratio": ratio,
            "located": to_json({k: v.to_dict() for k, v in c.located.items()}),
        },
    )


def _measure_lyapunov(states: States, P: np.ndarray) -> np.ndarray:
    """The Lyapunov function of each weighted state (angles, log-weights) on S^1 (T,)."""
    from ...science import metrics

    out = []
    for theta, logw in states:
        X = np.stack([np.cos(theta), np.sin(theta)], -1)
        out.append(float(metrics.lyapunov(X, P, weights=np.exp(logw - np.logaddexp.reduce(logw)))))
    return np.asarray(out)


def _measure_energy(states: States, att: Attention) -> np.ndarray:
    """log E_beta of each weighted state (angles, log-weights) on S^1 (T,): science.energy's
    (1 / 2 beta) sum_ij w_i w_j e^(beta x_i^T B x_j), its row sums those of the circle field's
    softmax (`log_row_sums`: from each row's kept keys where there are many nodes, not every pair)."""
    import torch
    from scipy.special import logsumexp

    from ...dynamics.meanfield.circle_field import CircleField, log_row_sums

    fld = CircleField(att)
    out = []
    for theta, logw in states:
        lw = np.asarray(logw, dtype=np.float64) - logsumexp(logw)
        th = torch.from_numpy(np.asarray(theta, dtype=np.float64))
        rows = log_row_sums(fld, th, th, torch.from_numpy(lw)).numpy()
        out.append(float(logsumexp(lw + rows) - math.log(2.0 * att.beta)))
    return np.asarray(out)


def _node_ratio(theta: np.ndarray, beta: float, B: np.ndarray) -> float:
    """The resolution ratio as for graded nodes: the largest gap between the nodes at angles theta
    against the kernel width 1 / sqrt(beta max_i |B^T x_i|)."""
    theta0 = np.sort(np.mod(theta, 2.0 * math.pi))
    gap = float(np.max(np.diff(theta0, append=theta0[0] + 2.0 * math.pi)))
    X0 = np.stack([np.cos(theta0), np.sin(theta0)], -1)
    return gap * math.sqrt(beta * float(np.max(np.linalg.norm(X0 @ B, axis=1))))
