"""ONNX graphs of post-layer-norm (BERT-style) encoders: weights found through the graph.

Initializer names of an exported graph may be generated (``onnx::MatMul_470``), so nothing is found
by name.  Each attention is found from its ``Softmax``: back from it to the MatMul of the scores
(through the mask ``Add`` and the scale ``Div``/``Mul``), from its two inputs back to the query and
key projections (``MatMul`` or ``Gemm`` with a constant weight, a constant bias ``Add``, reshapes
and transposes between), from the MatMul that applies the softmax to the value projection, and
forward to the output projection.  The layer norms (``LayerNormalization``) and the feed-forward
weights are found from there, and the embedding tables from the ``Gather`` ops before the first
layer norm.  The result is a BERT state dict (`Found`) with the scale of the scores stated: when
the graph's scale is not 1/sqrt(d_head) the difference is folded into W_Q and b_Q.
"""

from __future__ import annotations

import math
from collections import deque
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from .common import CheckpointError, Found, require, tokenizer_next_to

if TYPE_CHECKING:
    from onnx import GraphProto, NodeProto

__all__ = ["read"]

PASS_THROUGH = {"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Cast", "Dropout"}
ACTIVATIONS = {"Erf": "gelu", "Tanh": "gelu_new", "Relu": "relu"}


class _Graph:
    """Producers, consumers and constant values (initializers and Constant nodes) of a graph."""

    def __init__(self, graph: GraphProto, numpy_helper: ModuleType) -> None:
        self.inputs = {i.name for i in graph.input}
        self.const: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self.producer: dict[str, NodeProto] = {}
        self.consumers: dict[str, list[NodeProto]] = {}
        self.nodes = list(graph.node)
        for node in self.nodes:
            if node.op_type == "Constant":
                for a in node.attribute:
                    if a.name == "value":
                        self.const[node.output[0]] = numpy_helper.to_array(a.t)
            for out in node.output:
                self.producer[out] = node
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)

    def attr(self, node: NodeProto, name: str, default: Any = None) -> Any:
        for a in node.attribute:
            if a.name == name:
                from onnx import helper

                return helper.get_attribute_value(a)
        return default

    def split(self, node: NodeProto) -> tuple[list[np.ndarray], list[str]]:
        """A node's constant inputs and its other inputs."""
        consts = [self.const[n] for n in node.input if n in self.const]
        return consts, [n for n in node.input if n and n not in self.const]

    def only_consumer(self, name: str, skip: set[str]) -> NodeProto | None:
        """Follow `name` forward through ops in `skip` to the first other consumer (the Shape ops
        of dynamic reshapes aside)."""
        while True:
            nodes = [n for n in self.consumers.get(name, []) if n.op_type != "Shape"]
            if len(nodes) != 1:
                return None
            if nodes[0].op_type not in skip:
                return nodes[0]
            name = nodes[0].output[0]


def _error(path: Path, what: str) -> CheckpointError:
    return CheckpointError(f"ONNX checkpoint {path}: {what}")


def _projection(g: _Graph, name: str, path: Path) -> dict[str, Any]:
    """Back from an activation to the projection making it: W (out, in), b, scale and input x, with
    activation = scale * (W x + b) (the invariant kept at each step back)."""
    b: np.ndarray | None = None
    scale = 1.0
    for _ in range(32):
        node = g.producer.get(name)
        if node is None:
            break
        consts, others = g.split(node)
        op = node.op_type
        if op in PASS_THROUGH:
            name = node.input[0]
        elif op == "Add" and len(consts) == 1 and consts[0].ndim == 1 and len(others) == 1:
            b = consts[0].astype(np.float64) + (0.0 if b is None else b)
            name = others[0]
        elif op in ("Mul", "Div") and len(consts) == 1 and consts[0].size == 1 and len(others) == 1:
            c = float(consts[0].reshape(()))
            k = c if op == "Mul" else 1.0 / c
            scale, b = scale * k, None if b is None else b / k
            name = others[0]
        elif op == "MatMul" and node.input[1] in g.const and len(others) == 1:
            W = g.const[node.input[1]].astype(np.float64).T
            return {"W": W, "b": b, "scale": scale, "x": node.input[0]}
        elif op == "Gemm" and node.input[1] in g.const:
            W = g.const[node.input[1]].astype(np.float64)
            W = W if g.attr(node, "transB", 0) else W.T
            alpha = float(g.attr(node, "alpha", 1.0))
            if len(node.input) > 2 and node.input[2] in g.const:
                C = g.const[node.input[2]].astype(np.float64) * float(g.attr(node, "beta", 1.0))
                b = C if b is None else C + b
            scale, b = scale * alpha, None if b is None else b / alpha
            return {"W": W, "b": b, "scale": scale, "x": node.input[0]}
        else:
            break
    raise _error(path, f"cannot follow {name!r} back to a MatMul or Gemm with constant weights")


def _source(g: _Graph, name: str) -> str:
    """The tensor `name` comes from, back through reshapes (a Gemm reads the tokens squeezed)."""
    while (node := g.producer.get(name)) is not None and node.op_type in PASS_THROUGH:
        name = node.input[0]
    return name


def _scores(g: _Graph, name: str, depth: int = 0) -> tuple[NodeProto, float] | None:
    """The MatMul of two activations (q k^T) feeding `name`, and the constant scale on the way."""
    node = g.producer.get(name)
    if node is None or depth > 12:
        return None
    consts, others = g.split(node)
    if node.op_type == "MatMul" and not consts:
        return node, 1.0
    if node.op_type in ("Mul", "Div") and len(consts) == 1 and consts[0].size == 1:
        c = float(consts[0].reshape(()))
        found = _scores(g, others[0], depth + 1) if others else None
        return None if found is None else (found[0], found[1] * (c if node.op_type == "Mul" else 1 / c))
    if node.op_type in ("Add", "Where", "Sub", *PASS_THROUGH):
        for n in others:
            found = _scores(g, n, depth + 1)
            if found is not None:
                return found
    return None


def _heads(g: _Graph, q_name: str, d: int, scale: float) -> int:
    """Heads from the query's Reshape (its constant shape ... H, d_head), else from the scale."""
    name = q_name
    for _ in range(8):
        node = g.producer.get(name)
        if node is None:
            break
        if node.op_type == "Reshape":
            shape = g.const.get(node.input[1])
            if shape is None and node.input[1] in g.producer:
                cat = g.producer[node.input[1]]
                dims = [g.const.get(n) for n in cat.input] if cat.op_type == "Concat" else []
                if len(dims) >= 2 and dims[-1] is not None and dims[-2] is not None:
                    shape = np.concatenate([np.ravel(dims[-2]), np.ravel(dims[-1])])
            if shape is not None and len(shape) >= 2 and shape[-1] > 0 and shape[-2] > 0:
                return int(shape[-2])
        name = node.input[0]
    dh = round(1.0 / scale**2)
    if dh > 0 and d % dh == 0 and math.isclose(scale, 1 / math.sqrt(dh), rel_tol=1e-4):
        return d // dh
    raise CheckpointError(f"cannot tell the number of heads (no constant reshape; score scale {scale:g})")


def _scaled(proj: dict[str, Any], factor: float = 1.0) -> tuple[np.ndarray, np.ndarray | None]:
    """(W, b) of a projection with its scale (and `factor`) folded in: activation = W x + b."""
    c = proj["scale"] * factor
    return c * proj["W"], None if proj["b"] is None else c * proj["b"]


def _output(g: _Graph, apply: NodeProto, softmax: NodeProto, path: Path) -> tuple[dict[str, Any], str]:
    """The output projection after the attention's value MatMul, and the tensor it ends in."""
    out = g.only_consumer(apply.output[0], PASS_THROUGH)
    if out is None or out.op_type not in ("MatMul", "Gemm") or out.input[1] not in g.const:
        raise _error(path, f"no output projection after Softmax {softmax.name!r}")
    after = out.output[0]
    bias = g.only_consumer(after, set())
    if bias is not None and bias.op_type == "Add" and any(c.ndim == 1 for c in g.split(bias)[0]):
        after = bias.output[0]
    return _projection(g, after, path), after


def _attention(g: _Graph, softmax: NodeProto, path: Path) -> dict[str, Any]:
    """W_Q, b_Q, ..., W_O, b_O (torch layout), the heads and the input x of one attention."""
    found = _scores(g, softmax.input[0])
    if found is None:
        raise _error(path, f"Softmax {softmax.name!r} is not fed by a MatMul of queries and keys")
    mm, scale = found
    q, k = _projection(g, mm.input[0], path), _projection(g, mm.input[1], path)
    apply = g.only_consumer(softmax.output[0], PASS_THROUGH)
    if apply is None or apply.op_type != "MatMul":
        raise _error(path, f"the output of Softmax {softmax.name!r} is not applied to values by a MatMul")
    v = _projection(g, apply.input[1], path)
    if not _source(g, q["x"]) == _source(g, k["x"]) == _source(g, v["x"]):
        raise _error(path, "queries, keys and values come from different tensors (not self-attention)")
    o, after = _output(g, apply, softmax, path)
    d = q["W"].shape[1]
    heads = _heads(g, mm.input[0], d, scale * q["scale"] * k["scale"])
    ratio = scale * math.sqrt(d // heads)  # logits = ratio * (W_Q x + b_Q)(W_K x + b_K) / sqrt(d_head)
    ratio = 1.0 if math.isclose(ratio, 1.0, rel_tol=1e-6) else ratio  # a float32 sqrt(d_head) is exact enough
    w = dict(zip(("W_Q", "b_Q"), _scaled(q, ratio), strict=True))
    for name, proj in (("K", k), ("V", v), ("O", o)):
        w["W_" + name], w["b_" + name] = _scaled(proj)
    return {"w": w, "heads": heads, "x": _source(g, q["x"]), "after": after, "folded": ratio != 1.0}


def _layer_norm(g: _Graph, node: NodeProto | None, path: Path) -> tuple[np.ndarray, np.ndarray | None, float]:
    if node is None or node.op_type != "LayerNormalization" or node.input[1] not in g.const:
        raise _error(path, "only post-layer-norm (BERT-style) graphs with LayerNormalization ops are read")
    b = g.const.get(node.input[2]) if len(node.input) > 2 else None
    eps = float(g.attr(node, "epsilon", 1e-5))
    return g.const[node.input[1]].astype(np.float64), None if b is None else b.astype(np.float64), eps


def _first_after(g: _Graph, name: str, op: str) -> NodeProto | None:
    """The first node of type `op` downstream of `name` (breadth first)."""
    queue, seen = deque([name]), {name}
    while queue:
        for node in g.consumers.get(queue.popleft(), []):
            if node.op_type == op:
                return node
            for out in node.output:
                if out not in seen:
                    seen.add(out)
                    queue.append(out)
    return None


def _ffn(g: _Graph, ln1_out: str, ln2: NodeProto, path: Path) -> dict[str, Any]:
    """W_1, b_1, W_2, b_2 and the activation between a layer's two layer norms."""
    add = g.producer.get(ln2.input[0])
    branch = [n for n in (add.input if add is not None else []) if n != ln1_out]
    if add is None or add.op_type != "Add" or len(branch) != 1:
        raise _error(path, "the feed-forward block is not a residual Add before the second layer norm")
    second = _projection(g, branch[0], path)
    ops: set[str] = set()
    queue, first = deque([second["x"]]), None
    while queue and first is None:
        node = g.producer.get(queue.popleft())
        if node is None:
            continue
        ops.add(node.op_type)
        if node.op_type in ("MatMul", "Gemm") and node.input[1] in g.const and node.input[0] == ln1_out:
            first = node
        queue.extend(n for n in node.input if n not in g.const)
    if first is None:
        raise _error(path, "no first feed-forward projection found after the attention's layer norm")
    up = _projection(g, first.output[0], path)
    b1 = g.only_consumer(first.output[0], set())
    consts = g.split(b1)[0] if b1 is not None and b1.op_type == "Add" else []
    act = next((a for op, a in ACTIVATIONS.items() if op in ops), "gelu")
    return {"W_1": up["W"], "b_1": consts[0].astype(np.float64) if consts else None,
            "W_2": second["W"], "b_2": second["b"], "act": act}  # fmt: skip


def _embeddings(g: _Graph, ln: NodeProto, path: Path) -> dict[str, np.ndarray]:
    """The word, position and token-type tables: Gathers of constants summed before the layer norm."""
    gathers, queue = [], deque([ln.input[0]])
    while queue:
        node = g.producer.get(queue.popleft())
        if node is None:
            continue
        if node.op_type == "Gather" and node.input[0] in g.const:
            gathers.append(node)
        elif node.op_type == "Add":
            queue.extend(node.input)
    word = [n for n in gathers if n.input[1] in g.inputs and "type" not in n.input[1]]
    if len(word) != 1:
        raise _error(path, "no word-embedding Gather indexed by the token ids before the first layer norm")
    rest = sorted((n for n in gathers if n is not word[0]), key=lambda n: -g.const[n.input[0]].shape[0])
    tables = {"word_embeddings": g.const[word[0].input[0]]}
    if rest:
        tables["position_embeddings"] = g.const[rest[0].input[0]]
    if len(rest) > 1:
        tables["token_type_embeddings"] = g.const[rest[1].input[0]]
    return {f"embeddings.{k}.weight": v.astype(np.float64) for k, v in tables.items()}


def _bert(g: _Graph, path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any], bool]:
    softmaxes = [n for n in g.nodes if n.op_type == "Softmax"]
    if not softmaxes:
        raise _error(path, "the graph has no Softmax: no attention to read")
    tensors: dict[str, np.ndarray] = {}
    config: dict[str, Any] = {"model_type": "bert", "num_hidden_layers": len(softmaxes)}
    folded = False
    emb_ln = None
    for i, sm in enumerate(softmaxes):
        att = _attention(g, sm, path)
        if i == 0:
            emb_ln = g.producer.get(att["x"])
            tensors.update(_embeddings(g, emb_ln, path) if emb_ln is not None else {})
            gamma, beta, eps = _layer_norm(g, emb_ln, path)
            tensors["embeddings.LayerNorm.weight"] = gamma
            if beta is not None:
                tensors["embeddings.LayerNorm.bias"] = beta
            config["layer_norm_eps"] = eps
        p = f"encoder.layer.{i}."
        names = {"W_Q": "attention.self.query", "W_K": "attention.self.key", "W_V": "attention.self.value",
                 "W_O": "attention.output.dense"}  # fmt: skip
        for key, stem in names.items():
            tensors[f"{p}{stem}.weight"] = att["w"][key]
            if att["w"]["b" + key[1:]] is not None:
                tensors[f"{p}{stem}.bias"] = att["w"]["b" + key[1:]]
        ln1 = _first_after(g, att["after"], "LayerNormalization")
        ln2 = _first_after(g, ln1.output[0], "LayerNormalization") if ln1 is not None else None
        if ln1 is None or ln2 is None:  # (no ln1: no ln2)
            raise _error(
                path, f"layer {i} has no two layer norms after its attention (post-LN BERT expected)"
            )
        ffn = _ffn(g, ln1.output[0], ln2, path)
        for stem, node in (("attention.output.LayerNorm", ln1), ("output.LayerNorm", ln2)):
            gamma, beta, _ = _layer_norm(g, node, path)
            tensors[f"{p}{stem}.weight"] = gamma
            if beta is not None:
                tensors[f"{p}{stem}.bias"] = beta
        for key, stem in (("1", "intermediate.dense"), ("2", "output.dense")):
            tensors[f"{p}{stem}.weight"] = ffn["W_" + key]
            if ffn["b_" + key] is not None:
                tensors[f"{p}{stem}.bias"] = ffn["b_" + key]
        config.update(num_attention_heads=att["heads"], hidden_size=att["w"]["W_Q"].shape[1],
                      hidden_act=ffn["act"], intermediate_size=ffn["W_1"].shape[0])  # fmt: skip
        folded = folded or att["folded"]
    return tensors, config, folded


def check_initializers(graph: GraphProto, path: Path) -> None:
    """CheckpointError naming the first initializer whose declared shape is not the number of values
    it holds (in its raw bytes, external data included once loaded, or its typed field)."""
    from onnx import helper

    for t in graph.initializer:
        if t.data_type in (0, 8):  # undefined, strings: not weights
            continue
        declared = math.prod(t.dims)
        if t.raw_data:
            held = len(t.raw_data) // helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        else:
            fields = (t.float_data, t.double_data, t.int32_data, t.int64_data, t.uint64_data)
            held = max(len(f) for f in fields)
        if held != declared or any(n < 0 for n in t.dims):
            raise _error(path, f"initializer {t.name} declares shape {tuple(t.dims)} but holds {held} values")


def read(path: Path) -> Found:
    """A BERT state dict, config and notes from an ONNX graph (see the module's doc)."""
    onnx = require("onnx", f"reading {path.name}")
    from onnx import numpy_helper

    try:
        model = onnx.load(str(path))
    except Exception as e:
        raise CheckpointError(f"checkpoint {path} is not a readable ONNX file: {e}") from None
    check_initializers(model.graph, path)
    tensors, config, folded = _bert(_Graph(model.graph, numpy_helper), path)
    notes = ["weights found by following the graph from each Softmax (initializer names not used)"]
    if folded:
        notes.append("the graph's score scale differs from 1/sqrt(d_head): the ratio is folded into W_Q, b_Q")
    return Found(tensors, config, tokenizer_next_to(path), "onnx", tuple(notes))
