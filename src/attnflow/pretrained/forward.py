"""The model's own token states for a text: tokenizer and a float64 NumPy BERT encoder.

`token_states` tokenizes once and runs the encoder once, returning the tokens and the states of every
layer (`TokenStates`); `tokenize`, `hidden_states` and `token_cloud` are views of it.  Post-layer-
norm BERT blocks (embeddings + layer norm, then per layer: self-attention, residual, layer norm,
GELU feed-forward, residual, layer norm), checked against a torch reference in the tests.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .checkpoint import FFN_KEYS, Checkpoint, CheckpointError, check_layers, layer_weights, open_checkpoint

__all__ = ["TokenStates", "hidden_states", "token_cloud", "token_states", "tokenize"]

_ROBERTA_LIKE = ("roberta", "xlm-roberta", "camembert")  # positions start after the padding index


@dataclass(frozen=True)
class TokenStates:
    """A text run through a checkpoint: its tokens and the model's raw token states.

    tokens: the token strings (with special tokens, e.g. [CLS] ... [SEP]), N of them.
    states: (L + 1, N, d) float64; states[0] is the embedding output (after its layer norm),
    states[l] the output of layer l, i.e. the input of layer l + 1.
    """

    text: str
    tokens: list[str]
    states: np.ndarray

    def cloud(self, layer: int = 0) -> np.ndarray:
        """Tokens entering `layer`, normalised onto the sphere: (N, d) unit rows."""
        (i,) = check_layers([layer], self.states.shape[0])
        X = self.states[i]
        return X / np.linalg.norm(X, axis=1, keepdims=True)


def _tokenizer(ck: Checkpoint, tokenizer: Any):
    from tokenizers import Tokenizer

    if isinstance(tokenizer, Tokenizer):
        tok = Tokenizer.from_str(tokenizer.to_str())  # a copy: padding is switched off below
    else:
        path = Path(tokenizer) if tokenizer is not None else ck.tokenizer_path
        if path is None or not path.is_file():
            where = f" ({path} does not exist)" if path is not None else ""
            raise CheckpointError(
                f"no tokenizer for checkpoint {ck.source}{where}: put tokenizer.json next to the weights "
                "or pass tokenizer=path/to/tokenizer.json"
            )
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as e:
            raise CheckpointError(f"tokenizer {path} is unreadable: {e}") from None
    tok.no_padding()
    tok.no_truncation()
    return tok


def _encode(ck: Checkpoint, text: str, tokenizer: Any):
    """The tokenizer's encoding of `text` (ids, type ids, token strings): the one place text is
    tokenized."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    if not text.strip():
        raise ValueError("text is empty: need at least one word to make tokens")
    return _tokenizer(ck, tokenizer).encode(text)


def tokenize(checkpoint: Any, text: str, tokenizer: Any = None) -> list[str]:
    """The token strings of `text` (with the model's special tokens, e.g. [CLS] ... [SEP])."""
    ck = open_checkpoint(checkpoint)
    return list(_encode(ck, text, tokenizer).tokens)


def _layer_norm(X: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = X.mean(axis=-1, keepdims=True)
    var = ((X - mu) ** 2).mean(axis=-1, keepdims=True)
    return (X - mu) / np.sqrt(var + eps) * g + b


def _activation(name: str) -> Callable[[np.ndarray], np.ndarray]:
    if name == "gelu":
        from scipy.special import erf

        return lambda x: 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    if name in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        return lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    if name == "relu":
        return lambda x: np.maximum(x, 0.0)
    raise CheckpointError(f"hidden_act {name!r} is not supported (gelu, gelu_new, relu)")


def softmax(z: np.ndarray) -> np.ndarray:
    """Row softmax over the last axis, max-subtracted."""
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _mha(H: np.ndarray, w: dict[str, np.ndarray], num_heads: int) -> np.ndarray:
    """Standard multi-head self-attention of one sequence, (N, d) -> (N, d), from the layer weights."""
    N, d = H.shape
    dh = d // num_heads
    q = (H @ w["W_Q"].T + w["b_Q"]).reshape(N, num_heads, dh).transpose(1, 0, 2)
    k = (H @ w["W_K"].T + w["b_K"]).reshape(N, num_heads, dh).transpose(1, 0, 2)
    v = (H @ w["W_V"].T + w["b_V"]).reshape(N, num_heads, dh).transpose(1, 0, 2)
    ctx = softmax(q @ k.transpose(0, 2, 1) / math.sqrt(dh)) @ v  # (heads, N, dh)
    return ctx.transpose(1, 0, 2).reshape(N, d) @ w["W_O"].T + w["b_O"]


def _embed(ck: Checkpoint, enc: Any, eps: float) -> np.ndarray:
    """Word + position + token-type embeddings of the encoding, then the embedding layer norm."""
    ids = np.asarray(enc.ids)
    p = f"{ck.prefix}embeddings."
    word = ck.array(p + "word_embeddings.weight")
    pos = ck.array(p + "position_embeddings.weight")
    if ids.max() >= word.shape[0]:
        raise CheckpointError(f"tokenizer ids reach {ids.max()} but the vocabulary has {word.shape[0]} rows")
    offset = 0
    if str(ck.config.get("model_type", "")) in _ROBERTA_LIKE:
        offset = int(ck.config.get("pad_token_id", 1)) + 1
    if len(ids) + offset > pos.shape[0]:
        raise ValueError(f"text has {len(ids)} tokens; this model takes at most {pos.shape[0] - offset}")
    E = word[ids] + pos[offset + np.arange(len(ids))]
    types = ck.array(p + "token_type_embeddings.weight", required=False)
    if types is not None:
        E = E + types[np.asarray(enc.type_ids)]
    return _layer_norm(E, ck.array(p + "LayerNorm.weight"), ck.array(p + "LayerNorm.bias"), eps)


def token_states(checkpoint: Any, text: str, tokenizer: Any = None) -> TokenStates:
    """Tokenize `text` once and run the encoder once: its tokens and states (`TokenStates`).

    BERT-style checkpoints only.  tokenizer: a path to tokenizer.json or a `tokenizers.Tokenizer`
    (default: tokenizer.json next to the weights).
    """
    ck = open_checkpoint(checkpoint)
    if ck.layout != "bert":
        raise CheckpointError(f"checkpoint {ck.source}: hidden states need a BERT-style checkpoint")
    enc = _encode(ck, text, tokenizer)
    eps = float(ck.config.get("layer_norm_eps", 1e-12))
    H = _embed(ck, enc, eps)
    act = _activation(str(ck.config.get("hidden_act", "gelu")))
    states = [H]
    for i in range(ck.num_layers):
        f = {n: ck.layer_array(i, n) for n in FFN_KEYS}
        b1, b2 = ck.layer_array(i, "b_1", required=False), ck.layer_array(i, "b_2", required=False)
        H = _layer_norm(H + _mha(H, layer_weights(ck, i), ck.num_heads[i]), f["ln1_w"], f["ln1_b"], eps)
        inner = act(H @ f["W_1"].T + (0.0 if b1 is None else b1))
        H = _layer_norm(H + inner @ f["W_2"].T + (0.0 if b2 is None else b2), f["ln2_w"], f["ln2_b"], eps)
        states.append(H)
    return TokenStates(text, list(enc.tokens), np.stack(states))


def hidden_states(checkpoint: Any, text: str, tokenizer: Any = None) -> np.ndarray:
    """The model's token states for `text`, float64 (L + 1, N, d), raw (not normalised).

    states[0] is the embedding output (word + position + token type, then layer norm); states[l]
    is the output of layer l, i.e. the input of layer l + 1.  BERT-style checkpoints only.
    """
    return token_states(checkpoint, text, tokenizer).states


def token_cloud(checkpoint: Any, text: str, layer: int = 0, tokenizer: Any = None) -> np.ndarray:
    """Tokens of `text` entering `layer`, normalised onto the sphere: (N, d) float64 unit rows.

    layer 0 is the embedding layer's output (after its layer norm); layer l the output of layer
    l - 1; layer L (the number of layers) the model's last hidden state.
    """
    return token_states(checkpoint, text, tokenizer).cloud(layer)
