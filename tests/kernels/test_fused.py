"""The fused kernel: both paths (compiled core, torch) against sdpa, blocked and a NumPy reference;
weights, per-cloud betas, float32, batches, other query points; the compiled core's own checks and
its fallbacks (no compiler, a failing build, the switch)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnflow as af
from attnflow.kernels import compiled, velocity
from attnflow.kernels.dense import field_sdpa, velocity_blocked, velocity_sdpa
from attnflow.kernels.fused import backend_for, field_fused, velocity_fused
from helpers import assert_kernel_matches_sdpa, one_torch_thread, random_attention  # noqa: F401

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BACKENDS = ["compiled", "torch"]


@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param == "compiled" and compiled.core() is None:
        pytest.skip(compiled.status())
    return request.param


def weights_of(N: int, M: int, seed: int) -> np.ndarray:
    w = np.exp(np.random.default_rng(seed).uniform(-3.0, 3.0, (M, N)))
    return w / w.sum(axis=1, keepdims=True)


def ref_weighted(X: np.ndarray, att: af.Attention, w: np.ndarray, beta: float) -> np.ndarray:
    """float64 NumPy reference for one cloud, the whole score matrix."""
    S = beta * X @ att.B @ X.T + np.log(w)[None, :]
    E = np.exp(S - S.max(axis=1, keepdims=True))
    U = (E @ X @ att.V.T) / E.sum(axis=1, keepdims=True)
    return U - np.sum(X * U, axis=1, keepdims=True) * X


@pytest.mark.parametrize("d", [2, 3, 5, 8])
@pytest.mark.parametrize("beta", [0.5, 30.0, 1e3, 1e5])
def test_fused_matches_sdpa_and_blocked(backend, d, beta):
    att = random_attention(d, beta, seed=d)
    X = torch.as_tensor(af.sample_uniform(203, d, seed=1, M=2))  # 203: the last group is padded
    out = velocity_fused(X, att, backend=backend)
    assert out.shape == X.shape and out.dtype == torch.float64
    for ref in (velocity_sdpa(X, att), velocity_blocked(X, att)):
        np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=0, atol=1e-12)
    assert float(out.abs().max()) > 1e-3  # not trivially zero


def test_fused_weights_and_betas_per_cloud(backend):
    att = random_attention(3, 1.0, seed=4)
    M, N = 3, 150
    X = af.sample_uniform(N, 3, seed=2, M=M)
    w = weights_of(N, M, seed=3)
    betas = np.array([2.0, 300.0, 3e4])
    out = velocity_fused(
        torch.as_tensor(X), att, betas=torch.as_tensor(betas), weights=torch.as_tensor(w), backend=backend
    )
    for m in range(M):
        np.testing.assert_allclose(out[m].numpy(), ref_weighted(X[m], att, w[m], betas[m]), atol=1e-12)
    sdpa = velocity_sdpa(torch.as_tensor(X), att, betas=torch.as_tensor(betas), weights=torch.as_tensor(w))
    np.testing.assert_allclose(out.numpy(), sdpa.numpy(), rtol=0, atol=1e-12)


def test_fused_float32_on_the_torch_path_is_computed_in_float64():
    att = random_attention(3, 100.0, seed=5)
    X32 = torch.as_tensor(af.sample_uniform(300, 3, seed=6), dtype=torch.float32)
    stats: dict = {}
    out = velocity_fused(X32, att, backend="torch", stats=stats)
    assert out.dtype == torch.float32 and out.shape == X32.shape and stats["sums"] == ["float64"]
    ref = velocity_sdpa(X32.double(), att)  # the same float32 points, in float64
    np.testing.assert_allclose(out.double().numpy(), ref.numpy(), rtol=0, atol=1e-6)
    error = float((out.double() - ref).abs().max())
    assert float((velocity_sdpa(X32, att).double() - ref).abs().max()) > error


def float32_tolerance(att: af.Attention, beta: float) -> float:
    """The float32 twin's stated accuracy: 1e-7 (1 + beta ||B||_2) ||V||_2 (rounding of the scores)."""
    return 1e-7 * (1.0 + beta * np.linalg.norm(att.B, 2)) * np.linalg.norm(att.V, 2)


@pytest.fixture
def core32():
    c = compiled.core()
    if c is None or not c.float32:
        pytest.skip(compiled.status())
    return c


@pytest.mark.parametrize("d", [2, 3, 5, 8])
@pytest.mark.parametrize("beta", [0.5, 30.0, 1e3, 1e4])
def test_float32_twin_matches_the_float64_field(core32, d, beta):
    """float32 input runs the float32 twin; against the float64 field of the same (rounded) points
    it is within 1e-7 (1 + beta ||B||) ||V||, and tangent to the sphere to float32 rounding."""
    att = random_attention(d, beta, seed=d)
    X32 = torch.as_tensor(af.sample_uniform(203, d, seed=1, M=2), dtype=torch.float32)
    stats: dict = {}
    out = velocity_fused(X32, att, stats=stats)
    assert out.dtype == torch.float32 and out.shape == X32.shape and stats["sums"] == ["float32"] * 2
    ref = velocity_fused(X32.double(), att)
    error = float((out.double() - ref).abs().max())
    assert error < float32_tolerance(att, beta)
    assert error > 0  # the float32 arithmetic did run
    assert float((out * X32).sum(-1).abs().max()) < 1e-6 * np.linalg.norm(att.V, 2)


def test_float32_twin_weights_betas_and_other_points(core32):
    att = random_attention(3, 1.0, seed=4)
    M, N = 3, 150
    X = torch.as_tensor(af.sample_uniform(N, 3, seed=2, M=M), dtype=torch.float32)
    w = torch.as_tensor(weights_of(N, M, seed=3), dtype=torch.float32)
    betas = torch.tensor([2.0, 300.0, 3e4])
    out = velocity_fused(X, att, betas=betas, weights=w)
    ref = velocity_fused(X.double(), att, betas=betas, weights=w.double())
    for m in range(M):
        error = float((out[m].double() - ref[m]).abs().max())
        assert error < float32_tolerance(att, float(betas[m]))
    Y = torch.as_tensor(af.sample_uniform(37, 3, seed=9, M=M), dtype=torch.float32)
    got = field_fused(Y, X, att, weights=w).double()
    want = field_fused(Y.double(), X.double(), att, weights=w.double())
    assert float((got - want).abs().max()) < float32_tolerance(att, att.beta)


@pytest.mark.parametrize("beta", [1e5, 1e6])
def test_float32_at_large_beta_is_finite(core32, beta):
    """Tight antipodal clusters: scores of size beta with spreads of thousands.  Below the float32
    twin's score bound (2^21) it runs, within its tolerance; above (beta = 1e6 here) the sums run
    in float64; every value is finite."""
    att = random_attention(3, beta, seed=11)
    X = af.sample_vmf(400, np.array([0.0, 0.6, 0.8]), 1e8, seed=12)
    X[::3] *= -1
    X32 = torch.as_tensor(X, dtype=torch.float32)
    stats: dict = {}
    out = velocity_fused(X32, att, stats=stats)
    assert torch.isfinite(out).all()
    assert stats["sums"] == (["float32"] if beta < 1e6 else ["float64"])
    ref = velocity_fused(X32.double(), att)
    assert float((out.double() - ref).abs().max()) < float32_tolerance(att, beta)


def test_float32_twin_exponential_and_floor(core32):
    """Z = sum_j 2^(s_j - m) for scores spread over 110 bits below the maximum, some beyond the
    floor of 120 (which must not count beyond 2^-120 each), against NumPy's exp2 in float64."""
    d, n = 2, core32.group(2, "float32")
    rng = np.random.default_rng(16)
    s = np.concatenate([rng.uniform(-110.0, 0.0, 4000), [0.3, -150.0, -3000.0]]).astype(np.float32)
    rows = np.zeros((s.size, 2 * d + 1), dtype=np.float32)
    rows[:, d] = s
    rows[:, d + 1] = rng.normal(size=s.size)
    out = np.empty((d + 2, n))
    core32.sums32(np.zeros((d, n), dtype=np.float32), rows, out)
    e = np.exp2(s.astype(np.float64) - np.round(s.max()))
    e[s < -120.0] = 2.0**-120
    assert out[d + 1, 0] == np.round(s.max())
    assert abs(out[0, 0] / e.sum() - 1) < 3e-7
    assert abs(out[1, 0] - e @ rows[:, d + 1]) < 3e-7 * np.abs(e * rows[:, d + 1]).sum()
    with pytest.raises(ValueError):
        core32.sums32(np.zeros((d, n)), rows, out)  # float64 queries


def test_float32_twin_falls_back_without_its_check(core32, monkeypatch):
    """A core whose float32 twin failed its self-check computes float32 input in float64."""
    monkeypatch.setattr(compiled, "core", lambda: compiled.Core(core32.lib, core32.path, float32=False))
    att = random_attention(3, 100.0, seed=5)
    X32 = torch.as_tensor(af.sample_uniform(300, 3, seed=6), dtype=torch.float32)
    stats: dict = {}
    out = velocity_fused(X32, att, stats=stats)
    assert stats["sums"] == ["float64"]
    np.testing.assert_allclose(out.double().numpy(), velocity_sdpa(X32.double(), att).numpy(), atol=1e-6)


def test_field_at_other_points(backend):
    att = random_attention(4, 50.0, seed=7)
    X = torch.as_tensor(af.sample_uniform(120, 4, seed=8, M=2))
    Y = torch.as_tensor(af.sample_uniform(37, 4, seed=9, M=2))
    w = torch.as_tensor(weights_of(120, 2, seed=10))
    out = field_fused(Y, X, att, weights=w, backend=backend)
    assert out.shape == Y.shape
    np.testing.assert_allclose(out.numpy(), field_sdpa(Y, X, att, weights=w).numpy(), atol=1e-12)
    np.testing.assert_allclose(
        field_fused(Y[0], X[0], att, backend=backend).numpy(), field_sdpa(Y[0], X[0], att).numpy(), atol=1e-12
    )


def test_float32_twin_threads_give_the_same_bits(core32):
    att = af.worked_example(1000.0)
    X = torch.as_tensor(af.sample_uniform(2100, 3, seed=13), dtype=torch.float32)[None]
    one = velocity_fused(X, att)
    torch.set_num_threads(2)
    try:
        two = velocity_fused(X, att)
    finally:
        torch.set_num_threads(1)
    assert torch.equal(one, two)


@pytest.mark.parametrize("kappa", [1e4, 1e8])
def test_fused_at_beta_1e6_and_tight_clusters(backend, kappa):
    """Scores of size 1e6 with spreads from O(1) to thousands: the shift and the floor keep every sum
    finite and exact (keys more than 1000 bits below the maximum do not count in float64)."""
    att = random_attention(3, 1e6, seed=11)
    X = af.sample_vmf(400, np.array([0.0, 0.6, 0.8]), kappa, seed=12)
    X[::3] *= -1
    out = velocity_fused(torch.as_tensor(X), att, backend=backend).numpy()
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, velocity_blocked(torch.as_tensor(X), att).numpy(), atol=1e-9)


def test_one_or_several_threads_give_the_same_bits(backend):
    """Each query's sums run in the same order whatever the chunking: threads change no bit."""
    att = af.worked_example(1000.0)
    X = torch.as_tensor(af.sample_uniform(2100, 3, seed=13))[None]  # 2100^2 > PARALLEL_PAIRS
    one = velocity_fused(X, att, backend=backend)
    torch.set_num_threads(2)
    try:
        two = velocity_fused(X, att, backend=backend)
    finally:
        torch.set_num_threads(1)
    assert torch.equal(one, two)


def test_fused_through_velocity_and_simulate():
    att = random_attention(3, 40.0, seed=14)
    assert_kernel_matches_sdpa(af.sample_uniform(90, 3, seed=15), att, "fused", atol=1e-12)


def test_compiled_core_self_check():
    c = compiled.core()
    if c is None:
        pytest.skip(compiled.status())
    assert compiled.self_check(c) < 1e-14
    assert compiled.self_check(c, "float32") < 2e-6 and c.float32
    assert compiled.status().startswith("compiled: ")
    assert c.group(3) % 8 == 0 and c.group(9) == 0 and c.group(1) == 0


def test_compiled_core_exponential_is_exact_to_rounding():
    """Z = sum_j 2^(s_j - round(max)) for scores spread over 900 bits below the maximum (and some
    beyond the floor of 1000, which must not count) against NumPy's exp2, relative to float64."""
    c = compiled.core()
    if c is None:
        pytest.skip(compiled.status())
    d, n = 2, c.group(2)
    rng = np.random.default_rng(16)
    s = np.concatenate([rng.uniform(-900.0, 0.0, 4000), [0.3, -1500.0, -3000.0]])
    rows = np.zeros((s.size, 2 * d + 1))
    rows[:, d] = s  # scores through the log-weight column alone (q = 0)
    rows[:, d + 1] = rng.normal(size=s.size)
    q = np.zeros((d, n))
    out = np.empty((d + 2, n))
    c.sums(q, rows, out)
    e = np.exp2(s - np.round(s.max()))
    e[s < -1000.0] = 0.0
    assert abs(out[0, 0] / e.sum() - 1) < 1e-15
    assert abs(out[1, 0] - e @ rows[:, d + 1]) < 1e-15 * np.abs(e * rows[:, d + 1]).sum()


def test_backend_errors_and_choice(monkeypatch):
    with pytest.raises(ValueError, match="backend must be one of"):
        backend_for(3, "cpu", "fast")
    assert backend_for(9, "cpu") == "torch"  # beyond the compiled core's dimensions
    assert backend_for(3, "cpu", "torch") == "torch"
    with pytest.raises(ValueError, match="d = 9 > 8"):
        backend_for(9, "cpu", "compiled")
    monkeypatch.setattr(compiled, "_core", lambda: (None, "not compiled: no C compiler"))
    assert backend_for(3, "cpu") == "torch"
    with pytest.raises(ValueError, match="no C compiler"):
        backend_for(3, "cpu", "compiled")
    att = random_attention(3, 10.0, seed=17)
    X = af.sample_uniform(64, 3, seed=18)
    stats: dict = {}
    out = velocity_fused(torch.as_tensor(X), att, stats=stats)
    assert stats["backend"] == "torch"
    np.testing.assert_allclose(out.numpy(), velocity(X, att, kernel="sdpa"), atol=1e-12)


def test_no_compiler_and_failing_builds_fall_back(monkeypatch, tmp_path):
    """Without a compiler, with a compiler that fails, or switched off: no compiled core, a reason, and
    the kernel still computes the field (torch path); nothing is left in the cache directory."""
    monkeypatch.setenv("ATTNFLOW_CACHE_DIR", str(tmp_path))
    att = random_attention(3, 10.0, seed=19)
    X = af.sample_uniform(50, 3, seed=20)
    ref = velocity(X, att, kernel="sdpa")
    cases = [
        ({"ATTNFLOW_NO_COMPILE": "1"}, "ATTNFLOW_NO_COMPILE is set"),
        ({"CC": "false"}, "failed on fused.c"),
    ]
    try:
        for env, reason in cases:
            for key, value in env.items():
                monkeypatch.setenv(key, value)
            compiled._core.cache_clear()
            assert compiled.core() is None and reason in compiled.status()
            np.testing.assert_allclose(velocity(X, att, kernel="fused"), ref, atol=1e-12)
            v32 = velocity(X, att, kernel="fused", dtype="float32")  # float32 as before: in float64
            assert v32.dtype == np.float32
            np.testing.assert_allclose(v32, velocity(X, att, kernel="sdpa", dtype="float32"), atol=1e-6)
            for key in env:
                monkeypatch.delenv(key)
        assert not [p for p in tmp_path.rglob("*") if p.is_file()]
    finally:
        compiled._core.cache_clear()


def test_a_damaged_library_is_rebuilt(monkeypatch, tmp_path):
    """A file at the library's place that does not load (damaged, foreign) is rebuilt, not trusted."""
    if compiled.core() is None:
        pytest.skip(compiled.status())
    monkeypatch.setenv("ATTNFLOW_CACHE_DIR", str(tmp_path))
    path = compiled.library_path(compiled.compiler())
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a library")
    try:
        compiled._core.cache_clear()
        c = compiled.core()
        assert c is not None and c.path == path and compiled.self_check(c) < 1e-14
    finally:
        compiled._core.cache_clear()


def test_compiled_cells_match_numpy_and_refuse_bad_indices():
    """fused_cells: each cell's queries against its own keys (a query in no cell is left alone),
    against NumPy; out-of-range indices and cells without keys are errors, not crashes."""
    c = compiled.core()
    if c is None:
        pytest.skip(compiled.status())
    rng = np.random.default_rng(21)
    d, nq, nk = 3, 60, 80
    q = rng.uniform(-5, 5, (nq, d))
    rows = np.hstack([rng.uniform(-1, 1, (nk, d)), rng.uniform(-2, 0, (nk, 1)), rng.normal(size=(nk, d))])
    perm = rng.permutation(nq)
    cells_q = [perm[:1], perm[1:8], perm[8:33]]  # disjoint
    cells_k = [rng.choice(nk, size=n, replace=True) for n in (3, 80, 1)]  # repeated keys count twice
    qidx, kidx = np.concatenate(cells_q).astype(np.int64), np.concatenate(cells_k).astype(np.int64)
    qs = np.cumsum([0] + [len(x) for x in cells_q]).astype(np.int64)
    ks = np.cumsum([0] + [len(x) for x in cells_k]).astype(np.int64)
    out = np.full((nq, d + 2), 7.0)
    c.cells(q, qidx, qs, rows, kidx, ks, out, threads=2)
    for qi, kj in zip(cells_q, cells_k, strict=True):
        s = q[qi] @ rows[kj, :d].T + rows[kj, d]
        shift = np.round(s.max(axis=1))
        e = np.exp2(s - shift[:, None])
        np.testing.assert_allclose(out[qi, 0], e.sum(1), rtol=1e-14)
        np.testing.assert_allclose(out[qi, 1 : d + 1], e @ rows[kj, d + 1 :], rtol=1e-13, atol=1e-14)
        np.testing.assert_array_equal(out[qi, d + 1], shift)
    untouched = np.setdiff1d(np.arange(nq), qidx)
    assert (out[untouched] == 7.0).all()
    if c.float32:  # the float32 twin on the same cells, against the same sums of the rounded numbers
        q32, rows32 = q.astype(np.float32), rows.astype(np.float32)
        out32 = np.full((nq, d + 2), 7.0)
        c.cells(q32, qidx, qs, rows32, kidx, ks, out32, threads=2, dtype="float32")
        for qi, kj in zip(cells_q, cells_k, strict=True):
            s = q32[qi].astype(float) @ rows32[kj, :d].T.astype(float) + rows32[kj, d]
            e = np.exp2(s - out32[qi, d + 1 :])
            np.testing.assert_allclose(out32[qi, 0], e.sum(1), rtol=3e-6)
            np.testing.assert_allclose(
                out32[qi, 1 : d + 1], e @ rows32[kj, d + 1 :], rtol=0, atol=3e-6 * e.sum()
            )
        assert (out32[untouched] == 7.0).all()
    for bad in (
        dict(kidx=np.r_[kidx[:-1], nk]),  # a key out of range
        dict(qidx=np.r_[-1, qidx[1:]]),  # a query out of range
        dict(ks=np.r_[ks[:-1], ks[-2]]),  # a cell without keys
        dict(q=q.astype(np.float32)),  # the wrong dtype
        dict(out=out[:, :d]),  # the wrong shape
    ):
        args = dict(q=q, qidx=qidx, qs=qs, rows=rows, kidx=kidx, ks=ks, out=out) | bad
        with pytest.raises(ValueError):
            c.cells(**args)
