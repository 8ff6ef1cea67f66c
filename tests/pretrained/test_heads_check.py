"""`attnflow heads` and `attnflow check` give the same verdicts on the same matrices, a heads run
tokenizes its text once and runs the model once, and a head's spectrum from small pieces is right."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from attnflow.cli import app

pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

D, HEADS = 4, 2
DH = D // HEADS
runner = CliRunner()


def _layer(W_Q, W_K, W_V, W_O, i):
    p = f"encoder.layer.{i}.attention."
    return {
        p + "self.query.weight": W_Q,
        p + "self.key.weight": W_K,
        p + "self.value.weight": W_V,
        p + "output.dense.weight": W_O,
    }


def attention_checkpoint(folder):
    """Attention weights only (BERT key names, float64), three layers of two heads:
    layer 0 random (A not symmetric, each head's B singular); layer 1 with a whole-layer B of
    condition number 1e13 (singular for the checker: above 1e12, though of full numerical rank);
    layer 2 with a symmetric whole-layer A = S (V = S B^{-T}) with a gap."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(3)
    U, _ = np.linalg.qr(rng.standard_normal((D, D)))
    near_singular = U @ np.diag([2.0, 1.0, 0.5, 2e-13])
    B = np.diag([2.0, 1.5, 1.0, 0.5])
    S = np.diag([1.0, 0.25, -0.5, -1.0])
    tensors = {
        **_layer(*(rng.standard_normal((D, D)) for _ in range(4)), 0),
        **_layer(np.eye(D), near_singular, rng.standard_normal((D, D)), rng.standard_normal((D, D)), 1),
        **_layer(np.eye(D), B, S @ np.linalg.inv(B).T, np.eye(D), 2),
    }
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "num_attention_heads": HEADS}))
    return tensors


def qkv(tensors, layer, head):
    """(Q, K, V) of the whole layer (head None) or one head, from the raw weights."""
    p = f"encoder.layer.{layer}.attention."
    W_Q, W_K = tensors[p + "self.query.weight"], tensors[p + "self.key.weight"]
    W_V, W_O = tensors[p + "self.value.weight"], tensors[p + "output.dense.weight"]
    if head is None:
        return W_Q, W_K, W_O @ W_V
    rows = slice(head * DH, (head + 1) * DH)
    pad = np.zeros((D - DH, D))
    return np.vstack([W_Q[rows], pad]), np.vstack([W_K[rows], pad]), W_O[:, rows] @ W_V[rows]


def check_json(tmp_path, Q, K, V, beta, x0=None):
    np.savez(tmp_path / "qkv.npz", Q=Q, K=K, V=V)
    args = ["check", str(tmp_path / "qkv.npz"), "--beta", repr(beta), "--json"]
    if x0 is not None:
        np.save(tmp_path / "x0.npy", x0)
        args += ["--x0", str(tmp_path / "x0.npy")]
    result = runner.invoke(app, args)
    data = json.loads(result.stdout)
    assert result.exit_code == (0 if data["ok"] else 1), result.output
    return data


def test_heads_and_check_agree_on_every_head(tmp_path):
    folder = tmp_path / "ckpt"
    tensors = attention_checkpoint(folder)
    res = runner.invoke(app, ["heads", str(folder), "--json"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    rows = 0
    for L in rep["layers"]:
        assert L["beta_eff"] == pytest.approx(D / math.sqrt(DH))  # |h| = sqrt(d): no layer norm, no text
        for head, diag in [(None, L["full"]), *((h["head"], h) for h in L["heads"])]:
            checked = check_json(tmp_path, *qkv(tensors, L["layer"], head), L["beta_eff"])
            assert diag["assumptions"] == checked  # statuses, reasons and numbers, as check reports them
            assert diag["failures"] == [
                f"{k}. {it['reason']}" for k, it in enumerate(checked["items"], 1) if it["status"] == "fails"
            ]
            rows += 1
    assert rows == 3 * (1 + HEADS)
    full = [L["full"]["assumptions"]["items"][0] for L in rep["layers"]]
    assert full[0]["status"] == "fails" and full[0]["short"] == "A not symmetric"
    assert full[1]["status"] == "fails" and "B singular" in full[1]["short"]  # near-singular whole layer
    assert rep["layers"][1]["full"]["cond_B"] > 1e12  # of full numerical rank: its own number, no verdict
    assert full[2]["status"] == "ok"  # a symmetric A with a gap
    for L in rep["layers"]:
        for h in L["heads"]:
            assert "B singular" in h["assumptions"]["items"][0]["short"]  # a head's B has rank d_h < d
    table = runner.invoke(app, ["heads", str(folder), "--wide"])
    assert table.exit_code == 0
    assert "1 FAILS: B singular" in table.stdout and "1 ok; 2 n/c; 3 n/c" in table.stdout
    narrow = runner.invoke(app, ["heads", str(folder)])
    assert narrow.exit_code == 0 and "fails: assumption 1: B singular" in narrow.stdout
    assert narrow.stdout.index("summary:") < narrow.stdout.index("layer 0")  # the summary first


def test_heads_and_check_agree_on_a_token_cloud(tmp_path):
    """With a text, assumption 2 on the cloud entering each layer: check --x0 on the same states."""
    from attnflow import pretrained as P
    from checkpoints import write_checkpoint

    folder = tmp_path / "bert"
    write_checkpoint(folder, d=8, heads=2, layers=2)
    text = "the cat sat on the mat"
    rep = json.loads(runner.invoke(app, ["heads", str(folder), "--json", "--text", text]).stdout)
    states = P.token_states(folder, text).states
    (L1,) = P.load_heads(folder, text, layers=[1])
    L = rep["layers"][1]
    for head, diag in [(None, L["full"]), (1, L["heads"][1])]:
        att = L1.attention if head is None else L1.heads[head].attention
        checked = check_json(tmp_path, att.Q, att.K, att.V, att.beta, x0=states[1])
        assert diag["assumptions"] == checked
        assert checked["items"][1]["status"] in ("ok", "fails")  # checked on the 8 tokens


def _counting(monkeypatch, module, name):
    calls = []
    original = getattr(module, name)

    def wrapped(*args, **kwargs):
        calls.append(name)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapped)
    return calls


def test_report_tokenizes_once_and_runs_the_model_once(tmp_path, monkeypatch):
    import attnflow.pretrained.forward as F
    from attnflow import pretrained as P
    from checkpoints import write_checkpoint

    write_checkpoint(tmp_path, d=8, heads=2, layers=3)
    encodes, passes = _counting(monkeypatch, F, "_encode"), _counting(monkeypatch, F, "_embed")
    rep = P.report(tmp_path, text="the cat sat")
    assert (len(encodes), len(passes)) == (1, 1)
    assert rep["tokens"] == ["[CLS]", "the", "cat", "sat", "[SEP]"] and len(rep["layers"]) == 3


def test_heads_run_tokenizes_once_and_runs_the_model_once(tmp_path, monkeypatch):
    import attnflow.pretrained.forward as F
    from attnflow.experiments import load_config, run_experiment
    from checkpoints import write_checkpoint

    write_checkpoint(tmp_path / "bert", d=8, heads=2, layers=2)
    cfg = load_config(
        "heads-tiny",
        [f"checkpoint={str(tmp_path / 'bert')!r}", "text='the cat sat'", "heads=[1]", "t_max=0.2"],
    )
    encodes, passes = _counting(monkeypatch, F, "_encode"), _counting(monkeypatch, F, "_embed")
    ds = run_experiment(cfg, tmp_path / "run")
    assert (len(encodes), len(passes)) == (1, 1)
    assert list(ds.token_text.values) == ["[CLS]", "the", "cat", "sat", "[SEP]"]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), d=st.integers(4, 12), frac=st.floats(0.1, 0.5))
def test_a_heads_spectrum_from_small_pieces_equals_the_dense_one(seed, d, frac):
    """Q, K padded with zero rows (one head): spectrum and singular values of B from r x r pieces."""
    from attnflow.attention import Attention, spectrum_of

    rng = np.random.default_rng(seed)
    r = max(1, int(frac * d))
    pad = np.zeros((d - r, d))
    att = Attention(
        np.vstack([rng.standard_normal((r, d)), pad]),
        np.vstack([rng.standard_normal((r, d)), pad]),
        rng.standard_normal((d, d)),
    )
    A = np.asarray(att.A)
    scale = float(np.linalg.norm(A))
    dense = spectrum_of(A, np.asarray(att.V))
    low = att.spectrum()
    np.testing.assert_allclose(
        np.sort_complex(low.eigenvalues), np.sort_complex(dense.eigenvalues), atol=1e-9 * scale
    )
    assert low.multiplicity == dense.multiplicity
    assert low.mu1 == pytest.approx(dense.mu1, abs=1e-9 * scale) and low.gap == pytest.approx(
        dense.gap, abs=1e-9 * scale
    )
    U = np.asarray(low.eigenvectors)
    np.testing.assert_allclose(A @ U, U * low.eigenvalues, atol=1e-8 * scale)  # eigenpairs, zeros included
    if np.isfinite(dense.top_projector).all():
        np.testing.assert_allclose(low.top_projector, dense.top_projector, atol=1e-7)
    s = np.linalg.svd(att.B, compute_uv=False)
    np.testing.assert_allclose(att.singular_values_B, s, atol=1e-12 * s[0])
    assert np.all(att.singular_values_B[r:] == 0) and att.cond_B == math.inf
