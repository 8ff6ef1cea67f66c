"""Decoder families read from GGUF files the tests write with known weights: Qwen2 (q/k/v biases),
Gemma-2 (norms after each sublayer, logit soft-capping, tanh-GELU gate, scaled embeddings) and a
model with attention sinks; their forward passes and heads against a dense NumPy reference written
here from the families' formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("gguf")

from attnflow import pretrained as P
from attnflow.pretrained.beta import bias_logits, fit_beta, unit_scores
from attnflow.pretrained.forward import head_inputs
from checkpoints import write_gguf_family

FAMILIES = ("qwen2", "gemma2", "sinks")
IDS = [3, 17, 5, 30, 8, 8, 21, 1, 39]


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / f"{request.param}.gguf"
    sd, config = write_gguf_family(path, request.param)
    return path, {k: v.astype(np.float64) for k, v in sd.items()}, config


def rms(x, g, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def rotate_half(x, pos, base):
    """Hugging Face's rotary positions on (N, d_h) at positions pos."""
    half = x.shape[-1] // 2
    ang = pos[:, None] * base ** (-np.arange(half) * 2.0 / x.shape[-1])
    a, b = x[:, :half], x[:, half:]
    return np.concatenate([a * np.cos(ang) - b * np.sin(ang), b * np.cos(ang) + a * np.sin(ang)], axis=1)


def dense_attention(sd, config, i, h_in):
    """The attention sublayer of layer i on h_in (N, d) (after the input norm), head by head:
    biases, rotary positions, 1/sqrt(d_h), soft cap, causal mask, a sink column dropped after the
    softmax."""
    p, fam = f"model.layers.{i}.self_attn.", config["family"]
    H, kv = config["num_attention_heads"], config["num_key_value_heads"]
    N, d = h_in.shape
    dh, pos = d // H, np.arange(N, dtype=float)

    def proj(name, rows):
        b = sd.get(p + f"{name}.bias", np.zeros(sd[p + f"{name}.weight"].shape[0]))
        return h_in @ sd[p + f"{name}.weight"][rows].T + b[rows]

    ctx = []
    for h in range(H):
        g = h // (H // kv)
        q = rotate_half(proj("q_proj", slice(h * dh, (h + 1) * dh)), pos, config["rope_theta"])
        k = rotate_half(proj("k_proj", slice(g * dh, (g + 1) * dh)), pos, config["rope_theta"])
        v = proj("v_proj", slice(g * dh, (g + 1) * dh))
        logits = q @ k.T / math.sqrt(dh)
        if fam == "gemma2":
            cap = config["attn_logit_softcapping"]
            logits = cap * np.tanh(logits / cap)
        logits[np.triu_indices(N, 1)] = -np.inf
        if fam == "sinks":
            logits = np.hstack([logits, np.full((N, 1), sd[p + "sinks"][h])])
        w = np.exp(logits - logits.max(axis=1, keepdims=True))
        w = (w / w.sum(axis=1, keepdims=True))[:, :N]
        ctx.append(w @ v)
    return np.hstack(ctx) @ sd[p + "o_proj.weight"].T


def dense_states(sd, config, ids):
    """The family's forward pass, (L + 1, N, d)."""
    fam, eps, d = config["family"], config["rms_norm_eps"], config["hidden_size"]
    one = 1.0 if fam == "gemma2" else 0.0  # Gemma scales by 1 + w
    X = sd["model.embed_tokens.weight"][ids] * (math.sqrt(d) if fam == "gemma2" else 1.0)
    out = [X]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = dense_attention(sd, config, i, rms(X, one + sd[p + "input_layernorm.weight"], eps))
        if fam == "gemma2":
            a = rms(a, one + sd[p + "post_attention_layernorm.weight"], eps)
        X = X + a
        pre = "pre_feedforward_layernorm" if fam == "gemma2" else "post_attention_layernorm"
        h = rms(X, one + sd[p + pre + ".weight"], eps)
        gate, up = h @ sd[p + "mlp.gate_proj.weight"].T, h @ sd[p + "mlp.up_proj.weight"].T
        if fam == "gemma2":
            act = 0.5 * gate * (1 + np.tanh(math.sqrt(2 / math.pi) * (gate + 0.044715 * gate**3)))
        else:
            act = gate / (1 + np.exp(-gate))
        f = (act * up) @ sd[p + "mlp.down_proj.weight"].T
        X = X + (rms(f, one + sd[p + "post_feedforward_layernorm.weight"], eps) if fam == "gemma2" else f)
        out.append(X)
    return np.stack(out)


def test_the_file_is_read_as_its_family(family):
    path, sd, config = family
    ck = P.open_checkpoint(path)
    assert ck.layout == ("gemma2" if config["family"] == "gemma2" else "llama") and ck.fmt == "gguf"
    for name, value in sd.items():
        got = ck.array(name)
        np.testing.assert_allclose(got, value, rtol=0, atol=1e-6 if "norm" in name else 0, err_msg=name)
    assert ck.softcap == (2.0 if config["family"] == "gemma2" else None)


def test_the_forward_pass_equals_the_dense_reference(family):
    path, sd, config = family
    S = P.token_states(path, ids=IDS).states
    np.testing.assert_allclose(S, dense_states(sd, config, IDS), rtol=1e-9, atol=1e-9)


def test_the_heads_give_the_attention_sublayer(family):
    path, sd, config = family
    ck = P.open_checkpoint(path)
    X = dense_states(sd, config, IDS)
    for L in P.load_heads(ck, states=X):
        H_in = head_inputs(ck, L.layer, X[L.layer])
        g = ck.layer_array(L.layer, "attn_norm_w")
        np.testing.assert_allclose(
            P.attention_output(L, H_in), dense_attention(sd, config, L.layer, H_in * g), atol=1e-9
        )
        fam, p = config["family"], f"model.layers.{L.layer}.self_attn."
        for h in L.heads:
            assert h.softcap == (2.0 if fam == "gemma2" else None)
            assert h.sink == (pytest.approx(sd[p + "sinks"][h.head]) if fam == "sinks" else None)
            if fam == "qwen2":
                np.testing.assert_allclose(
                    h.b_Q, sd[p + "q_proj.bias"][h.head * 8 : h.head * 8 + 8], atol=1e-7
                )


def test_qwen2_beta_fit_with_the_bias_logits_is_exact(family):
    path, _, config = family
    if config["family"] != "qwen2":
        pytest.skip("the bias regressors are Qwen2's")
    ck = P.open_checkpoint(path)
    run = P.token_states(ck, ids=IDS)
    for L in P.load_heads(ck, states=run):
        logits = P.attention_logits(ck, L.layer, run.states[L.layer])
        H, X = head_inputs(ck, L.layer, run.states[L.layer]), run.cloud(L.layer)
        for h in L.heads:
            Z = bias_logits(h, H)
            assert set(Z) == {"query bias", "key bias"}
            fit = fit_beta(logits[h.head], unit_scores(h, X), Z, offsets=True)
            # RMSNorm: |h| = sqrt(d) up to eps, so the logits are d / sqrt(d_h) s + the bias terms
            assert fit.beta == pytest.approx(32 / math.sqrt(8), rel=1e-4) and fit.r2 > 1 - 1e-8
            assert [c for c, _ in fit.terms.values()] == pytest.approx([1.0, 1.0], rel=1e-4)
            plain = fit_beta(logits[h.head], unit_scores(h, X), offsets=True)
            assert plain.r2 < 1 - 1e-6  # without them the fit is not exact


def test_gemma2_logits_are_capped_and_sinks_take_mass(family):
    path, sd, config = family
    rep = P.report(path, ids=IDS, offsets=())
    fam, ck = config["family"], P.open_checkpoint(path)
    if fam == "gemma2":
        logits = P.attention_logits(ck, 1, P.token_states(path, ids=IDS).states[1])
        top = np.nanmax(np.abs(np.where(np.isfinite(logits), logits, np.nan)))
        assert 1.9 < top < 2.0  # the cap bites: uncapped logits reach beyond 2 atanh(0.95) = 3.7
        assert any("soft-capped" in n for n in rep["notes"])
    if fam == "sinks":
        assert any("attention sinks" in n for n in rep["notes"])
        X = P.token_states(path, ids=IDS).states
        for L in rep["layers"]:
            for h in L["heads"]:
                i, p = L["layer"], f"model.layers.{L['layer']}.self_attn."
                logits = P.attention_logits(ck, i, X[i])[h["head"]]
                e = np.exp(np.vstack([logits.T, np.full(len(IDS), sd[p + "sinks"][h["head"]])]).T)
                assert h["sink_mass"] == pytest.approx(np.mean(e[:, -1] / e.sum(axis=1)), rel=1e-9)
    assert "regime" in rep and len(rep["regime"]["steps"]) == 2


def test_lean_report_keeps_the_top_eigenvalues_and_reads_only_the_embedding_rows(family, monkeypatch):
    path, sd, _ = family
    ck = P.open_checkpoint(path)
    np.testing.assert_array_equal(
        ck.rows("model.embed_tokens.weight", np.array(IDS)), sd["model.embed_tokens.weight"][IDS]
    )
    loaded = []
    load = ck._get
    monkeypatch.setattr(ck, "_get", lambda key: loaded.append(key) or load(key))
    P.token_states(ck, ids=IDS)
    assert "model.embed_tokens.weight" not in loaded  # its rows only, dequantised alone
    short = P.report(path, layer=0, offsets=())["layers"][0]["heads"][0]["assumptions"]["items"][0]["numbers"]
    full = P.report(path, layer=0, offsets=(), spectra=True)["layers"][0]["heads"][0]["assumptions"]["items"][
        0
    ]
    assert short["eigenvalues"] == full["numbers"]["eigenvalues"][:8] and short["eigenvalues_count"] == 32
    assert len(full["numbers"]["eigenvalues"]) == 32 and "eigenvalues_count" not in full["numbers"]


def test_the_numbers_over_rotary_offsets_equal_the_dense_ones(family):
    """offset_spread's d_h x d_h pieces against each offset's dense Attention (d x d)."""
    from attnflow.pretrained.diagnostics import diagnose
    from attnflow.pretrained.report import offset_spread

    path, _, _ = family
    (L,) = P.load_heads(path, layers=[1])
    for h in L.heads[:2]:
        spread = offset_spread(h, (1, 5))
        dense = [diagnose(h.attention_at(r)) for r in (0, 1, 5)]
        for name, key in [
            ("asymmetry", "asymmetry"),
            ("norm_B", "norm_B"),
            ("mu1", "mu1"),
            ("rel_gap", "rel_gap"),
        ]:
            values = [d[key] for d in dense]
            assert spread[name] == pytest.approx([min(values), max(values)], rel=1e-8, abs=1e-12), name
        assert spread["rank_B"] == [8, 8] and all(d["rank_B"] == 8 for d in dense)
