"""The Dataset of a concentration run: the final level's curves per beta and the ladder per beta
and level (`assemble`), its attrs (fits, the claims table, convergence, the time-step probe, the
solvers, the separatrix searches), long names, the zero-temperature tokens, and `summarize`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from ...io import json_attr
from ...science.claims import BetaData, ClaimData
from ...science.convergence import (
    QUANTITIES,
    STATUSES,
)
from ...science.energy import ENERGY_LONG_NAME
from ...science.uncertainty import Measured
from ..common import DataVariables, finite_or_none, fit_or_reason
from .evidence import NO_DEPARTURE, TimeStepProbe
from .levels import (
    CURVES,
    Cloud,
    ConcentrationInputs,
    Ladder,
)

if TYPE_CHECKING:
    import xarray as xr

    from .zero import ZeroInfo


def _separatrix_record(search: xr.Dataset) -> dict[str, object]:
    """What summary.json says of one beta's separatrix search (init = graded)."""
    where = (
        {"angles": [float(a) for a in search.angles.values]}
        if "angles" in search
        else {"source_alpha": float(search.alpha_bracket.values.mean())}
    )
    return {
        **where,
        "width": float(search.attrs["width"]),
        "passes": len(json_attr(search, "passes", [])),
        "search_s": float(search.attrs["wall_s"]),
    }


def tokens_at_zero_temperature(inputs: ConcentrationInputs, c: Cloud, ds: xr.Dataset) -> np.ndarray:
    """The stored tokens of the first beta's last level (its cloud c) under the exact zero-temperature
    flow (it is local: the kept tokens alone give their own paths)."""
    from ...dynamics.zero_temperature import simulate_zero_temperature

    X = c.X0[0][c.keep][: ds.sizes["token"]]
    if not len(X):  # n_keep = 0: no token is stored
        return np.zeros((len(inputs.times), 0, inputs.model.d), dtype=np.float32)
    x: np.ndarray = simulate_zero_temperature(X, inputs.model.head_at(math.inf), inputs.times).x
    return x.astype(np.float32)


#: the columns of the ladder table (beta, level): N, the window's end, the windowed quantities, ratio
LADDER_COLUMNS = ("N", "window", *(q for q, spec in QUANTITIES.items() if spec.windowed), "ratio")


def _ladder_table(ladders: list[Ladder]) -> DataVariables:
    """ladder_<column> (beta, level) for LADDER_COLUMNS, NaN where a beta ran fewer levels."""
    L = max(len(lad.parts) for lad in ladders)
    table = {k: np.full((len(ladders), L), np.nan) for k in LADDER_COLUMNS}
    for i, lad in enumerate(ladders):
        for j, (p, q) in enumerate(zip(lad.parts, lad.quantities, strict=True)):
            row = {"N": p.attrs["N"], "window": q.t_end, "ratio": p.attrs["resolution_ratio"]}
            for k in LADDER_COLUMNS:
                table[k][i, j] = row[k] if k in row else getattr(q, k)
    out: DataVariables = {f"ladder_{k}": (("beta", "level"), v) for k, v in table.items()}
    cost = {k: np.full((len(ladders), L), np.nan) for k in COST_COLUMNS}
    for i, lad in enumerate(ladders):
        for j, p in enumerate(lad.parts):
            record = _cost_of(p)
            for k in COST_COLUMNS:
                cost[k][i, j] = record[k]
    return out | {f"cost_{k}": (("beta", "level"), v) for k, v in cost.items()}


#: what each level cost, read from its solver's record (`_cost_of`): largest node count, accepted and
#: rejected steps, field evaluations (reproducible to the bit, as every data variable; the machine's
#: wall seconds per level are in attrs["cost_wall_s"], beside attrs["timings"])
COST_COLUMNS = ("nodes", "steps", "rejected", "evals")


def _cost_of(part: xr.Dataset) -> dict[str, float]:
    """A level's cost columns (NaN where its record, e.g. of an older version, lacks one): the
    mean-field flow's passes summed, or the particle integrator's counts."""
    s = json_attr(part, "solver", {}) or {}
    if s.get("method") == "meanfield":
        passes = s.get("passes") or []
        return {
            "wall_s": s.get("wall_s", math.nan),
            "nodes": s.get("max_nodes", math.nan),
            "steps": sum(p.get("steps", 0) for p in passes) if passes else math.nan,
            "rejected": sum(p.get("rejected", 0) for p in passes) if passes else math.nan,
            "evals": s.get("field_evals", math.nan),
        }
    return {
        "wall_s": s.get("wall_time_s", math.nan),
        "nodes": float(part.attrs.get("N", math.nan)),
        "steps": s.get("n_steps", math.nan),
        "rejected": s.get("n_rejected", math.nan),
        "evals": s.get("n_evals", math.nan),
    }


def _per_beta_variables(evidence: list[BetaData]) -> DataVariables:
    """The per-beta variables of the Dataset: each quantity's value, N -> infinity estimate is not
    here (see assemble), total error and convergence flag; the near-minimal band; the curve's error."""
    data: DataVariables = {}
    for key in QUANTITIES:
        q = [e.quantities[key] for e in evidence]
        data[f"{key}_error"] = (("beta",), [m.error for m in q])
        data[f"{key}_converged"] = (("beta",), np.array([m.usable for m in q], dtype=bool))
    data["t_star_lo"] = (("beta",), [e.t_band[0] for e in evidence])
    data["t_star_hi"] = (("beta",), [e.t_band[1] for e in evidence])
    data["w2_error"] = (("beta", "time"), np.stack([e.w2_error for e in evidence]))
    return data


def _curve(part: xr.Dataset, name: str) -> np.ndarray:
    """A part's per-seed curve (seed, time); NaN for one its version did not measure (log_energy)."""
    return part[name].values if name in part.variables else np.full(part.w2.shape, np.nan)


def assemble(
    inputs: ConcentrationInputs, ladders: list[Ladder], zero: xr.Dataset, evidence: list[BetaData]
) -> xr.Dataset:
    """One Dataset: the final level's curves per beta, the ladder per beta and level."""
    import xarray as xr

    finals = [lad.parts[-1] for lad in ladders]
    decisions = [lad.decision for lad in ladders]
    n_tok = min(p.sizes["token"] for p in finals)
    # the headline scalars first (sweeps list the first few of a point's scalars)
    data: DataVariables = {k: (("beta",), [d.quantities[k]["value"] for d in decisions]) for k in QUANTITIES}
    data["N_used"] = (("beta",), [d.N for d in decisions])
    data["resolution_ratio"] = (("beta",), [float(p.attrs["resolution_ratio"]) for p in finals])
    data["status"] = (("beta",), np.array([d.status for d in decisions], dtype=str))
    for key in QUANTITIES:
        data[f"{key}_estimate"] = (("beta",), [d.quantities[key]["estimate"] for d in decisions])
    data.update(_per_beta_variables(evidence))
    for name in CURVES:
        per = np.stack([_curve(p, name) for p in finals])  # (beta, seed, time)
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


def _convergence(ladders: list[Ladder], claims: ClaimData) -> dict[str, dict[str, object]]:
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


def _quantity_record(q: Measured, ladder: Mapping[str, float]) -> dict[str, object]:
    """A quantity in attrs["convergence"]: its Measured record and the ladder's N -> infinity estimate."""
    return {**q.to_dict(), "estimate": finite_or_none(ladder["estimate"])}


def _theorem_bound(inputs: ConcentrationInputs, ds: xr.Dataset, claims: ClaimData) -> dict[str, object]:
    """The fit of Theorem 1's bound over the converged betas, before the terminal phase (or why not)."""
    from ...science.bound import fit_theorem_bound

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


def run_attrs(
    inputs: ConcentrationInputs,
    ds: xr.Dataset,
    ladders: list[Ladder],
    claims: ClaimData,
    probe: TimeStepProbe,
    zero_info: ZeroInfo,
) -> dict[str, object]:
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
    fits: dict[str, object] = {"claims_betas": {r["key"]: r["betas"] for r in rows}}
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
        "cost_wall_s": {
            f"{lad.beta:g}": [finite_or_none(_cost_of(p)["wall_s"]) for p in lad.parts] for lad in ladders
        },
    }


def long_names(ds: xr.Dataset, eps: float, zero_info: ZeroInfo, theorem: tuple[bool, str]) -> None:
    beyond = "" if theorem[0] else " of head 0's A, a reference only (the theorem does not apply)"
    long = {
        "w2": f"exact W2(rho^beta_t, Pi_# rho_0), chordal cost{beyond}",
        "coupling_bound": "synchronous coupling UPPER BOUND on W2(rho^beta_t, Pi_# rho_0)",
        "w2_zero": f"W2(rho^inf_t, Pi_# rho_0) of the zero-temperature flow ({zero_info.get('kind')})",
        "mass_A": f"mass within {eps:g} rad of A's top eigenspace",
        "mass_V": f"mass within {eps:g} rad of V's top eigenspace",
        "log_energy": ENERGY_LONG_NAME,
        "x": "positions of a seeded subset of tokens (float32), at the last level",
        "status": f"{' | '.join(STATUSES)} (attnflow.science.convergence)",
    }
    for k, v in long.items():
        if k in ds.variables:
            ds[k].attrs["long_name"] = v


def _headline(
    ds: xr.Dataset, key: str, beta: float, absent: Mapping[str, str]
) -> float | dict[str, object] | None:
    """One per-beta quantity of the summary: {value, error, converged} (its total error and its own
    convergence), with the reason it does not exist where `absent` ({beta: reason}) says so; the
    bare value for a Dataset written before they were stored."""
    value = finite_or_none(ds[key].sel(beta=beta))
    if f"{key}_converged" not in ds.variables:
        return value
    record: dict[str, object] = {
        "value": value,
        "error": finite_or_none(ds[f"{key}_error"].sel(beta=beta)),
        "converged": bool(ds[f"{key}_converged"].sel(beta=beta)),
    }
    if value is None and f"{beta:g}" in absent:
        record["reason"] = absent[f"{beta:g}"]
    return record


def _no_departure(ds: xr.Dataset) -> dict[str, str]:
    """{beta: "no departure: <why>"} for the betas whose t_depart does not exist (no metastable phase,
    or none by t_max): the reason their convergence record carries (`evidence.no_departure`)."""
    out = {}
    for beta, record in (json_attr(ds, "convergence", {}) or {}).items():
        reason = (record.get("t_depart") or {}).get("reason", "") if isinstance(record, Mapping) else ""
        if reason.startswith(NO_DEPARTURE):
            out[str(beta)] = reason
    return out


def _probe(ds: xr.Dataset) -> dict[str, object]:
    """The time-step probe, its integrator named as the probe's beside the run's own."""
    probe = json_attr(ds, "time_step", {})
    if not isinstance(probe, Mapping) or "integration" not in probe:
        return dict(probe) if isinstance(probe, Mapping) else {}
    named = {("probe's integration (tighter)" if k == "integration" else k): v for k, v in probe.items()}
    return {**named, "run's integration": ds.attrs.get("integrator")}


def summarize(ds: xr.Dataset) -> dict[str, object]:
    """Headline numbers: per beta the status, N, t*, min W2 (each with its error and its own
    convergence); the claims table; the time-step probe; timing."""
    cfg = json_attr(ds, "config", {})
    conv = json_attr(ds, "convergence", {})
    headline = [k for k, q in QUANTITIES.items() if q.headline]
    absent = _no_departure(ds)
    per_beta = {
        f"{b:g}": {
            "status": str(ds.status.sel(beta=b).values),
            "N": int(ds.N_used.sel(beta=b)),
            **{k: _headline(ds, k, b, absent if k == "t_depart" else {}) for k in headline},
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
        "time_step": _probe(ds),
        "zero_temperature": {
            k: zero.get(k) for k in ("kind", "reason", "guaranteed", "c_star", "local_rates") if k in zero
        },
        "separatrices": json_attr(ds, "separatrices", {}),
        "theorem": json_attr(ds, "theorem", {"applies": True, "reason": ""}),
        "warnings": json_attr(ds, "warnings", []),
        "wall_time_s": json_attr(ds, "timings", {}).get("total_s"),
    }
