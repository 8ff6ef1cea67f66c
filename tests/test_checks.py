import numpy as np
import pytest
import torch

from attnflow._checks import check_points, check_times


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


def test_times():
    np.testing.assert_array_equal(check_times(2.0), [2.0])
    with pytest.raises(ValueError, match="non-decreasing"):
        check_times([0.0, 2.0, 1.0])
    with pytest.raises(ValueError, match="NaN"):
        check_times([0.0, np.nan])
