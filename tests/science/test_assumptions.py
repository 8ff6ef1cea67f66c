"""The theorem's assumptions and Corollary 2's reference rates, on planted and hand-computed cases."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import ortho_group

from attnflow.attention import Attention, attention_from_A, worked_example
from attnflow.io import to_json
from attnflow.measures.sampling import sample_uniform
from attnflow.science.assumptions import check_assumptions, reference_rates, subspace_angle


def planted(mu, cond: float = 5.0, d: int | None = None, seed: int = 0, asym: float = 0.0) -> Attention:
    """A = U diag(mu) U^T + asym * (antisymmetric unit-Frobenius K); B with condition number `cond`."""
    mu = np.asarray(mu, dtype=float)
    d = mu.size
    rng = np.random.default_rng(seed)
    U = ortho_group.rvs(d, random_state=rng)
    A = U @ np.diag(mu) @ U.T
    G = rng.standard_normal((d, d))
    K = (G - G.T) / np.linalg.norm(G - G.T)
    A = A + asym * K
    R1, R2 = ortho_group.rvs(d, random_state=rng), ortho_group.rvs(d, random_state=rng)
    B = R1 @ np.diag(np.geomspace(2.0, 2.0 / cond, d)) @ R2
    return attention_from_A(A, B)


def test_planted_gap_condition_number_and_eigenvalues():
    mu = [2.0, 0.5, -0.3, -1.0]
    rep = check_assumptions(planted(mu, cond=1e3))
    one = rep.items[0]
    assert one.status == "ok" and rep.ok
    n = one.numbers
    assert n["gap"] == pytest.approx(1.5, abs=1e-10)
    assert n["mu1"] == pytest.approx(2.0, abs=1e-10) and n["mu2"] == pytest.approx(0.5, abs=1e-10)
    np.testing.assert_allclose(n["eigenvalues"], mu, atol=1e-10)
    assert n["cond_B"] == pytest.approx(1e3, rel=1e-10)
    assert n["multiplicity"] == 1
    assert n["asymmetry"] < 1e-14
    assert rep.items[1].status == "not checkable" and rep.items[2].status == "not checkable"


def test_planted_two_dimensional_top_eigenspace():
    """A double top eigenvalue still has a gap: mu_2 is the next distinct eigenvalue."""
    rep = check_assumptions(planted([1.0, 1.0, -0.5, -2.0], seed=3))
    n = rep.items[0].numbers
    assert rep.items[0].status == "ok"
    assert n["multiplicity"] == 2
    assert n["gap"] == pytest.approx(1.5, abs=1e-10)
    assert n["mu2"] == pytest.approx(-0.5, abs=1e-10)


def test_planted_asymmetry_fails_with_its_number():
    """A = S + e K, S symmetric, K antisymmetric with ||K||_F = 1: S and K are Frobenius-orthogonal, so
    ||A - A^T||_F / 2 / ||A||_F = e / sqrt(||S||_F^2 + e^2), ||S||_F^2 = sum mu_k^2."""
    mu = [1.0, 0.2, -0.7]
    e = 0.3
    rep = check_assumptions(planted(mu, asym=e, seed=1))
    one = rep.items[0]
    assert one.status == "fails" and not rep.ok
    want = e / math.sqrt(sum(m * m for m in mu) + e * e)
    assert one.numbers["asymmetry"] == pytest.approx(want, abs=1e-12)
    assert "not symmetric" in one.reason and "B is singular" not in one.reason


def test_singular_B_and_no_gap_fail_with_reasons():
    att = Attention(np.eye(3), np.diag([1.0, 2.0, 0.0]), np.eye(3))
    rep = check_assumptions(att)
    assert rep.items[0].status == "fails" and "B is singular" in rep.items[0].reason
    assert rep.items[0].numbers["cond_B"] == math.inf
    assert rep.to_dict()["items"][0]["numbers"]["cond_B"] == math.inf  # plain values
    d = json.loads(to_json(rep.to_dict()))  # the one JSON encoder: inf is written as null
    assert d["items"][0]["numbers"]["cond_B"] is None
    flat = check_assumptions(attention_from_A(2.0 * np.eye(3), np.eye(3)))
    assert flat.items[0].status == "fails" and "no spectral gap" in flat.items[0].reason
    assert flat.to_dict()["items"][0]["numbers"]["mu2"] is None  # no mu_2


def test_moments_on_tilted_great_circle():
    """Top eigenspace span(e1, e2) of A = diag(1, 1, -1); rho_0 uniform on the great circle
    x(theta) = (cos th, sin th cos a, sin th sin a), k = sin a.  Then |P_1^perp x| = k |sin th|,
    |P_1 x|^2 = 1 - k^2 sin^2 th, and with (1/2pi) int dth / (1 - k^2 sin^2 th) = 1 / sqrt(1 - k^2):

        M_2 = 1 / sqrt(1 - k^2) - 1 = 1 / cos a - 1,
        M_1 = (2/pi) int_0^1 k dc / sqrt(1 - k^2 + k^2 c^2)   (c = cos th)
            = (2/pi) asinh(tan a) = (2/pi) atanh(sin a).

    Equal-weight nodes th_j = 2 pi (j + 1/2) / n: the trapezoid rule, exact to rounding for the smooth
    M_2 integrand and O(n^-2) for M_1 (kink of |sin th| at th = 0, pi).  min |P_1 x| = cos a.
    """
    a = 0.7
    n = 2**16
    th = 2 * np.pi * (np.arange(n) + 0.5) / n
    X = np.stack([np.cos(th), np.sin(th) * np.cos(a), np.sin(th) * np.sin(a)], axis=1)
    att = attention_from_A(np.diag([1.0, 1.0, -1.0]), np.diag([2.0, 1.0, 0.5]))
    rep = check_assumptions(att, X)
    two = rep.items[1]
    assert two.status == "ok"
    assert two.numbers["M2"] == pytest.approx(1 / math.cos(a) - 1, abs=1e-12)
    assert two.numbers["M1"] == pytest.approx(2 / math.pi * math.atanh(math.sin(a)), abs=1e-9)
    assert two.numbers["min_abs_P1x"] == pytest.approx(math.cos(a), abs=1e-8)


def test_uniform_circle_line_eigenspace_moments_diverge():
    """d = 2, top eigenspace the line e1: M_p = (1/2pi) int |tan th|^p dth, infinite for p >= 1
    (|tan th| ~ 1/|th - pi/2|).  On n midpoints th_j = 2 pi (j + 1/2) / n the sample M_1 is
    (2/pi) sum_{j < n/4} 1/(j + 1/2) + O(1/n) ~ (2/pi) log n + const: quadrupling n adds (2/pi) log 4.
    The sample M_2 is n/2 - 1 (below), growing like n.  The report says which moments are finite for
    uniform data (p < dim of the top eigenspace = 1)."""
    att = attention_from_A(np.diag([1.0, -1.0]), np.diag([1.0, 2.0]))

    def m1(n):
        th = 2 * np.pi * (np.arange(n) + 0.5) / n
        return check_assumptions(att, np.stack([np.cos(th), np.sin(th)], 1), kind="uniform").items[1]

    small, big = m1(400), m1(1600)
    assert big.numbers["M1"] - small.numbers["M1"] == pytest.approx(2 / math.pi * math.log(4), abs=1e-5)
    # sum_{k=1}^{m} tan^2((2k - 1) pi / (4m)) = m (2m - 1); with n = 4m midpoints, M_2 = n/2 - 1 exactly
    assert small.numbers["M2"] == pytest.approx(199.0, rel=1e-12)
    assert big.numbers["M2"] == pytest.approx(799.0, rel=1e-12)
    assert small.numbers["moments_finite_for_p_below"] == 1
    assert "p < 1" in small.reason


def test_token_where_pi_is_undefined_fails():
    att = worked_example()
    X = sample_uniform(10, 3, seed=0)
    X[7] = np.array([1.0, 0.0, -1.0]) / math.sqrt(2)  # u_3, orthogonal to u_1 = (1, 0, 1)/sqrt 2
    rep = check_assumptions(att, X, kind="points")
    two = rep.items[1]
    assert two.status == "fails" and not rep.ok
    assert two.numbers["argmin"] == 7 and two.numbers["min_abs_P1x"] < 1e-15
    assert "token 7" in two.reason
    assert rep.items[2].status == "not checkable"


def test_density_kinds_and_ok_logic():
    att = worked_example()
    X = sample_uniform(50, 3, seed=1)
    for kind, status in [
        ("uniform", "ok"),
        ("vmf", "ok"),
        ("points", "not checkable"),
        (None, "not checkable"),
    ]:
        rep = check_assumptions(att, X, kind=kind)
        assert rep.items[2].status == status
        assert rep.ok  # "not checkable" does not fail the report
    text = str(check_assumptions(att, X, kind="uniform"))
    for word in ("B invertible", "positive density", "gap", "M1=", "ok"):
        assert word in text
    d = check_assumptions(att, X).to_dict()
    assert json.loads(json.dumps(d, allow_nan=False)) == d
    assert d["ok"] is True and len(d["items"]) == 3


def test_nonsymmetric_report_lists_complex_eigenvalues():
    T = np.array([[0.3, 2.0, 0.0], [-2.0, 0.3, 0.0], [0.0, 0.0, -0.5]])
    rep = check_assumptions(attention_from_A(T, np.eye(3)), sample_uniform(5, 3, seed=0))
    assert rep.items[0].status == "fails"
    d = json.loads(to_json(rep.to_dict()))  # complex numbers are written as [re, im]
    eig = d["items"][0]["numbers"]["eigenvalues"]
    np.testing.assert_allclose(sorted(map(tuple, eig)), [(-0.5, 0.0), (0.3, -2.0), (0.3, 2.0)], atol=1e-12)
    assert "spectral" in rep.items[1].reason


def test_bad_input():
    att = worked_example()
    X = sample_uniform(4, 3, seed=0)
    with pytest.raises(ValueError, match="kind"):
        check_assumptions(att, X, kind="gaussian")
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="X0 contains NaN"):
        check_assumptions(att, bad)
    with pytest.raises(ValueError, match="X0 has d = 4"):
        check_assumptions(att, sample_uniform(4, 4, seed=0))
    with pytest.raises(TypeError, match="att must be"):
        check_assumptions(np.eye(3))
    with pytest.raises(TypeError, match="att must be"):
        reference_rates("head")
    with pytest.raises(ValueError, match="same number of rows"):
        subspace_angle(np.eye(3)[:, :1], np.eye(4)[:, :1])
    with pytest.raises(ValueError, match="linearly independent"):
        subspace_angle(np.ones((3, 2)), np.eye(3)[:, :1])
    with pytest.raises(ValueError, match="W contains NaN"):
        subspace_angle(np.eye(3)[:, :1], np.full((3, 1), np.nan))


def test_reference_rates_worked_example_by_hand():
    """A: eigenvalues 1, -1/2, -1, u_1 = (1,0,1)/sqrt2, u_2 = e_2, u_3 = (1,0,-1)/sqrt2; B = diag(3,1,1/3).
    |B^T u_1| = |B^T u_3| = sqrt(9 + 1/9)/sqrt2 = sqrt(41)/3, |B^T u_2| = 1, gamma = 3/2, ||B|| = 3.
      guaranteed = gamma / (2 ||B||) = 1/4
      k = 1: gamma / |B^T u_1|                = 4.5 / sqrt41 = 0.70278
      k = 2: (1 + 1/2) / (2 * 1)              = 0.75
      k = 3: ((1 + 1) + (-1/2 + 1)) / (2 sqrt41 / 3) = 3.75 / sqrt41 = 0.58565  <- c*
    V = A B^{-T} = [[0,0,3],[0,-1/2,0],[1/3,0,0]]: top eigenvector by real part (3,0,1)/sqrt10, at angle
    arccos(4/sqrt20) = atan(1/2) from u_1; by modulus the eigenvalues +1, -1 tie, giving span(e1, e3),
    which contains u_1 (angle 0).
    """
    r = reference_rates(worked_example())
    assert r["guaranteed"] == pytest.approx(0.25, abs=1e-12)
    assert r["c_star"] == pytest.approx(3.75 / math.sqrt(41), abs=1e-12)
    rates = [t["rate"] for t in r["terms"]]
    np.testing.assert_allclose(rates, [4.5 / math.sqrt(41), 0.75, 3.75 / math.sqrt(41)], atol=1e-12)
    assert r["gamma"] == pytest.approx(1.5) and r["norm_B"] == pytest.approx(3.0)
    assert r["angle_A_V_real"] == pytest.approx(math.atan(0.5), abs=1e-12)
    assert r["angle_A_V_magnitude"] == pytest.approx(0.0, abs=1e-7)


def test_reference_rates_diagonal():
    """A = diag(2, 1/2, -1), B = diag(4, 1, 1/2): u_k = e_k, |B^T u_k| = 4, 1, 1/2, gamma = 3/2.
    Terms: 1.5/4 = 0.375; 1.5/(2*1) = 0.75; (3 + 1.5)/(2 * 0.5) = 4.5.  c* = 0.375, guaranteed 1.5/8.
    V = A B^{-1} = diag(1/2, 1/2, -2): top by real part span(e1, e2) (angle 0 to e1), by modulus e3 (pi/2)."""
    r = reference_rates(attention_from_A(np.diag([2.0, 0.5, -1.0]), np.diag([4.0, 1.0, 0.5])))
    np.testing.assert_allclose([t["rate"] for t in r["terms"]], [0.375, 0.75, 4.5], atol=1e-12)
    assert r["c_star"] == pytest.approx(0.375) and r["guaranteed"] == pytest.approx(0.1875)
    assert r["angle_A_V_real"] == pytest.approx(0.0, abs=1e-12)
    assert r["angle_A_V_magnitude"] == pytest.approx(math.pi / 2, abs=1e-12)


def test_reference_rates_multiple_top_eigenvalue():
    """A = diag(1, 1, -1), B = diag(3, 1, 2): top eigenspace span(e1, e2); the slowest limit point has
    max |B^T u| = ||B^T U_1|| = 3, so the first term is gamma / 3 = 2/3; the -1 eigenvector e3 has
    (1 + 1) + (1 + 1) = 4 above it: 4 / (2 * 2) = 1.  c* = 2/3, the same in any rotated frame."""
    r = reference_rates(attention_from_A(np.diag([1.0, 1.0, -1.0]), np.diag([3.0, 1.0, 2.0])))
    assert [t["dim"] for t in r["terms"]] == [2, 1]
    np.testing.assert_allclose([t["rate"] for t in r["terms"]], [2 / 3, 1.0], atol=1e-12)
    assert r["c_star"] == pytest.approx(2 / 3)
    R = ortho_group.rvs(3, random_state=0)
    rr = reference_rates(
        attention_from_A(R @ np.diag([1.0, 1.0, -1.0]) @ R.T, R @ np.diag([3.0, 1.0, 2.0]) @ R.T)
    )
    assert rr["c_star"] == pytest.approx(2 / 3, abs=1e-10)


def test_reference_rates_nonsymmetric_gives_note():
    T = np.array([[1.0, 1.5], [0.0, -0.5]])
    r = reference_rates(attention_from_A(T, np.eye(2)))
    assert r["c_star"] is None and r["guaranteed"] is None and "not symmetric" in r["note"]
    assert 0 <= r["angle_A_V_real"] <= math.pi / 2


def test_subspace_angle_known_values():
    th = 0.4
    assert subspace_angle([1.0, 0.0], [math.cos(th), math.sin(th)]) == pytest.approx(th, abs=1e-14)
    # a plane and a line at angle th out of it; bases need not be orthonormal
    plane = np.array([[1.0, 1.0], [0.0, 2.0], [0.0, 0.0]])
    line = np.array([[0.0], [math.cos(th)], [math.sin(th)]])
    assert subspace_angle(plane, line) == pytest.approx(th, abs=1e-14)
    assert subspace_angle(np.eye(3)[:, :2], np.eye(3)[:, 1:]) == pytest.approx(math.pi / 2)


@settings(max_examples=25, deadline=None)
@given(d=st.integers(2, 5), seed=st.integers(0, 10_000))
def test_property_c_star_at_least_guaranteed_and_rotation_invariant(d, seed):
    """c* >= gamma/(2||B||): each term has numerator >= gamma and |B^T u| <= ||B||.  Both rates are
    invariant under rotation of the whole problem."""
    rng = np.random.default_rng(seed)
    mu = np.sort(rng.uniform(-1, 1, d))[::-1]
    mu[0] += 0.1
    att = planted(mu, cond=float(rng.uniform(1, 20)), seed=seed)
    r = reference_rates(att)
    assert r["c_star"] >= r["guaranteed"] * (1 - 1e-12)
    R = ortho_group.rvs(d, random_state=seed) if d > 1 else np.eye(d)
    rot = Attention(R @ att.Q @ R.T, R @ att.K @ R.T, R @ att.V @ R.T)
    rr = reference_rates(rot)
    assert rr["c_star"] == pytest.approx(r["c_star"], rel=1e-9)
    assert rr["guaranteed"] == pytest.approx(r["guaranteed"], rel=1e-9)


# --------------------------------------------------------------------------- headline and moments


def test_headline_counts_not_checkable_apart_from_ok():
    """Never "ok" for the whole report when some assumptions could not be checked."""
    att = worked_example()
    bare = check_assumptions(att)
    assert bare.counts == {"fails": 0, "ok": 1, "not checkable": 2}
    assert bare.headline == "1 ok, 2 not checkable (none fails)" and bare.ok
    assert str(bare).splitlines()[0] == "Assumptions of the theorem: 1 ok, 2 not checkable (none fails)"
    assert bare.to_dict()["counts"] == bare.counts
    # all three checkable and met: a top eigenspace of dimension 3 makes M_1, M_2 finite for uniform data
    A = np.diag([1.0, 1.0, 1.0, -1.0])
    met = check_assumptions(
        attention_from_A(A, np.diag([1.0, 2.0, 3.0, 4.0])), sample_uniform(50, 4, seed=0), "uniform"
    )
    assert met.headline == "all 3 ok" and met.ok
    X = sample_uniform(10, 3, seed=0)
    X[3] = np.array([1.0, 0.0, -1.0]) / math.sqrt(2)  # on P_1 x = 0
    bad = check_assumptions(att, X, kind="points")
    assert bad.headline == "NOT MET (1 fails, 1 ok, 1 not checkable)" and not bad.ok
    assert bad.items[1].short == "token 3 on P_1 x = 0"


@pytest.mark.parametrize(("m", "finite"), [(1, (False, False)), (2, (True, False)), (3, (True, True))])
def test_assumption_2_says_which_moments_are_finite_and_is_never_ok_beside_an_infinite_one(m, finite):
    """Uniform rho_0 on S^3, top eigenspace of dimension m: M_p(rho_0) < inf exactly for p < m."""
    d = 4
    A = np.diag([1.0] * m + [-1.0] * (d - m))
    att = attention_from_A(A, np.diag([1.0, 2.0, 3.0, 4.0]))
    X = sample_uniform(200, d, seed=1)
    two = check_assumptions(att, X, kind="uniform").items[1]
    assert (two.numbers["M1_finite"], two.numbers["M2_finite"]) == finite
    assert two.numbers["moments_finite_for_p_below"] == m
    assert f"p < {m}" in two.reason and "theorem needs" in two.reason
    if all(finite):
        assert two.status == "ok"
    else:
        assert two.status == "not checkable"
        assert (
            two.short == " = ".join(f"M_{p}" for p, f in zip((1, 2), finite, strict=True) if not f) + " = inf"
        )
    # the same tokens as a bare cloud (the empirical measure): every M_p is finite
    cloud = check_assumptions(att, X).items[1]
    assert cloud.status == "ok" and cloud.numbers["M1_finite"] and cloud.numbers["M2_finite"]
    assert cloud.numbers["M1"] == two.numbers["M1"]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), kind=st.sampled_from([None, "points", "uniform", "vmf"]))
def test_no_ok_beside_an_infinite_moment(seed, kind):
    rng = np.random.default_rng(seed)
    d = int(rng.integers(2, 6))
    mu = np.sort(rng.choice([1.0, 0.5, -0.5], size=d))[::-1]
    att = planted(mu, seed=seed)
    X = sample_uniform(20, d, seed=seed)
    two = check_assumptions(att, X, kind=kind).items[1]
    if two.status == "ok":
        assert two.numbers["M1_finite"] and two.numbers["M2_finite"]


def test_check_command_headline_and_exit_codes(tmp_path):
    """`attnflow check` prints the counted headline; exit 0 while no checkable assumption fails."""
    from typer.testing import CliRunner

    from attnflow.cli import app

    att = worked_example()
    np.savez(tmp_path / "w.npz", Q=att.Q, K=att.K, V=att.V)
    np.save(tmp_path / "X0.npy", sample_uniform(100, 3, seed=0))
    runner = CliRunner()
    plain = runner.invoke(app, ["check", str(tmp_path / "w.npz")])
    assert plain.exit_code == 0 and "Assumptions of the theorem: 1 ok, 2 not checkable" in plain.output
    uniform = runner.invoke(
        app, ["check", str(tmp_path / "w.npz"), "--x0", str(tmp_path / "X0.npy"), "--kind", "uniform"]
    )
    assert uniform.exit_code == 0, uniform.output
    assert "2 ok, 1 not checkable" in uniform.output and "M_1 = M_2 = inf" in uniform.output
    data = json.loads(
        runner.invoke(
            app,
            [
                "check",
                str(tmp_path / "w.npz"),
                "--x0",
                str(tmp_path / "X0.npy"),
                "--kind",
                "uniform",
                "--json",
            ],
        ).output
    )
    assert data["counts"] == {"fails": 0, "ok": 2, "not checkable": 1}
    assert data["items"][1]["numbers"]["M1_finite"] is False
