"""The registries of rho_0 (attnflow.measures.MEASURES, DISCRETISATIONS): every entry works in every
dimension it claims, and is refused, naming its key, in one it does not claim."""

import math

import numpy as np
import pytest
from scipy import integrate, special

from attnflow.measures import DISCRETISATIONS, MEASURES, Dims
from attnflow.measures.densities import vmf_normaliser
from attnflow.measures.geometry import sphere_area
from attnflow.measures.sampling import sample_uniform

CLAIMED_D = [2, 3, 4, 6]  # a family that claims every d >= 2 is tested in these


def params_of(family, d, kappa=1.7):
    mean = np.arange(1.0, d + 1.0)
    given = {"mean": mean / np.linalg.norm(mean), "kappa": kappa}
    return {p: given[p] for p in family.parameters}


def dims_of(entry):
    return list(entry.dims.only) or CLAIMED_D


def cosine_law(d):
    """The density of t = <m, x> for x uniform on S^{d-1}: (1 - t^2)^((d-3)/2) / B(1/2, (d-1)/2),
    as the weight of scipy's quad ("alg" weight on [-1, 1]) and its constant."""
    a = (d - 3) / 2.0
    return {"weight": "alg", "wvar": (a, a)}, 1.0 / special.beta(0.5, (d - 1) / 2.0)


def law_of_t(kappa, Z, power=0):
    """t -> t^power exp(kappa (t - 1)) / Z: the normalised vMF density (uniform: kappa = 0, Z = 1) as a
    function of t = <m, x>, times t^power."""

    def f(t):
        return t**power * math.exp(kappa * (t - 1.0)) / Z

    return f


def expect(f_of_t, d):
    """E[f(<m, x>)] for x uniform on S^{d-1}, by one-dimensional quadrature."""
    kw, c = cosine_law(d)
    return c * integrate.quad(f_of_t, -1.0, 1.0, **kw, epsabs=1e-13, epsrel=1e-12)[0]


def test_sphere_area_closed_forms():
    assert sphere_area(2) == pytest.approx(2 * math.pi, rel=1e-15)
    assert sphere_area(3) == pytest.approx(4 * math.pi, rel=1e-15)
    assert sphere_area(4) == pytest.approx(2 * math.pi**2, rel=1e-15)
    # the 1-D law of <m, x> integrates to 1: the area's Gamma functions and the Beta constant agree
    for d in (2, 3, 5, 9):
        assert expect(lambda t: 1.0, d) == pytest.approx(1.0, rel=1e-10)


@pytest.mark.parametrize("d", [2, 3, 4, 5, 7, 12, 400])
@pytest.mark.parametrize("kappa", [1e-3, 0.3, 2.0, 40.0])
def test_vmf_normaliser_is_the_integral_of_the_density(d, kappa):
    """Z = integral exp(kappa (t - 1)) under the uniform law of t = <m, x>, in closed form for d = 2, 3
    and by the scaled Bessel function (or, where it underflows, its series) beyond."""
    if d <= 12:
        Z = expect(lambda t: math.exp(kappa * (t - 1.0)), d)
    else:  # the law of t is sharply peaked: integrate its logarithm's exponential directly
        a, logc = (d - 3) / 2.0, -special.betaln(0.5, (d - 1) / 2.0)
        Z = integrate.quad(
            lambda t: math.exp(kappa * (t - 1.0) + a * math.log1p(-t * t) + logc),
            -1.0,
            1.0,
            points=[kappa / d],
            epsabs=0.0,
            epsrel=1e-12,
            limit=200,
        )[0]
    assert vmf_normaliser(d, kappa) == pytest.approx(Z, rel=1e-9)
    assert vmf_normaliser(d, 0.0) == 1.0


@pytest.mark.parametrize("name", list(MEASURES))
def test_every_density_works_in_every_dimension_it_claims(name):
    family = MEASURES[name]
    for d in dims_of(family):
        params = params_of(family, d)
        rho = family.bind(d, **params)
        X = rho.sample(40_000, seed=5)
        assert X.shape == (40_000, d)
        np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-14)
        f = rho.unnormalised()(X)
        assert np.all(f > 0) and np.max(f) <= 1.0 + 1e-15
        # the normalised density integrates to 1 against the uniform law, and its mean of <m, x> is
        # that of the sample (sampler and density describe the same law): 5 standard errors
        m = params.get("mean", np.eye(d)[0])
        g = rho.normalised()
        kappa, Z = params.get("kappa", 0.0), rho.normaliser()
        assert expect(law_of_t(kappa, Z), d) == pytest.approx(1.0, rel=1e-9)
        U = sample_uniform(200_000, d, seed=1)
        assert np.mean(g(U)) == pytest.approx(1.0, abs=5 * np.std(g(U)) / math.sqrt(U.shape[0]))
        t = X @ m
        mean_t = expect(law_of_t(kappa, Z, power=1), d)
        assert abs(t.mean() - mean_t) < 5 * t.std() / math.sqrt(t.size)
        # sup of f(x) + f(-x) is a bound, reached at x = m
        both = g(U) + g(-U)
        assert np.max(both) <= rho.pair_sup() * (1 + 1e-12)
        assert g(m[None])[0] + g(-m[None])[0] == pytest.approx(rho.pair_sup(), rel=1e-12)


@pytest.mark.parametrize("name", list(MEASURES))
def test_a_density_is_refused_where_it_does_not_exist_naming_its_key(name):
    family = MEASURES[name]
    with pytest.raises(ValueError, match=f"density = {name} exists for d >= 2 only") as err:
        family.bind(1, **params_of(family, 2))
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=f"density = {name} takes the parameters"):
        family.bind(3, **params_of(family, 3), extra=1.0)


def carried(entry):
    return [n for n in MEASURES if entry.carries(n)]


@pytest.mark.parametrize("name", [n for n, e in DISCRETISATIONS.items() if not e.per_beta])
def test_every_discretisation_works_in_every_dimension_it_claims(name):
    """Nodes on the sphere whose (weighted) mean of <m, x> is that of rho_0: exactly enough for the
    deterministic ones, within 5 standard errors for the i.i.d. one."""
    entry = DISCRETISATIONS[name]
    for d in dims_of(entry):
        for density in carried(entry):
            family = MEASURES[density]
            params = params_of(family, d)
            rho = family.bind(d, **params)
            N = 4096
            nodes = entry.nodes(N, rho, seed=3)
            assert nodes.X.shape == (N, d)
            np.testing.assert_allclose(np.linalg.norm(nodes.X, axis=1), 1.0, atol=1e-14)
            w = np.full(N, 1.0 / N) if nodes.weights is None else nodes.weights
            assert nodes.weights is None or (np.all(w > 0) and w.sum() == pytest.approx(1.0, abs=1e-14))
            assert (nodes.weights is None) == (rho.is_uniform or entry.name != "quadrature")
            m = params.get("mean", np.arange(1.0, d + 1.0) / np.linalg.norm(np.arange(1.0, d + 1.0)))
            t = nodes.X @ m
            want = expect(law_of_t(params.get("kappa", 0.0), rho.normaliser(), power=1), d)
            tol = 5 * t.std() / math.sqrt(N) if entry.seeded else 2e-3
            assert abs(w @ t - want) < tol
            if entry.seeded:
                again = entry.nodes(N, rho, seed=3).X
                np.testing.assert_array_equal(again, nodes.X)
                assert not np.array_equal(entry.nodes(N, rho, seed=4).X, nodes.X)


@pytest.mark.parametrize("name", list(DISCRETISATIONS))
def test_a_discretisation_is_refused_where_it_does_not_exist_naming_its_key(name):
    entry = DISCRETISATIONS[name]
    outside = [d for d in (2, 3, 4, 5) if d not in entry.dims]
    for d in outside:
        rho = MEASURES["uniform"].bind(d)
        with pytest.raises(ValueError, match=f"init = {name} exists for d = ") as err:
            entry.nodes(64, rho, seed=0)
        assert "\n" not in str(err.value)
    for density in (n for n in MEASURES if not entry.carries(n)):
        d = dims_of(entry)[0]
        rho = MEASURES[density].bind(d, **params_of(MEASURES[density], d))
        with pytest.raises(ValueError, match=f"init = {name} carries density = uniform only"):
            entry.nodes(64, rho, seed=0)
    if entry.per_beta:  # graded: built by the flow's separatrices at each beta
        with pytest.raises(ValueError, match=f"init = {name} depends on beta"):
            entry.nodes(64, MEASURES["uniform"].bind(2), seed=0)
    assert outside or not entry.dims.only


def test_dims_say_where_they_hold():
    assert str(Dims()) == "d >= 2" and 2 in Dims() and 1 not in Dims() and 17 in Dims()
    assert str(Dims((3,))) == "d = 3" and 3 in Dims((3,)) and 2 not in Dims((3,))
    assert str(Dims((2, 3))) == "d = 2 or 3"
    assert str(DISCRETISATIONS["quadrature"].dims) == "d >= 2"  # quasi-Monte Carlo nodes for d >= 4
