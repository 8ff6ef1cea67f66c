"""ARCHITECTURES: the layout of each model family, so that a new family is one entry.

An `Architecture` says where a layer's tensors are (W_Q, b_Q, W_K, ..., by their MATH.md names,
relative to the layer's key prefix), how its blocks are built (the norm and where it sits, the
feed-forward kind, causal or not, learned or rotary positions) and which config.json keys give the
number of heads, of key/value heads (grouped-query attention) and the norm's epsilon.  Readers of
other formats (GGUF, ONNX) rename their tensors into one of these layouts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, TypeVar

_T = TypeVar("_T")

__all__ = ["ARCHITECTURES", "Architecture", "Key", "detect"]

#: a tensor key after the layer prefix, or (key, part): part k of 3 stacked along the rows (packed QKV)
Key = str | tuple[str, int]


@dataclass(frozen=True)
class Architecture:
    """One model family's layout (see the module's doc).

    query: regex matching a layer's query weight; group `prefix`, and `i` for numbered layers.
    layer: the layer prefix from `prefix` and `i`.  keys: MATH name -> `Key` per layer (attention
    W_Q, b_Q, W_K, b_K, W_V, b_V, W_O, b_O; norms attn_norm_w/_b, ffn_norm_w/_b; feed-forward W_1,
    b_1, W_2, b_2 or W_gate, W_up, W_down; sinks: a sink logit per head; post_attn_norm_w,
    post_ffn_norm_w: norms of the sublayers' outputs, Gemma-2).  embeddings: word, position, type,
    norm_w, norm_b and final_norm_w, after the prefix.  norm: "layernorm", "rmsnorm" or "none";
    placement: "post" (norm after each residual add, BERT) or "pre" (norm on each sublayer's input,
    LLaMA) or "none"; ffn: "gelu" (with `hidden_act`), "swiglu", "geglu" (tanh GELU gate) or "none";
    positions: "learned", "rope" or "none".  model_types: the config's model_type values that pick
    this entry over another with the same keys; norm_offset: added to every norm weight (Gemma
    stores w and scales by 1 + w); embed_scale: the embeddings are multiplied by sqrt(d).
    """

    name: str
    description: str
    query: str
    layer: str
    keys: Mapping[str, Key]
    embeddings: Mapping[str, str] = field(default_factory=dict)
    norm: str = "none"
    placement: str = "none"
    ffn: str = "none"
    positions: str = "none"
    causal: bool = False
    heads_keys: tuple[str, ...] = ("num_attention_heads", "n_heads")
    kv_heads_keys: tuple[str, ...] = ()
    eps_keys: tuple[str, ...] = ()
    eps_default: float = 1e-12
    model_types: tuple[str, ...] = ()
    norm_offset: float = 0.0
    embed_scale: bool = False

    @property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(self.query)

    def layer_prefix(self, prefix: str, i: int | None) -> str:
        return self.layer.format(prefix=prefix, i=i)

    def config_value(self, config: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
        """The first of `keys` present in config, or None."""
        return next((config[k] for k in keys if config.get(k) is not None), None)


def _frozen(d: dict[str, _T]) -> Mapping[str, _T]:
    return MappingProxyType(d)


_BERT = Architecture(
    name="bert",
    description="BERT-style encoders (BERT, RoBERTa, MiniLM, ELECTRA): post-layer-norm, learned positions",
    query=r"^(?P<prefix>.*?)encoder\.layer\.(?P<i>\d+)\.attention\.self\.query\.weight$",
    layer="{prefix}encoder.layer.{i}.",
    keys=_frozen(
        {
            "W_Q": "attention.self.query.weight",
            "b_Q": "attention.self.query.bias",
            "W_K": "attention.self.key.weight",
            "b_K": "attention.self.key.bias",
            "W_V": "attention.self.value.weight",
            "b_V": "attention.self.value.bias",
            "W_O": "attention.output.dense.weight",
            "b_O": "attention.output.dense.bias",
            "attn_norm_w": "attention.output.LayerNorm.weight",
            "attn_norm_b": "attention.output.LayerNorm.bias",
            "W_1": "intermediate.dense.weight",
            "b_1": "intermediate.dense.bias",
            "W_2": "output.dense.weight",
            "b_2": "output.dense.bias",
            "ffn_norm_w": "output.LayerNorm.weight",
            "ffn_norm_b": "output.LayerNorm.bias",
        }
    ),
    embeddings=_frozen(
        {
            "word": "embeddings.word_embeddings.weight",
            "position": "embeddings.position_embeddings.weight",
            "type": "embeddings.token_type_embeddings.weight",
            "norm_w": "embeddings.LayerNorm.weight",
            "norm_b": "embeddings.LayerNorm.bias",
        }
    ),
    norm="layernorm",
    placement="post",
    ffn="gelu",
    positions="learned",
    eps_keys=("layer_norm_eps",),
)

_LLAMA = Architecture(
    name="llama",
    description="LLaMA-style decoders (LLaMA, Mistral, SmolLM, Qwen2): causal, pre-RMSNorm, rotary "
    "positions, grouped key/value heads",
    query=r"^(?P<prefix>.*?)layers\.(?P<i>\d+)\.self_attn\.q_proj\.weight$",
    layer="{prefix}layers.{i}.",
    keys=_frozen(
        {
            "W_Q": "self_attn.q_proj.weight",
            "b_Q": "self_attn.q_proj.bias",
            "W_K": "self_attn.k_proj.weight",
            "b_K": "self_attn.k_proj.bias",
            "W_V": "self_attn.v_proj.weight",
            "b_V": "self_attn.v_proj.bias",
            "W_O": "self_attn.o_proj.weight",
            "b_O": "self_attn.o_proj.bias",
            "attn_norm_w": "input_layernorm.weight",
            "ffn_norm_w": "post_attention_layernorm.weight",
            "W_gate": "mlp.gate_proj.weight",
            "W_up": "mlp.up_proj.weight",
            "W_down": "mlp.down_proj.weight",
            "sinks": "self_attn.sinks",
        }
    ),
    embeddings=_frozen({"word": "embed_tokens.weight", "final_norm_w": "norm.weight"}),
    norm="rmsnorm",
    placement="pre",
    ffn="swiglu",
    positions="rope",
    causal=True,
    kv_heads_keys=("num_key_value_heads",),
    eps_keys=("rms_norm_eps",),
    eps_default=1e-6,
)

_MHA = Architecture(
    name="mha",
    description="torch.nn.MultiheadAttention (packed in_proj): attention weights only",
    query=r"^(?P<prefix>.*?)in_proj_weight$",
    layer="{prefix}",
    keys=_frozen(
        {
            "W_Q": ("in_proj_weight", 0),
            "W_K": ("in_proj_weight", 1),
            "W_V": ("in_proj_weight", 2),
            "b_Q": ("in_proj_bias", 0),
            "b_K": ("in_proj_bias", 1),
            "b_V": ("in_proj_bias", 2),
            "W_O": "out_proj.weight",
            "b_O": "out_proj.bias",
        }
    ),
)

_GEMMA2 = replace(
    _LLAMA,
    name="gemma2",
    description="Gemma-2-style decoders: the LLaMA layout with norms after each sublayer too, "
    "logit soft-capping, a tanh-GELU gate, embeddings scaled by sqrt(d), norm weights 1 + w",
    keys=_frozen(
        {
            **_LLAMA.keys,
            "post_attn_norm_w": "post_attention_layernorm.weight",
            "ffn_norm_w": "pre_feedforward_layernorm.weight",
            "post_ffn_norm_w": "post_feedforward_layernorm.weight",
        }
    ),
    ffn="geglu",
    model_types=("gemma2",),
    norm_offset=1.0,
    embed_scale=True,
)

ARCHITECTURES: dict[str, Architecture] = {a.name: a for a in (_BERT, _LLAMA, _GEMMA2, _MHA)}


def detect(
    keys: frozenset[str], model_type: str | None = None
) -> tuple[Architecture, dict[str, set[int]]] | None:
    """The first architecture whose query key matches (one that names `model_type` first, one
    that names other model types never), with {prefix: layer numbers} (empty sets for unnumbered
    layers: one layer per prefix); None when none matches."""
    ordered = sorted(ARCHITECTURES.values(), key=lambda a: model_type not in a.model_types)
    for arch in ordered:
        if arch.model_types and model_type not in arch.model_types:
            continue
        found: dict[str, set[int]] = {}
        for k in keys:
            m = arch.pattern.match(k)
            if m:
                layers = found.setdefault(m["prefix"], set())
                if "i" in m.groupdict():
                    layers.add(int(m["i"]))
        if found:
            return arch, found
    return None
