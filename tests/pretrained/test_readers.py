"""Checkpoint readers by format: GGUF (quantised, llama.cpp's row order) and ONNX (weights found
through the graph), written by the tests themselves; a LLaMA-style model (causal, pre-RMSNorm,
rotary positions, grouped key/value heads) checked against a torch reference; beta fitted from
the logits against an explicit least-squares solve."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from attnflow import pretrained as P
from attnflow.cli import app
from attnflow.pretrained.beta import fit_beta, unit_scores
from attnflow.pretrained.forward import head_inputs
from checkpoints import (
    DEQUANTIZE,
    bert_state,
    llama_state,
    quantize_q4_1,
    quantize_q8_0,
    write_gguf,
    write_onnx,
)

torch = pytest.importorskip("torch")
runner = CliRunner()


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    ref, config = write_gguf(path)
    return path, ref, config


@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory):
    pytest.importorskip("onnx")
    path = tmp_path_factory.mktemp("onnx") / "bert.onnx"
    sd, config = bert_state(d=16, heads=4, layers=2, seed=4)
    write_onnx(path, sd, config)
    return path, sd, config


# ------------------------------------------------------------------------------- torch reference


def torch_llama_states(sd, config, ids):
    """A LLaMA forward in torch float64 written from the Hugging Face formulas (rotate_half rotary
    positions, repeat_interleave for grouped key/value heads, causal softmax attention, SwiGLU)."""
    g = {k: torch.tensor(np.asarray(v), dtype=torch.float64) for k, v in sd.items()}
    d, H, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    dh, eps, N = d // H, config["rms_norm_eps"], len(ids)
    inv = 1.0 / config["rope_theta"] ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh)
    ang = torch.outer(torch.arange(N, dtype=torch.float64), inv)
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

    def rot(x):  # rotate_half
        return torch.cat([-x[..., dh // 2 :], x[..., : dh // 2]], -1)

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    x = g["model.embed_tokens.weight"][torch.tensor(ids)]
    out = [x.numpy()]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, g[p + "input_layernorm.weight"])
        q = (h @ g[p + "self_attn.q_proj.weight"].T).view(N, H, dh).transpose(0, 1)
        k = (h @ g[p + "self_attn.k_proj.weight"].T).view(N, kv, dh).transpose(0, 1)
        v = (h @ g[p + "self_attn.v_proj.weight"].T).view(N, kv, dh).transpose(0, 1)
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        k, v = k.repeat_interleave(H // kv, 0), v.repeat_interleave(H // kv, 0)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + a.transpose(0, 1).reshape(N, d) @ g[p + "self_attn.o_proj.weight"].T
        h = rms(x, g[p + "post_attention_layernorm.weight"])
        gate, up = h @ g[p + "mlp.gate_proj.weight"].T, h @ g[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ g[p + "mlp.down_proj.weight"].T
        out.append(x.numpy())
    return np.stack(out)


def torch_llama_attention(sd, config, i, H_in):
    """The attention sublayer of layer i on its normed inputs (N, d), torch float64."""
    g = {k: torch.tensor(np.asarray(v), dtype=torch.float64) for k, v in sd.items()}
    d, H, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    dh, N = d // H, H_in.shape[0]
    inv = 1.0 / config["rope_theta"] ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh)
    ang = torch.outer(torch.arange(N, dtype=torch.float64), inv)
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    p = f"model.layers.{i}."
    h = torch.tensor(H_in) * g[p + "input_layernorm.weight"]
    q = (h @ g[p + "self_attn.q_proj.weight"].T).view(N, H, dh).transpose(0, 1)
    k = (h @ g[p + "self_attn.k_proj.weight"].T).view(N, kv, dh).transpose(0, 1)
    v = (h @ g[p + "self_attn.v_proj.weight"].T).view(N, kv, dh).transpose(0, 1)
    rot = lambda x: torch.cat([-x[..., dh // 2 :], x[..., : dh // 2]], -1)  # noqa: E731
    q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
    k, v = k.repeat_interleave(H // kv, 0), v.repeat_interleave(H // kv, 0)
    a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return (a.transpose(0, 1).reshape(N, d) @ g[p + "self_attn.o_proj.weight"].T).numpy()


def write_llama_safetensors(folder, **kw):
    pytest.importorskip("safetensors")
    from safetensors.numpy import save_file

    sd, config = llama_state(**kw)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(sd, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    return sd, config


# ------------------------------------------------------------------------------------------ GGUF


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_1"])
def test_our_dequantisers_agree_with_gguf_and_bound_the_error(kind):
    gguf = pytest.importorskip("gguf")
    W = np.random.default_rng(1).standard_normal((6, 96)).astype(np.float32)
    raw = {"Q8_0": quantize_q8_0, "Q4_1": quantize_q4_1}[kind](W)
    ours = DEQUANTIZE[kind](raw)
    theirs = gguf.quants.dequantize(raw, getattr(gguf.GGMLQuantizationType, kind))
    np.testing.assert_array_equal(ours, theirs)
    step = (
        np.abs(W).reshape(6, -1, 32).max(-1) / 127
        if kind == "Q8_0"
        else np.ptp(W.reshape(6, -1, 32), -1) / 15
    )
    assert np.all(
        np.abs(ours - W).reshape(6, -1, 32).max(-1) <= 0.51 * step + 1e-3
    )  # half a step, f16 scales


def test_gguf_reader_dequantises_and_restores_the_row_order(tiny_gguf):
    path, ref, _ = tiny_gguf
    ck = P.open_checkpoint(path)
    assert (ck.layout, ck.fmt, ck.num_layers, ck.d, ck.d_head) == ("llama", "gguf", 2, 64, 16)
    assert ck.num_heads == [4, 4] and ck.num_kv_heads == [2, 2]
    for key, value in ref.items():
        np.testing.assert_array_equal(ck.array(key), value, err_msg=key)
    assert any("quantised" in n and "Q4_1" in n for n in ck.notes)
    assert P.tokenize(ck, "the cat") == ["t", "he", "Ġ", "c", "a", "t"]  # the file's own BPE


def test_llama_forward_matches_torch(tiny_gguf):
    path, ref, config = tiny_gguf
    ids = [5, 70, 3, 257, 100, 12, 9]
    S = P.token_states(path, ids=ids).states
    np.testing.assert_allclose(S, torch_llama_states(ref, config, ids), atol=1e-9, rtol=1e-9)


def test_llama_heads_reproduce_the_attention_sublayer(tmp_path):
    """Grouped key/value heads (kv = h // 2), rotary positions, causal mask, RMSNorm weight folded."""
    sd, config = write_llama_safetensors(tmp_path, seed=3)
    ck = P.open_checkpoint(tmp_path)
    X = np.random.default_rng(2).standard_normal((9, 64)) * 3
    for L in P.load_heads(ck):
        assert [h.kv_head for h in L.heads] == [0, 0, 1, 1] and L.causal and L.input_norm.folded
        H_in = head_inputs(ck, L.layer, X)
        np.testing.assert_allclose(np.linalg.norm(H_in, axis=1), 8.0, rtol=1e-4)  # |x / rms(x)| = sqrt(d)
        ref = torch_llama_attention(sd, config, L.layer, H_in)
        np.testing.assert_allclose(P.attention_output(L, H_in), ref, atol=1e-9)
        p = f"model.layers.{L.layer}."
        g = sd[p + "input_layernorm.weight"].astype(np.float64)
        Wq, Wk = sd[p + "self_attn.q_proj.weight"] * g, sd[p + "self_attn.k_proj.weight"] * g
        h = L.heads[3]
        np.testing.assert_allclose(h.attention.B, Wq[48:64].T @ Wk[16:32], atol=1e-12)  # kv head 1
        assert h.beta == pytest.approx(64 / math.sqrt(16))


def test_rotary_offsets_give_the_model_logits(tmp_path):
    write_llama_safetensors(tmp_path, seed=5)
    ck = P.open_checkpoint(tmp_path)
    (L,) = P.load_heads(ck, layers=[1])
    rope = L.rope
    assert rope is not None and (rope.base, rope.dim, rope.d_head) == (10000.0, 16, 16)
    for p, q in [(0, 3), (5, 2), (7, 7)]:
        np.testing.assert_allclose(rope.matrix(p).T @ rope.matrix(q), rope.matrix(q - p), atol=1e-12)
    X = np.random.default_rng(6).standard_normal((6, 64))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    h = L.heads[2]
    S = unit_scores(h, X)
    for i, j in [(0, 0), (3, 1), (5, 0), (4, 4)]:
        assert X[i] @ h.B_at(i - j) @ X[j] == pytest.approx(S[i, j], abs=1e-12)
        assert X[i] @ h.attention_at(i - j).B @ X[j] == pytest.approx(S[i, j], abs=1e-12)
    # the model's own logits (norm, rotary positions, 1/sqrt(d_head)) are beta_eff times the unit score
    logits = P.attention_logits(ck, 1, X * 5.0)
    fit = fit_beta(logits[2], S)
    assert fit.beta == pytest.approx(h.beta, rel=1e-4) and fit.r2 == pytest.approx(1.0, abs=1e-8)
    assert fit.pairs == 6 * 7 // 2 - 1 and fit.queries == 5  # causal pairs; the first query has one key


def test_beta_fit_is_least_squares_with_a_fixed_effect_per_query():
    """Against an explicit dummy-variable regression solved by lstsq (estimate and standard error)."""
    rng = np.random.default_rng(7)
    N, beta = 12, 3.5
    S = rng.standard_normal((N, N))
    logits = beta * S + rng.standard_normal((N, 1)) * 4 + 0.3 * rng.standard_normal((N, N))
    logits = np.where(np.tril(np.ones((N, N), bool)), logits, -np.inf)
    fit = fit_beta(logits, S)
    rows = [(i, j) for i in range(1, N) for j in range(i + 1)]  # query 0 has one key: dropped
    Xd = np.zeros((len(rows), N))
    for r, (i, j) in enumerate(rows):
        Xd[r, 0], Xd[r, i] = S[i, j], 1.0
    y = np.array([logits[i, j] for i, j in rows])
    coef, rss, *_ = np.linalg.lstsq(Xd, y, rcond=None)
    sigma2 = rss[0] / (len(rows) - N)
    se = math.sqrt(sigma2 * np.linalg.inv(Xd.T @ Xd)[0, 0])
    assert fit.beta == pytest.approx(coef[0], rel=1e-10) and fit.se == pytest.approx(se, rel=1e-8)
    assert abs(fit.beta - beta) < 4 * fit.se and fit.pairs == len(rows) and fit.queries == N - 1


# ------------------------------------------------------------------------------------------ ONNX


def test_onnx_reader_finds_the_weights_through_the_graph(tiny_onnx):
    path, sd, _ = tiny_onnx
    ck = P.open_checkpoint(path)
    assert (ck.layout, ck.fmt, ck.num_layers, ck.num_heads, ck.d) == ("bert", "onnx", 2, [4, 4], 16)
    for key, value in sd.items():
        np.testing.assert_array_equal(ck.array(key), value.numpy().astype(np.float64), err_msg=key)
    assert any("Softmax" in n for n in ck.notes)


def test_onnx_reader_reads_gemm_projections_with_their_scale(tmp_path):
    pytest.importorskip("onnx")
    import onnx
    from onnx.reference import ReferenceEvaluator

    sd, config = bert_state(d=16, heads=4, layers=2, seed=8)
    write_onnx(tmp_path / "gemm.onnx", sd, config, gemm=True)
    ck = P.open_checkpoint(tmp_path / "gemm.onnx")
    for key, value in sd.items():  # 0.5 * (2 W) x + b: the reader folds alpha back
        np.testing.assert_allclose(ck.array(key), value.numpy(), rtol=1e-7, atol=0, err_msg=key)
    ids = np.array([[2, 5, 8, 3]])
    (out,) = ReferenceEvaluator(onnx.load(str(tmp_path / "gemm.onnx"))).run(
        None, {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    )
    np.testing.assert_allclose(P.token_states(ck, ids=ids[0]).states[-1], out[0], atol=1e-5)


def test_onnx_forward_agrees_with_the_graph_run_by_onnx(tiny_onnx):
    import onnx
    from onnx.reference import ReferenceEvaluator

    path, _, _ = tiny_onnx
    ids = np.array([[2, 7, 4, 9, 3]])
    (out,) = ReferenceEvaluator(onnx.load(str(path))).run(
        None, {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    )
    S = P.token_states(path, ids=ids[0]).states
    np.testing.assert_allclose(S[-1], out[0], atol=1e-5)


def test_onnx_without_attention_is_one_line(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    onnx.save(helper.make_model(graph), str(tmp_path / "relu.onnx"))
    res = runner.invoke(app, ["heads", str(tmp_path / "relu.onnx")])
    assert res.exit_code == 2 and "no Softmax" in res.stderr and len(res.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------------- the command


@pytest.mark.parametrize("package", ["gguf", "tokenizers"])
def test_without_the_extra_one_line_and_exit_2(tiny_gguf, monkeypatch, package):
    path = tiny_gguf[0]
    monkeypatch.setitem(sys.modules, package, None)  # import fails as if not installed
    args = ["heads", str(path)] + (["--text", "the cat"] if package == "tokenizers" else [])
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and 'pip install "attnflow[pretrained]"' in err and package in err


def test_without_safetensors_one_line(tmp_path, monkeypatch):
    pytest.importorskip("safetensors")
    write_llama_safetensors(tmp_path)
    monkeypatch.setitem(sys.modules, "safetensors", None)
    res = runner.invoke(app, ["heads", str(tmp_path)])
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1
    assert 'pip install "attnflow[pretrained]"' in res.stderr


def test_tables_fit_100_columns_summary_first_and_json_has_every_head(tiny_gguf):
    path = tiny_gguf[0]
    res = runner.invoke(app, ["heads", str(path), "--text", "the cat sat"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert res.stdout.index("summary:") < res.stdout.index("layer 0") and "quantised" in res.stdout
    assert "kv" in lines[next(i for i, line in enumerate(lines) if line.startswith("head"))]
    wide = runner.invoke(app, ["heads", str(path), "--text", "the cat sat", "--wide"])
    assert wide.exit_code == 0 and "assumptions (as attnflow check)" in wide.stdout
    rep = json.loads(runner.invoke(app, ["heads", str(path), "--ids", "5,70,3,9", "--json"]).stdout)
    assert rep["summary"]["heads"] == 8 and rep["num_kv_heads"] == 2 and rep["kv_head_rule"] == "h // 2"
    for L in rep["layers"]:
        assert [h["kv_head"] for h in L["heads"]] == [0, 0, 1, 1]
        for h in L["heads"]:
            assert h["beta_fit"]["beta"] == pytest.approx(h["beta"], rel=1e-4)
            assert h["offsets"]["offsets"] == [0, 1, 4, 16, 64] and h["offsets"]["rank_B"] == [16, 16]
    bad = runner.invoke(app, ["heads", str(path), "--ids", "1,x"])
    assert bad.exit_code == 2 and "--ids" in bad.stderr
    out_of_range = runner.invoke(app, ["heads", str(path), "--ids", "5,999"])
    assert out_of_range.exit_code == 2 and "ids must be token ids" in out_of_range.stderr


@settings(max_examples=12, deadline=None)
@given(
    kv=st.sampled_from([1, 2, 3]),
    group=st.sampled_from([1, 2, 3]),
    half=st.integers(1, 4),
    n=st.integers(1, 7),
    seed=st.integers(0, 10_000),
)
def test_grouped_rotary_heads_reproduce_torch_for_any_shape(kv, group, half, n, seed):
    """H = kv * group query heads of width 2 * half on kv key/value heads, any sequence length."""
    import tempfile
    from pathlib import Path

    H, dh = kv * group, 2 * half
    with tempfile.TemporaryDirectory() as tmp:
        sd, config = write_llama_safetensors(
            Path(tmp), d=H * dh, heads=H, kv_heads=kv, layers=1, ffn=8, vocab=11, seed=seed
        )
        ck = P.open_checkpoint(tmp)
        (L,) = P.load_heads(ck)
        assert [h.kv_head for h in L.heads] == [h // group for h in range(H)]
        H_in = head_inputs(ck, 0, np.random.default_rng(seed).standard_normal((n, H * dh)))
        np.testing.assert_allclose(
            P.attention_output(L, H_in), torch_llama_attention(sd, config, 0, H_in), atol=1e-9
        )


def test_rotary_heads_with_biases_say_what_is_not_represented(tmp_path):
    """Qwen2-style query/key biases with rotary positions: the report names the missing terms."""
    from safetensors.numpy import save_file

    sd, config = llama_state(d=16, heads=2, kv_heads=1, layers=1, ffn=8, vocab=11)
    sd["model.layers.0.self_attn.q_proj.bias"] = np.ones(16, dtype=np.float32)
    sd["model.layers.0.self_attn.k_proj.bias"] = np.ones(8, dtype=np.float32)
    save_file(sd, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(config))
    rep = P.report(tmp_path, offsets=())
    assert any("biases with rotary positions" in n for n in rep["notes"])
    write_llama_safetensors(tmp_path / "plain", d=16, heads=2, kv_heads=1, layers=1, ffn=8, vocab=11)
    assert not P.report(tmp_path / "plain", offsets=())["notes"]
