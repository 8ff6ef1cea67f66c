"""An opened checkpoint: its architecture, its layers and a float64 view of its tensors, from a
path (any format of `readers`), a state dict, a torch module or a Hugging Face model object.

The architecture is recognised by its keys (`architectures.ARCHITECTURES`: BERT-style, LLaMA-style,
``torch.nn.MultiheadAttention``); modules holding several MultiheadAttention modules
(``torch.nn.TransformerEncoder``) give one layer each.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, overload

import numpy as np

from .._checks import check_positive, to_numpy
from .architectures import Architecture, detect
from .readers import CheckpointError, Found, read_path, unwrap_state_dict
from .readers.common import Tensor

if TYPE_CHECKING:
    import torch
    from tokenizers import Tokenizer

#: what `open_checkpoint` opens: a folder or weights file path, a state dict, a torch module or a
#: Checkpoint
CheckpointLike: TypeAlias = "str | Path | Mapping[str, Tensor] | torch.nn.Module | Checkpoint"

ATTENTION_KEYS = ("W_Q", "W_K", "W_V", "W_O")
BIAS_KEYS = ("b_Q", "b_K", "b_V", "b_O")

__all__ = ["Checkpoint", "CheckpointError", "check_layers", "layer_weights", "open_checkpoint"]


@dataclass
class Checkpoint:
    """An opened checkpoint: where it came from, its architecture and a float64 view of its tensors.

    layout: the architecture's name ("bert", "llama", "mha"); arch: the `Architecture`.  layers: the
    key prefix of each layer, in order.  num_heads, num_kv_heads: query heads and key/value heads
    per layer (equal unless grouped-query attention).  d: model width; d_head: head width.
    config: config.json (or the model's config) as a dict, {} if none.  tokenizer: tokenizer.json
    path, a `tokenizers.Tokenizer` or None.  fmt: the reader ("safetensors", "gguf", ...) or
    "state dict"/"module"; notes: what reading did (quantised weights, graph search).
    token_names: the vocabulary as strings, when known without a tokenizer.
    """

    source: str
    arch: Architecture
    prefix: str
    layers: list[str]
    num_heads: list[int]
    num_kv_heads: list[int]
    config: dict[str, Any]
    tokenizer: Tokenizer | Path | None
    keys: frozenset[str]
    _get: Callable[[str], Tensor] = field(repr=False)
    fmt: str = "state dict"
    notes: tuple[str, ...] = ()
    token_names: list[str] | None = field(default=None, repr=False)
    d: int = 0
    d_head: int = 0
    _cache: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _rows: Callable[[str, np.ndarray], Tensor] | None = field(default=None, repr=False)
    _shape: Callable[[str], tuple[int, ...]] | None = field(default=None, repr=False)

    @property
    def layout(self) -> str:
        return self.arch.name

    @property
    def tokenizer_path(self) -> Path | None:
        """The tokenizer.json path, when the tokenizer is a file."""
        return self.tokenizer if isinstance(self.tokenizer, Path) else None

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @overload
    def array(self, key: str, required: Literal[True] = ..., cache: bool = ...) -> np.ndarray: ...

    @overload
    def array(self, key: str, required: bool, cache: bool = ...) -> np.ndarray | None: ...

    def array(self, key: str, required: bool = True, cache: bool = True) -> np.ndarray | None:
        """Tensor `key` as float64 NumPy (cached unless cache=False); None (or CheckpointError if
        required) when absent."""
        if key in self._cache:
            return self._cache[key]
        if key not in self.keys:
            alt = _old_layer_norm_name(key)
            if alt not in self.keys:
                if required:
                    raise CheckpointError(f"checkpoint {self.source} is incomplete: tensor {key!r} missing")
                return None
            key = alt
        try:
            a = to_numpy(self._get(key))
            a = a.astype(np.float64) if a.dtype.kind == "f" else a
        except CheckpointError:
            raise
        except Exception as e:  # corrupt data surfaces here for lazily read formats
            raise CheckpointError(f"checkpoint {self.source}: cannot read tensor {key!r}: {e}") from None
        if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
            raise CheckpointError(f"checkpoint {self.source}: tensor {key!r} contains NaN or inf")
        if cache:
            self._cache[key] = a
        return a

    def layer_shape(self, layer: int, name: str) -> tuple[int, ...] | None:
        """The shape of a per-layer tensor (by its MATH name), from the file's header where the
        reader has one (the tensor is not read), else from the tensor; None when absent."""
        spec = self.arch.keys.get(name)
        if spec is None or self._shape is None or not isinstance(spec, str):
            a = self.layer_array(layer, name, required=False, cache=False)
            return None if a is None else tuple(a.shape)
        key = self.layers[layer] + spec
        return tuple(self._shape(key)) if key in self.keys else None

    def rows(self, key: str, index: np.ndarray) -> np.ndarray:
        """Rows `index` of the matrix `key`, float64, read alone where the reader can (GGUF: only
        those rows are dequantised), not cached."""
        if key in self._cache or self._rows is None or key not in self.keys:
            return self.array(key, cache=False)[index]
        try:
            a = np.asarray(self._rows(key, index), dtype=np.float64)
        except CheckpointError:
            raise
        except Exception as e:
            raise CheckpointError(f"checkpoint {self.source}: cannot read tensor {key!r}: {e}") from None
        if not np.all(np.isfinite(a)):
            raise CheckpointError(f"checkpoint {self.source}: tensor {key!r} contains NaN or inf")
        return a

    def release(self, layer: int) -> None:
        """Drop layer `layer`'s cached tensors (a model is read one layer at a time: its layers'
        dequantised weights are never all held at once)."""
        prefix = self.layers[layer]
        for key in [k for k in self._cache if k.startswith(prefix)]:
            del self._cache[key]

    @overload
    def layer_array(
        self, layer: int, name: str, required: Literal[True] = ..., cache: bool = ...
    ) -> np.ndarray: ...

    @overload
    def layer_array(self, layer: int, name: str, required: bool, cache: bool = ...) -> np.ndarray | None: ...

    def layer_array(
        self, layer: int, name: str, required: bool = True, cache: bool = True
    ) -> np.ndarray | None:
        """Per-layer tensor by its MATH name (W_Q, b_Q, ..., see `Architecture.keys`), float64;
        None when absent and not required."""
        spec = self.arch.keys.get(name)
        if spec is None:
            if required:
                raise CheckpointError(f"a {self.layout} checkpoint has no tensor {name!r}")
            return None
        key, part = (spec, None) if isinstance(spec, str) else spec
        whole = self.array(self.layers[layer] + key, required, cache)
        if whole is not None and name.endswith("norm_w") and self.arch.norm_offset:
            whole = whole + self.arch.norm_offset
        if whole is None or part is None:
            return whole
        n = whole.shape[0] // 3
        return whole[part * n : (part + 1) * n]

    @overload
    def global_array(self, name: str, required: Literal[True] = ..., cache: bool = ...) -> np.ndarray: ...

    @overload
    def global_array(self, name: str, required: bool, cache: bool = ...) -> np.ndarray | None: ...

    def global_array(self, name: str, required: bool = True, cache: bool = True) -> np.ndarray | None:
        """A tensor outside the layers (embeddings, final norm) by its `Architecture.embeddings` name."""
        key = self.arch.embeddings.get(name)
        if key is None:
            if required:
                raise CheckpointError(f"a {self.layout} checkpoint has no {name!r} tensor")
            return None
        a = self.array(self.prefix + key, required, cache)
        return a + self.arch.norm_offset if a is not None and name.endswith("norm_w") else a

    @property
    def softcap(self) -> float | None:
        """The attention logits' soft cap c (logits -> c tanh(logits / c)), None without."""
        value = self.config.get("attn_logit_softcapping")
        return float(value) if value else None

    @property
    def eps(self) -> float:
        """The norms' epsilon (config, else the architecture's default)."""
        value = self.arch.config_value(self.config, self.arch.eps_keys)
        return float(self.arch.eps_default if value is None else value)


def _old_layer_norm_name(key: str) -> str:
    """TF-converted BERT names layer-norm parameters gamma/beta instead of weight/bias."""
    if "LayerNorm." in key:
        return key.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
    return key


@dataclass
class _Source:
    """What a checkpoint argument holds before its layout is known."""

    source: str
    found: Found
    mha_heads: list[tuple[str, int]] | None = None


def _from_module(module: object) -> _Source:
    """A torch module: its state dict, config, tokenizer and MultiheadAttention submodules."""
    import torch

    if not isinstance(module, torch.nn.Module):
        raise TypeError(
            f"checkpoint must be a path, a state dict or a torch.nn.Module, got {type(module).__name__}"
        )
    mhas = [(n, m) for n, m in module.named_modules() if isinstance(m, torch.nn.MultiheadAttention)]
    cfg = getattr(module, "config", None)
    config: dict[str, Any] = {}
    if cfg is not None:
        config = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(vars(cfg))
    state = {k: v.detach() for k, v in module.state_dict().items()}
    name = config.get("_name_or_path")
    tok = Path(name) / "tokenizer.json" if name and (Path(name) / "tokenizer.json").is_file() else None
    source = _Source(f"<{type(module).__name__}>", Found(state, config, tok, "module"))
    found = detect(frozenset(state))
    if mhas and (found is None or found[0].name == "mha"):
        for n, m in mhas:
            if not m._qkv_same_embed_dim:
                raise CheckpointError(
                    f"MultiheadAttention {n or '(root)'} has kdim/vdim != embed_dim: it is cross-attention "
                    "between spaces of different widths, not self-attention of tokens on one sphere"
                )
        source.mha_heads = [(f"{n}." if n else "", m.num_heads) for n, m in mhas]
    return source


def _source(checkpoint: object) -> _Source:
    if isinstance(checkpoint, (str, Path)):
        return _Source(str(checkpoint), read_path(Path(checkpoint).expanduser()))
    if isinstance(checkpoint, Mapping):
        return _Source(
            "<state dict>", Found(unwrap_state_dict(checkpoint, "<state dict>"), {}, None, "state dict")
        )
    if hasattr(checkpoint, "state_dict"):
        return _from_module(checkpoint)
    raise TypeError(
        "checkpoint must be a folder or weights file path, a state dict, a torch.nn.Module or a "
        f"Checkpoint, got {type(checkpoint).__name__}"
    )


def _natural_key(s: str) -> list[int | str]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def _layers(src: _Source, keys: frozenset[str]) -> tuple[Architecture, str, list[str]]:
    """The architecture, key prefix and layer prefixes of a checkpoint, from its keys."""
    found = detect(keys, src.found.config.get("model_type"))
    if found is None:
        shown = ", ".join(sorted(keys)[:6]) or "(no tensors)"
        raise CheckpointError(
            f"unknown checkpoint layout in {src.source}: expected BERT-style keys "
            "('...encoder.layer.0.attention.self.query.weight'), LLaMA-style keys "
            "('...layers.0.self_attn.q_proj.weight') or MultiheadAttention keys ('...in_proj_weight'); "
            f"found {shown}"
        )
    arch, prefixes = found
    if arch.name == "mha":
        if src.mha_heads is not None:  # the module's own order
            return arch, "", [p for p, _ in src.mha_heads]
        return arch, "", sorted(prefixes, key=_natural_key)
    if len(prefixes) > 1:
        raise CheckpointError(f"checkpoint {src.source} holds several encoders (prefixes {sorted(prefixes)})")
    prefix, numbers = next(iter(prefixes.items()))
    if numbers != set(range(len(numbers))):
        raise CheckpointError(
            f"checkpoint {src.source} is incomplete: layers {sorted(numbers)} are not 0..{max(numbers)}"
        )
    return arch, prefix, [arch.layer_prefix(prefix, i) for i in range(len(numbers))]


def _head_counts(
    src: _Source, arch: Architecture, n: int, num_heads: int | None
) -> tuple[list[int], list[int]]:
    """Query heads and key/value heads per layer, from the argument, the module or the config."""
    if src.mha_heads is not None and num_heads is None:
        heads = [h for _, h in src.mha_heads]
        return heads, heads
    config = src.found.config
    h = num_heads or arch.config_value(config, arch.heads_keys)
    if h is None:
        where = (
            "a MultiheadAttention state dict does not store its number of heads"
            if arch.name == "mha"
            else ("the number of heads is unknown (no config.json with num_attention_heads)")
        )
        raise CheckpointError(f"checkpoint {src.source}: {where}: pass num_heads")
    kv = arch.config_value(config, arch.kv_heads_keys) or h
    if int(h) < 1 or int(kv) < 1:  # 0 heads: no layer to read (and a division by zero to come)
        raise CheckpointError(
            f"checkpoint {src.source}: its config gives {h} attention heads and {kv} key/value heads; a "
            "layer has at least one of each"
        )
    return [int(h)] * n, [int(kv)] * n


def open_checkpoint(checkpoint: CheckpointLike, num_heads: int | None = None) -> Checkpoint:
    """Open a checkpoint: a folder or file path, a state dict, a torch module or a Checkpoint.

    num_heads: heads per layer, needed when neither config.json nor the module says it (bare
    state dicts).  Raises CheckpointError for missing, corrupt or incomplete files or an unknown
    layout (MissingExtra, one of its kinds, when a package of the pretrained extra is absent).
    """
    if isinstance(checkpoint, Checkpoint):
        return checkpoint
    if num_heads is not None:
        num_heads = int(check_positive(num_heads, "num_heads", integer=True))
    src = _source(checkpoint)
    keys = frozenset(src.found.tensors)
    arch, prefix, layers = _layers(src, keys)
    heads, kv = _head_counts(src, arch, len(layers), num_heads)
    f = src.found
    ck = Checkpoint(
        src.source, arch, prefix, layers, heads, kv, f.config, f.tokenizer, keys,
        f.tensors.__getitem__, f.fmt, f.notes, f.token_names,
    )  # fmt: skip
    ck._rows = getattr(f.tensors, "rows", None)
    ck._shape = getattr(f.tensors, "shape", None)
    ck.d, ck.d_head = _validate_shapes(ck)
    return ck


def _expected_rows(ck: Checkpoint, i: int, name: str, d: int, dh: int) -> tuple[int, int]:
    rows = {"W_Q": ck.num_heads[i] * dh, "W_K": ck.num_kv_heads[i] * dh, "W_V": ck.num_kv_heads[i] * dh}
    return (d, ck.num_heads[i] * dh) if name == "W_O" else (rows[name], d)


def _validate_shapes(ck: Checkpoint) -> tuple[int, int]:
    """Check every layer's attention tensors exist with consistent shapes; return (d, d_head)."""
    if not ck.layers:
        raise CheckpointError(f"checkpoint {ck.source} has no attention layers")
    if ck.layout == "mha":
        for p in ck.layers:
            W = ck.array(p + "in_proj_weight")
            if W.ndim != 2 or W.shape[0] != 3 * W.shape[1]:
                raise CheckpointError(f"checkpoint {ck.source}: {p}in_proj_weight has shape {W.shape}")
    shape = ck.layer_shape(0, "W_Q")
    d = int(shape[-1]) if shape is not None else int(ck.layer_array(0, "W_Q").shape[-1])
    head_dim = ck.config.get("head_dim") if ck.layout == "llama" else None
    for i in range(ck.num_layers):
        H, kv = ck.num_heads[i], ck.num_kv_heads[i]
        if head_dim is None and d % H:
            raise CheckpointError(
                f"checkpoint {ck.source}: width d = {d} is not divisible by num_heads = {H}"
            )
        if H % kv:
            raise CheckpointError(
                f"checkpoint {ck.source}: {H} query heads cannot share {kv} key/value heads (not a divisor)"
            )
        dh = int(head_dim or d // H)
        for name in ATTENTION_KEYS:  # shapes from the header where the reader has one: nothing read
            shape = ck.layer_shape(i, name)
            if shape is None:
                ck.layer_array(i, name)  # missing: the error that names it
            want = _expected_rows(ck, i, name, d, dh)
            if shape != want:
                raise CheckpointError(
                    f"checkpoint {ck.source}: layer {i} {name} has shape {shape}, expected {want}"
                )
        for name in BIAS_KEYS:
            shape = ck.layer_shape(i, name)
            rows = d if name == "b_O" else _expected_rows(ck, i, "W" + name[1:], d, dh)[0]
            if shape is not None and shape != (rows,):
                raise CheckpointError(
                    f"checkpoint {ck.source}: layer {i} {name} has shape {shape}, expected ({rows},)"
                )
    return d, int(head_dim or d // ck.num_heads[0])


def layer_weights(ck: Checkpoint, i: int) -> dict[str, np.ndarray]:
    """The attention weights W_Q (H d_h, d), W_K, W_V (H_kv d_h, d), W_O (d, H d_h) and biases
    b_Q, b_K, b_V, b_O of layer i (absent biases as zeros)."""
    w = {n: ck.layer_array(i, n) for n in ATTENTION_KEYS}
    for n in BIAS_KEYS:
        b = ck.layer_array(i, n, required=False)
        w[n] = np.zeros(w["W" + n[1:]].shape[0] if n != "b_O" else ck.d) if b is None else b
    return w


def check_layers(layers: int | Iterable[int] | None, n: int) -> list[int]:
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
