"""Attention heads and token clouds from pretrained transformers, read from local files only.

A checkpoint is read as (Q, K, V, beta) per layer and per head, in the notation of MATH.md:

- `readers/`: one module per file format behind one interface (`READERS`: safetensors, pytorch,
  gguf, onnx), each returning tensors, config, tokenizer and notes; `sources`: a checkpoint named
  by a path or by an installed package.
- `architectures`: the layout of each model family (`ARCHITECTURES`: bert, llama, mha);
  `checkpoint`: an opened `Checkpoint` (from a path, a state dict, a module).
- `heads`: each layer and head as an `Attention` at its effective beta (`Layer`, `Head`, `Norm`),
  with grouped key/value heads and rotary offsets (`rope`).
- `forward`: the tokenizer and NumPy forward passes (BERT, LLaMA), for the model's own token states.
- `diagnostics`: the theorem's assumptions on one head, checked by `attnflow.science.assumptions`;
  `report`: every head of a checkpoint with summaries; `beta`: beta fitted from the logits;
  `regime`: each layer's step fitted on the forward pass, the stack's time against log beta.
"""

from .architectures import ARCHITECTURES, Architecture
from .beta import BetaFit, fit_beta
from .checkpoint import Checkpoint, CheckpointError, open_checkpoint
from .diagnostics import diagnose, symmetric_part_attention, symmetric_top
from .forward import TokenStates, attention_logits, hidden_states, token_cloud, token_states, tokenize
from .heads import Head, Layer, Norm, attention_output, head_attention, load_heads
from .readers import READERS, MissingExtra
from .regime import Regime, StepFit, regime
from .report import report
from .rope import RoPE
from .sources import resolve_checkpoint

__all__ = [
    "ARCHITECTURES",
    "READERS",
    "Architecture",
    "BetaFit",
    "Checkpoint",
    "CheckpointError",
    "Head",
    "Layer",
    "MissingExtra",
    "Norm",
    "Regime",
    "RoPE",
    "StepFit",
    "TokenStates",
    "attention_logits",
    "attention_output",
    "diagnose",
    "fit_beta",
    "head_attention",
    "hidden_states",
    "load_heads",
    "open_checkpoint",
    "regime",
    "report",
    "resolve_checkpoint",
    "symmetric_part_attention",
    "symmetric_top",
    "token_cloud",
    "token_states",
    "tokenize",
]
