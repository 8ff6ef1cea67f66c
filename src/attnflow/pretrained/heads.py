"""Each layer and each head of a checkpoint as an `Attention(Q, K, V, beta_eff)` of MATH.md.

- Head h of a layer with H query heads, H_kv key/value heads and width d_h reads the key/value
  head kv(h) = h // (H / H_kv) (grouped-query attention; kv(h) = h without it).  With the rows
  of head h (of kv(h) for K and V): Q_h = W_Q[rows] and K_h = W_K[rows] (d_h x d), so
  B_h = Q_h^T K_h (d x d, rank <= d_h); V_h = W_O[:, rows of h] W_V[rows of kv(h)] (d x d), so A_h =
  V_h B_h^T goes through the output projection.  The logits are (Q_h h_i)^T (K_h h_j) / sqrt(d_h):
  the 1/sqrt(d_h) scale is kept out of B and put into beta.  The whole layer: Q = W_Q, K and V the
  key/value rows each query head reads, stacked, V = W_O W_V; B = sum_h B_h (a diagnostic).
- Rotary positions: B depends on the offset r = i - j, B_h(r) = Q_h^T R(-r) K_h (`rope`);
  ``Head.attention`` is B at r = 0, ``Head.attention_at(r)`` at any offset.
- The norm: a pre-norm RMSNorm reads g * x / rms(x), and |x / rms(x)| = sqrt(d) (eps aside): its
  weight g is folded into the heads (Q_h diag(g), K_h diag(g), W_V diag(g)), the tokens on the
  sphere are the residual stream's directions x / |x| and r = sqrt(d) exactly.  A post-norm layer
  norm (BERT) is not folded: the tokens are its outputs.  ``Layer.input_norm`` says which.
- Biases: b_K drops out of the softmax (without rotary positions: with them, q_i^T R b_K depends on
  j and is not represented).  b_Q leaves a key-dependent logit u_h^T h_j, u_h = K_h^T b_Q^h /
  sqrt(d_h) (``Head.query_bias``).  b_V and b_O add the constant W_O b_V + b_O to the output
  (``Layer.output_bias``): the weights sum to one.
- Effective beta: write a token as h = |h| x.  Then h_i^T B_h h_j / sqrt(d_h) = (|h_i| |h_j| /
  sqrt(d_h)) x_i^T B_h x_j, so with a representative norm r, beta_eff = r^2 / sqrt(d_h).  r is the
  ``norm`` you pass; sqrt(d) for a pre-norm RMSNorm; the median |h| of the real tokens entering the
  layer when a text (or its states) is given; sqrt(|gamma|^2 + |b|^2) of the post-norm layer norm
  feeding the layer (the expected norm of gamma * z + b for z of zero mean and unit variance); or
  sqrt(d) for bare MultiheadAttention weights.
- V_h acts on unit tokens unscaled: a residual layer adds r V x to the residual stream, one Euler
  step of size r / |residual| for its direction (1 for post-norm, where the residual is the token).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .._checks import check_positive, to_numpy
from ..attention import Attention
from .checkpoint import Checkpoint, CheckpointLike, check_layers, layer_weights, open_checkpoint
from .forward import TokenizerLike, TokenStates, head_inputs, softcap, softmax, token_states
from .rope import RoPE, layer_rope

__all__ = ["Head", "Layer", "Norm", "attention_output", "head_attention", "layer_rope", "load_heads"]

NORM_FROM_TEXT = "median |h| of the text's tokens"


@dataclass(frozen=True)
class Norm:
    """The norm that feeds a layer's attention: kind ("layernorm", "rmsnorm", "none"), placement
    ("pre", "post", "none"), weight (d,) or None, eps, and whether the weight is folded into the
    heads' Q, K and W_V."""

    kind: str
    placement: str
    weight: np.ndarray | None
    eps: float
    folded: bool

    def describe(self) -> str:
        if self.kind == "none":
            return "no norm before the attention"
        if self.folded:
            return f"{self.placement}-{self.kind}, weight folded into Q, K, V"
        return f"{self.placement}-{self.kind} output as the tokens (not folded)"


@dataclass(frozen=True)
class Head:
    """One attention head of one layer.

    Q, K: (d_h, d) rows of the head and of the key/value head it reads (norm folded when
    ``Layer.input_norm.folded``); W_V: (d_h, d) value rows of that key/value head; W_O: (d, d_h)
    the head's columns of the output projection; V = W_O W_V (d, d).  attention: the Attention of
    MATH.md with Q, K padded by zero rows to (d, d) (B = Q^T K, rank <= d_h), V, beta = beta_eff =
    norm^2 / sqrt(d_h), at rotary offset 0.  kv_head: the key/value head (h // (H / H_kv)).
    rope: the rotary positions or None.  query_bias: (d,) u with logit_ij += u^T h_j (without
    rotary positions).  b_Q, b_K: (d_h,) the head's query bias and its key/value head's key bias
    (None without), which `attention_output` adds to the queries and keys before the rotation.
    sink: the head's sink logit (None without): an extra key that takes softmax mass and gives
    nothing.  softcap: c of the logits' soft cap c tanh(logits / c) (None without).  Neither is in
    `attention` (the maths has no term for them); `attention_output` and the field apply both.
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
    kv_head: int = 0
    W_V: np.ndarray | None = None
    W_O: np.ndarray | None = None
    rope: RoPE | None = None
    b_Q: np.ndarray | None = None
    b_K: np.ndarray | None = None
    sink: float | None = None
    softcap: float | None = None

    @property
    def beta(self) -> float:
        return self.attention.beta

    def B_at(self, offset: float) -> np.ndarray:
        """B_h(r) = Q_h^T R(-r) K_h (d, d) at offset r = i - j; B_h without rotary positions."""
        if self.rope is None:
            return self.attention.B
        return self.Q.T @ self.rope.matrix(-offset) @ self.K

    def attention_at(self, offset: float) -> Attention:
        """The head's Attention at rotary offset r = i - j (the same for every r without RoPE)."""
        if self.rope is None or offset == 0:
            return self.attention
        d = self.Q.shape[1]
        pad = np.zeros((d - self.d_head, d))
        K = self.rope.matrix(-offset) @ self.K
        return Attention(np.vstack([self.Q, pad]), np.vstack([K, pad]), self.V, self.beta)


@dataclass(frozen=True)
class Layer:
    """One attention layer: the whole-layer Attention, its heads, the representative token norm
    and how it was obtained, the norm feeding it, whether it is causal, and the constant output
    bias W_O b_V + b_O (d,)."""

    layer: int
    attention: Attention
    heads: tuple[Head, ...]
    norm: float
    norm_source: str
    output_bias: np.ndarray
    input_norm: Norm | None = None
    causal: bool = False
    num_kv_heads: int = 0

    @property
    def beta(self) -> float:
        return self.attention.beta

    @property
    def d_head(self) -> int:
        return self.heads[0].d_head

    @property
    def rope(self) -> RoPE | None:
        return self.heads[0].rope


def _input_norm(ck: Checkpoint, i: int) -> Norm:
    arch = ck.arch
    if arch.placement == "pre":
        g = ck.layer_array(i, "attn_norm_w", required=False)
        return Norm(arch.norm, "pre", g, ck.eps, folded=g is not None)
    if arch.placement == "post":
        g = ck.global_array("norm_w", False) if i == 0 else ck.layer_array(i - 1, "ffn_norm_w", False)
        return Norm(arch.norm, "post", g, ck.eps, folded=False)
    return Norm("none", "none", None, 0.0, folded=False)


def _head(i: int, h: int, w: dict[str, np.ndarray], group: int, dh: int, norm: float, ck: Checkpoint) -> Head:
    rows, kv = slice(h * dh, (h + 1) * dh), h // group
    kv_rows = slice(kv * dh, (kv + 1) * dh)
    Qh, Kh, WV, WO = w["W_Q"][rows], w["W_K"][kv_rows], w["W_V"][kv_rows], w["W_O"][:, rows]
    d = Qh.shape[1]
    pad = np.zeros((d - dh, d))
    V = WO @ WV
    att = Attention(np.vstack([Qh, pad]), np.vstack([Kh, pad]), V, norm * norm / math.sqrt(dh))
    bq, bk = w["b_Q"][rows], w["b_K"][kv_rows]
    u = Kh.T @ bq / math.sqrt(dh)
    b_Q, b_K = (b if b.any() else None for b in (bq, bk))
    sinks = ck.layer_array(i, "sinks", required=False)
    sink = None if sinks is None else float(sinks[h])
    return Head(i, h, dh, Qh, Kh, V, att, u, norm, kv, WV, WO, layer_rope(ck), b_Q, b_K, sink, ck.softcap)


def _build_layer(ck: Checkpoint, i: int, norm: float, source: str) -> Layer:
    w = layer_weights(ck, i)
    inorm = _input_norm(ck, i)
    if inorm.folded:
        assert inorm.weight is not None
        w = {**w, **{n: w[n] * inorm.weight[None, :] for n in ("W_Q", "W_K", "W_V")}}
    H, dh = ck.num_heads[i], ck.d_head
    group = H // ck.num_kv_heads[i]
    heads = tuple(_head(i, h, w, group, dh, norm, ck) for h in range(H))
    rows = np.concatenate([np.arange(dh) + (h // group) * dh for h in range(H)])  # kv rows per query head
    K, WV, b_V = w["W_K"][rows], w["W_V"][rows], w["b_V"][rows]
    d = ck.d
    Q = w["W_Q"] if w["W_Q"].shape[0] == d else np.vstack([w["W_Q"], np.zeros((d - H * dh, d))])
    K = K if K.shape[0] == d else np.vstack([K, np.zeros((d - H * dh, d))])
    full = Attention(Q, K, w["W_O"] @ WV, norm * norm / math.sqrt(dh))
    bias = w["W_O"] @ b_V + w["b_O"]
    return Layer(i, full, heads, norm, source, bias, inorm, ck.arch.causal, ck.num_kv_heads[i])


def _layer_norm_scale(ck: Checkpoint, i: int) -> float | None:
    """sqrt(|gamma|^2 + |b|^2) of the post-norm layer norm feeding layer i, None when unknown."""
    if ck.arch.placement != "post":
        return None
    if i == 0:
        g, b = ck.global_array("norm_w", False), ck.global_array("norm_b", False)
    else:
        g, b = ck.layer_array(i - 1, "ffn_norm_w", False), ck.layer_array(i - 1, "ffn_norm_b", False)
    if g is None:
        return None
    return float(math.sqrt(np.sum(g * g) + (0.0 if b is None else np.sum(b * b))))


def _check_states(states: TokenStates | ArrayLike, ck: Checkpoint) -> np.ndarray:
    S = states.states if isinstance(states, TokenStates) else to_numpy(states).astype(np.float64)
    if S.ndim != 3 or S.shape[0] != ck.num_layers + 1 or S.shape[2] != ck.d:
        raise ValueError(
            f"states must have shape (L + 1, N, d) = ({ck.num_layers + 1}, N, {ck.d}) for this checkpoint "
            f"(the states of token_states(checkpoint, text)), got {S.shape}"
        )
    return S


def _norm_of(ck: Checkpoint, i: int, S: np.ndarray | None) -> tuple[float, str]:
    """The representative token norm r of layer i and where it comes from (`load_heads`)."""
    if ck.arch.placement == "pre" and ck.arch.norm == "rmsnorm":
        return math.sqrt(ck.d), "sqrt(d): |x / rms(x)| after the RMSNorm"
    if S is not None:
        return float(np.median(np.linalg.norm(head_inputs(ck, i, S[i]), axis=1))), NORM_FROM_TEXT
    scale = _layer_norm_scale(ck, i)
    if scale is not None:
        return scale, "layer norm sqrt(|gamma|^2+|b|^2)"
    return math.sqrt(ck.d), "sqrt(d) (no layer norm or text)"


def load_heads(
    checkpoint: CheckpointLike,
    text: str | None = None,
    *,
    norm: float | None = None,
    num_heads: int | None = None,
    layers: list[int] | None = None,
    tokenizer: TokenizerLike = None,
    states: TokenStates | ArrayLike | None = None,
) -> list[Layer]:
    """Per-layer and per-head attention of a checkpoint, with beta_eff = r^2 / sqrt(d_h).

    r, the representative token norm, is `norm` when given; else sqrt(d) after a pre-norm RMSNorm;
    else the median |h| of the tokens of `text` entering each layer; else the layer-norm estimate
    sqrt(|gamma|^2 + |b|^2); else sqrt(d).  states: the model's states for a text (a `TokenStates`
    from `token_states`, or its (L + 1, N, d) array), used instead of `text` so that the model is
    not run again.  layers: indices to return (default all).  Returns a list of `Layer`.
    """
    ck = open_checkpoint(checkpoint, num_heads)
    idx = check_layers(layers, ck.num_layers)
    if text is not None and states is not None:
        raise ValueError("pass text or states (the states of that text), not both")
    S = None
    if norm is not None:
        norm = check_positive(norm, "norm")
    elif text is not None or states is not None:
        S = _check_states(states, ck) if states is not None else token_states(ck, text, tokenizer).states
    out = []
    for i in idx:
        r, src = (norm, "given") if norm is not None else _norm_of(ck, i, S)
        out.append(_build_layer(ck, i, r, src))
    return out


def head_attention(
    checkpoint: CheckpointLike,
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


def attention_output(layer: Layer, H: ArrayLike) -> np.ndarray:
    """The layer's self-attention output (before the residual) recomputed from its heads.

    H: (N, d) token states as the heads read them (after the norm, before its folded weight; the
    row order is the position).  Returns (N, d): sum_h softmax_j(l_ij, j <= i when causal) V_h h_j
    + output_bias, l_ij = (Q_h h_i + b_Q)^T R(j - i) (K_h h_j + b_K) / sqrt(d_h) (= h_i^T B_h(i - j)
    h_j / sqrt(d_h) + u_h^T h_j + terms constant in j, without biases under RoPE), soft-capped
    and with the sink's mass where the head has them.  Equals the model's own attention sublayer
    when the extraction is right (tested to 1e-9).
    """
    H = to_numpy(H).astype(np.float64)
    d = layer.attention.d
    if H.ndim != 2 or H.shape[1] != d:
        raise ValueError(f"H must have shape (N, {d}), got {H.shape}")
    N = H.shape[0]
    out = np.zeros_like(H) + layer.output_bias
    pos = np.arange(N)
    for head in layer.heads:
        q = H @ head.Q.T + (0.0 if head.b_Q is None else head.b_Q)
        k = H @ head.K.T + (0.0 if head.b_K is None else head.b_K)
        if head.rope is not None:
            q, k = head.rope.rotate(q, pos), head.rope.rotate(k, pos)
        logits = softcap((q @ k.T) / math.sqrt(head.d_head), head.softcap)
        if layer.causal:
            logits = np.where(pos[None, :] <= pos[:, None], logits, -np.inf)
        sink = None if head.sink is None else np.full(N, head.sink)
        out += softmax(logits, sink) @ (H @ head.V.T)
    return out
