"""Tiny checkpoints written by the tests themselves (a random BERT-style state dict, its config and a
word-level tokenizer), shared by the tests of pretrained/ and experiments/."""

from __future__ import annotations

import json
import math

import numpy as np
import torch

WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "far", "away", "it", "was", "tired", "."]


def bert_state(d=16, heads=4, layers=2, ffn=24, vocab=20, max_pos=32, seed=0, bias=True, prefix=""):
    """A random BERT-style state dict (float32 torch tensors) and its config."""
    rng = np.random.default_rng(seed)

    def t(*shape, scale=1.0, loc=0.0):
        return torch.tensor(loc + scale * rng.standard_normal(shape), dtype=torch.float32)

    e = f"{prefix}embeddings."
    sd = {
        e + "word_embeddings.weight": t(vocab, d),
        e + "position_embeddings.weight": t(max_pos, d, scale=0.3),
        e + "token_type_embeddings.weight": t(2, d, scale=0.3),
        e + "LayerNorm.weight": t(d, scale=0.2, loc=1.0),
        e + "LayerNorm.bias": t(d, scale=0.1),
    }
    for i in range(layers):
        p = f"{prefix}encoder.layer.{i}."
        for name, shape in [
            ("attention.self.query", (d, d)),
            ("attention.self.key", (d, d)),
            ("attention.self.value", (d, d)),
            ("attention.output.dense", (d, d)),
            ("intermediate.dense", (ffn, d)),
            ("output.dense", (d, ffn)),
        ]:
            sd[p + name + ".weight"] = t(*shape, scale=1.5 / math.sqrt(shape[1]))
            if bias:
                sd[p + name + ".bias"] = t(shape[0], scale=0.3)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            sd[p + ln + ".weight"] = t(d, scale=0.2, loc=1.0)
            sd[p + ln + ".bias"] = t(d, scale=0.1)
    config = {
        "model_type": "bert",
        "hidden_size": d,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "intermediate_size": ffn,
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-12,
        "vocab_size": vocab,
        "max_position_embeddings": max_pos,
    }
    return sd, config


def write_tokenizer(path):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tok.save(str(path))


def write_checkpoint(folder, fmt="safetensors", tokenizer=True, **kw):
    sd, config = bert_state(**kw)
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "safetensors":
        from safetensors.torch import save_file

        save_file(sd, str(folder / "model.safetensors"))
    else:
        torch.save(sd, folder / "pytorch_model.bin")
    (folder / "config.json").write_text(json.dumps(config))
    if tokenizer:
        write_tokenizer(folder / "tokenizer.json")
    return sd, config
