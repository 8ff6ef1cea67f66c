"""Attention heads and token clouds from pretrained transformers, read from local files only.

A checkpoint is read as (Q, K, V, beta) per layer and per head, in the notation of MATH.md:

- `checkpoint`: layouts (BERT-style, MultiheadAttention, Hugging Face model objects) and an opened
  `Checkpoint`; `files`: safetensors and PyTorch files, shard indexes, config.json; `sources`: a
  checkpoint named by a path or by an installed package.
- `heads`: each layer and head as an `Attention` at its effective beta (`Layer`, `Head`).
- `forward`: the tokenizer and a NumPy BERT encoder, for the model's own token states.
- `diagnostics`: the theorem's assumptions on every head, checked by `attnflow.science.assumptions`.
"""

from .checkpoint import Checkpoint, CheckpointError, open_checkpoint
from .diagnostics import diagnose, report, symmetric_part_attention, symmetric_top
from .diagnostics import spectra as spectra  # the tests compare it with dense spectra
from .forward import TokenStates, hidden_states, token_cloud, token_states, tokenize
from .heads import Head, Layer, attention_output, head_attention, load_heads
from .sources import resolve_checkpoint

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "Head",
    "Layer",
    "TokenStates",
    "attention_output",
    "diagnose",
    "head_attention",
    "hidden_states",
    "load_heads",
    "open_checkpoint",
    "report",
    "resolve_checkpoint",
    "symmetric_part_attention",
    "symmetric_top",
    "token_cloud",
    "token_states",
    "tokenize",
]
