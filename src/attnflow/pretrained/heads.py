"""Each layer and each head of a checkpoint as an `Attention(Q, K, V, beta_eff)` of MATH.md.

- Head h of a layer with weights W_Q, W_K, W_V, W_O (d x d) and d_h = d / heads:
  Q_h = W_Q[rows of h] and K_h = W_K[rows of h] (d_h x d), B_h = Q_h^T K_h (d x d, rank <= d_h),
  V_h = W_O[:, columns of h] W_V[rows of h] (d x d), A_h = V_h B_h^T.  The whole layer:
  Q = W_Q, K = W_K, V = W_O W_V, B = sum_h B_h (a diagnostic: the model never uses one head of B).
- Biases: logits_ij = (Q_h h_i + b_Q)^T (K_h h_j + b_K) / sqrt(d_h).  Terms constant in j cancel
  in the softmax: b_K drops out entirely.  b_Q leaves a key-dependent logit u_h^T h_j with
  u_h = K_h^T b_Q / sqrt(d_h) (``Head.query_bias``).  b_V and b_O add the constant
  W_O b_V + b_O to the output (``Layer.output_bias``): the weights sum to one.
- Effective beta: write a token as h = |h| x with x on the sphere.  Then
  h_i^T B_h h_j / sqrt(d_h) = (|h_i| |h_j| / sqrt(d_h)) x_i^T B_h x_j, so with a representative
  norm r of the tokens, beta_eff = r^2 / sqrt(d_h).  r is the median |h| of the real tokens entering
  the layer when a text (or its states) is given; otherwise sqrt(|gamma|^2 + |b|^2) of the layer
  norm that feeds the layer (the expected norm of gamma * z + b when z has zero mean and unit
  variance, as a layer norm makes it); sqrt(d) for bare MultiheadAttention weights; or the
  ``norm`` you pass.
- V_h acts on unit tokens unscaled: a residual layer adds r V x to r x, i.e. one Euler step of
  size 1 for x before the next layer norm renormalises.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._checks import check_positive, to_numpy
from ..attention import Attention
from .checkpoint import Checkpoint, CheckpointError, check_layers, layer_weights, open_checkpoint
from .forward import TokenStates, softmax, token_states

__all__ = ["Head", "Layer", "attention_output", "head_attention", "load_heads"]

NORM_FROM_TEXT = "median |h| of the text's tokens"


@dataclass(frozen=True)
class Head:
    """One attention head of one layer.

    Q, K: (d_h, d) query and key rows of the head; V: (d, d) = W_O^h W_V^h.  attention: the
    Attention of MATH.md with Q, K padded by zero rows to (d, d) (so B = Q_h^T K_h, rank <= d_h)
    and beta = beta_eff = norm^2 / sqrt(d_h).  query_bias: (d,) vector u with logit_ij += u^T h_j
    for raw tokens h (from b_Q; zero when the query has no bias).
    """

    layer: int
    head: int
    d_head: int
    Q: np.ndarray
    K: np.ndarray
    V: np.ndarray
    attention: Attention
    query_bias: np.ndarray
    norm: float

    @property
    def beta(self) -> float:
        return self.attention.beta


@dataclass(frozen=True)
class Layer:
    """One attention layer: the whole-layer Attention (Q = W_Q, K = W_K, V = W_O W_V), its heads,
    the representative token norm and how it was obtained, and the constant output bias
    W_O b_V + b_O (d,)."""

    layer: int
    attention: Attention
    heads: tuple[Head, ...]
    norm: float
    norm_source: str
    output_bias: np.ndarray

    @property
    def beta(self) -> float:
        return self.attention.beta

    @property
    def d_head(self) -> int:
        return self.heads[0].d_head


def _build_layer(i: int, w: dict[str, np.ndarray], num_heads: int, norm: float, source: str) -> Layer:
    d = w["W_Q"].shape[0]
    dh = d // num_heads
    s = math.sqrt(dh)
    beta = norm * norm / s
    pad = np.zeros((d - dh, d))
    heads = []
    for h in range(num_heads):
        rows = slice(h * dh, (h + 1) * dh)
        Qh, Kh = w["W_Q"][rows], w["W_K"][rows]
        Vh = w["W_O"][:, rows] @ w["W_V"][rows]
        att = Attention(np.vstack([Qh, pad]), np.vstack([Kh, pad]), Vh, beta)
        u = Kh.T @ w["b_Q"][rows] / s
        heads.append(Head(i, h, dh, Qh, Kh, Vh, att, u, norm))
    full = Attention(w["W_Q"], w["W_K"], w["W_O"] @ w["W_V"], beta)
    return Layer(i, full, tuple(heads), norm, source, w["W_O"] @ w["b_V"] + w["b_O"])


def _layer_norm_scale(ck: Checkpoint, i: int) -> float | None:
    """sqrt(|gamma|^2 + |b|^2) of the layer norm feeding layer i (BERT), None when unknown."""
    if ck.layout != "bert":
        return None
    if i == 0:
        g = ck.array(f"{ck.prefix}embeddings.LayerNorm.weight", required=False)
        b = ck.array(f"{ck.prefix}embeddings.LayerNorm.bias", required=False)
    else:
        g = ck.layer_array(i - 1, "ln2_w", required=False)
        b = ck.layer_array(i - 1, "ln2_b", required=False)
    if g is None:
        return None
    return float(math.sqrt(np.sum(g * g) + (0.0 if b is None else np.sum(b * b))))


def _check_states(states: Any, ck: Checkpoint) -> np.ndarray:
    S = states.states if isinstance(states, TokenStates) else to_numpy(states).astype(np.float64)
    if S.ndim != 3 or S.shape[0] != ck.num_layers + 1 or S.shape[2] != ck.d:
        raise ValueError(
            f"states must have shape (L + 1, N, d) = ({ck.num_layers + 1}, N, {ck.d}) for this checkpoint "
            f"(the states of token_states(checkpoint, text)), got {S.shape}"
        )
    return S


def load_heads(
    checkpoint: Any,
    text: str | None = None,
    *,
    norm: float | None = None,
    num_heads: int | None = None,
    layers: list[int] | None = None,
    tokenizer: Any = None,
    states: Any = None,
) -> list[Layer]:
    """Per-layer and per-head attention of a checkpoint, with beta_eff = r^2 / sqrt(d_h).

    r, the representative token norm, is `norm` when given; else the median |h| of the tokens of
    `text` entering each layer (BERT layouts); else the layer-norm estimate sqrt(|gamma|^2 + |b|^2);
    else sqrt(d).  states: the model's states for a text (a `TokenStates` from `token_states`, or its
    (L + 1, N, d) array), used instead of `text` so that the model is not run again.
    layers: indices to return (default all).  Returns a list of `Layer`.
    """
    ck = open_checkpoint(checkpoint, num_heads)
    idx = check_layers(layers, ck.num_layers)
    if text is not None and states is not None:
        raise ValueError("pass text or states (the states of that text), not both")
    S = None
    if norm is not None:
        norm = check_positive(norm, "norm")
    elif text is not None or states is not None:
        if ck.layout != "bert":
            raise CheckpointError(
                f"checkpoint {ck.source}: token norms from text need a BERT-style checkpoint with "
                "embeddings; pass norm instead"
            )
        S = token_states(ck, text, tokenizer).states if text is not None else _check_states(states, ck)
    out = []
    for i in idx:
        if norm is not None:
            r, src = norm, "given"
        elif S is not None:
            r, src = float(np.median(np.linalg.norm(S[i], axis=1))), NORM_FROM_TEXT
        elif (scale := _layer_norm_scale(ck, i)) is not None:
            r, src = scale, "layer norm sqrt(|gamma|^2+|b|^2)"
        else:
            r, src = math.sqrt(ck.d), "sqrt(d) (no layer norm or text)"
        out.append(_build_layer(i, layer_weights(ck, i), ck.num_heads[i], r, src))
    return out


def head_attention(
    checkpoint: Any,
    layer: int,
    head: int | None = None,
    *,
    text: str | None = None,
    norm: float | None = None,
    num_heads: int | None = None,
) -> Attention:
    """The Attention of one head (head=None: the whole layer) at beta_eff; see `load_heads`."""
    (L,) = load_heads(checkpoint, text, norm=norm, num_heads=num_heads, layers=[layer])
    if head is None:
        return L.attention
    if isinstance(head, bool) or not isinstance(head, (int, np.integer)) or not 0 <= head < len(L.heads):
        raise ValueError(f"head must be an integer in [0, {len(L.heads)}) for this layer, got {head!r}")
    return L.heads[int(head)].attention


def attention_output(layer: Layer, H: Any) -> np.ndarray:
    """The layer's self-attention output (before the residual) recomputed from its heads.

    H: (N, d) raw token states (not normalised).  Returns (N, d):
    sum_h softmax_j(beta_h h_i^T B_h h_j / r^2 + u_h^T h_j) V_h h_j + output_bias.
    Equals the model's own attention sublayer when the extraction is right (tested to 1e-6).
    """
    H = to_numpy(H).astype(np.float64)
    d = layer.attention.d
    if H.ndim != 2 or H.shape[1] != d:
        raise ValueError(f"H must have shape (N, {d}), got {H.shape}")
    out = np.zeros_like(H) + layer.output_bias
    for head in layer.heads:
        scale = head.beta / head.norm**2  # = 1 / sqrt(d_h)
        logits = scale * (H @ head.attention.B @ H.T) + (H @ head.query_bias)[None, :]
        out += softmax(logits) @ (H @ head.V.T)
    return out
