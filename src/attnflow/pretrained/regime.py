"""The regime of a model: the time its stack of layers integrates, against the theorem's window.

MATH.md: a transformer with step h is the explicit Euler scheme of the flow followed by
renormalisation, y = (x + h v(x)) / |x + h v(x)| with v(x) tangent at x.  Then

    P_x^perp y / <x, y> = h v(x)        exactly

(y's gnomonic image in the tangent plane at x).  So the step h_l of layer l is measured on the
model's own forward pass: x_i the directions of the token states entering the layer (the residual
stream for pre-norm models), y_i those leaving it, D_i = P^perp y_i / <x_i, y_i> (tokens turned by
90 degrees or more have no image and are left out), and v_i the layer's attention field at x_i,

    v_i = P_{x_i}^perp a_i / r_l,

a_i the layer's attention sublayer output on the states as its heads read them (`attention_output`:
every head, biases, rotary positions, causal mask, the tokens' own norms) and r_l the
representative norm of beta_eff (sqrt(d) after an RMSNorm): on unit tokens, a_i / r_l is
sum_h sum_j w_ij V_h x_j, the multi-head field of the maths.  h_l is the least-squares slope of D
on v over the tokens, h_l = sum_i <D_i, v_i> / sum_i |v_i|^2; its standard error treats tokens as
clusters (a sandwich estimate); R^2 says how much of the layer's motion the attention field
explains (the feed-forward and the norms' rescaling are the rest).  In a pre-norm model a layer
adds a_i to a residual stream of norm |s_i|, a step r_l / |s_i| per token: h_l is their weighted
mean.

The stack integrates T = sum_l h_l (t_l: the time after layer l).  The theorem's window is
t <~ log beta: concentration is guaranteed up to a time of order log beta.  beta of a layer: the
median of its heads' beta fitted from the logits (`beta.head_fits`); of the model: the median over
every head.  Since beta_eff alone is a convention under RMSNorm (d / sqrt(d_h)), the window is also
given with beta ||B_h|| (the largest logit on unit tokens).  The verdict compares T with log beta:
a ratio, not a theorem (the window's constants K1, K2, C1, c of the bound are unknown for a
trained model).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from .beta import BetaFit, head_fits
from .checkpoint import Checkpoint, CheckpointLike, open_checkpoint
from .forward import TokenizerLike, TokenStates, head_inputs, token_states
from .heads import Head, Layer, attention_output, load_heads

__all__ = [
    "Regime",
    "StepFit",
    "attention_field",
    "departure",
    "fit_step",
    "layer_step",
    "regime",
    "regime_of",
]


@dataclass(frozen=True)
class StepFit:
    """The step of one layer: h (None when the field vanishes), its standard error (tokens as
    clusters; None with one token), R^2 of D on v, and the number of tokens used."""

    h: float | None
    se: float | None
    r2: float | None
    tokens: int


def fit_step(X: np.ndarray, Y: np.ndarray, V: np.ndarray) -> StepFit:
    """h with P_x^perp y / <x, y> = h v + e by least squares over tokens: X, Y (N, d) unit tokens
    before and after the layer, V (N, d) the field at X (tangent)."""
    c = np.sum(X * Y, axis=1)
    keep = c > 0
    X, Y, V, c = X[keep], Y[keep], V[keep], c[keep]
    n = int(keep.sum())
    D = (Y - c[:, None] * X) / c[:, None]
    vv = float(np.sum(V * V))
    if n == 0 or vv <= 0:
        return StepFit(None, None, None, n)
    h = float(np.sum(D * V)) / vv
    E = D - h * V
    dd = float(np.sum(D * D))
    r2 = 1.0 - float(np.sum(E * E)) / dd if dd > 0 else None
    score = np.sum(E * V, axis=1)  # each token's contribution to the normal equation
    se = math.sqrt(float(score @ score) * n / (n - 1)) / vv if n > 1 else None
    return StepFit(h, se, r2, n)


def attention_field(ck: Checkpoint, rec: Layer, S: np.ndarray) -> np.ndarray:
    """v_i = P_{x_i}^perp a_i / r of layer `rec` at the states S (N, d) entering it (x_i = S_i /
    |S_i|, a_i its attention sublayer's output), (N, d)."""
    X = S / np.linalg.norm(S, axis=1, keepdims=True)
    a = attention_output(rec, head_inputs(ck, rec.layer, S)) / rec.norm
    return a - np.sum(a * X, axis=1, keepdims=True) * X


def layer_step(ck: Checkpoint, rec: Layer, run: TokenStates) -> StepFit:
    """h of layer `rec` from the forward pass `run` (see the module's doc)."""
    i = rec.layer
    return fit_step(run.cloud(i), run.cloud(i + 1), attention_field(ck, rec, run.states[i]))


def norm_B(head: Head) -> float:
    """||B_h||_2 = ||Q_h^T K_h||_2 from d_h x d_h pieces: the root of the largest eigenvalue of
    (Q_h Q_h^T)(K_h K_h^T)."""
    w = np.linalg.eigvals((head.Q @ head.Q.T) @ (head.K @ head.K.T))
    return math.sqrt(max(float(np.max(w.real)), 0.0))


def departure(head: Head, beta: float, N: int) -> tuple[float, float] | None:
    """The heuristic metastable times of MATH.md ("Why concentration lasts longer than guaranteed")
    on the symmetric part S = (A_h + A_h^T) / 2 of the head, u_1, u_2 its top eigenvectors, gap
    gamma = mu_1 - mu_2: delta = |B^T u_1| - u_1^T B u_1, lambda = gamma / |B^T u_2|; returns
    (log N / lambda, delta beta / lambda): the finite-N departure (its intercept b unknown, taken 0)
    and the mean-field one.  From 2 d_h x 2 d_h pieces (S = U M U^T, U = [V_h K_h^T, Q_h^T]).
    None when S has no positive gap among its nonzero eigenvalues.  A heuristic derived for
    symmetric A: a trained head's A is not (asymmetry about 0.7), so these are orders of magnitude.
    """
    k = head.d_head
    U = np.hstack([head.V @ head.K.T, head.Q.T])
    Qu, Ru = np.linalg.qr(U)
    M = np.zeros((2 * k, 2 * k))
    M[:k, k:] = M[k:, :k] = np.eye(k) / 2
    w, Y = np.linalg.eigh(Ru @ M @ Ru.T)
    w, Y = w[::-1], Y[:, ::-1]
    if not w[1] > 0 or not w[0] > w[1]:
        return None
    u1, u2 = Qu @ Y[:, 0], Qu @ Y[:, 1]
    Bt = lambda u: head.K.T @ (head.Q @ u)  # noqa: E731 -- B^T u = K^T (Q u)
    delta = float(np.linalg.norm(Bt(u1)) - (head.Q @ u1) @ (head.K @ u1))
    lam = float((w[0] - w[1]) / np.linalg.norm(Bt(u2)))
    return math.log(N) / lam, delta * beta / lam


def _median(values: Sequence[float | None]) -> float | None:
    v = [x for x in values if x is not None and math.isfinite(x)]
    return float(np.median(v)) if v else None


@dataclass(frozen=True)
class Regime:
    """Where a model sits against the window t <~ log beta (see the module's doc).

    steps: the StepFit of each layer; times: t_l = h_0 + ... + h_l; T: the stack's time; T_rest:
    without the first layer (its step acts on the embeddings, which need not be on the scale of
    the residual stream: SmolLM2's first step is 20 with R^2 = 0);
    beta_layers: per layer the median over heads of the fitted beta; beta: the median over every
    head; beta_normB: the median of beta ||B_h||; window, window_normB: log beta and
    log(beta ||B||); ratio: T / window; inside: T <= window; beyond: the first layer whose t_l
    passes the window (None); metastable: the heuristic metastable time, the median over heads of
    min(log N / lambda, delta beta / lambda) (`departure`; None without a head with a gap), and
    departure_N, departure_mf the medians of the two branches; line: the verdict in words.
    """

    steps: tuple[StepFit, ...]
    times: tuple[float, ...]
    T: float
    T_rest: float
    beta_layers: tuple[float | None, ...]
    beta: float | None
    beta_normB: float | None
    window: float | None
    window_normB: float | None
    ratio: float | None
    inside: bool | None
    beyond: int | None
    metastable: float | None
    departure_N: float | None
    departure_mf: float | None
    line: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _verdict(T: float, rest: float, beta: float | None, window: float | None, window_B: float | None) -> str:
    if beta is None or window is None or window <= 0:
        return f"T = {T:.3g}; no fitted beta > 1, so no window to compare it with"
    where = "inside" if T <= window else "beyond"
    line = (
        f"T = sum h_l = {T:.3g} against log beta_eff = log {beta:.3g} = {window:.3g} (T / log beta = "
        f"{T / window:.2g}): {where} the window t <~ log beta; without layer 0, T = {rest:.3g} "
        f"({'inside' if rest <= window else 'beyond'})"
    )
    if window_B is not None:
        line += f"; with beta ||B|| the window is {window_B:.3g}"
    return line


def regime_of(
    steps: Sequence[StepFit],
    fits: Sequence[Sequence[float | None]],
    normB: Sequence[float],
    departures: Sequence[tuple[float, float] | None] = (),
) -> Regime:
    """The Regime from each layer's step, each layer's fitted betas per head, beta ||B_h|| of
    every head and each head's heuristic `departure` (finite N, mean field)."""
    h = [s.h if s.h is not None else 0.0 for s in steps]
    times = tuple(float(t) for t in np.cumsum(h))
    T = times[-1] if times else 0.0
    beta_layers = tuple(_median(f) for f in fits)
    beta = _median([b for f in fits for b in f])
    bB = _median(list(normB))
    window = math.log(beta) if beta is not None and beta > 1 else None
    window_B = math.log(bB) if bB is not None and bB > 1 else None
    inside = None if window is None else T <= window
    beyond = next((k for k, t in enumerate(times) if window is not None and t > window), None)
    ratio = T / window if window else None
    rest = T - h[0] if h else 0.0
    known = [dep for dep in departures if dep is not None]
    meta = _median([min(dep) for dep in known])
    line = _verdict(T, rest, beta, window, window_B)
    if meta is not None:
        line += (
            f"; heuristic metastable time (median over heads of min(log N / lambda, delta beta / lambda), "
            f"symmetric parts) {meta:.3g}: T is {'below' if T <= meta else 'beyond'} it"
        )
    n_branch, mf_branch = _median([d[0] for d in known]), _median([d[1] for d in known])
    return Regime(
        tuple(steps), times, T, rest, beta_layers, beta, bB, window, window_B, ratio, inside, beyond,
        meta, n_branch, mf_branch, line,
    )  # fmt: skip


def _fitted(fits: Sequence[BetaFit]) -> list[float | None]:
    return [f.beta for f in fits]


def regime(
    checkpoint: CheckpointLike,
    text: str | None = None,
    *,
    ids: Sequence[int] | None = None,
    tokenizer: TokenizerLike = None,
) -> Regime:
    """Run the model once on `text` (or token `ids`) and place it against the window t <~ log beta:
    each layer's step h_l, the integrated time T, beta fitted per head and per layer."""
    ck = open_checkpoint(checkpoint)
    run = token_states(ck, text, tokenizer, ids=ids)
    steps: list[StepFit] = []
    fits: list[list[float | None]] = []
    normB: list[float] = []
    deps: list[tuple[float, float] | None] = []
    for i in range(ck.num_layers):  # one layer at a time: a layer's Attention objects are large
        (rec,) = load_heads(ck, layers=[i], states=run)
        steps.append(layer_step(ck, rec, run))
        fits.append(_fitted(head_fits(ck, rec, run)))
        normB.extend(h.beta * norm_B(h) for h in rec.heads)
        for h, b in zip(rec.heads, fits[-1], strict=True):
            deps.append(departure(h, b if b is not None else h.beta, len(run.tokens)))
    return regime_of(steps, fits, normB, deps)
