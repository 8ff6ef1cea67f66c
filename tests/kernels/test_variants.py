"""The field of a Dynamics beyond the single head (kernels/variants.py) against a dense NumPy
reference written here from docs/math.md ("Beyond the single head"), and its invariants."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnflow as af
from attnflow.flow import Dynamics, padded_head
from attnflow.kernels import compiled
from helpers import one_torch_thread, random_attention  # noqa: F401 (one_torch_thread: a fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

KERNELS = ("fused", "blocked", "sdpa")


def reference(X, heads, *, W_O=None, causal=False, usa=False, w=None, layer_norm="post", alpha=1.0):
    """The field, one token at a time: m_i = sum_h W_O^h sum_{j (<= i)} w_ij^h V_h theta_j and the
    layer norm's map of it."""
    X = np.asarray(X, dtype=float)
    N = len(X)
    w = np.full(N, 1.0 / N) if w is None else np.asarray(w, dtype=float)
    th = X / np.linalg.norm(X, axis=1, keepdims=True)
    m = np.zeros_like(th)
    for h, att in enumerate(heads):
        values = att.V / len(heads) if W_O is None else W_O[h] @ att.V[: W_O[h].shape[1]]
        scores = att.beta * th @ att.B @ th.T
        for i in range(N):
            js = np.arange(i + 1) if causal else np.arange(N)
            s = scores[i, js]
            e = w[js] * np.exp(s - (0.0 if usa else s.max()))
            num = e @ (th[js] @ values.T)
            m[i] += num if usa else num / e.sum()
    if layer_norm == "pre":
        return m
    if layer_norm in ("peri", "ngpt"):
        m = m / np.linalg.norm(m, axis=1, keepdims=True)
    if layer_norm == "peri":
        return m
    v = m - np.sum(m * th, axis=1, keepdims=True) * th
    return alpha * v if layer_norm == "ngpt" else v


@pytest.fixture(scope="module")
def heads():
    return random_attention(3, 2.0, 1), random_attention(3, 2.0, 2), random_attention(3, 2.0, 3)


CASES = {
    "averaged": {},
    "causal": {"mask": "causal"},
    "usa": {"normalization": "usa"},
    "causal-usa": {"mask": "causal", "normalization": "usa"},
    "pre": {"layer_norm": "pre"},
    "peri": {"layer_norm": "peri", "mask": "causal"},
    "ngpt": {"layer_norm": "ngpt", "alpha": 0.3},
}


def _reference_of(X, hs, kw, w=None, W_O=None):
    return reference(
        X,
        hs,
        W_O=W_O,
        causal=kw.get("mask") == "causal",
        usa=kw.get("normalization") == "usa",
        w=w,
        layer_norm=kw.get("layer_norm", "post"),
        alpha=kw.get("alpha", 1.0),
    )


@pytest.mark.parametrize("N", [40, 600])  # 600: several chunks of the compiled causal path
@pytest.mark.parametrize("case", list(CASES))
def test_every_variant_matches_the_reference(heads, case, N):
    kw = CASES[case]
    X = af.sample_uniform(N, 3, seed=N)
    dyn = Dynamics(heads, **kw)
    ref = _reference_of(X, heads, kw)
    for kernel in KERNELS:
        if kernel == "sdpa" and kw.get("normalization") == "usa":
            with pytest.raises(ValueError, match="kernel 'sdpa' cannot compute normalization = 'usa'"):
                af.velocity(X, dyn, kernel=kernel)
            continue
        np.testing.assert_allclose(
            af.velocity(X, dyn, kernel=kernel), ref, rtol=0, atol=1e-12, err_msg=kernel
        )


@pytest.mark.parametrize("case", ["averaged", "causal", "usa", "pre"])
def test_weighted_measures_match_the_reference(heads, case):
    kw = CASES[case]
    X = af.sample_uniform(300, 3, seed=5)
    w = np.random.default_rng(0).uniform(0.5, 2.0, 300)
    w /= w.sum()
    ref = _reference_of(X, heads, kw, w=w)
    for kernel in KERNELS:
        if kernel == "sdpa" and case == "usa":
            continue
        v = af.velocity(X, Dynamics(heads, **kw), kernel=kernel, weights=w)
        np.testing.assert_allclose(v, ref, rtol=0, atol=1e-12, err_msg=kernel)


def test_output_blocks_match_the_reference_and_the_folded_heads():
    """Heads of width d_h = 2 in d = 4 (V_h d_h x d, W_O^h d x d_h, as a real layer): the field
    with the blocks is that of the heads whose V is W_O^h V_h, summed (W_O^h = I)."""
    rng = np.random.default_rng(7)
    d, d_h = 4, 2
    blocks = [rng.standard_normal((3, d_h, d)) / 2 for _ in range(2)]
    W_O = [rng.standard_normal((d, d_h)) / 2 for _ in range(2)]
    hs = [padded_head(Q, K, Vh, beta=1.5) for Q, K, Vh in blocks]
    X = af.sample_uniform(200, d, seed=2)
    dyn = Dynamics(hs, W_O=W_O, mask="causal")
    ref = reference(X, hs, W_O=W_O, causal=True)
    folded = Dynamics(
        [af.Attention(h.Q, h.K, W @ h.V[:d_h], h.beta) for h, W in zip(hs, W_O, strict=True)],
        W_O=[np.eye(d)] * 2,
        mask="causal",
    )
    for kernel in KERNELS:
        np.testing.assert_allclose(af.velocity(X, dyn, kernel=kernel), ref, rtol=0, atol=1e-12)
        np.testing.assert_allclose(af.velocity(X, folded, kernel=kernel), ref, rtol=0, atol=1e-12)


def test_per_cloud_betas_match_the_reference(heads):
    """A batch (M, N, d) with one beta per cloud (a list of Dynamics through simulate's Field)."""
    from attnflow.kernels.variants import velocity_model

    X = np.stack([af.sample_uniform(100, 3, seed=s) for s in (1, 2)])
    dyn = Dynamics(heads, mask="causal", normalization="usa")
    betas = torch.tensor([0.5, 3.0], dtype=torch.float64)
    for impl in ("fused", "blocked"):
        out = velocity_model(torch.as_tensor(X), dyn, betas=betas, impl=impl).numpy()
        for m, b in enumerate((0.5, 3.0)):
            ref = reference(X[m], [h.with_beta(b) for h in heads], causal=True, usa=True)
            np.testing.assert_allclose(out[m], ref, rtol=1e-12, atol=1e-12)  # (USA: up to e^(beta ||B||))


@pytest.mark.parametrize("kernel", KERNELS)
def test_causal_first_token_moves_as_a_lone_token(heads, kernel):
    """Token 0 attends to itself only: dz/dt = P_z^perp (sum_h V_h / H) z, whatever the others do."""
    X = af.sample_uniform(300, 3, seed=11)
    v = af.velocity(X, Dynamics(heads, mask="causal"), kernel=kernel)
    z = X[0]
    Vbar = sum(h.V for h in heads) / len(heads)
    lone = Vbar @ z - (z @ Vbar @ z) * z
    np.testing.assert_allclose(v[0], lone, rtol=0, atol=1e-14)


@pytest.mark.parametrize("kernel", KERNELS)
def test_causal_token_ignores_later_tokens(heads, kernel):
    """Moving the tokens j > i changes nothing of the velocities of tokens 0..i."""
    X = af.sample_uniform(500, 3, seed=12)
    Y = X.copy()
    i = 260
    Y[i + 1 :] = af.sample_uniform(len(X) - i - 1, 3, seed=13)
    dyn = Dynamics(heads, mask="causal")
    a, b = af.velocity(X, dyn, kernel=kernel), af.velocity(Y, dyn, kernel=kernel)
    np.testing.assert_allclose(a[: i + 1], b[: i + 1], rtol=0, atol=1e-15)
    assert np.abs(a[i + 1 :] - b[i + 1 :]).max() > 1e-3  # (and the later ones do move)


@pytest.mark.parametrize("kernel", ["fused", "blocked"])
def test_usa_is_softmax_times_the_partition_function(kernel):
    """One head: v_USA = v_SA Z_i / N with Z_i = sum_j exp(beta x_i^T B x_j)."""
    att = random_attention(3, 1.7, 4)
    X = af.sample_uniform(400, 3, seed=3)
    Z = np.exp(att.beta * X @ att.B @ X.T).sum(axis=1)
    sa = af.velocity(X, att, kernel="sdpa")
    usa = af.velocity(X, Dynamics(att, normalization="usa"), kernel=kernel)
    np.testing.assert_allclose(usa, sa * (Z / len(X))[:, None], rtol=1e-12, atol=1e-14)


def test_usa_rescaled_time_divides_by_exp_beta_norm_B():
    att = random_attention(3, 4.0, 5)
    X = af.sample_uniform(100, 3, seed=3)
    model = af.velocity(X, Dynamics(att, normalization="usa"), kernel="blocked")
    rescaled = af.velocity(X, Dynamics(att, normalization="usa", usa_time="rescaled"), kernel="blocked")
    np.testing.assert_allclose(rescaled, model * np.exp(-att.beta * att.norm_B), rtol=1e-12)


def test_usa_beyond_float64_is_one_clear_error():
    att = random_attention(3, 1000.0, 6)
    X = af.sample_uniform(50, 3, seed=3)
    with pytest.raises(FloatingPointError, match="usa_time = 'rescaled'"):
        af.velocity(X, Dynamics(att, normalization="usa"), kernel="fused")
    v = af.velocity(X, Dynamics(att, normalization="usa", usa_time="rescaled"), kernel="fused")
    assert np.all(np.isfinite(v))


@pytest.mark.parametrize("kernel", KERNELS)
def test_identical_averaged_heads_are_one_head(kernel):
    """The model path itself (not the routing to the single-head kernels) on H copies of a head."""
    from attnflow.kernels.variants import velocity_model

    att = random_attention(3, 3.0, 8)
    X = torch.as_tensor(af.sample_uniform(300, 3, seed=4))
    dyn = Dynamics((att, att, att), mask="none")
    assert dyn.single is att  # what velocity and simulate compute with
    one = af.velocity(X.numpy(), att, kernel="sdpa")
    np.testing.assert_allclose(velocity_model(X, dyn, impl=kernel).numpy(), one, rtol=0, atol=1e-13)


def test_the_compiled_path_is_the_torch_path():
    if compiled.core() is None:
        pytest.skip(compiled.status())
    heads = random_attention(3, 5.0, 1), random_attention(3, 5.0, 2)
    X = af.sample_uniform(700, 3, seed=1)
    dyn = Dynamics(heads, mask="causal", normalization="usa")
    a = af.velocity(X, dyn, kernel="fused")
    with compiled.disabled():
        b = af.velocity(X, dyn, kernel="fused")
    np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("kernel", ["truncated", "cluster", "zero"])
def test_single_head_kernels_refuse_a_model_beyond_one_head(heads, kernel):
    X = af.sample_uniform(20, 3, seed=1)
    with pytest.raises(ValueError, match=f"kernel '{kernel}' computes one softmax head.*2 heads"):
        af.velocity(X, Dynamics(heads[:2]), kernel=kernel)


def test_pre_and_peri_fields_take_any_nonzero_rows(heads):
    """Tokens of pre- and peri-LN live in R^d: the field is a function of x / |x|."""
    X = af.sample_uniform(30, 3, seed=1)
    r = np.linspace(0.5, 3.0, 30)[:, None]
    for ln in ("pre", "peri"):
        dyn = Dynamics(heads, layer_norm=ln)
        np.testing.assert_allclose(af.velocity(r * X, dyn), af.velocity(X, dyn), rtol=0, atol=1e-14)
    with pytest.raises(ValueError, match="unit rows"):
        af.velocity(r * X, Dynamics(heads, mask="causal"))
