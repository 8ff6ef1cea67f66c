"""The model's own token states for a text (or token ids): tokenizer and float64 NumPy forward passes.

`token_states` tokenizes once and runs the model once, returning the tokens and the states of every
layer (`TokenStates`); `tokenize`, `hidden_states` and `token_cloud` are views of it.  The blocks
follow the architecture (`architectures`): post-layer-norm BERT blocks (embeddings + layer norm,
then per layer self-attention, residual, layer norm, GELU feed-forward, residual, layer norm) and
pre-RMSNorm LLaMA blocks (causal attention with rotary positions and grouped key/value heads,
SwiGLU feed-forward, each on the normed residual stream and added to it; Gemma-2: each sublayer's
output normed too, logits soft-capped, a tanh-GELU gate, embeddings scaled by sqrt(d)), with
attention sinks (a logit per head of a key that takes mass and gives nothing) where the checkpoint
has them.  Checked against torch
and ONNX references in the tests.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import numpy as np
from numpy.typing import ArrayLike

from .checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointLike,
    check_layers,
    layer_weights,
    open_checkpoint,
)
from .readers import require
from .rope import RoPE, layer_rope

if TYPE_CHECKING:
    from tokenizers import Tokenizer

#: a tokenizer to read text with: a `tokenizers.Tokenizer`, a path to tokenizer.json, or None (the
#: checkpoint's own)
TokenizerLike: TypeAlias = "Tokenizer | str | os.PathLike[str] | None"

__all__ = [
    "TokenStates",
    "attention_logits",
    "head_inputs",
    "hidden_states",
    "sink_mass",
    "softcap",
    "softmax",
    "token_cloud",
    "token_states",
    "tokenize",
]

_ROBERTA_LIKE = ("roberta", "xlm-roberta", "camembert")  # positions start after the padding index


@dataclass(frozen=True)
class TokenStates:
    """A text (or token ids) run through a checkpoint: its tokens and the model's raw token states.

    tokens: the token strings (with special tokens, e.g. [CLS] ... [SEP]), N of them; ids: their ids.
    states: (L + 1, N, d) float64; states[0] is the embedding output (after its layer norm for
    post-norm models), states[l] the output of layer l, i.e. the input of layer l + 1 (the
    residual stream for pre-norm models).
    """

    text: str | None
    tokens: list[str]
    states: np.ndarray
    ids: list[int] = field(default_factory=list)

    def cloud(self, layer: int = 0) -> np.ndarray:
        """Tokens entering `layer`, normalised onto the sphere: (N, d) unit rows."""
        (i,) = check_layers([layer], self.states.shape[0])
        X = self.states[i]
        return X / np.linalg.norm(X, axis=1, keepdims=True)


def _tokenizer(ck: Checkpoint, tokenizer: TokenizerLike) -> Tokenizer:
    require("tokenizers", "reading text through the checkpoint's tokenizer")
    from tokenizers import Tokenizer

    tokenizer = ck.tokenizer if tokenizer is None else tokenizer
    if isinstance(tokenizer, Tokenizer):
        tok = Tokenizer.from_str(tokenizer.to_str())  # a copy: padding is switched off below
    else:
        path = Path(tokenizer) if tokenizer is not None else None
        if path is None or not path.is_file():
            where = f" ({path} does not exist)" if path is not None else ""
            raise CheckpointError(
                f"no tokenizer for checkpoint {ck.source}{where}: put tokenizer.json next to the weights, "
                "pass tokenizer=path/to/tokenizer.json, or give token ids (ids=..., --ids)"
            )
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as e:
            raise CheckpointError(f"tokenizer {path} is unreadable: {e}") from None
    tok.no_padding()
    tok.no_truncation()
    return tok


@dataclass(frozen=True)
class _Encoding:
    ids: list[int]
    type_ids: list[int]
    tokens: list[str]


def _vocab_size(ck: Checkpoint) -> int:
    """Rows of the word embedding, without reading it when the vocabulary or config says."""
    if ck.token_names is not None:
        return len(ck.token_names)
    if isinstance(ck.config.get("vocab_size"), int):
        return int(ck.config["vocab_size"])
    return int(ck.global_array("word", cache=False).shape[0])


def _check_ids(ck: Checkpoint, ids: ArrayLike) -> list[int]:
    vocab = _vocab_size(ck)
    try:
        out = [int(i) for i in np.asarray(ids).ravel()]
    except (TypeError, ValueError):
        raise ValueError(f"ids must be integer token ids, got {ids!r}") from None
    bad = [i for i in out if not 0 <= i < vocab]
    if not out or bad:
        raise ValueError(f"ids must be token ids in [0, {vocab}) (at least one), got {bad or out}")
    return out


def _encode(
    ck: Checkpoint, text: str | None, tokenizer: TokenizerLike, ids: ArrayLike | None = None
) -> _Encoding:
    """The encoding of `text` (ids, type ids, token strings), or of given `ids`: the one place text
    is tokenized."""
    if ids is not None:
        if text is not None:
            raise ValueError("pass text or ids, not both")
        out = _check_ids(ck, ids)
        names = ck.token_names
        return _Encoding(out, [0] * len(out), [names[i] if names else str(i) for i in out])
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    if not text.strip():
        raise ValueError("text is empty: need at least one word to make tokens")
    enc = _tokenizer(ck, tokenizer).encode(text)
    return _Encoding(list(enc.ids), list(enc.type_ids), list(enc.tokens))


def tokenize(checkpoint: CheckpointLike, text: str, tokenizer: TokenizerLike = None) -> list[str]:
    """The token strings of `text` (with the model's special tokens, e.g. [CLS] ... [SEP])."""
    return _encode(open_checkpoint(checkpoint), text, tokenizer).tokens


def _layer_norm(X: np.ndarray, g: np.ndarray, b: np.ndarray | None, eps: float) -> np.ndarray:
    mu = X.mean(axis=-1, keepdims=True)
    var = ((X - mu) ** 2).mean(axis=-1, keepdims=True)
    return (X - mu) / np.sqrt(var + eps) * g + (0.0 if b is None else b)


def _rms(X: np.ndarray, eps: float) -> np.ndarray:
    """x / rms(x) row by row (RMSNorm before its weight)."""
    return X / np.sqrt(np.mean(X * X, axis=-1, keepdims=True) + eps)


def _activation(name: str) -> Callable[[np.ndarray], np.ndarray]:
    if name == "gelu":
        from scipy.special import erf

        return lambda x: 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    if name in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        return lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    if name == "relu":
        return lambda x: np.maximum(x, 0.0)
    if name == "silu":
        return lambda x: x / (1.0 + np.exp(-x))
    raise CheckpointError(f"hidden_act {name!r} is not supported (gelu, gelu_new, relu, silu)")


def softmax(z: np.ndarray, sink: ArrayLike | None = None) -> np.ndarray:
    """Row softmax over the last axis, max-subtracted.  sink: a logit per row (broadcast to
    z.shape[:-1], e.g. (heads, 1)) of an extra key that takes mass and gives nothing (attention
    sinks): the weights then sum to 1 - sink_mass."""
    if sink is None:
        m = z.max(axis=-1, keepdims=True)
        e = np.exp(z - m)
        return e / e.sum(axis=-1, keepdims=True)
    s = np.broadcast_to(np.asarray(sink, dtype=np.float64)[..., None], (*z.shape[:-1], 1))
    m = np.maximum(z.max(axis=-1, keepdims=True), s)
    e = np.exp(z - m)
    return e / (e.sum(axis=-1, keepdims=True) + np.exp(s - m))


def sink_mass(logits: np.ndarray, sink: float) -> np.ndarray:
    """The mass the sink takes from each query's softmax, 1 - sum_j w_ij: logits (N, N) -> (N,)."""
    return 1.0 - softmax(logits, np.full(logits.shape[0], sink)).sum(axis=-1)


def softcap(logits: np.ndarray, cap: float | None) -> np.ndarray:
    """Logit soft-capping c tanh(logits / c) (Gemma-2), the logits themselves without a cap."""
    return logits if cap is None else cap * np.tanh(logits / cap)


def head_inputs(ck: Checkpoint, i: int, X: np.ndarray) -> np.ndarray:
    """What the heads of layer i read from the states X (N, d) entering it, before a folded norm
    weight: x / rms(x) after a pre-norm RMSNorm, the states themselves otherwise."""
    if ck.arch.placement == "pre" and ck.arch.norm == "rmsnorm":
        return _rms(X, ck.eps)
    return X


def _logits(H: np.ndarray, w: dict[str, np.ndarray], ck: Checkpoint, i: int, rope: RoPE | None):
    """(queries, keys, values) per head and the logits (H, N, N) as the model computes them."""
    N = H.shape[0]
    nh, nkv, dh = ck.num_heads[i], ck.num_kv_heads[i], ck.d_head
    q = (H @ w["W_Q"].T + w["b_Q"]).reshape(N, nh, dh).transpose(1, 0, 2)
    k = (H @ w["W_K"].T + w["b_K"]).reshape(N, nkv, dh).transpose(1, 0, 2)
    v = (H @ w["W_V"].T + w["b_V"]).reshape(N, nkv, dh).transpose(1, 0, 2)
    kv = np.arange(nh) // (nh // nkv)
    k, v = k[kv], v[kv]
    if rope is not None:
        pos = np.arange(N)
        q, k = rope.rotate(q, pos), rope.rotate(k, pos)
    logits = softcap(q @ k.transpose(0, 2, 1) / math.sqrt(dh), ck.softcap)
    if ck.arch.causal:
        logits = np.where(np.tril(np.ones((N, N), dtype=bool)), logits, -np.inf)
    return logits, v


def attention_logits(ck: Checkpoint, i: int, X: np.ndarray) -> np.ndarray:
    """The logits (H, N, N) of layer i's heads on the states X (N, d) entering it, as the model
    computes them (norm, biases, rotary positions, 1/sqrt(d_head), soft cap; -inf where the causal
    mask is)."""
    H = _normed(ck, i, X)
    return _logits(H, layer_weights(ck, i), ck, i, layer_rope(ck))[0]


def _normed(ck: Checkpoint, i: int, X: np.ndarray) -> np.ndarray:
    """The attention's input: the pre-norm applied to the residual stream, or the states (post)."""
    if ck.arch.placement == "pre":
        g = ck.layer_array(i, "attn_norm_w")
        return _rms(X, ck.eps) * g if ck.arch.norm == "rmsnorm" else _layer_norm(X, g, None, ck.eps)
    return X


def _attend(H: np.ndarray, ck: Checkpoint, i: int, rope: RoPE | None) -> np.ndarray:
    """Multi-head self-attention of one sequence, (N, d) -> (N, d), from layer i's weights."""
    w = layer_weights(ck, i)
    logits, v = _logits(H, w, ck, i, rope)
    sinks = ck.layer_array(i, "sinks", required=False)
    ctx = softmax(logits, None if sinks is None else sinks[:, None]) @ v  # (heads, N, dh)
    return ctx.transpose(1, 0, 2).reshape(H.shape[0], -1) @ w["W_O"].T + w["b_O"]


def _embed(ck: Checkpoint, enc: _Encoding) -> np.ndarray:
    """Word (+ position + token-type) embeddings of the encoding (+ the layer norm, post-norm)."""
    ids = np.asarray(enc.ids)
    vocab = _vocab_size(ck)
    if ids.max() >= vocab:
        raise CheckpointError(f"tokenizer ids reach {ids.max()} but the vocabulary has {vocab} rows")
    E = ck.rows(ck.prefix + ck.arch.embeddings["word"], ids) * (
        math.sqrt(ck.d) if ck.arch.embed_scale else 1.0
    )
    if ck.arch.positions == "learned":
        pos = ck.global_array("position")
        offset = (
            int(ck.config.get("pad_token_id", 1)) + 1
            if str(ck.config.get("model_type", "")) in _ROBERTA_LIKE
            else 0
        )
        if len(ids) + offset > pos.shape[0]:
            raise ValueError(f"text has {len(ids)} tokens; this model takes at most {pos.shape[0] - offset}")
        E = E + pos[offset + np.arange(len(ids))]
        types = ck.global_array("type", required=False)
        if types is not None:
            E = E + types[np.asarray(enc.type_ids)]
    if ck.arch.placement == "post":
        return _layer_norm(E, ck.global_array("norm_w"), ck.global_array("norm_b", False), ck.eps)
    return E


def _block(ck: Checkpoint, i: int, X: np.ndarray, rope: RoPE | None) -> np.ndarray:
    """One layer of the architecture on the states X (N, d) entering it."""
    arr = ck.layer_array
    if ck.arch.placement == "post":
        act = _activation(str(ck.config.get("hidden_act", "gelu")))
        X = _layer_norm(
            X + _attend(X, ck, i, rope), arr(i, "attn_norm_w"), arr(i, "attn_norm_b", False), ck.eps
        )
        b1, b2 = arr(i, "b_1", False), arr(i, "b_2", False)
        inner = act(X @ arr(i, "W_1").T + (0.0 if b1 is None else b1))
        ffn = inner @ arr(i, "W_2").T + (0.0 if b2 is None else b2)
        return _layer_norm(X + ffn, arr(i, "ffn_norm_w"), arr(i, "ffn_norm_b", False), ck.eps)
    post_attn, post_ffn = arr(i, "post_attn_norm_w", False), arr(i, "post_ffn_norm_w", False)
    a = _attend(_normed(ck, i, X), ck, i, rope)
    X = X + (a if post_attn is None else _rms(a, ck.eps) * post_attn)
    h = _rms(X, ck.eps) * arr(i, "ffn_norm_w")
    act = _activation("gelu_pytorch_tanh" if ck.arch.ffn == "geglu" else "silu")
    gate, up = h @ arr(i, "W_gate", cache=False).T, h @ arr(i, "W_up", cache=False).T
    f = (act(gate) * up) @ arr(i, "W_down", cache=False).T
    return X + (f if post_ffn is None else _rms(f, ck.eps) * post_ffn)


def token_states(
    checkpoint: CheckpointLike,
    text: str | None = None,
    tokenizer: TokenizerLike = None,
    *,
    ids: Sequence[int] | None = None,
) -> TokenStates:
    """Tokenize `text` (or take token `ids`) once and run the model once: its tokens and states.

    tokenizer: a path to tokenizer.json or a `tokenizers.Tokenizer` (default: the checkpoint's).
    Architectures with a forward pass: BERT-style and LLaMA-style (not bare MultiheadAttention).
    """
    ck = open_checkpoint(checkpoint)
    if ck.arch.ffn == "none":
        raise CheckpointError(
            f"checkpoint {ck.source}: hidden states need a whole model, not {ck.layout} weights"
        )
    enc = _encode(ck, text, tokenizer, ids)
    if ck.arch.positions == "rope":
        limit = int(ck.config.get("max_position_embeddings", 1 << 30))
        if len(enc.ids) > limit:
            raise ValueError(f"text has {len(enc.ids)} tokens; this model takes at most {limit}")
    X = _embed(ck, enc)
    rope = layer_rope(ck)
    states = [X]
    for i in range(ck.num_layers):
        X = _block(ck, i, X, rope)
        ck.release(i)
        states.append(X)
    return TokenStates(text, enc.tokens, np.stack(states), enc.ids)


def hidden_states(checkpoint: CheckpointLike, text: str, tokenizer: TokenizerLike = None) -> np.ndarray:
    """The model's token states for `text`, float64 (L + 1, N, d), raw (not normalised).

    states[0] is the embedding output (after its layer norm for BERT); states[l] is the output of
    layer l, i.e. the input of layer l + 1.
    """
    return token_states(checkpoint, text, tokenizer).states


def token_cloud(
    checkpoint: CheckpointLike, text: str, layer: int = 0, tokenizer: TokenizerLike = None
) -> np.ndarray:
    """Tokens of `text` entering `layer`, normalised onto the sphere: (N, d) float64 unit rows.

    layer 0 is the embedding layer's output; layer l the output of layer l - 1; layer L (the
    number of layers) the model's last hidden state (before a final norm).
    """
    return token_states(checkpoint, text, tokenizer).cloud(layer)
