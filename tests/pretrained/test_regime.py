"""The regime of a model: each layer's step h_l recovered on a synthetic stack built with known steps
(Euler steps of the multi-head field, renormalised), the stack's time against log beta."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from attnflow import pretrained as P  # noqa: E402
from attnflow.pretrained.forward import TokenStates  # noqa: E402
from attnflow.pretrained.regime import StepFit, fit_step, layer_step, norm_B, regime_of  # noqa: E402
from checkpoints import bert_state, write_checkpoint  # noqa: E402

STEPS = [0.3, 1.7, 0.05]


def dense_field(sd, i, H, heads, r):
    """The multi-head attention field of layer i on unit tokens X = H / r, written from the state
    dict: sum_h softmax_j((Q_h h_i + b_Q)^T (K_h h_j + b_K) / sqrt(d_h)) (W_O^h (W_V^h h_j + b_V)) + b_O,
    divided by r and projected on the tangent space."""
    w = {
        k.split(f"encoder.layer.{i}.", 1)[1]: v.double().numpy() for k, v in sd.items() if f"layer.{i}." in k
    }
    d = H.shape[1]
    dh = d // heads
    out = np.tile(w["attention.output.dense.bias"], (H.shape[0], 1))
    for h in range(heads):
        rows = slice(h * dh, (h + 1) * dh)
        q = H @ w["attention.self.query.weight"][rows].T + w["attention.self.query.bias"][rows]
        k = H @ w["attention.self.key.weight"][rows].T + w["attention.self.key.bias"][rows]
        v = H @ w["attention.self.value.weight"][rows].T + w["attention.self.value.bias"][rows]
        z = q @ k.T / math.sqrt(dh)
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        out += p @ v @ w["attention.output.dense.weight"][:, rows].T
    X = H / r
    a = out / r
    return a - np.sum(a * X, axis=1, keepdims=True) * X


def synthetic_stack(sd, heads, r, steps, N=9, seed=0, noise=0.0):
    """States (L + 1, N, d), every token of norm r, each layer one Euler step of size steps[l] of
    the dense field followed by renormalisation (plus noise before it)."""
    rng = np.random.default_rng(seed)
    d = sd["encoder.layer.0.attention.self.query.weight"].shape[1]
    X = rng.standard_normal((N, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    states = [r * X]
    for i, h in enumerate(steps):
        Y = X + h * dense_field(sd, i, r * X, heads, r) + noise * rng.standard_normal(X.shape)
        X = Y / np.linalg.norm(Y, axis=1, keepdims=True)
        states.append(r * X)
    return TokenStates(None, [str(k) for k in range(N)], np.stack(states))


def test_steps_are_recovered_on_a_synthetic_stack_with_known_steps():
    sd, _ = bert_state(d=16, heads=4, layers=3, seed=5)
    ck = P.open_checkpoint(sd, num_heads=4)
    run = synthetic_stack(sd, 4, r=4.0, steps=STEPS)
    layers = P.load_heads(ck, states=run)
    assert [L.norm for L in layers] == pytest.approx([4.0] * 3)  # the median norm of the tokens
    fits = [layer_step(ck, L, run) for L in layers]
    assert [f.h for f in fits] == pytest.approx(STEPS, rel=1e-10)
    assert all(f.r2 == pytest.approx(1.0, abs=1e-10) and f.tokens == 9 for f in fits)
    reg = regime_of(fits, [[10.0, 20.0, 30.0]] * 3, [100.0] * 12)
    assert reg.T == pytest.approx(sum(STEPS)) and reg.times == pytest.approx(np.cumsum(STEPS))
    assert reg.T_rest == pytest.approx(sum(STEPS[1:]))
    assert reg.beta == 20.0 and reg.window == pytest.approx(math.log(20.0)) and reg.inside
    assert reg.window_normB == pytest.approx(math.log(100.0)) and reg.beyond is None


def test_a_noisy_stack_gives_the_step_within_its_error():
    sd, _ = bert_state(d=16, heads=4, layers=3, seed=6)
    ck = P.open_checkpoint(sd, num_heads=4)
    run = synthetic_stack(sd, 4, r=3.0, steps=STEPS, N=40, noise=0.01, seed=1)
    for L, h in zip(P.load_heads(ck, states=run), STEPS, strict=True):
        f = layer_step(ck, L, run)
        assert f.se is not None and 0 < f.se < 0.1 and abs(f.h - h) < 4 * f.se and f.r2 < 1


@settings(max_examples=30, deadline=None)
@given(h=st.floats(0.0, 20.0), seed=st.integers(0, 10_000), d=st.integers(2, 6))
def test_the_gnomonic_image_of_an_euler_step_is_the_step(h, seed, d):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((5, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    V = rng.standard_normal((5, d))
    V -= np.sum(V * X, axis=1, keepdims=True) * X
    Y = X + h * V
    fit = fit_step(X, Y / np.linalg.norm(Y, axis=1, keepdims=True), V)
    assert fit.h == pytest.approx(h, rel=1e-9, abs=1e-12) and fit.tokens == 5


def test_the_window_verdict_and_the_norm_of_B():
    steps = [StepFit(2.0, 0.1, 0.5, 7)] * 3
    reg = regime_of(steps, [[math.e**3.5]] * 3, [50.0])  # t_l = 2, 4, 6 against log beta = 3.5
    assert reg.T == 6.0 and reg.window == pytest.approx(3.5) and not reg.inside and reg.beyond == 1
    assert "beyond the window" in reg.line and reg.ratio == pytest.approx(6 / 3.5)
    assert reg.metastable is None and "metastable" not in reg.line  # no departures given
    reg = regime_of(steps, [[math.e**3.5]] * 3, [50.0], [(2.0, 5.0), (8.0, 10.0), None])
    assert reg.metastable == 5.0 and reg.departure_N == 5.0 and reg.departure_mf == 7.5  # medians
    assert "heuristic metastable time" in reg.line and "T is beyond it" in reg.line
    sd, _ = bert_state(d=16, heads=4, layers=1, seed=2)
    (L,) = P.load_heads(sd, num_heads=4)
    for h in L.heads:
        assert norm_B(h) == pytest.approx(np.linalg.norm(h.attention.B, 2), rel=1e-10)


def test_regime_runs_the_model_once_and_agrees_with_the_report(tmp_path):
    write_checkpoint(tmp_path, layers=2, seed=3)
    reg = P.regime(tmp_path, "the cat sat on the mat")
    rep = P.report(tmp_path, "the cat sat on the mat", offsets=())
    fitted = [h["beta_fit"]["beta"] for L in rep["layers"] for h in L["heads"]]
    assert reg.beta == pytest.approx(float(np.median(fitted)))
    assert len(reg.steps) == 2 and reg.T == pytest.approx(sum(s.h for s in reg.steps))
    assert rep["regime"]["T"] == pytest.approx(reg.T) and rep["regime"]["line"] == reg.line


def test_heads_prints_the_regime_and_draws_it(tmp_path):
    from typer.testing import CliRunner

    from attnflow.cli import app

    write_checkpoint(tmp_path / "ck", layers=2, seed=3)
    runner = CliRunner()
    res = runner.invoke(
        app, ["heads", str(tmp_path / "ck"), "--text", "the cat sat", "--figure", str(tmp_path / "r.png")]
    )
    assert res.exit_code == 0, res.output
    assert "regime:" in res.stdout and "h_l ± se" in res.stdout and "window t <~ log beta" in res.stdout
    assert (tmp_path / "r.png").stat().st_size > 1000
    bad = runner.invoke(app, ["heads", str(tmp_path / "ck"), "--figure", str(tmp_path / "s.png")])
    assert bad.exit_code == 2 and "--figure needs --text" in bad.output and not (tmp_path / "s.png").exists()
    one = runner.invoke(
        app, ["heads", str(tmp_path / "ck"), "--text", "the cat", "--layer", "1", "--figure", "x.png"]
    )
    assert one.exit_code == 2 and "--figure needs every layer" in one.output
    assert "regime" not in P.report(tmp_path / "ck", "the cat sat", layer=1, offsets=())


def test_the_heuristic_departure_from_small_pieces_equals_the_dense_one():
    from attnflow.pretrained.regime import departure

    sd, _ = bert_state(d=16, heads=4, layers=1, seed=8)
    (L,) = P.load_heads(sd, num_heads=4, norm=3.0)
    for h in L.heads:
        A, B = h.attention.A, h.attention.B
        w, U = np.linalg.eigh((A + A.T) / 2)
        u1, u2 = U[:, -1], U[:, -2]
        delta = np.linalg.norm(B.T @ u1) - u1 @ B @ u1
        lam = (w[-1] - w[-2]) / np.linalg.norm(B.T @ u2)
        assert delta >= 0 and lam > 0
        assert departure(h, 7.0, 20) == pytest.approx((math.log(20) / lam, 7.0 * delta / lam), rel=1e-8)
