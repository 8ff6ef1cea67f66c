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


# --------------------------------------------------------------------------------- GGUF (llama.cpp)
# Block formats of ggml, written and read here with NumPy alone (independent of the gguf package):
# Q8_0: 32 weights per block as (float16 d, int8 q[32]), w = d q;  Q4_1: (float16 d, float16 m,
# 16 bytes of 4-bit q, weight j in the low nibble of byte j and weight j + 16 in its high nibble),
# w = d q + m.
QK = 32


def quantize_q8_0(w):
    """(rows, cols) float -> (rows, cols / 32 * 34) uint8 bytes of Q8_0 blocks."""
    b = np.asarray(w, dtype=np.float32).reshape(w.shape[0], -1, QK)
    d = np.abs(b).max(axis=-1, keepdims=True) / 127.0
    q = np.round(b / np.where(d > 0, d, 1.0)).clip(-127, 127).astype(np.int8)
    out = np.concatenate([d.astype(np.float16).view(np.uint8), q.view(np.uint8)], axis=-1)
    return out.reshape(w.shape[0], -1)


def quantize_q4_1(w):
    """(rows, cols) float -> (rows, cols / 32 * 20) uint8 bytes of Q4_1 blocks."""
    b = np.asarray(w, dtype=np.float32).reshape(w.shape[0], -1, QK)
    lo, hi = b.min(axis=-1, keepdims=True), b.max(axis=-1, keepdims=True)
    d = (hi - lo) / 15.0
    q = np.round((b - lo) / np.where(d > 0, d, 1.0)).clip(0, 15).astype(np.uint8)
    packed = q[..., :16] | (q[..., 16:] << 4)
    head = np.concatenate(
        [d.astype(np.float16).view(np.uint8), lo.astype(np.float16).view(np.uint8)], axis=-1
    )
    return np.concatenate([head, packed], axis=-1).reshape(w.shape[0], -1)


def dequantize_q8_0(raw):
    """Q8_0 bytes (rows, blocks * 34) -> float32 (rows, blocks * 32)."""
    b = np.ascontiguousarray(raw, dtype=np.uint8).reshape(raw.shape[0], -1, 34)
    d = b[..., :2].copy().view(np.float16).astype(np.float32)
    q = b[..., 2:].copy().view(np.int8).astype(np.float32)
    return (d * q).reshape(raw.shape[0], -1)


def dequantize_q4_1(raw):
    """Q4_1 bytes (rows, blocks * 20) -> float32 (rows, blocks * 32)."""
    b = np.ascontiguousarray(raw, dtype=np.uint8).reshape(raw.shape[0], -1, 20)
    d = b[..., 0:2].copy().view(np.float16).astype(np.float32)
    m = b[..., 2:4].copy().view(np.float16).astype(np.float32)
    qs = b[..., 4:]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.float32)
    return (d * q + m).reshape(raw.shape[0], -1)


DEQUANTIZE = {"Q8_0": dequantize_q8_0, "Q4_1": dequantize_q4_1}


def llama_cpp_permute(w, n_head):
    """llama.cpp's converter's reordering of W_Q, W_K rows (Hugging Face -> interleaved rotary pairs):
    file row (h, k, a) = model row (h, a, k), k < d_head / 2, a in {0, 1}."""
    dh = w.shape[0] // n_head
    rows = [h * dh + a * (dh // 2) + k for h in range(n_head) for k in range(dh // 2) for a in (0, 1)]
    return w[rows]


def llama_state(d=64, heads=4, kv_heads=2, layers=2, ffn=64, vocab=259, seed=0, prefix="model."):
    """A random LLaMA-style state dict (float32 NumPy, Hugging Face names) and its config."""
    rng = np.random.default_rng(seed)
    dh = d // heads

    def t(*shape, scale=1.0, loc=0.0):
        return (loc + scale * rng.standard_normal(shape)).astype(np.float32)

    sd = {f"{prefix}embed_tokens.weight": t(vocab, d), f"{prefix}norm.weight": t(d, scale=0.1, loc=1.0)}
    for i in range(layers):
        p = f"{prefix}layers.{i}."
        for name, shape in [
            ("self_attn.q_proj", (heads * dh, d)),
            ("self_attn.k_proj", (kv_heads * dh, d)),
            ("self_attn.v_proj", (kv_heads * dh, d)),
            ("self_attn.o_proj", (d, heads * dh)),
            ("mlp.gate_proj", (ffn, d)),
            ("mlp.up_proj", (ffn, d)),
            ("mlp.down_proj", (d, ffn)),
        ]:
            sd[p + name + ".weight"] = t(*shape, scale=1.5 / math.sqrt(shape[1]))
        sd[p + "input_layernorm.weight"] = t(d, scale=0.2, loc=1.0)
        sd[p + "post_attention_layernorm.weight"] = t(d, scale=0.2, loc=1.0)
    config = {
        "model_type": "llama",
        "hidden_size": d,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "num_hidden_layers": layers,
        "intermediate_size": ffn,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-5,
        "hidden_act": "silu",
        "max_position_embeddings": 64,
        "vocab_size": vocab,
    }
    return sd, config


GGUF_NAMES = {
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
}


def byte_level_vocab():
    """The 256 byte-level symbols of GPT-2's tokenizer, then an end-of-text token."""
    from tokenizers import pre_tokenizers

    return [*sorted(pre_tokenizers.ByteLevel.alphabet()), "Ġt", "he", "<|endoftext|>"]


def write_gguf(path, **kw):
    """A tiny LLaMA GGUF file as llama.cpp writes one: the rows of W_Q and W_K interleaved, the
    embedding in Q8_0, the other matrices in Q4_1, the norms in F32, a byte-level BPE vocabulary.
    Returns (state dict of the dequantised weights in Hugging Face order, config)."""
    import gguf

    sd, config = llama_state(**kw)
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    w = gguf.GGUFWriter(str(path), "llama")
    for key, value in [
        ("block_count", config["num_hidden_layers"]),
        ("embedding_length", config["hidden_size"]),
        ("feed_forward_length", config["intermediate_size"]),
        ("attention.head_count", heads),
        ("attention.head_count_kv", kv),
        ("context_length", config["max_position_embeddings"]),
        ("rope.dimension_count", config["hidden_size"] // heads),
    ]:
        w.add_uint32(f"llama.{key}", value)
    w.add_float32("llama.rope.freq_base", config["rope_theta"])
    w.add_float32("llama.attention.layer_norm_rms_epsilon", config["rms_norm_eps"])
    tokens = byte_level_vocab()
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "gpt2")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", [1] * (len(tokens) - 1) + [3])
    w.add_array("tokenizer.ggml.merges", ["Ġ t", "h e"])
    ref = {}
    for name, value in sd.items():
        if name.endswith("norm.weight"):
            gname = "output_norm.weight" if name == "model.norm.weight" else None
            kind, raw = "F32", value
        else:
            kind = "Q8_0" if "embed_tokens" in name else "Q4_1"
            raw = (quantize_q8_0 if kind == "Q8_0" else quantize_q4_1)(value)
            gname = "token_embd.weight" if "embed_tokens" in name else None
        if gname is None:
            i, rest = name.removeprefix("model.layers.").split(".", 1)
            gname = f"blk.{i}.{GGUF_NAMES[rest]}"
        ref[name] = value if kind == "F32" else DEQUANTIZE[kind](raw)
        if "q_proj" in name or "k_proj" in name:
            raw = llama_cpp_permute(raw, heads if "q_proj" in name else kv)
        qtype = getattr(gguf.GGMLQuantizationType, kind)
        w.add_tensor(gname, raw, raw_dtype=None if kind == "F32" else qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return ref, config


GEMMA2_NAMES = {  # Gemma-2's llama.cpp names where they differ from LLaMA's
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}


def family_state(family, d=32, heads=4, kv_heads=2, layers=2, ffn=32, vocab=40, seed=0, cap=2.0):
    """A LLaMA-style state dict (Hugging Face names, float32) of one decoder family and its config:
    "qwen2" adds q/k/v biases; "gemma2" adds the norms after each sublayer (Gemma-2 names: the
    second norm is the pre-feed-forward one; weights stored as w, scaled by 1 + w), soft-capping
    at `cap`, a tanh-GELU gate and embeddings scaled by sqrt(d); "sinks" adds a sink logit per head
    (self_attn.sinks, gpt-oss's name)."""
    sd, config = llama_state(
        d=d, heads=heads, kv_heads=kv_heads, layers=layers, ffn=ffn, vocab=vocab, seed=seed
    )
    rng = np.random.default_rng(seed + 100)
    dh = d // heads
    for i in range(layers):
        p = f"model.layers.{i}."
        if family == "qwen2":
            for proj, n in (("q_proj", heads), ("k_proj", kv_heads), ("v_proj", kv_heads)):
                sd[p + f"self_attn.{proj}.bias"] = rng.normal(0, 0.5, n * dh).astype(np.float32)
        if family == "sinks":
            sd[p + "self_attn.sinks"] = rng.normal(0.5, 1.0, heads).astype(np.float32)
        if family == "gemma2":
            sd[p + "pre_feedforward_layernorm.weight"] = sd.pop(p + "post_attention_layernorm.weight") - 1
            sd[p + "input_layernorm.weight"] -= 1
            for n in ("post_attention_layernorm.weight", "post_feedforward_layernorm.weight"):
                sd[p + n] = rng.normal(0.0, 0.2, d).astype(np.float32)
    if family == "gemma2":
        sd["model.norm.weight"] -= 1
        # 1 + w exact in float32, as the file holds it
        for name in [n for n in sd if n.endswith("norm.weight")]:
            sd[name] = (sd[name] + np.float32(1)) - np.float32(1)
        config.update(model_type="gemma2", hidden_act="gelu_pytorch_tanh", attn_logit_softcapping=cap)
    else:
        config["model_type"] = "qwen2" if family == "qwen2" else "llama"
    config["family"] = family
    return sd, config


def write_gguf_family(path, family, **kw):
    """`family_state` written as llama.cpp writes it (all tensors F32): architecture "qwen2",
    "gemma2" or (sinks) "llama"; LLaMA's W_Q, W_K rows interleaved, the others' kept; Gemma's norm
    weights written as 1 + w and its soft cap as metadata; sinks as blk.N.attn_sinks.weight.
    Returns (state dict, config)."""
    import gguf

    sd, config = family_state(family, **kw)
    arch = {"qwen2": "qwen2", "gemma2": "gemma2", "sinks": "llama"}[family]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in [
        ("block_count", config["num_hidden_layers"]),
        ("embedding_length", config["hidden_size"]),
        ("feed_forward_length", config["intermediate_size"]),
        ("attention.head_count", heads),
        ("attention.head_count_kv", kv),
        ("context_length", config["max_position_embeddings"]),
        ("rope.dimension_count", config["hidden_size"] // heads),
    ]:
        w.add_uint32(f"{arch}.{key}", value)
    w.add_float32(f"{arch}.rope.freq_base", config["rope_theta"])
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", config["rms_norm_eps"])
    if family == "gemma2":
        w.add_float32("gemma2.attn_logit_softcapping", config["attn_logit_softcapping"])
    names = {**GGUF_NAMES, **(GEMMA2_NAMES if family == "gemma2" else {})}
    names.update(
        {f"self_attn.{p}_proj.bias": f"attn_{p}.bias" for p in "qkv"},
        **{"self_attn.sinks": "attn_sinks.weight"},
    )
    for name, value in sd.items():
        raw = value + 1 if family == "gemma2" and name.endswith("norm.weight") else value
        if name.startswith("model.layers."):
            i, rest = name.removeprefix("model.layers.").split(".", 1)
            gname = f"blk.{i}.{names[rest]}"
            if arch == "llama" and ("q_proj.weight" in rest or "k_proj.weight" in rest):
                raw = llama_cpp_permute(raw, heads if "q_proj" in rest else kv)
        else:
            gname = {
                "model.embed_tokens.weight": "token_embd.weight",
                "model.norm.weight": "output_norm.weight",
            }[name]
        w.add_tensor(gname, np.ascontiguousarray(raw, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return sd, config


# ------------------------------------------------------------------------------------------- ONNX


def write_onnx(path, sd, config, gemm=False):
    """A BERT state dict (`bert_state`, no prefix, with biases) as an ONNX graph shaped like
    PyTorch's export: MatMul + Add projections, Reshape/Transpose to heads, scores divided by
    sqrt(d_head) plus a mask from attention_mask, Softmax, LayerNormalization, GELU through Erf.
    Every initializer and intermediate name is generated, so nothing can be found by name.
    gemm=True: the attention's four projections as Gemm on the squeezed (N, d) tokens instead, the
    weights stored (out, in) with transB = 1 and alpha = 0.5 (the weights doubled to match)."""
    from onnx import TensorProto, checker, helper, numpy_helper

    names = iter(range(100, 10**6))
    nodes, inits = [], []
    g = {k: v.double().numpy().astype(np.float32) for k, v in sd.items()}
    d, H = config["hidden_size"], config["num_attention_heads"]
    dh, eps = d // H, config["layer_norm_eps"]

    def const(value, dtype=np.float32):
        name = f"onnx::MatMul_{next(names)}"
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(kind, *inputs, **attrs):
        out = f"/{next(names)}_output_0"
        nodes.append(helper.make_node(kind, list(inputs), [out], **attrs))
        return out

    def linear(x, key):
        return op("Add", const(g[key + ".bias"]), op("MatMul", x, const(g[key + ".weight"].T)))

    def projection(x2, x, key):
        if not gemm:
            return linear(x, key)
        W, b = 2.0 * g[key + ".weight"], g[key + ".bias"]
        return op("Gemm", x2, const(W), const(b), transB=1, alpha=0.5)

    def norm(x, key):
        return op(
            "LayerNormalization", x, const(g[key + ".weight"]), const(g[key + ".bias"]), axis=-1, epsilon=eps
        )

    shape = op("Shape", "input_ids")
    n = op("Gather", shape, const(1, np.int64), axis=0)
    positions = op("Range", const(0, np.int64), n, const(1, np.int64))
    zeros = op("ConstantOfShape", shape, value=helper.make_tensor("v", TensorProto.INT64, [1], [0]))
    e = "embeddings."
    x = op("Add", op("Gather", const(g[e + "word_embeddings.weight"]), "input_ids"),
           op("Gather", const(g[e + "token_type_embeddings.weight"]), zeros))  # fmt: skip
    x = norm(
        op("Add", x, op("Gather", const(g[e + "position_embeddings.weight"]), positions)), e + "LayerNorm"
    )
    keep = op("Cast", op("Unsqueeze", "attention_mask", const([1, 2], np.int64)), to=TensorProto.FLOAT)
    mask = op("Mul", op("Sub", const(1.0), keep), const(-1e4))
    heads_shape = const([1, -1, H, dh], np.int64)

    def heads_of(x2, x, key, perm):
        return op("Transpose", op("Reshape", projection(x2, x, key), heads_shape), perm=perm)

    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        x2 = op("Squeeze", x, const([0], np.int64)) if gemm else None
        q = heads_of(x2, x, p + "attention.self.query", [0, 2, 1, 3])
        k = heads_of(x2, x, p + "attention.self.key", [0, 2, 3, 1])
        v = heads_of(x2, x, p + "attention.self.value", [0, 2, 1, 3])
        scores = op("Add", op("Div", op("MatMul", q, k), const(math.sqrt(dh))), mask)
        ctx = op("Transpose", op("MatMul", op("Softmax", scores, axis=-1), v), perm=[0, 2, 1, 3])
        ctx = op("Reshape", ctx, const([-1, d] if gemm else [1, -1, d], np.int64))
        out = projection(ctx, ctx, p + "attention.output.dense")
        x1 = norm(op("Add", out, x), p + "attention.output.LayerNorm")
        h = linear(x1, p + "intermediate.dense")
        gelu = op(
            "Mul",
            op("Mul", h, op("Add", op("Erf", op("Div", h, const(math.sqrt(2.0)))), const(1.0))),
            const(0.5),
        )
        x = norm(op("Add", linear(gelu, p + "output.dense"), x1), p + "output.LayerNorm")
    graph = helper.make_graph(
        nodes,
        "bert",
        [
            helper.make_tensor_value_info(n, TensorProto.INT64, [1, "N"])
            for n in ("input_ids", "attention_mask")
        ],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, "N", d])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    checker.check_model(model)
    path.write_bytes(model.SerializeToString())
    return x
