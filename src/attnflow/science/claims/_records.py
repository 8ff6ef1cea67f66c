"""The records of the claims table and what every row uses: the data a run hands it (BetaData,
ZeroData, WeightsData, ClaimData), a row's finding and record (Finding, ClaimRow, Claim), the rules'
constants, and the small readers and verdict helpers the rows share."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypedDict, Unpack

import numpy as np
from numpy.typing import ArrayLike

from ..curves import FORMED
from ..fits import LineFit, fit_line
from ..uncertainty import Measured, finite

if TYPE_CHECKING:
    from ...attention import Attention, Spectrum


MIN_BETAS = 4  # a law is judged over at least this many betas ...
MIN_SPAN = 4.0  # ... spanning at least this factor in beta
SIGMAS = 2.0  # a verdict needs the measured number this many errors away from its threshold
MIN_FIT = 3  # an observed law is fitted from this many betas on (two points fit any line)
ERROR_TIMES = (0.5, 1.0, 2.0)  # the fixed early times at which E(t) is read
RATE_REL_TOL = 0.01  # the last zero-temperature window within 1 % of c*
MOST = 0.5  # "most of the mass": a metastable phase, and the terminal phase on V's eigenspace
TERMINAL_EPS = 0.1  # "near V's top eigenspace" for the travel time (the experiments' default eps)
C1_MAX_FACTOR = 2.0  # the envelope searches C1 up to this times ||A|| ||B^-1|| (the field's scale)
C1_STEPS = 600  # grid steps of C1 in [0, C1_max]

THEOREM_VERDICTS = ("consistent", "inconsistent", "not resolved", "untested (sign only)")
HEURISTIC_VERDICTS = ("matches", "does not match", "not resolved")
OBSERVED = "observed"
NOT_APPLICABLE = "not applicable"  # a theorem row's verdict when the weights fail its assumptions

Kind = Literal["theorem", "heuristic", "conjecture", "observed"]


# ---------------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class ClusterCounts:
    """One beta's clusters against the linearisation (docs/math.md, "Clusters predicted by the
    linearisation"): the predicted count and the measured count of the metastable state (means over
    the seeds; measured NaN: no plateau), and the fraction of the seeds where the two are equal."""

    predicted: float
    measured: float
    agree: float


@dataclass(frozen=True, eq=False)
class BetaData:
    """What one beta of a run gives the claims. status: its ladder's (science.convergence);
    quantities: name -> Measured (t_star, min_w2, t_dev, t_depart, ...); w2, w2_error (T,): the W2
    curve of its last level and its error (N level + time step); mass_A_max: the largest mass near
    A's top eigenspace (>= FORMED: a metastable phase; NaN: unknown); mass_V_final: the mass near V's
    top eigenspace at t_max; t_band: the near-minimal band (t_lo, t_hi) around t*; clusters: its
    `ClusterCounts` (None where the linearisation does not apply)."""

    beta: float
    status: str
    quantities: Mapping[str, Measured]
    w2: np.ndarray
    w2_error: np.ndarray
    mass_A_max: float = math.nan
    mass_V_final: float = math.nan
    t_band: tuple[float, float] = (math.nan, math.nan)
    clusters: ClusterCounts | None = None

    @property
    def label(self) -> str:
        return f"{self.beta:g}"

    @property
    def metastable(self) -> bool:
        """Whether a metastable phase formed: the mass near A's top eigenspace reached FORMED at some
        time (`science.curves.departure`; unknown counts as yes)."""
        return not self.mass_A_max < FORMED


@dataclass(frozen=True, eq=False)
class ZeroData:
    """The zero-temperature curve: w2, w2_error (T,), its local rates [{window, rate, err}] and its
    kind ("N = infinity reference", or the exact flow of a cloud)."""

    w2: np.ndarray
    w2_error: np.ndarray
    local_rates: Sequence[Mapping[str, Any]]
    kind: str

    @property
    def exact(self) -> bool:
        return self.kind.startswith("N = infinity")


@dataclass(frozen=True)
class WeightsData:
    """The numbers of the weights the rows use: gamma (the gap), ||B||, the guaranteed rate
    c = gamma / (2 ||B||) and the heuristic c*, delta = |B^T u_1| - u_1^T B u_1 and lambda, the
    rate at which the flow drains its source (`source_drain_rate`: gamma / |B^T u_2| in d = 2; the
    departure heuristic: t_depart ~ (delta / lambda) beta), c1_max, the largest C1 the envelope
    searches (NaN where undefined, e.g. A not symmetric), and travel (`terminal_travel`)."""

    gamma: float
    norm_B: float
    guaranteed: float
    c_star: float
    delta: float
    lam: float
    c1_max: float
    travel: float = math.nan  # `terminal_travel`: a cluster's way from u_1 to V's top eigenspace

    @property
    def departure_slope(self) -> float:
        return self.delta / self.lam if self.lam > 0 else math.nan


def weights_data(att: Attention) -> WeightsData:
    """The WeightsData of an Attention (its beta is ignored)."""
    from ..assumptions import reference_rates

    rates = reference_rates(att)
    sp = att.spectrum()
    B, A = np.asarray(att.B), np.asarray(att.A)
    u1 = np.asarray(sp.top.basis)[:, 0]
    delta = float(np.linalg.norm(B.T @ u1) - u1 @ B @ u1)
    lam = math.nan
    if sp.mu2 is not None and sp.gap > 0:
        lam = source_drain_rate(sp, B)
    sv = np.linalg.svd(B, compute_uv=False)
    speed = float(np.linalg.norm(A, 2) / sv[-1]) if sv[-1] > 0 else math.inf  # ||A|| ||B^-1||
    return WeightsData(
        gamma=float(sp.gap),
        norm_B=float(att.norm_B),
        guaranteed=finite(rates.get("guaranteed")),
        c_star=finite(rates.get("c_star")),
        delta=delta,
        lam=lam,
        c1_max=C1_MAX_FACTOR * speed if math.isfinite(speed) else math.nan,
        travel=terminal_travel(att),
    )


def source_drain_rate(sp: Spectrum, B: np.ndarray) -> float:
    """lambda: the rate at which the zero-temperature flow drains a neighbourhood of its source, the
    bottom eigenvector u_d of A (MATH.md, "The tail in d = 3"): the sum of the expansion rates
    mu_k - mu_d of its linearisation on the sphere in the clock ds/dt = 1 / |B^T x|,

        lambda = (trace A - d mu_d) / |B^T u_d|,

    gamma / |B^T u_2| in d = 2 (the source is u_2); a degenerate bottom eigenvalue (a circle of
    sources) adds nothing for its own directions. For symmetric A it is twice the bottom term of c*
    (`assumptions.reference_rates`); it is computed here too because the departure heuristic is
    read for any A with a gap, where c* is not defined."""
    mu = np.real(np.asarray(sp.eigenvalues))
    scale = max(float(np.max(np.abs(mu))), 1e-300)
    bottom = np.real(np.asarray(sp.eigenvectors))[:, np.abs(mu - mu.min()) <= 1e-9 * scale]
    return float(np.sum(mu - mu.min())) / float(np.linalg.norm(B.T @ bottom, 2))


def terminal_travel(att: Attention, eps: float = TERMINAL_EPS, t_max: float = 1e3) -> float:
    """The time a tight cluster takes from u_1 to within eps (radians) of V's top eigenspace (largest
    real part), moving like one token, dz/dt = P_z^perp V z (MATH.md, Conjecture 1): 0 when u_1 is
    already that close; NaN when it is not reached by t_max."""
    from scipy.integrate import solve_ivp

    sp = att.spectrum()
    u1 = np.asarray(sp.top.basis)[:, 0]
    P = np.asarray(sp.v_top_real.basis, dtype=np.float64)  # real (a complex pair: its real plane)
    V = np.asarray(att.V, dtype=np.float64)

    def angle(z: np.ndarray) -> float:
        return math.acos(min(1.0, float(np.linalg.norm(P.T @ z)) / float(np.linalg.norm(z))))

    if angle(u1) < eps:
        return 0.0

    def reached(_t: float, z: np.ndarray) -> float:
        return angle(z) - eps

    reached.terminal = True  # type: ignore[attr-defined]
    sol = solve_ivp(lambda _t, z: V @ z - (z @ V @ z) * z, (0.0, t_max), u1, events=reached, rtol=1e-8)
    return float(sol.t_events[0][0]) if sol.t_events[0].size else math.nan


@dataclass(frozen=True, eq=False)
class ClaimData:
    """Everything the rows read: the saved times (T,), the betas, the weights' numbers, the
    zero-temperature curve (or None) and the early times at which E(t) is read."""

    times: np.ndarray
    betas: tuple[BetaData, ...]
    weights: WeightsData
    zero: ZeroData | None = None
    error_times: tuple[float, ...] = ERROR_TIMES


# --------------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Finding:
    """What one row's function finds (the row's fields but its key, claim and kind)."""

    verdict: str
    meaning: str
    measured: float | None = None
    error: float | None = None
    betas: tuple[float, ...] = ()
    left_out: Mapping[str, str] = field(default_factory=dict)
    threshold: float | None = None
    note: str = ""
    details: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class ClaimRow:
    """One row of the claims table: its claim (key, kind, words) and what the data say."""

    key: str
    claim: str
    kind: Kind
    finding: Finding

    def to_dict(self) -> dict[str, object]:
        """The row as plain JSON: key, claim, kind, measured, error, betas, left_out, verdict,
        meaning, then threshold, note and the details (non-finite numbers as None)."""
        f = self.finding
        row: dict[str, Any] = {
            "key": self.key,
            "claim": self.claim,
            "kind": self.kind,
            "measured": f.measured,
            "error": f.error,
            "betas": list(f.betas),
            "left_out": dict(f.left_out),
            "verdict": f.verdict,
            "meaning": f.meaning,
        }
        if f.threshold is not None:
            row["threshold"] = f.threshold
        if f.note:
            row["note"] = f.note
        return _plain({**row, **f.details})


@dataclass(frozen=True)
class Claim:
    """A row of the table: its stable key, kind, the claim in words, and the function that reads the
    data for it."""

    key: str
    kind: Kind
    claim: str
    row: Callable[[ClaimData], Finding]


def _plain(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple | np.ndarray):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


# --------------------------------------------------------------------------------- helpers


def _usable(data: ClaimData, name: str) -> tuple[list[BetaData], dict[str, str]]:
    """The betas whose quantity `name` converged in N with a finite error, and why the others not."""
    used, left = [], {}
    for b in data.betas:
        q = b.quantities.get(name)
        if q is None:
            left[b.label] = f"{name} not measured"
        elif not q.converged:
            left[b.label] = q.reason or f"{name} not converged in N"
        elif not math.isfinite(q.value):
            left[b.label] = f"{name} undefined"
        elif not math.isfinite(q.error):
            left[b.label] = f"{name} has no error estimate (one level)"
        else:
            used.append(b)
    return used, left


def _curves(data: ClaimData) -> tuple[list[BetaData], dict[str, str]]:
    """The betas whose whole W2 curve converged in N (status converged), and why the others not."""
    used = [b for b in data.betas if b.status == "converged"]
    left = {
        b.label: f"status {b.status}: its W2 curve is not converged in N over the saved span"
        for b in data.betas
        if b.status != "converged"
    }
    return used, left


def _span_reason(betas: Sequence[float]) -> str:
    """Why these betas cannot judge a law ("" when they can)."""
    b = sorted(float(x) for x in betas)
    span = b[-1] / b[0] if b else 1.0
    if len(b) >= MIN_BETAS and span >= MIN_SPAN * (1 - 1e-12):
        return ""
    return (
        f"{len(b)} betas spanning a factor {span:.3g}: a law is judged over at least {MIN_BETAS} "
        f"spanning a factor {MIN_SPAN:g}"
    )


def _at_least(value: float, err: float, threshold: float) -> str:
    """A one-sided test of an exponent, value >= threshold > 0: inconsistent when below it by SIGMAS
    errors; consistent when not, and positive by SIGMAS errors (the quantity is seen to vanish);
    else not resolved (too uncertain to tell a vanishing quantity from one that does not)."""
    if not (math.isfinite(value) and math.isfinite(err)):
        return "not resolved"
    if value < threshold - SIGMAS * err:
        return "inconsistent"
    return "consistent" if value - SIGMAS * err > 0 else "not resolved"


def _sign(value: float, err: float) -> str:
    """consistent when value > 0 by SIGMAS errors, inconsistent when < 0 by as much, else not resolved."""
    if not (math.isfinite(value) and math.isfinite(err)):
        return "not resolved"
    if value - SIGMAS * err > 0:
        return "consistent"
    return "inconsistent" if value + SIGMAS * err < 0 else "not resolved"


def _combine(verdicts: Sequence[str]) -> str:
    """Several tests of one row: inconsistent if any is, else consistent if any is, else untested
    (sign only) if any is, else not resolved. The row is decided on its decided tests only, and says
    which those are (`_decided_by`)."""
    for v in ("inconsistent", "consistent", "untested (sign only)"):
        if v in verdicts:
            return v
    return "not resolved"


def _decided_by(labels: Sequence[str], verdicts: Sequence[str]) -> str:
    """Which sub-tests of a row decided it, in words: "decided by t = 2, 4 (2 of 3); not resolved:
    t = 6" ("" when every sub-test is decided)."""
    decided = [lab for lab, v in zip(labels, verdicts, strict=True) if v in ("consistent", "inconsistent")]
    if len(decided) == len(labels):
        return ""
    rest = [f"{lab}: {v}" for lab, v in zip(labels, verdicts, strict=True) if lab not in decided]
    head = f"decided by {', '.join(decided)} ({len(decided)} of {len(labels)})" if decided else "none decided"
    return f"{head}; {'; '.join(rest)}"


def _fit(x: ArrayLike, y: ArrayLike, sigma: ArrayLike, name: str) -> LineFit:
    """A weighted line through (x, y) with errors sigma (floored at 1e-300: an exact point weighs most)."""
    s = np.maximum(np.asarray(sigma, dtype=float), 1e-300)
    return fit_line(np.asarray(x, dtype=float), np.asarray(y, dtype=float), s, name)


def _line(fit: LineFit, law: str) -> dict[str, object]:
    """A fit as the row shows it: the law in words, a (intercept), b (slope), their errors, the rms."""
    return {
        "law": law,
        "a": fit.intercept,
        "a_err": fit.intercept_err,
        "b": fit.slope,
        "b_err": fit.slope_err,
        "rms": fit.rms,
    }


def _regimes(data: ClaimData) -> dict[str, str]:
    """beta -> a flag for the betas without a metastable phase."""
    return {
        b.label: (
            f"no metastable phase: the mass near A's top eigenspace peaks at {b.mass_A_max:.2g} < {FORMED:g}"
        )
        for b in data.betas
        if not b.metastable
    }


class _Extras(TypedDict, total=False):
    """The fields of a Finding besides its verdict, meaning and note (`_not_resolved`)."""

    measured: float | None
    error: float | None
    betas: tuple[float, ...]
    left_out: Mapping[str, str]
    threshold: float | None
    details: Mapping[str, object]


def _not_resolved(why: str, what: str, **kw: Unpack[_Extras]) -> Finding:
    return Finding("not resolved", f"the data do not decide {what}: {why}", note=why, **kw)
