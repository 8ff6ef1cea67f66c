"""The claims table: what the theorem implies, tested one-sided, and the laws the data show, beside it.

Three kinds of rows (docs/math.md, "The results to reproduce"), each one function and one line of
CLAIMS:

- kind "theorem": what Theorem 1 and Corollary 2 imply, and only that. Verdict "consistent",
  "inconsistent" or "not resolved" ("untested (sign only)" for a sign test on too few betas). The
  tests are one-sided: data that do better than the bound (concentrate longer, closer, faster) are
  consistent with it, never "inconsistent".
- kind "heuristic" (the sharper zero-temperature rate c*) and "conjecture" (Conjecture 1, the
  terminal phase): verdict "matches", "does not match" or "not resolved".
- kind "observed": laws of the data (t*, the departure, min W2) as fits side by side with their rms.
  No verdict on the paper: "observed".

Every row (`ClaimRow`): key (stable: figures and reports find rows by it), claim, kind, measured,
error, betas (used), left_out (beta -> reason), verdict, meaning (one sentence on what the row means
for the paper), and what else it needs (threshold, fits, per-time or per-threshold results).

The rules. Numbers come from quantities converged in N, each with its honest error
(`attnflow.science.uncertainty`: N level + time step + save grid + flatness). A law is judged over at
least MIN_BETAS betas spanning at least a factor MIN_SPAN; a verdict needs the measured number
SIGMAS errors away from its threshold. E(t) = W2^beta(t) - W2^inf(t) is read against the N = infinity
zero-temperature reference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._laws import (
    _law_departure,
    _law_min_w2,
    _law_predicted_clusters,
    _law_t_star,
    _terminal_phase,
    _zero_rate_heuristic,
)
from ._records import (
    ERROR_TIMES,
    MIN_BETAS,
    MIN_SPAN,
    NOT_APPLICABLE,
    OBSERVED,
    SIGMAS,
    BetaData,
    Claim,
    ClaimData,
    ClaimRow,
    ClusterCounts,
    Finding,
    WeightsData,
    ZeroData,
    weights_data,
)
from ._theorem import (
    Envelope,
    _best_concentration,
    _bound_envelope,
    _error_vanishes,
    _guaranteed_duration,
    _zero_rate_guaranteed,
    bound_envelope,
)

__all__ = [
    "CLAIMS",
    "ERROR_TIMES",
    "MIN_BETAS",
    "MIN_SPAN",
    "NOT_APPLICABLE",
    "OBSERVED",
    "SIGMAS",
    "BetaData",
    "Claim",
    "ClaimData",
    "ClaimRow",
    "ClusterCounts",
    "Envelope",
    "Finding",
    "WeightsData",
    "ZeroData",
    "bound_envelope",
    "claims_table",
    "not_applicable",
    "verdict_counts",
    "weights_data",
]


# ---------------------------------------------------------------------------------- registry

#: the rows of the claims table, in the order it lists them (one line each)
CLAIMS: dict[str, Claim] = {
    c.key: c
    for c in (
        Claim(
            "error_vanishes",
            "theorem",
            "the error E(t) = W2^beta(t) - W2^inf(t) at fixed t vanishes at "
            "least like a(beta) = sqrt(log(beta+1)/beta)",
            _error_vanishes,
        ),
        Claim(
            "guaranteed_duration",
            "theorem",
            "concentration lasts at least a time of order log beta: "
            "t_dev(delta) grows with log beta (delta = 5, 10, 20 %)",
            _guaranteed_duration,
        ),
        Claim(
            "bound_envelope",
            "theorem",
            "every converged curve lies below K1 a(beta) e^(C1 t) + K2 e^(-c t) "
            "with constants uniform in beta",
            _bound_envelope,
        ),
        Claim(
            "best_concentration",
            "theorem",
            "min_t W2 is at least as small as C a(beta)^p0, p0 = c/(c + C1) from the envelope",
            _best_concentration,
        ),
        Claim(
            "zero_rate_guaranteed",
            "theorem",
            "at zero temperature W2 decays at least at gamma/(2 ||B||) (late windows)",
            _zero_rate_guaranteed,
        ),
        Claim(
            "zero_rate_heuristic",
            "heuristic",
            "the zero-temperature rate tends to c* (the last window within 1 %)",
            _zero_rate_heuristic,
        ),
        Claim(
            "terminal_phase",
            "conjecture",
            "after the departure, the mass moves to V's top eigenspace (Conjecture 1)",
            _terminal_phase,
        ),
        Claim("law_t_star", "observed", "the argmin t* of W2 against log beta and against beta", _law_t_star),
        Claim(
            "law_departure",
            "observed",
            "the departure time against beta and log beta, beside the heuristic slope delta/lambda",
            _law_departure,
        ),
        Claim("law_min_w2", "observed", "min_t W2 against a(beta), beta^-q and C/beta", _law_min_w2),
        Claim(
            "predicted_clusters",
            "observed",
            "predicted cluster count: the metastable state has as many clusters as the linearisation "
            "about the uniform measure predicts",
            _law_predicted_clusters,
        ),
    )
}


def claims_table(data: ClaimData) -> list[ClaimRow]:
    """Every row of CLAIMS, in order, read from `data`."""
    return [ClaimRow(c.key, c.claim, c.kind, c.row(data)) for c in CLAIMS.values()]


def verdict_counts(rows: Sequence[ClaimRow | Mapping[str, Any]]) -> dict[str, int]:
    """How many rows have each verdict."""
    out: dict[str, int] = {}
    for r in rows:
        v = r["verdict"] if isinstance(r, Mapping) else r.finding.verdict
        out[v] = out.get(v, 0) + 1
    return out


def not_applicable(rows: Sequence[Mapping[str, object]], reason: str) -> list[dict[str, object]]:
    """The rows (as `ClaimRow.to_dict` gives them) when the weights miss an assumption of the
    theorem: each "theorem" row's verdict is NOT_APPLICABLE with `reason` as its note (the theorem
    says nothing about these weights; its measured numbers stay, as laws of the data); the other
    kinds keep their own verdicts."""
    return [
        {**r, "verdict": NOT_APPLICABLE, "note": reason} if r.get("kind") == "theorem" else dict(r)
        for r in rows
    ]
