import numpy as np
import pytest
import torch

import attnflow as af
from attnflow import _checks
from attnflow._checks import (
    check_beta,
    check_betas,
    check_device,
    check_points,
    check_rtol_for_dtype,
    check_saved_memory,
    check_times,
    check_weights,
)
from attnflow.attention import check_attention


def test_points_ok_and_batched():
    X = np.eye(3)
    assert check_points(X).shape == (3, 3)
    assert check_points(np.stack([X, X])).shape == (2, 3, 3)


def test_points_torch_input():
    X = torch.eye(3, dtype=torch.float32)
    out = check_points(X)
    assert isinstance(out, np.ndarray) and out.dtype == np.float64


@pytest.mark.parametrize(
    ("X", "match"),
    [
        (np.ones(3), r"shape \(N, d\) or \(M, N, d\)"),
        (np.zeros((0, 3)), "empty"),
        (np.ones((4, 1)), "d >= 2"),
        (np.array([[1.0, np.nan], [0.0, 1.0]]), "NaN or inf"),
        (np.array([[1.0, np.inf], [0.0, 1.0]]), "NaN or inf"),
        (np.array([[2.0, 0.0], [0.0, 1.0]]), "unit rows"),
    ],
)
def test_points_bad(X, match):
    with pytest.raises(ValueError, match=match):
        check_points(X, "X0")


def test_points_mismatched_d_and_normalize():
    with pytest.raises(ValueError, match="d = 2 columns but the attention matrices are 3 x 3"):
        check_points(np.eye(2), d=3)
    Y = check_points(np.array([[3.0, 4.0]]), normalize=True)
    np.testing.assert_allclose(Y, [[0.6, 0.8]])
    with pytest.raises(ValueError, match="zero row"):
        check_points(np.zeros((1, 2)), normalize=True)


def test_beta_scalar():
    assert check_beta(2) == 2.0 and isinstance(check_beta(np.float32(2.5)), float)
    assert check_beta(np.inf) == np.inf
    with pytest.raises(ValueError, match=r"^beta must be in \(0, inf\], got 0$"):
        check_beta(0)
    with pytest.raises(ValueError, match=r"^--beta must be in \(0, inf\], got nan$"):
        check_beta(float("nan"), "--beta")
    with pytest.raises(ValueError, match=r"^beta must be in \(0, inf\) \(beta = inf, the zero-temperature"):
        check_beta(np.inf, finite=True)
    with pytest.raises(TypeError, match=r"^beta must be a real number in \(0, inf\], got 'x'$"):
        check_beta("x")


def test_betas_list():
    out = check_betas([10, 2.0, 30])
    assert out.dtype == np.float64 and out.tolist() == [10.0, 2.0, 30.0]  # kept in order
    assert check_betas(torch.tensor([1.0, 2.0])).tolist() == [1.0, 2.0]
    assert check_betas([1.0, np.inf], finite=False).tolist() == [1.0, np.inf]
    assert check_betas([3.0, 3.0]).tolist() == [3.0, 3.0]  # duplicates only refused on request


@pytest.mark.parametrize(
    ("betas", "kw", "error", "match"),
    [
        ([], {}, ValueError, r"^betas must be a non-empty 1-D sequence of numbers, got shape \(0,\)$"),
        ([[1.0, 2.0]], {}, ValueError, r"^betas must be a non-empty 1-D .* got shape \(1, 2\)$"),
        (5.0, {}, ValueError, r"^betas must be a non-empty 1-D .* got shape \(\)$"),
        (["a"], {}, TypeError, r"^betas must be a sequence of numbers, got \['a'\]$"),
        ([1.0, -1.0], {}, ValueError, r"^betas must be finite and > 0, got \[1.0, -1.0\]$"),
        ([1.0, np.nan], {"finite": False}, ValueError, r"^betas must be in \(0, inf\], got \[1.0, nan\]$"),
        ([1.0, np.inf], {}, ValueError, r"^betas must be finite and > 0 \(beta = inf, the zero-temperature"),
        ([2.0, 1.0, 2.0], {"distinct": True}, ValueError, r"^my betas must be distinct, got \[2.0, 1.0"),
    ],
)
def test_betas_bad(betas, kw, error, match):
    name = "my betas" if kw.get("distinct") else "betas"
    with pytest.raises(error, match=match) as info:
        check_betas(betas, name, **kw)
    assert "\n" not in str(info.value)  # one line


def test_times():
    np.testing.assert_array_equal(check_times(2.0), [2.0])
    with pytest.raises(ValueError, match="non-decreasing"):
        check_times([0.0, 2.0, 1.0])
    with pytest.raises(ValueError, match="NaN"):
        check_times([0.0, np.nan])


def test_attention():
    att = af.worked_example(10.0)
    assert check_attention(att) is att
    with pytest.raises(TypeError, match=r"att must be an attnflow\.Attention, got ndarray"):
        check_attention(np.eye(3))


def test_weights():
    w = check_weights([0.25, 0.75], 2)
    assert w.dtype == np.float64 and w.shape == (2,)
    assert check_weights(np.full((3, 4), 0.25), 4).shape == (3, 4)
    check_weights(np.full(10, 0.1) * (1 + 1e-13), 10)  # within 1e-12 of summing to 1
    with pytest.raises(ValueError, match="sum to 1"):
        check_weights([0.3, 0.3], 2)


def test_device():
    assert check_device(None).type == "cpu"
    assert check_device(None, torch.zeros(1)).type == "cpu"
    assert check_device("cpu") == torch.device("cpu")


def test_rtol_for_dtype_boundary():
    check_rtol_for_dtype(1e-5, "float32", "adaptive")
    check_rtol_for_dtype(1e-12, "float64", "adaptive")
    check_rtol_for_dtype(1e-12, "float32", "rk4")  # fixed steps take no tolerance
    with pytest.raises(ValueError, match=r"rtol = 9\.9e-06"):
        check_rtol_for_dtype(9.9e-6, "float32", "adaptive")


def test_saved_memory(monkeypatch):
    check_saved_memory(10, (100, 3), 8)  # 24 kB: fine anywhere
    monkeypatch.setattr(_checks, "available_memory", lambda device=None: None)
    check_saved_memory(10**9, (10**6, 3), 8)  # unknown memory: no refusal
    monkeypatch.setattr(_checks, "available_memory", lambda device=None: 10**6)
    with pytest.raises(ValueError, match=r"10 times x N = 100000 tokens x d = 3 x 4 bytes"):
        check_saved_memory(10, (100_000, 3), 4)


def test_torch_build_read_without_importing_torch(tmp_path, monkeypatch):
    """The CPU/GPU build of torch is read from its version file: a CPU build says no, a CUDA build yes,
    a file without the fields cannot tell (None)."""
    import importlib.util
    from types import SimpleNamespace

    pkg = tmp_path / "torch"
    pkg.mkdir()
    spec = SimpleNamespace(submodule_search_locations=[str(pkg)])
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
    (pkg / "version.py").write_text("cuda: Optional[str] = None\nhip: Optional[str] = None\n")
    assert _checks.torch_build_has_gpu() is False
    (pkg / "version.py").write_text("cuda: Optional[str] = '12.8'\nhip: Optional[str] = None\n")
    assert _checks.torch_build_has_gpu() is True
    (pkg / "version.py").write_text("__version__ = '2.13.0'\n")
    assert _checks.torch_build_has_gpu() is None
