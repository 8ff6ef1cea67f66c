"""An opened checkpoint: its layout (BERT-style or MultiheadAttention), its layers and a float64
view of its tensors, from a path, a state dict, a torch module or a Hugging Face model object.

Layouts: BERT-style state dicts (keys ``...encoder.layer.{l}.attention.self.query.weight`` and
friends: BERT, RoBERTa, MiniLM, ELECTRA), ``torch.nn.MultiheadAttention`` modules and their state
dicts (``in_proj_weight``, ``out_proj.weight``), modules holding several of them
(``torch.nn.TransformerEncoder``), and a Hugging Face model object (its ``state_dict()`` and
``config``).  Files are read by `files`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

import numpy as np

from .._checks import check_positive, to_numpy
from .files import CheckpointError, from_path, unwrap_state_dict

BERT_QUERY = re.compile(r"^(?P<prefix>.*?)encoder\.layer\.(?P<i>\d+)\.attention\.self\.query\.weight$")
MHA_IN = re.compile(r"^(?P<prefix>.*?)in_proj_weight$")
# Per-layer BERT key names, relative to "{prefix}encoder.layer.{l}.".
BERT_LAYER = {
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
ATTENTION_KEYS = ("W_Q", "W_K", "W_V", "W_O")
FFN_KEYS = ("ln1_w", "ln1_b", "W_1", "W_2", "ln2_w", "ln2_b")

__all__ = ["Checkpoint", "CheckpointError", "check_layers", "layer_weights", "open_checkpoint"]


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
        """Per-layer tensor by its MATH name (W_Q, b_Q, ..., see BERT_LAYER), float64."""
        p = self.layers[layer]
        if self.layout == "bert":
            return self.array(p + BERT_LAYER[name], required)
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
    if mhas and not any(BERT_QUERY.match(k) for k in state):
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
        state, config, tokenizer = from_path(Path(checkpoint).expanduser())
    elif isinstance(checkpoint, Mapping):
        source = "<state dict>"
        state = unwrap_state_dict(checkpoint, source)
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
        m = BERT_QUERY.match(k)
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
        mha = sorted({m["prefix"] for k in keys if (m := MHA_IN.match(k))}, key=_natural_key)
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
        for name in ATTENTION_KEYS:
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


def layer_weights(ck: Checkpoint, i: int) -> dict[str, np.ndarray]:
    """The attention weights W_Q, W_K, W_V, W_O (d, d) and biases b_Q, b_K, b_V, b_O (d,) of layer i
    (absent biases as zeros)."""
    d = ck.d
    w = {n: ck.layer_array(i, n) for n in ATTENTION_KEYS}
    for n in ("b_Q", "b_K", "b_V", "b_O"):
        b = ck.layer_array(i, n, required=False)
        w[n] = np.zeros(d) if b is None else b
    return w


def check_layers(layers: Any, n: int) -> list[int]:
    """Layer indices (an int, a list of ints or None for all) as a list in [0, n); negatives count
    from the end."""
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
