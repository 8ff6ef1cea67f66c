"""GGUF files (llama.cpp): tensors dequantised to float32 and renamed to Hugging Face's layout.

Read through the `gguf` package (`GGUFReader`, `gguf.quants.dequantize`): Q4_x, Q8_0 and the other
block formats become float32 on access, so every number computed from them is a number of the
quantised model, and `Found.notes` says so.  Per architecture (`GGUF_ARCHITECTURES`) the file's
names map to Hugging Face's (``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``)
and its metadata to config.json keys.  llama.cpp's converter reorders the rows of W_Q and W_K of
llama models (each head's rotary pairs interleaved, (2k, 2k+1), instead of Hugging Face's halves,
(k, k + d_head/2)); the reader puts them back, so that every checkpoint of one architecture has one
layout; Qwen2 and Gemma-2 files keep Hugging Face's order.  Qwen2's q/k/v biases, Gemma-2's norms
after each sublayer and its logit soft cap (`{arch}.attn_logit_softcapping`, norm weights stored
as 1 + w and put back to w) and attention sinks (`blk.N.attn_sinks.weight`, gpt-oss's name, read
in any of these architectures) are read.  A byte-level BPE tokenizer is rebuilt from the file's
vocabulary and merges when its pre-tokenizer is one of `PRE_TOKENIZERS`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from .common import CheckpointError, Found, LazyTensors, require, tokenizer_next_to

if TYPE_CHECKING:
    from gguf import GGUFReader, ReaderTensor
    from tokenizers import Tokenizer

__all__ = ["GGUF_ARCHITECTURES", "PRE_TOKENIZERS", "GgufArchitecture", "check_data", "read", "unpermute_rows"]

# Per-block GGUF tensor names -> Hugging Face llama-style names (relative to model.layers.{i}.)
BLOCK_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "attn_sinks.weight": "self_attn.sinks",
}
GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
# config.json key <- GGUF metadata key (after "{arch}.")
CONFIG_KEYS = {
    "hidden_size": "embedding_length",
    "num_hidden_layers": "block_count",
    "num_attention_heads": "attention.head_count",
    "num_key_value_heads": "attention.head_count_kv",
    "head_dim": "attention.key_length",
    "rope_theta": "rope.freq_base",
    "rope_dim": "rope.dimension_count",
    "rms_norm_eps": "attention.layer_norm_rms_epsilon",
    "intermediate_size": "feed_forward_length",
    "max_position_embeddings": "context_length",
    "attn_logit_softcapping": "attn_logit_softcapping",
    "sliding_window": "attention.sliding_window",
}


@dataclass(frozen=True)
class GgufArchitecture:
    """How one GGUF architecture maps to Hugging Face: its model_type, whether llama.cpp's
    converter interleaved the rotary rows of W_Q and W_K, the feed-forward's activation, block
    names that differ from `BLOCK_NAMES`, and the offset the converter added to the norm weights
    (Gemma's 1 + w, taken off again: the Hugging Face layout stores w)."""

    model_type: str
    permuted_qk: bool
    hidden_act: str = "silu"
    names: Mapping[str, str] = field(default_factory=dict)
    norm_offset: float = 0.0


GGUF_ARCHITECTURES = {
    "llama": GgufArchitecture("llama", permuted_qk=True),
    "qwen2": GgufArchitecture("qwen2", permuted_qk=False),  # q/k/v biases, rotate-half rows kept
    "gemma2": GgufArchitecture(
        "gemma2",
        permuted_qk=False,
        hidden_act="gelu_pytorch_tanh",
        names={
            "post_attention_norm.weight": "post_attention_layernorm.weight",
            "ffn_norm.weight": "pre_feedforward_layernorm.weight",
            "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
        },
        norm_offset=1.0,
    ),
}
# llama.cpp pre-tokenizer name -> (split digits one by one before the byte-level split)
PRE_TOKENIZERS = {"gpt2": False, "smollm": True}


def unpermute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Rows of W_Q or W_K (n_head * d_head, ...) from llama.cpp's interleaved rotary order back to
    Hugging Face's: row (h, k, a) of the file (pair k, member a) is row (h, a, k) of the model."""
    dh = w.shape[0] // n_head
    return w.reshape(n_head, dh // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _field(reader: GGUFReader, key: str, default: object = None) -> Any:
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def _hf_name(name: str, spec: GgufArchitecture) -> str:
    if name in GLOBAL_NAMES:
        return GLOBAL_NAMES[name]
    parts = name.split(".", 2)
    names = {**BLOCK_NAMES, **spec.names}
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in names:
        return f"model.layers.{parts[1]}.{names[parts[2]]}"
    return name


def _config(reader: GGUFReader, arch: str, spec: GgufArchitecture, names: set[str]) -> dict[str, Any]:
    config: dict[str, Any] = {"model_type": spec.model_type, "hidden_act": spec.hidden_act}
    for key, meta in CONFIG_KEYS.items():
        value = _field(reader, f"{arch}.{meta}")
        if value is not None:
            config[key] = value
    config["tie_word_embeddings"] = "output.weight" not in names
    return config


def _notes(reader: GGUFReader, permuted: bool) -> tuple[str, ...]:
    kinds = Counter(t.tensor_type.name for t in reader.tensors)
    quant = {k: n for k, n in kinds.items() if k not in ("F32", "F16", "BF16", "F64")}
    notes = []
    if quant:
        listed = ", ".join(f"{k}: {n} tensors" for k, n in sorted(quant.items()))
        notes.append(
            f"weights quantised in the file ({listed}) and dequantised to float32: the numbers are "
            "those of the quantised model"
        )
    if permuted:
        notes.append("W_Q and W_K rows put back from llama.cpp's interleaved rotary order")
    return tuple(notes)


def _tokenizer(reader: GGUFReader) -> Tokenizer | None:
    """A byte-level BPE `tokenizers.Tokenizer` from the file's vocabulary and merges, or None."""
    pre = _field(reader, "tokenizer.ggml.pre")
    if _field(reader, "tokenizer.ggml.model") != "gpt2" or pre not in PRE_TOKENIZERS:
        return None
    try:
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    except ImportError:
        return None
    tokens = list(_field(reader, "tokenizer.ggml.tokens"))
    merges = [tuple(m.split(" ", 1)) for m in _field(reader, "tokenizer.ggml.merges", [])]
    try:
        tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    except Exception:  # vocabulary and merges that do not agree: no tokenizer (token ids still work)
        return None
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    steps = (
        [pre_tokenizers.Digits(individual_digits=True), byte_level] if PRE_TOKENIZERS[pre] else [byte_level]
    )
    tok.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tok.decoder = decoders.ByteLevel()
    types = list(_field(reader, "tokenizer.ggml.token_type", []))
    control = [AddedToken(t, special=True) for t, k in zip(tokens, types, strict=False) if k == 3]
    tok.add_special_tokens(control)
    return tok


def _tensors(
    gguf: ModuleType, path: Path, spec: GgufArchitecture, by_name: dict[str, ReaderTensor], config: dict
) -> LazyTensors:
    """The file's tensors by Hugging Face name, dequantised on access (rows alone where asked),
    their shapes from the header."""
    n_heads = config.get("num_attention_heads")
    heads = {"q_proj": n_heads, "k_proj": config.get("num_key_value_heads", n_heads)}

    def dequantise(t: ReaderTensor, data: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        try:
            return gguf.quants.dequantize(data, t.tensor_type).astype(np.float32).reshape(shape)
        except Exception as e:
            raise CheckpointError(f"checkpoint {path}: cannot dequantise {t.name}: {e}") from None

    def load(name: str) -> np.ndarray:
        t = by_name[name]
        w = dequantise(t, t.data, tuple(int(n) for n in reversed(t.shape)))
        n = heads.get(name.rsplit(".", 2)[-2])
        if spec.permuted_qk and n:
            w = unpermute_rows(w, int(n))
        if spec.norm_offset and name.endswith("norm.weight"):
            return w.astype(np.float64) - spec.norm_offset
        return w

    def load_rows(name: str, index: np.ndarray) -> np.ndarray:
        """Rows `index` of a matrix, dequantised alone (an embedding's rows for a text's tokens)."""
        t = by_name[name]
        return dequantise(t, t.data[index], (-1, int(t.shape[0])))

    shapes = {n: tuple(int(k) for k in reversed(t.shape)) for n, t in by_name.items()}
    return LazyTensors(list(by_name), load, load_rows, shapes)


def check_data(reader: GGUFReader, path: Path) -> None:
    """CheckpointError naming the first tensor whose data leave the file or overlap another's (a GGUF
    file holds each tensor's bytes once: two names read from one range are not two tensors)."""
    size = path.stat().st_size
    spans = sorted((int(t.data_offset), int(t.data_offset) + int(t.n_bytes), t.name) for t in reader.tensors)
    for (start, end, name), (next_start, _, next_name) in zip(
        spans, [*spans[1:], (size, 0, "")], strict=True
    ):
        if end > size:
            raise CheckpointError(
                f"checkpoint {path}: the data of {name} (bytes {start}-{end}) end past the file "
                f"({size} bytes)"
            )
        if next_start < end:
            raise CheckpointError(
                f"checkpoint {path}: the data of {next_name} (from byte {next_start}) overlap those of "
                f"{name} (bytes {start}-{end}); a GGUF file holds each tensor's data once"
            )


def read(path: Path) -> Found:
    """The tensors (float32 on access, Hugging Face names), config and tokenizer of a GGUF file."""
    gguf = require("gguf", f"reading {path.name}")
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as e:
        raise CheckpointError(
            f"checkpoint {path} is truncated or malformed: not a readable GGUF file ({e}; "
            f"{path.stat().st_size} bytes)"
        ) from None
    check_data(reader, path)
    arch = _field(reader, "general.architecture")
    if arch not in GGUF_ARCHITECTURES:
        raise CheckpointError(
            f"checkpoint {path}: GGUF architecture {arch!r} is not supported (known: "
            f"{', '.join(sorted(GGUF_ARCHITECTURES))})"
        )
    spec = GGUF_ARCHITECTURES[arch]
    by_name = {_hf_name(t.name, spec): t for t in reader.tensors}
    config = _config(reader, arch, spec, {t.name for t in reader.tensors})
    embedding = by_name.get("model.embed_tokens.weight")
    if embedding is not None:  # its rows, from the header: the matrix itself is not read for it
        config.setdefault("vocab_size", int(embedding.shape[-1]))
    tokens = _field(reader, "tokenizer.ggml.tokens")
    names = list(tokens) if tokens is not None else None
    tokenizer = tokenizer_next_to(path) or _tokenizer(reader)
    for key in [k for k in reader.fields if k.startswith("tokenizer.ggml.")]:
        del reader.fields[key]  # read once above: the parsed vocabulary is hundreds of MB of small arrays
    tensors = _tensors(gguf, path, spec, by_name, config)
    return Found(tensors, config, tokenizer, "gguf", _notes(reader, spec.permuted_qk), names)
