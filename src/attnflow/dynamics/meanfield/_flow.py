"""The mean-field flow on S^1 (d = 2) at finite beta, with exponentially small masses kept exactly.

MATH.md, "Why concentration lasts longer than guaranteed": a cluster is held by the thin stream of
mass that leaves the separatrices, and departs once that stream's mass near its maximiser has
fallen below e^{-beta delta}.  A discretisation must carry masses down to e^{-beta delta - margin}
(e^-4677 at beta = 1e4) where they matter.  This module does it with three kinds of parts:

- ordinary nodes (angles, log-weights): rho_0's graded quadrature (`tail`), then every label that
  left a patch; integrated by Dormand-Prince 5(4) with the field of `circle_field`;
- one Eulerian patch per separatrix (`patch`): the log-density near the repelling point, moved by
  the step map of its Lobatto points, seen by the field through virtual nodes, emitting labels as
  they leave;
- a window of tracers around each separatrix (queries only), whose step maps give the separatrix
  itself by integrating backward in time (stable backward, unstable forward).

Passes.  Pass 1 centres each patch on the repelling zero of the field; the separatrix solved
backward from its step maps centres the next pass, and so on until the saved states stop moving
(`MeanFieldSettings.pass_tol`) or `max_passes` is reached.  The centre matters only to the
smoothness of the emitted family (see `patch`), never to the mass bookkeeping.

Error control.  The local error of each node is weighted by its importance (`circle_field.importance`:
its mass, raised to the softmax share it gets from any node that matters), floored at
`importance_cut`: the thin streams that run from a separatrix toward a cluster from the far side
cross sharp switches of attention (steps of 1e-3 for nodes of mass e^-30 that nothing attends to)
and would otherwise set the step for everything.  Nodes that have fallen into a cluster are merged
when merging moves the field by less than `merge_tol` (second moment of the pair in kernel widths).

Here (`_flow`): the entry point, the pass loop and the backward solve of the separatrices.  The
settings, the result and the set-up of a run live in `_setup`, one step and its bookkeeping in
`_step`; the public names are importable from the package (`attnflow.dynamics.meanfield`).
"""

from __future__ import annotations

import dataclasses
import math
import time as _time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from ..._checks import check_positive, check_times
from ..._threads import DEFAULT_THREADS, check_threads, torch_threads
from ...attention import Attention
from ._setup import (
    TWO_PI,
    MeanFieldSettings,
    MeanFieldTrajectory,
    State,
    _check_2d_attention,
    _check_settings,
    _initial_state,
    _Problem,
    _problem,
    _State,
    initial_separatrices,
)
from ._step import (
    _advance,
    _attempt,
    _error_weights,
    _keys,
    _narrow_unresolved,
    _Record,
    _save,
    _save_now,
)
from .chebyshev import local_lagrange

if TYPE_CHECKING:
    from ...measures.densities import DensityFn

# dense(times, states) -> the extra times where the next pass also saves its state
Dense = Callable[[np.ndarray, list[State]], ArrayLike]


def _run_pass(pb: _Problem, centres: np.ndarray, t_out: np.ndarray, t_run: float, run: _Run) -> _Record:
    """One forward pass from t = 0 to t_run, saving the states at t_out (and, where run.snapshots,
    a copy of the state that starts each step saving one, for `_dense_states`)."""
    st, rec = _initial_state(pb, centres, run.width), _Record()
    return _integrate(pb, st, rec, t_out, t_run, dataclasses.replace(run, h=min(1e-2, t_run)))


@dataclass(frozen=True)
class _Run:
    """How a pass, or a restart inside it, integrates: its separatrix (None: the repelling zeros),
    its patches' width, progress, the first step size, and whether it keeps the snapshots that
    `_dense_states` restarts from."""

    centre_of_t: Callable[[float], np.ndarray] | None
    width: float
    progress: Callable[[float, float], object] | None
    h: float = 0.0
    snapshots: bool = False


def _snapshot(st: _State) -> _State:
    """A copy of a pass's state that later steps do not change (label families shared)."""
    patches = [
        dataclasses.replace(p, ell=p.ell.copy(), stretch=dict(p.stretch), next_label=dict(p.next_label))
        for p in st.patches
    ]
    return dataclasses.replace(st, patches=patches, windows=st.windows.copy())


def _integrate(pb: _Problem, st: _State, rec: _Record, t_out: np.ndarray, t_run: float, run: _Run) -> _Record:
    """Integrate st to t_run, saving the states at t_out (increasing, >= st.t) into rec."""
    keys, j, h, err_old, rejected = _keys(pb, st), 0, run.h, 1.0, False
    while j < len(t_out) and t_out[j] <= st.t:
        if run.snapshots:
            rec.snapshots[float(t_out[j])] = (_snapshot(st), h)
        _save_now(pb, st, keys, rec)
        j += 1
    while st.t < t_run * (1.0 - 1e-12):
        if rec.counts["steps"] + rec.counts["rejected"] >= pb.settings.max_steps:
            raise RuntimeError(f"max_steps = {pb.settings.max_steps} reached at t = {st.t:.6g} < {t_run:.6g}")
        h = min(h, t_run - st.t)
        att = _attempt(pb, st, keys, h, _error_weights(pb, st, keys))
        if _narrow_unresolved(pb, st, att, rec):
            keys = _keys(pb, st)
            continue
        fac = _step_factor(att.err, err_old)
        if att.err > 1.0 or not math.isfinite(att.err):
            rec.counts["rejected"] += 1
            rejected = True
            h *= min(1.0, max(0.2, fac)) if math.isfinite(att.err) else 0.2
            if h < 1e-12 * max(1.0, st.t):
                raise RuntimeError(f"step size underflow at t = {st.t:.6g} (h = {h:.3g})")
            continue
        if run.snapshots and j < len(t_out) and t_out[j] <= st.t + h * (1.0 + 1e-12):
            snap = (_snapshot(st), h)
        while j < len(t_out) and t_out[j] <= st.t + h * (1.0 + 1e-12):
            if run.snapshots:
                rec.snapshots[float(t_out[j])] = snap
            _save(pb, st, keys, att, h, (t_out[j] - st.t) / h, rec)
            j += 1
        _advance(pb, st, att, h, run.centre_of_t, run.width, rec)
        keys = _keys(pb, st)
        rec.counts["steps"] += 1
        h *= min(1.0 if rejected else 5.0, max(0.2, fac))  # no growth right after a rejection
        err_old, rejected = max(att.err, 1e-4), False
        if run.progress is not None:
            run.progress(min(st.t, float(t_out[-1])), float(t_out[-1]))
    rec.t.append(st.t)
    return rec


def _dense_states(pb: _Problem, rec: _Record, t_out: np.ndarray, extra: np.ndarray, run: _Run) -> list[State]:
    """The states at the extra times (sorted, inside the saved span), each run of them between two
    saved times integrated again from the snapshot of the step that saved the first: as in the
    pass (its separatrix, its width), to the pass's tolerance."""
    out: list[State] = []
    at = np.searchsorted(t_out, extra, side="right") - 1  # the saved time before each extra time
    for i in np.unique(at):
        ts = extra[at == i]
        start, h = rec.snapshots[float(t_out[i])]
        part = _Record()
        again = dataclasses.replace(run, progress=None, h=h, snapshots=False)
        _integrate(pb, _snapshot(start), part, ts, float(ts[-1]), again)
        rec.counts["restarted"] = rec.counts.get("restarted", 0) + part.counts["steps"]
        out += part.states[-len(ts) :]
    return out


#: the PI step-size controller of Hairer and Wanner's DOPRI5 (Lund stabilisation): the new step
#: follows the error of the last two accepted steps, err^-(1/5 - 0.75 b) err_old^b
PI_BETA = 0.06


def _step_factor(err: float, err_old: float) -> float:
    """The factor of the next step size from the error norm of this attempt and of the last accepted
    step (PI control; before clipping to [0.2, 5])."""
    if not err > 0:
        return 5.0
    if not math.isfinite(err):
        return 0.2
    return float(0.9 * err ** -(0.2 - 0.75 * PI_BETA) * err_old**PI_BETA)


def _backward(pb: _Problem, rec: _Record) -> np.ndarray:
    """The separatrices (n + 1, k) at the pass's step times, solved backward from the repelling
    zeros at its end through the windows' step maps (x + D_n(x) = target, D_n by 6-point local
    Lagrange on the window's tracers; the solve contracts errors like exp(-Lambda))."""
    assert rec.final_zeros is not None
    n, k = len(rec.window_start), len(rec.final_zeros)
    sep = np.empty((n + 1, k))
    sep[n] = rec.final_zeros
    dx = float(pb.window[1] - pb.window[0])
    for m in range(n - 1, -1, -1):
        for c in range(k):
            start = rec.window_start[m][c] + pb.window[0]
            disp = rec.window_end[m][c] - (rec.window_start[m][c] + pb.window)
            target = sep[m + 1, c]
            target += TWO_PI * round((rec.window_end[m][c][pb.window.size // 2] - target) / TWO_PI)
            lo, hi = start, start + dx * (pb.window.size - 1)
            x = min(max(target, lo), hi)
            for _ in range(50):
                step = (x + local_lagrange(start, dx, disp, x) - target) / (
                    1.0
                    + (local_lagrange(start, dx, disp, x + 1e-7) - local_lagrange(start, dx, disp, x - 1e-7))
                    / 2e-7
                )
                x = min(max(x - step, lo), hi)
                if abs(step) < 1e-15:
                    break
            sep[m, c] = x
    return sep


def _moved(a: list[State], b: list[State]) -> float:
    """Largest change of the trigonometric moments between two lists of saved states."""

    def mom(states: list[State]) -> np.ndarray:
        return np.array([[np.exp(lw) @ f(th) for f in (np.cos, np.sin)] for th, lw in states])

    return float(np.max(np.abs(mom(a) - mom(b)))) if a and b else math.inf


def simulate_mean_field_circle(
    att: Attention,
    times: ArrayLike,
    *,
    level: int = 0,
    density: DensityFn | None = None,
    settings: MeanFieldSettings | None = None,
    centres: ArrayLike | None = None,
    progress: Callable[[float, float], object] | None = None,
    threads: int = DEFAULT_THREADS,
    dense: Dense | None = None,
) -> MeanFieldTrajectory:
    """The mean-field measure rho_t of rho_0 under att (d = 2, finite beta) at `times`.

    level: refinement (each level halves the spacing h = kw / 2^level away from the separatrices and
    the log-offset step du = min(2 kw, 0.2) / 2^level near them, kw = 1 / sqrt(beta ||B||), and so
    the spacing of the stream that leaves them).  density: rho_0's density w.r.t. the uniform law,
    a callable X (N, 2) -> (N,) > 0 (e.g. `sphere.vmf_density(mean, kappa)`), None: uniform.
    settings: MeanFieldSettings.  centres: first guesses of the separatrices at t = 0 (None: the
    repelling zeros of rho_0's field, `initial_separatrices`).  progress: progress(t, t_final).
    threads: torch CPU threads (the package's policy, `_threads`: 1 by default, 0 torch's own).
    dense: dense(times, states) -> extra times: after each pass, where the next one also saves its
    state (between saved times, to locate a time on the solution: `science.located.brackets`); the
    last pass's come back as `dense_t`, `dense_states`.
    Returns a MeanFieldTrajectory; `info["converged"]` says whether the passes agreed.
    """
    with torch_threads(check_threads(threads)):
        return _simulate(att, times, level, density, settings, centres, progress, dense)


def _scout(pb: _Problem) -> _Problem:
    """The problem of a scouting pass: tolerances loosened to settings.scout_rtol (atol in
    proportion); it only places the separatrices that centre the final pass's patches."""
    s = pb.settings
    assert s.scout_rtol is not None
    loose = dataclasses.replace(s, rtol=s.scout_rtol, atol=s.atol * s.scout_rtol / s.rtol)
    return dataclasses.replace(pb, settings=loose)


def _dense_times(dense: Dense | None, t_out: np.ndarray, states: list[State]) -> np.ndarray:
    """The extra times where the next pass saves its states (`dense`), strictly inside the span and
    not already saved."""
    if dense is None:
        return np.zeros(0)
    extra = np.asarray(dense(t_out, states), dtype=np.float64).reshape(-1)
    result: np.ndarray = extra[(extra > t_out[0]) & (extra < t_out[-1]) & ~np.isin(extra, t_out)]
    return result


def _simulate(
    att: Attention,
    times: ArrayLike,
    level: int,
    density: DensityFn | None,
    settings: MeanFieldSettings | None,
    centres: ArrayLike | None,
    progress: Callable[[float, float], object] | None,
    dense: Dense | None = None,
) -> MeanFieldTrajectory:
    att = _check_2d_attention(att)
    s = _check_settings(settings)
    if isinstance(level, bool) or not isinstance(level, int | np.integer) or level < 0:
        raise ValueError(f"level must be an integer >= 0 (each level halves the spacing), got {level!r}")
    t_out = check_times(times)
    if t_out[-1] <= 0:
        raise ValueError(f"times must reach beyond 0, got the last time {t_out[-1]!r}")
    pb = _problem(att, int(level), density, s)
    margin = 12.0 / pb.lam0 if s.margin is None else check_positive(s.margin, "settings.margin")
    c0 = (
        initial_separatrices(att, density)
        if centres is None
        else np.asarray(centres, dtype=np.float64).reshape(-1)
    )
    passes: list[dict[str, Any]] = []
    previous: list[State] = []
    rec, sep, centre_of_t, run = None, None, None, None
    scouting = s.scout_rtol is not None and s.max_passes > 1
    for k in range(s.max_passes):
        wall = _time.perf_counter()
        scout, final = scouting and k == 0, scouting and k == 1
        width = s.first_width if k == 0 else s.patch_width
        run = _Run(centre_of_t, width, progress, snapshots=dense is not None and not scout)
        t_run = float(t_out[-1] + (0.0 if final else margin))
        rec = _run_pass(_scout(pb) if scout else pb, c0, t_out, t_run, run)
        sep = _backward(pb, rec)
        states, n_nodes = rec.states, np.asarray(rec.n_nodes)
        moved = _moved(previous, states)
        wall_s = _time.perf_counter() - wall
        passes.append(dict(rec.counts, evals=0, wall_s=wall_s, separatrix0=sep[0].tolist(), moved=moved))
        if moved < s.pass_tol or final:
            break
        previous, c0, centre_of_t = states, sep[0], _spline(np.asarray(rec.t), sep)
    assert rec is not None and sep is not None and run is not None
    wall = _time.perf_counter()
    dense_t = _dense_times(dense, t_out, states)
    dense_states = _dense_states(pb, rec, t_out, np.sort(dense_t), run) if dense_t.size else []
    passes[-1]["restarted"] = rec.counts.get("restarted", 0)
    passes[-1]["wall_s"] += _time.perf_counter() - wall
    info = dict(
        level=int(level),
        h=pb.h,
        du=pb.du,
        kernel_width=pb.kw,
        beta=float(att.beta),
        lambda0=pb.lam0,
        margin=margin,
        converged=len(passes) == 1 or passes[-1]["moved"] < s.pass_tol,
        settings=s.__dict__.copy(),
        field_evals=pb.field.n_evals,
    )
    return MeanFieldTrajectory(
        t_out.copy(), states, n_nodes, np.asarray(rec.t), sep, passes, info, np.sort(dense_t), dense_states
    )


def _spline(t: np.ndarray, sep: np.ndarray) -> Callable[[float], np.ndarray]:
    from scipy.interpolate import CubicSpline

    keep = np.concatenate([np.diff(t) > 0, [True]])
    spline: Callable[[float], np.ndarray] = CubicSpline(t[keep], sep[keep], axis=0)
    return spline
