"""Attention heads and token clouds from pretrained transformers, read from local files only.

A checkpoint is read as (Q, K, V, beta) per layer and per head, in the notation of MATH.md:

- Layouts: BERT-style state dicts (keys ``...encoder.layer.{l}.attention.self.query.weight`` and
  friends: BERT, RoBERTa, MiniLM, ELECTRA) stored as safetensors or PyTorch files (sharded or not),
  ``torch.nn.MultiheadAttention`` modules and their state dicts (``in_proj_weight``,
  ``out_proj.weight``), modules holding several of them (``torch.nn.TransformerEncoder``), and a
  Hugging Face model object (its ``state_dict()`` and ``config``) when ``transformers`` is installed.
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
  the layer when a text is given; otherwise sqrt(|gamma|^2 + |b|^2) of the layer norm that feeds
  the layer (the expected norm of gamma * z + b when z has zero mean and unit variance, as a layer
  norm makes it); sqrt(d) for bare MultiheadAttention weights; or the ``norm`` you pass.
- V_h acts on unit tokens unscaled: a residual layer adds r V x to r x, i.e. one Euler step of
  size 1 for x before the next layer norm renormalises.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast, overload

import numpy as np

from ._checks import check_positive, to_numpy
from .model import Attention, EigenSpace, attention_from_A, top_eigenspace

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "Head",
    "Layer",
    "attention_output",
    "diagnose",
    "head_attention",
    "hidden_states",
    "load_heads",
    "open_checkpoint",
    "report",
    "symmetric_part_attention",
    "symmetric_top",
    "token_cloud",
    "tokenize",
]

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
_BERT_QUERY = re.compile(r"^(?P<prefix>.*?)encoder\.layer\.(?P<i>\d+)\.attention\.self\.query\.weight$")
_MHA_IN = re.compile(r"^(?P<prefix>.*?)in_proj_weight$")
# Per-layer BERT key names, relative to "{prefix}encoder.layer.{l}.".
_BERT_LAYER = {
    "W_Q": "attention.self.query.weight",
    "b_Q": "attention.self.query.bias",
    "W_K": "attention.self.key.weight",
    "b_K": "attention.self.key.bias",
    "W_V": "attention.self.value.weight",
    "b_V": "attention.self.value.bias",
    "W_O": "attention.output.dense.weight",
    "b_O": "attention.output.dense.bias",
    "ln1_w": "attention.output.LayerNorm.weight",
    "ln1_b": "attention.output.LayerNorm.bias",
    "W_1": "intermediate.dense.weight",
    "b_1": "intermediate.dense.bias",
    "W_2": "output.dense.weight",
    "b_2": "output.dense.bias",
    "ln2_w": "output.LayerNorm.weight",
    "ln2_b": "output.LayerNorm.bias",
}
_ATTENTION_KEYS = ("W_Q", "W_K", "W_V", "W_O")
_FFN_KEYS = ("ln1_w", "ln1_b", "W_1", "W_2", "ln2_w", "ln2_b")


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: missing, corrupt or incomplete files, or an unknown layout."""


# --------------------------------------------------------------------------------------------------
# Reading checkpoints


@dataclass
class Checkpoint:
    """An opened checkpoint: where it came from, its layout and a float64 view of its tensors.

    layout: "bert" or "mha".  layers: the key prefix of each layer, in order.  num_heads: heads per
    layer.  d: model width.  config: config.json (or the model's config) as a dict, {} if none.
    tokenizer_path: tokenizer.json next to the weights, or None.
    """

    source: str
    layout: str
    prefix: str
    layers: list[str]
    num_heads: list[int]
    d: int
    config: dict[str, Any]
    tokenizer_path: Path | None
    keys: frozenset[str]
    _get: Callable[[str], Any] = field(repr=False)
    _cache: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @overload
    def array(self, key: str, required: Literal[True] = ...) -> np.ndarray: ...

    @overload
    def array(self, key: str, required: bool) -> np.ndarray | None: ...

    def array(self, key: str, required: bool = True) -> np.ndarray | None:
        """Tensor `key` as float64 NumPy, cached; None (or CheckpointError if required) when absent."""
        if key not in self._cache:
            if key not in self.keys:
                alt = _old_layer_norm_name(key)
                if alt in self.keys:
                    key = alt
                elif required:
                    raise CheckpointError(f"checkpoint {self.source} is incomplete: tensor {key!r} missing")
                else:
                    return None
            try:
                a = to_numpy(self._get(key))
                a = a.astype(np.float64) if a.dtype.kind == "f" else a
            except Exception as e:  # corrupt data surfaces here for lazily read formats
                raise CheckpointError(f"checkpoint {self.source}: cannot read tensor {key!r}: {e}") from None
            if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
                raise CheckpointError(f"checkpoint {self.source}: tensor {key!r} contains NaN or inf")
            self._cache[key] = a
        return self._cache[key]

    @overload
    def layer_array(self, layer: int, name: str, required: Literal[True] = ...) -> np.ndarray: ...

    @overload
    def layer_array(self, layer: int, name: str, required: bool) -> np.ndarray | None: ...

    def layer_array(self, layer: int, name: str, required: bool = True) -> np.ndarray | None:
        """Per-layer tensor by its MATH name (W_Q, b_Q, ..., see _BERT_LAYER), float64."""
        p = self.layers[layer]
        if self.layout == "bert":
            return self.array(p + _BERT_LAYER[name], required)
        if name in ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V"):
            whole = self.array(p + ("in_proj_weight" if name[0] == "W" else "in_proj_bias"), required)
            if whole is None:
                return None
            d, k = whole.shape[0] // 3, "QKV".index(name[2])
            return whole[k * d : (k + 1) * d]
        if name in ("W_O", "b_O"):
            return self.array(p + ("out_proj.weight" if name == "W_O" else "out_proj.bias"), required)
        raise CheckpointError(f"a MultiheadAttention checkpoint has no tensor {name!r} (attention only)")

    @property
    def num_layers(self) -> int:
        return len(self.layers)


def _old_layer_norm_name(key: str) -> str:
    """TF-converted BERT names layer-norm parameters gamma/beta instead of weight/bias."""
    if "LayerNorm." in key:
        return key.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
    return key


def _load_file(path: Path) -> dict[str, Any]:
    """All tensors of one safetensors or PyTorch file, as torch tensors (CPU)."""
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} does not exist")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            return dict(load_file(str(path)))
        except Exception as e:
            raise CheckpointError(f"checkpoint {path} is not a readable safetensors file: {e}") from None
    import torch

    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:
        raise CheckpointError(
            f"checkpoint {path} is not a readable PyTorch state dict (torch.load(weights_only=True) "
            f"failed: {type(e).__name__}: {str(e)[:200]})"
        ) from None
    return _unwrap_state_dict(obj, str(path))


def _unwrap_state_dict(obj: Any, source: str) -> dict[str, Any]:
    """A flat {name: tensor} dict, unwrapping {"state_dict": ...} / {"model": ...} containers."""
    if not isinstance(obj, Mapping):
        raise CheckpointError(f"checkpoint {source} holds a {type(obj).__name__}, not a state dict")
    for wrapper in ("state_dict", "model", "module"):
        if wrapper in obj and isinstance(obj[wrapper], Mapping) and len(obj) <= 4:
            return _unwrap_state_dict(obj[wrapper], source)
    bad = [k for k, v in obj.items() if not isinstance(k, str) or not hasattr(v, "shape")]
    if bad:
        raise CheckpointError(f"checkpoint {source} is not a state dict of tensors (entry {bad[0]!r})")
    return dict(obj)


def _load_sharded(index: Path) -> dict[str, Any]:
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"shard index {index} is unreadable ({e})") from None
    tensors: dict[str, Any] = {}
    for shard in sorted(set(weight_map.values())):
        tensors.update(_load_file(index.parent / shard))
    missing = sorted(set(weight_map) - set(tensors))
    if missing:
        raise CheckpointError(
            f"checkpoint {index} is incomplete: {len(missing)} tensors missing, e.g. {missing[0]!r}"
        )
    return tensors


def _read_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.is_file():
        return {}
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path} is not valid JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise CheckpointError(f"{path} must hold a JSON object")
    return cfg


def _from_path(path: Path) -> tuple[dict[str, Any], dict[str, Any], Path | None]:
    """(tensors, config, tokenizer.json or None) from a folder or a weights file."""
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist (give a folder or a weights file)")
    if path.is_dir():
        folder = path
        names = [n for n in WEIGHT_FILES if (folder / n).is_file()]
        if not names:
            others = sorted(
                p.name for p in folder.iterdir() if p.suffix in (".safetensors", ".bin", ".pt", ".pth")
            )
            if len(others) != 1:
                raise CheckpointError(
                    f"no weights in {folder}: expected one of {', '.join(WEIGHT_FILES)}"
                    + (f" (found several candidates: {others})" if others else "")
                )
            names = others
        weights = folder / names[0]
    else:
        folder, weights = path.parent, path
    tensors = _load_sharded(weights) if weights.name.endswith(".index.json") else _load_file(weights)
    tok = folder / "tokenizer.json"
    return tensors, _read_config(folder), tok if tok.is_file() else None


def _from_module(module: Any) -> tuple[dict[str, Any], dict[str, Any], list[tuple[str, int]] | None]:
    """(state dict, config, [(prefix, heads)] of MultiheadAttention submodules or None)."""
    import torch

    if not isinstance(module, torch.nn.Module):
        raise TypeError(
            f"checkpoint must be a path, a state dict or a torch.nn.Module, got {type(module).__name__}"
        )
    mhas = [(n, m) for n, m in module.named_modules() if isinstance(m, torch.nn.MultiheadAttention)]
    config: dict[str, Any] = {}
    cfg = getattr(module, "config", None)
    if cfg is not None:
        config = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(vars(cfg))
    state = {k: v.detach() for k, v in module.state_dict().items()}
    if mhas and not any(_BERT_QUERY.match(k) for k in state):
        for n, m in mhas:
            if not m._qkv_same_embed_dim:
                raise CheckpointError(
                    f"MultiheadAttention {n or '(root)'} has kdim/vdim != embed_dim: it is cross-attention "
                    "between spaces of different widths, not self-attention of tokens on one sphere"
                )
        return state, config, [(f"{n}." if n else "", m.num_heads) for n, m in mhas]
    return state, config, None


def open_checkpoint(checkpoint: Any, num_heads: int | None = None) -> Checkpoint:
    """Open a checkpoint: a folder or file path, a state dict, a torch module or a Checkpoint.

    num_heads: heads per layer, needed when neither config.json nor the module says it (bare
    state dicts).  Raises CheckpointError for missing, corrupt or incomplete files or an unknown
    layout.
    """
    if isinstance(checkpoint, Checkpoint):
        return checkpoint
    mha_heads: list[tuple[str, int]] | None = None
    tokenizer: Path | None = None
    config: dict[str, Any] = {}
    if isinstance(checkpoint, (str, Path)):
        source = str(checkpoint)
        state, config, tokenizer = _from_path(Path(checkpoint).expanduser())
    elif isinstance(checkpoint, Mapping):
        source = "<state dict>"
        state = _unwrap_state_dict(checkpoint, source)
    elif hasattr(checkpoint, "state_dict"):
        source = f"<{type(checkpoint).__name__}>"
        state, config, mha_heads = _from_module(checkpoint)
        name = config.get("_name_or_path")
        if name and (Path(name) / "tokenizer.json").is_file():
            tokenizer = Path(name) / "tokenizer.json"
    else:
        raise TypeError(
            "checkpoint must be a folder or weights file path, a state dict, a torch.nn.Module or a "
            f"Checkpoint, got {type(checkpoint).__name__}"
        )
    if num_heads is not None:
        num_heads = int(check_positive(num_heads, "num_heads", integer=True))
    keys = frozenset(state)
    bert: dict[str, set[int]] = {}
    for k in keys:
        m = _BERT_QUERY.match(k)
        if m:
            bert.setdefault(m["prefix"], set()).add(int(m["i"]))
    if bert:
        if len(bert) > 1:
            raise CheckpointError(f"checkpoint {source} holds several encoders (prefixes {sorted(bert)})")
        prefix, found = next(iter(bert.items()))
        if found != set(range(len(found))):
            raise CheckpointError(
                f"checkpoint {source} is incomplete: encoder layers {sorted(found)} are not 0..{max(found)}"
            )
        layout = "bert"
        layers = [f"{prefix}encoder.layer.{i}." for i in range(len(found))]
        heads = num_heads or config.get("num_attention_heads") or config.get("n_heads")
        if heads is None:
            raise CheckpointError(
                f"checkpoint {source}: the number of heads is unknown (no config.json with "
                "num_attention_heads): pass num_heads"
            )
        heads_per_layer = [int(heads)] * len(layers)
    else:
        mha = sorted({m["prefix"] for k in keys if (m := _MHA_IN.match(k))}, key=_natural_key)
        if not mha:
            shown = ", ".join(sorted(keys)[:6]) or "(no tensors)"
            raise CheckpointError(
                f"unknown checkpoint layout in {source}: expected BERT-style keys "
                "('...encoder.layer.0.attention.self.query.weight') or MultiheadAttention keys "
                f"('...in_proj_weight'); found {shown}"
            )
        layout, prefix, layers = "mha", "", mha
        if mha_heads is not None:  # the module's own order
            layers, heads_per_layer = [p for p, _ in mha_heads], [h for _, h in mha_heads]
        elif num_heads is not None:
            heads_per_layer = [num_heads] * len(layers)
        else:
            raise CheckpointError(
                f"checkpoint {source}: a MultiheadAttention state dict does not store its number of "
                "heads: pass num_heads"
            )
    ck = Checkpoint(
        source, layout, prefix, layers, heads_per_layer, 0, config, tokenizer, keys, state.__getitem__
    )
    ck.d = _validate_shapes(ck)
    return ck


def _natural_key(s: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def _validate_shapes(ck: Checkpoint) -> int:
    """Check every layer's attention tensors exist with consistent shapes; return d."""
    d: int | None = None
    for i in range(ck.num_layers):
        if ck.layout == "mha":
            W = ck.array(ck.layers[i] + "in_proj_weight")
            if W.ndim != 2 or W.shape[0] != 3 * W.shape[1]:
                raise CheckpointError(
                    f"checkpoint {ck.source}: {ck.layers[i]}in_proj_weight has shape {W.shape}"
                )
            d = d or W.shape[1]
        for name in _ATTENTION_KEYS:
            W = ck.layer_array(i, name)
            d = d or W.shape[1]
            if W.shape != (d, d):
                raise CheckpointError(
                    f"checkpoint {ck.source}: layer {i} {name} has shape {W.shape}, expected ({d}, {d})"
                )
        for name in ("b_Q", "b_K", "b_V", "b_O"):
            b = ck.layer_array(i, name, required=False)
            if b is not None and b.shape != (d,):
                raise CheckpointError(
                    f"checkpoint {ck.source}: layer {i} {name} has shape {b.shape}, expected ({d},)"
                )
        assert d is not None  # set by the attention tensors above
        if d % ck.num_heads[i]:
            raise CheckpointError(
                f"checkpoint {ck.source}: width d = {d} is not divisible by num_heads = {ck.num_heads[i]}"
            )
    if d is None:
        raise CheckpointError(f"checkpoint {ck.source} has no attention layers")
    return int(d)


# --------------------------------------------------------------------------------------------------
# Heads


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


def _layer_weights(ck: Checkpoint, i: int) -> dict[str, np.ndarray]:
    d = ck.d
    w = {n: ck.layer_array(i, n) for n in _ATTENTION_KEYS}
    for n in ("b_Q", "b_K", "b_V", "b_O"):
        b = ck.layer_array(i, n, required=False)
        w[n] = np.zeros(d) if b is None else b
    return w


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


def load_heads(
    checkpoint: Any,
    text: str | None = None,
    *,
    norm: float | None = None,
    num_heads: int | None = None,
    layers: list[int] | None = None,
    tokenizer: Any = None,
) -> list[Layer]:
    """Per-layer and per-head attention of a checkpoint, with beta_eff = r^2 / sqrt(d_h).

    r, the representative token norm, is `norm` when given; else the median |h| of the tokens of
    `text` entering each layer (BERT layouts); else the layer-norm estimate sqrt(|gamma|^2 + |b|^2);
    else sqrt(d).  layers: indices to return (default all).  Returns a list of `Layer`.
    """
    ck = open_checkpoint(checkpoint, num_heads)
    idx = _check_layers(layers, ck.num_layers)
    states = None
    if norm is not None:
        norm = check_positive(norm, "norm")
    elif text is not None:
        if ck.layout != "bert":
            raise CheckpointError(
                f"checkpoint {ck.source}: token norms from text need a BERT-style checkpoint with "
                "embeddings; pass norm instead"
            )
        states = hidden_states(ck, text, tokenizer=tokenizer)
    out = []
    for i in idx:
        if norm is not None:
            r, src = norm, "given"
        elif states is not None:
            r, src = float(np.median(np.linalg.norm(states[i], axis=1))), "median |h| of the text's tokens"
        elif (scale := _layer_norm_scale(ck, i)) is not None:
            r, src = scale, "layer norm sqrt(|gamma|^2+|b|^2)"
        else:
            r, src = math.sqrt(ck.d), "sqrt(d) (no layer norm or text)"
        out.append(_build_layer(i, _layer_weights(ck, i), ck.num_heads[i], r, src))
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


def _check_layers(layers: Any, n: int) -> list[int]:
    if layers is None:
        return list(range(n))
    if isinstance(layers, (int, np.integer)):
        layers = [layers]
    idx = []
    for i in layers:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not -n <= i < n:
            raise ValueError(f"layer must be an integer in [0, {n}) for this checkpoint, got {i!r}")
        idx.append(int(i) % n)
    return idx


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
        out += _softmax(logits) @ (H @ head.V.T)
    return out


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


# --------------------------------------------------------------------------------------------------
# Tokens


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
    from scipy.special import erf

    if name == "gelu":
        return lambda x: 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    if name in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        return lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    if name == "relu":
        return lambda x: np.maximum(x, 0.0)
    raise CheckpointError(f"hidden_act {name!r} is not supported (gelu, gelu_new, relu)")


def _mha(H: np.ndarray, w: dict[str, np.ndarray], num_heads: int) -> np.ndarray:
    """Standard multi-head self-attention of one sequence, (N, d) -> (N, d), from the layer weights."""
    N, d = H.shape
    dh = d // num_heads
    q = (H @ w["W_Q"].T + w["b_Q"]).reshape(N, num_heads, dh).transpose(1, 0, 2)
    k = (H @ w["W_K"].T + w["b_K"]).reshape(N, num_heads, dh).transpose(1, 0, 2)
    v = (H @ w["W_V"].T + w["b_V"]).reshape(N, num_heads, dh).transpose(1, 0, 2)
    ctx = _softmax(q @ k.transpose(0, 2, 1) / math.sqrt(dh)) @ v  # (heads, N, dh)
    return ctx.transpose(1, 0, 2).reshape(N, d) @ w["W_O"].T + w["b_O"]


def hidden_states(checkpoint: Any, text: str, tokenizer: Any = None) -> np.ndarray:
    """The model's token states for `text`, float64 (L + 1, N, d), raw (not normalised).

    states[0] is the embedding output (word + position + token type, then layer norm); states[l]
    is the output of layer l, i.e. the input of layer l + 1.  BERT-style checkpoints only.
    """
    ck = open_checkpoint(checkpoint)
    if ck.layout != "bert":
        raise CheckpointError(f"checkpoint {ck.source}: hidden states need a BERT-style checkpoint")
    enc = _encode(ck, text, tokenizer)
    ids = np.asarray(enc.ids)
    p = f"{ck.prefix}embeddings."
    word = ck.array(p + "word_embeddings.weight")
    pos = ck.array(p + "position_embeddings.weight")
    if ids.max() >= word.shape[0]:
        raise CheckpointError(f"tokenizer ids reach {ids.max()} but the vocabulary has {word.shape[0]} rows")
    offset = 0
    if str(ck.config.get("model_type", "")) in ("roberta", "xlm-roberta", "camembert"):
        offset = int(ck.config.get("pad_token_id", 1)) + 1  # RoBERTa positions start after padding
    if len(ids) + offset > pos.shape[0]:
        raise ValueError(f"text has {len(ids)} tokens; this model takes at most {pos.shape[0] - offset}")
    E = word[ids] + pos[offset + np.arange(len(ids))]
    types = ck.array(p + "token_type_embeddings.weight", required=False)
    if types is not None:
        E = E + types[np.asarray(enc.type_ids)]
    eps = float(ck.config.get("layer_norm_eps", 1e-12))
    H = _layer_norm(E, ck.array(p + "LayerNorm.weight"), ck.array(p + "LayerNorm.bias"), eps)
    act = _activation(str(ck.config.get("hidden_act", "gelu")))
    states = [H]
    for i in range(ck.num_layers):
        w = _layer_weights(ck, i)
        f = {n: ck.layer_array(i, n) for n in _FFN_KEYS}
        b1, b2 = ck.layer_array(i, "b_1", required=False), ck.layer_array(i, "b_2", required=False)
        H = _layer_norm(H + _mha(H, w, ck.num_heads[i]), f["ln1_w"], f["ln1_b"], eps)
        inner = act(H @ f["W_1"].T + (0.0 if b1 is None else b1))
        H = _layer_norm(H + inner @ f["W_2"].T + (0.0 if b2 is None else b2), f["ln2_w"], f["ln2_b"], eps)
        states.append(H)
    return np.stack(states)


def token_cloud(checkpoint: Any, text: str, layer: int = 0, tokenizer: Any = None) -> np.ndarray:
    """Tokens of `text` entering `layer`, normalised onto the sphere: (N, d) float64 unit rows.

    layer 0 is the embedding layer's output (after its layer norm); layer l the output of layer
    l - 1; layer L (the number of layers) the model's last hidden state.
    """
    S = hidden_states(checkpoint, text, tokenizer)
    (i,) = _check_layers([layer], S.shape[0])
    X = S[i]
    return X / np.linalg.norm(X, axis=1, keepdims=True)


# --------------------------------------------------------------------------------------------------
# Comparison with the theory


def symmetric_top(att: Attention) -> EigenSpace:
    """Top eigenspace of the symmetric part S = (A + A^T) / 2 of A: the P_1 that Pi uses when A is
    replaced by its symmetric part (works for singular B, e.g. a single head)."""
    A = np.asarray(att.A)
    return top_eigenspace((A + A.T) / 2, "real")


def symmetric_part_attention(att: Attention) -> Attention:
    """Attention with the same B and beta and A replaced by its symmetric part (A + A^T) / 2.

    Built as Q = I, K = B, V = S B^{-T}; B must be invertible (a whole layer, not a single head:
    use `symmetric_top` there).
    """
    A = np.asarray(att.A)
    if np.linalg.matrix_rank(att.B) < att.d:
        raise ValueError(
            f"att.B has rank {np.linalg.matrix_rank(att.B)} < d = {att.d} (a single head?): no V gives "
            "A = S with this B; use symmetric_top(att) for the projector P_1 of the symmetric part"
        )
    return attention_from_A((A + A.T) / 2, att.B, att.beta)


def _spectra(att: Attention) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(singular values of B, eigenvalues of A, eigenvalues of S = (A + A^T)/2, basis of S's top
    eigenspace (d, m)); s and eigenvalues of S descending, those of A by descending real part.

    A head (Q padded with zero rows) has B = Q_r^T K_r of rank <= r: then everything comes from
    r x r and 2r x 2r matrices.  A = (V K_r^T) Q_r has the nonzero eigenvalues of Q_r V K_r^T;
    S = Z J Z^T with Z = [V K_r^T, Q_r^T] and J = [[0, I], [I, 0]] / 2; the rest are exact zeros.
    """
    d = att.d
    keep = np.any(att.Q != 0, axis=1)
    r = int(keep.sum())
    if r == d or r == 0:
        A = np.asarray(att.A)
        s = np.linalg.svd(att.B, compute_uv=False)
        w = np.linalg.eigvals(A)
        ws, Us = np.linalg.eigh((A + A.T) / 2)
        ws, Us = ws[::-1].copy(), Us[:, ::-1]
    else:
        Qr, Kr = att.Q[keep], att.K[keep]
        # NumPy's stubs type qr(mode="r") as QRResult; it returns the R array
        R1 = cast(np.ndarray, np.linalg.qr(Qr.T, mode="r"))
        R2 = cast(np.ndarray, np.linalg.qr(Kr.T, mode="r"))
        s = np.concatenate([np.linalg.svd(R1 @ R2.T, compute_uv=False), np.zeros(d - r)])
        w = np.concatenate([np.linalg.eigvals(Qr @ att.V @ Kr.T), np.zeros(d - r)])
        Qz, Rz = np.linalg.qr(np.hstack([att.V @ Kr.T, Qr.T]))
        k = Rz.shape[0]
        J = np.zeros((2 * r, 2 * r))
        J[:r, r:] = J[r:, :r] = 0.5 * np.eye(r)
        small, vs = np.linalg.eigh(Rz @ J @ Rz.T)
        ws = np.concatenate([small, np.zeros(d - k)])
        order = np.argsort(ws, kind="stable")[::-1]
        ws = ws[order]
        Us = None
        if order[0] < k and ws[0] > 1e-9 * max(abs(ws[0]), abs(ws[-1])):
            m = _distinct_gap(ws, float(np.max(np.abs(ws))))[2]
            Us = Qz @ vs[:, order[:m]]
        if Us is None:  # top eigenvalue 0: its eigenspace meets the complement of Z's range
            A = np.asarray(att.A)
            Us = np.linalg.eigh((A + A.T) / 2)[1][:, ::-1]
    w = w[np.lexsort((-w.imag, -w.real))]
    m = _distinct_gap(ws, float(np.max(np.abs(ws))))[2]
    return s, w, ws, Us[:, :m]


def _distinct_gap(values: np.ndarray, scale: float) -> tuple[float, float | None, int]:
    """(mu1, mu2, multiplicity) of real values, descending, grouping within 1e-9 * scale."""
    tol = 1e-9 * max(scale, np.finfo(float).tiny)
    mu1 = float(values[0])
    m = int(np.sum(values >= mu1 - tol))
    return mu1, (float(values[m]) if m < len(values) else None), m


def diagnose(att: Attention, X: Any = None) -> dict[str, Any]:
    """Numbers for the theorem's assumptions on one head or layer (JSON-able dict).

    beta_normB: beta ||B||_2, the largest logit on unit tokens (the beta of B scaled to norm 1).
    B: rank, cond_B (None when singular), cond_B_range (s_1 / s_rank, the conditioning on B's range).
    A: asymmetry (relative Frobenius norm of the antisymmetric part), top eigenvalues (real, imag),
    mu1, mu2, gap and gap / spectral radius on real parts, whether the top eigenvalue is complex.
    sym: the same for S = (A + A^T) / 2, and whether S is indefinite.  With tokens X (N, d): for P_1
    of S, M_1, M_2 and min |P_1 x_i| (assumption 2).  failures / warnings: plain-language findings.
    """
    d = att.d
    s, w, ws, P = _spectra(att)
    rank = int(np.sum(s > s[0] * d * np.finfo(float).eps)) if s[0] > 0 else 0
    cond = float(s[0] / s[-1]) if rank == d else None
    A = np.asarray(att.A)
    nA = float(np.linalg.norm(A))
    asym = float(np.linalg.norm(A - A.T) / 2 / nA) if nA > 0 else 0.0
    radius = float(np.max(np.abs(w)))
    mu1, mu2, mult = _distinct_gap(w.real, radius)
    gap = mu1 - mu2 if mu2 is not None else 0.0
    top_complex = bool(abs(w[0].imag) > 1e-9 * max(radius, 1e-300))
    rs = float(np.max(np.abs(ws)))
    smu1, smu2, smult = _distinct_gap(ws, rs)
    sgap = smu1 - smu2 if smu2 is not None else 0.0
    out: dict[str, Any] = {
        "d": d,
        "beta": att.beta,
        "norm_B": float(s[0]),
        "beta_normB": att.beta * float(s[0]),
        "rank_B": rank,
        "cond_B": cond,
        "cond_B_range": float(s[0] / s[rank - 1]) if rank else None,
        "asymmetry": asym,
        "eig_A_top": [[float(z.real), float(z.imag)] for z in w[:3]],
        "mu1": mu1,
        "mu2": mu2,
        "gap": gap,
        "rel_gap": gap / radius if radius > 0 else 0.0,
        "multiplicity": mult,
        "top_complex": top_complex,
        "sym_eig_top": [float(v) for v in ws[:3]],
        "sym_eig_min": float(ws[-1]),
        "sym_gap": sgap,
        "sym_rel_gap": sgap / rs if rs > 0 else 0.0,
        "sym_multiplicity": smult,
        "sym_indefinite": bool(ws[0] > 0 > ws[-1]),
    }
    failures, warnings = [], []
    if rank < d:
        failures.append(f"B singular: rank {rank} of {d}")
    elif cond is not None and cond > 1e3:  # rank == d here, so cond is set
        warnings.append(f"B ill-conditioned: cond {cond:.2g}")
    if asym > 1e-10:
        failures.append(f"A not symmetric: |A - A^T| / 2|A| = {asym:.2f} (random: 0.71)")
    if mu2 is None or gap <= 0:
        failures.append("A has no spectral gap")
    elif out["rel_gap"] < 1e-2:
        warnings.append(f"tiny gap of A: {out['rel_gap']:.1e} of its spectral radius")
    if top_complex:
        warnings.append("top eigenvalue of A complex (rotation)")
    if mult > (2 if top_complex else 1):
        warnings.append(f"top eigenvalue of A has multiplicity {mult}")
    if out["sym_indefinite"]:
        warnings.append("sym(A) indefinite")
    if X is not None:
        X = to_numpy(X).astype(np.float64)
        if X.ndim != 2 or X.shape[1] != d:
            raise ValueError(f"X must have shape (N, {d}), got {X.shape}")
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
        p1 = np.linalg.norm(X @ P, axis=1)
        perp = np.sqrt(np.maximum(1.0 - p1**2, 0.0))
        with np.errstate(divide="ignore"):
            ratio = np.where(p1 > 0, perp / np.where(p1 > 0, p1, 1.0), np.inf)
        out.update(
            {
                "M1": float(np.mean(ratio)),
                "M2": float(np.mean(ratio**2)),
                "min_P1x": float(p1.min()),
                "mean_P1x": float(p1.mean()),
            }
        )
        if p1.min() <= 1e-12:
            failures.append("tokens on P_1 x = 0 (symmetric part): Pi undefined there")
    out["failures"] = failures
    out["warnings"] = warnings
    return out


def report(
    checkpoint: Any,
    text: str | None = None,
    layer: int | None = None,
    *,
    num_heads: int | None = None,
    heads: bool = True,
    tokenizer: Any = None,
) -> dict[str, Any]:
    """Assumption diagnostics of every layer (whole layer and each head), JSON-able.

    With `text`, beta_eff uses the median token norm entering each layer and assumption 2 is
    evaluated on the normalised token cloud entering that layer.
    """
    ck = open_checkpoint(checkpoint, num_heads)
    idx = _check_layers(None if layer is None else [layer], ck.num_layers)
    states = hidden_states(ck, text, tokenizer) if text is not None else None
    if states is None:
        recs = load_heads(ck, layers=idx)
    else:  # reuse the states for the norms
        src = "median |h| of the text's tokens"
        norms = [float(np.median(np.linalg.norm(states[i], axis=1))) for i in idx]
        recs = [
            _build_layer(i, _layer_weights(ck, i), ck.num_heads[i], r, src)
            for i, r in zip(idx, norms, strict=True)
        ]
    out: dict[str, Any] = {
        "checkpoint": ck.source,
        "layout": ck.layout,
        "num_layers": ck.num_layers,
        "d": ck.d,
        "num_heads": ck.num_heads[0],
        "text": text,
        "tokens": tokenize(ck, text, tokenizer) if text is not None else None,
        "layers": [],
    }
    for rec in recs:
        X = states[rec.layer] if states is not None else None
        entry: dict[str, Any] = {
            "layer": rec.layer,
            "d_head": rec.d_head,
            "norm": rec.norm,
            "norm_source": rec.norm_source,
            "beta_eff": rec.beta,
            "output_bias_norm": float(np.linalg.norm(rec.output_bias)),
            "full": diagnose(rec.attention, X),
            "heads": [],
        }
        if heads:
            for h in rec.heads:
                diag = diagnose(h.attention, X)
                q = float(np.linalg.norm(h.query_bias)) * rec.norm / (h.beta * max(diag["norm_B"], 1e-300))
                diag["head"] = h.head
                diag["query_bias_ratio"] = q
                entry["heads"].append(diag)
        out["layers"].append(entry)
    return out
