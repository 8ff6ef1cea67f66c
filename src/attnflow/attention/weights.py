"""Named and random weights: the worked examples of MATH.md (`worked_example`), seeded random
weights (`random_attention`, the theorem's setting, and `ensemble_attention`, the random-matrix
ensembles of ENSEMBLES), and WEIGHTS, the named families of weights (`WeightsFamily`: the
experiments' `weights` key) with the builders and labels of each family."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from .._checks import SeedLike, rng_from
from .core import Attention, attention_from_A


def worked_example(beta: float = 100.0, d: int = 3) -> Attention:
    """The worked examples of MATH.md, d = 3 (default) or d = 2: both phases are visible.

    d = 3: Q = I, K = diag(3, 1, 1/3), A = [[0, 0, 1], [0, -1/2, 0], [1, 0, 0]], V = A B^{-T}.
    A has eigenvalues 1, -1/2, -1 (gap 3/2, u_1 = (1, 0, 1)/sqrt 2); V's top eigenvector is
    (3, 0, 1)/sqrt 10, so the terminal phase moves mass away from A's top eigenspace.

    d = 2: Q = I, K = diag(3, 1/3), A = [[1/4, 3/4], [3/4, 1/4]], V = A B^{-T}. A has eigenvalues 1,
    -1/2 (gap 3/2, u_1 = (1, 1)/sqrt 2); V's top eigenvalue 1.2374 has eigenvector (0.8898, 0.4564),
    17.8 degrees from u_1. In both, ||B|| = 3 and |B^T u_1| = 2.134.

    Parameters
    ----------
    beta : float
        Inverse temperature, in (0, inf].
    d : int
        3 or 2.

    Returns
    -------
    Attention
    """
    if d == 3:
        A = np.array([[0.0, 0.0, 1.0], [0.0, -0.5, 0.0], [1.0, 0.0, 0.0]])
        return attention_from_A(A, np.diag([3.0, 1.0, 1.0 / 3.0]), beta)
    if d == 2:
        A = np.array([[0.25, 0.75], [0.75, 0.25]])
        return attention_from_A(A, np.diag([3.0, 1.0 / 3.0]), beta)
    raise ValueError(f"worked_example: d must be 2 or 3 (the examples of MATH.md), got {d!r}")


#: random_attention: the singular values of K are drawn log-uniformly in [1/COND_SPREAD, COND_SPREAD]
#: and Q is orthogonal, so cond(B) <= COND_SPREAD^2 = 4 and 1/2 <= |B^T x| <= 2 on the sphere.
COND_SPREAD = 2.0
#: random_attention(symmetric=True): A = S has top eigenvalue 1 and the others in [-1, 1 - MIN_GAP].
MIN_GAP = 0.5


def _orthogonal(d: int, rng: np.random.Generator) -> np.ndarray:
    """A Haar-random orthogonal matrix (d, d): QR of a Gaussian matrix with R's signs fixed."""
    Q, R = np.linalg.qr(rng.standard_normal((d, d)))
    return Q * np.sign(np.diag(R))


def random_attention(d: int, seed: SeedLike, beta: float = 1.0, symmetric: bool = True) -> Attention:
    """Seeded random weights (d, d) with a well-conditioned B = Q^T K.

    Q is Haar-orthogonal and K = U diag(s) W^T with U, W Haar-orthogonal and s log-uniform in
    [1/2, 2] (COND_SPREAD), so cond(B) <= 4 and 1/2 <= |B^T x| <= 2. The same seed gives the same
    weights.

    Parameters
    ----------
    d : int
        The dimension, >= 2.
    seed : int or numpy.random.Generator
        The seed of the draw.
    beta : float
        Inverse temperature, in (0, inf].
    symmetric : bool
        True (default): V = S B^{-T} with S = U_S diag(1, mu_2, ..., mu_d) U_S^T symmetric, mu_k
        uniform in [-1, 1/2], so A = V B^T = S is symmetric with a simple top eigenvalue 1 and a
        spectral gap >= 1/2 (MIN_GAP): the theorem applies. False: V Gaussian with entries of
        variance 1/d (A then is generically not symmetric).

    Returns
    -------
    Attention
    """
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 2:
        raise ValueError(f"d must be an integer >= 2 (tokens on S^(d-1)), got {d!r}")
    d = int(d)
    rng = rng_from(seed)
    Q = _orthogonal(d, rng)
    s = np.exp(rng.uniform(-math.log(COND_SPREAD), math.log(COND_SPREAD), d))
    K = _orthogonal(d, rng) @ np.diag(s) @ _orthogonal(d, rng).T
    if symmetric:
        mu = np.concatenate([[1.0], rng.uniform(-1.0, 1.0 - MIN_GAP, d - 1)])
        U = _orthogonal(d, rng)
        S = (U * mu) @ U.T
        S = (S + S.T) / 2
        B = Q.T @ K
        V = np.linalg.solve(B, S.T).T  # S B^{-T}
    else:
        V = rng.standard_normal((d, d)) / math.sqrt(d)
    return Attention(Q, K, V, beta)


#: the laws of weights = random: "conditioned" is `random_attention` (the theorem's setting by default),
#: the others are the random-matrix ensembles of the field (`ensemble_attention`)
ENSEMBLES = ("conditioned", "gaussian", "goe", "gpt2-init")
GPT2_STD = 0.02  # GPT-2's initializer_range: weights N(0, 0.02^2)


def _goe(d: int, rng: np.random.Generator) -> np.ndarray:
    """A GOE matrix scaled to an O(1) spectrum: off-diagonal entries N(0, 1/d), diagonal N(0, 2/d)."""
    G = rng.standard_normal((d, d))
    return (G + G.T) / math.sqrt(2 * d)


def ensemble_attention(d: int, seed: SeedLike, ensemble: str, beta: float = 1.0) -> Attention:
    """Seeded weights of a random-matrix ensemble (d, d).

    Parameters
    ----------
    d : int
        The dimension, >= 2.
    seed : int or numpy.random.Generator
        The seed of the draw.
    ensemble : str
        "gaussian": Q, K, V with i.i.d. N(0, 1/d) entries (B = Q^T K has entries of variance 1/d).
        "goe": Q = I, K and V independent GOE matrices (symmetric; off-diagonal N(0, 1/d), diagonal
        N(0, 2/d)): B = K symmetric. "gpt2-init": Q, K, V with i.i.d. N(0, 0.02^2) entries (GPT-2's
        initialisation). "conditioned": `random_attention(d, seed, beta)` (B well conditioned, A
        symmetric with a gap).
    beta : float
        Inverse temperature.

    Returns
    -------
    Attention
    """
    if ensemble not in ENSEMBLES:
        raise ValueError(f"ensemble must be one of {', '.join(map(repr, ENSEMBLES))}, got {ensemble!r}")
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 2:
        raise ValueError(f"d must be an integer >= 2 (tokens on S^(d-1)), got {d!r}")
    if ensemble == "conditioned":
        return random_attention(d, seed, beta)
    rng = rng_from(seed)
    d = int(d)
    if ensemble == "goe":
        return Attention(np.eye(d), _goe(d, rng), _goe(d, rng), beta)
    std = GPT2_STD if ensemble == "gpt2-init" else 1 / math.sqrt(d)
    Q, K, V = std * rng.standard_normal((3, d, d))
    return Attention(Q, K, V, beta)


# ------------------------------------------------------------------------------------- WEIGHTS


#: the largest d of drawn weights (WeightsFamily.max_d), whose spectra a config check computes on one
#: BLAS thread: 1.3 s for a non-symmetric A at d = 512 (two shared cores, load 5)
MAX_DRAWN_D = 512


@dataclass(frozen=True)
class WeightsFamily:
    """A named family of weights Q, K, V: an entry of WEIGHTS (the experiments' `weights` key).

    Adding a family is its build function and one line of WEIGHTS.

    Attributes
    ----------
    name, summary : str
        Its name; what it is, in a few words.
    d : int or None
        The dimension it fixes, or None when the experiments' `d` key chooses it (default
        `default_d`, at most `max_d`).
    keys : tuple of str
        The config keys it reads besides d, passed to `build` and `label` as keywords.
    build : callable
        build(d, **keys) -> Attention at beta = 1.
    label : callable
        label(**keys) -> its name with those keys, for titles.
    drawn : bool
        The weights are random draws, and build also takes draw = (h, k), the draw of head h in
        segment k of redrawn weights (0, 0: the family's one draw), so that several heads (`heads`)
        and redrawn weights (`redraw`) are independent draws; a family that is not drawn gives the
        same head for every (h, k).
    """

    name: str
    summary: str
    d: int | None
    keys: tuple[str, ...]
    build: Callable[..., Attention]
    label: Callable[..., str]
    default_d: int = 3
    max_d: int = MAX_DRAWN_D
    drawn: bool = False

    def head(self, d: int, keys: Mapping[str, Any], h: int = 0, k: int = 0) -> Attention:
        """Head h of segment k (beta = 1): draw (h, k) of a drawn family, the one head otherwise."""
        if self.drawn:
            return self.build(d, draw=(h, k), **keys)
        return self.build(d, **keys)

    def dimension(self, d: int | None) -> int:
        """The d these weights have, given the `d` key (None: unset); ValueError naming `d`."""
        if self.d is None:
            d = self.default_d if d is None else d
            if d < 2:
                raise ValueError(f"weights = {self.name} needs d >= 2 (tokens on S^(d-1)), got d = {d}")
            if d > self.max_d:
                raise ValueError(
                    f"weights = {self.name} draws d x d matrices and checks their spectra when a config is "
                    f"made: d <= {self.max_d}, got d = {d}; for larger d save Q, K, V to an .npz "
                    "(numpy.savez(path, Q=Q, K=K, V=V)) and pass its path"
                )
            return d
        if d is not None and d != self.d:
            raise ValueError(
                f"weights = {self.name} has d = {self.d}; d = {d} contradicts it (leave d unset)"
            )
        return self.d


def _worked_example_3d(d: int) -> Attention:
    return worked_example(1.0, d=3)


def _worked_example_2d(d: int) -> Attention:
    return worked_example(1.0, d=2)


def _random(
    d: int,
    *,
    weights_seed: int,
    symmetric: bool,
    ensemble: str = "conditioned",
    draw: tuple[int, int] = (0, 0),
) -> Attention:
    """Draw (h, k) of weights = random: draw (0, 0) seeded by weights_seed itself (as ever), the others
    by the seed sequence (weights_seed, h, k)."""
    seed: SeedLike = weights_seed if draw == (0, 0) else np.random.default_rng([weights_seed, *draw])
    if ensemble == "conditioned":
        return random_attention(d, seed, symmetric=symmetric)
    return ensemble_attention(d, seed, ensemble)


def _random_label(*, weights_seed: int, symmetric: bool, ensemble: str = "conditioned") -> str:
    if ensemble != "conditioned":
        return f"random {ensemble} (seed {weights_seed})"
    return f"random (seed {weights_seed}, {'symmetric A' if symmetric else 'fully random'})"


def _identity(d: int) -> Attention:
    return Attention(np.eye(d), np.eye(d), np.eye(d), 1.0)


def _identity_label() -> str:
    return "identity (Q = K = V = I)"


def _worked_example_3d_label() -> str:
    return "worked-example"


def _worked_example_2d_label() -> str:
    return "worked-example-2d"


def _families(*families: WeightsFamily) -> Mapping[str, WeightsFamily]:
    return MappingProxyType({f.name: f for f in families})


#: the named weights (the experiments' `weights` key; any other value is a path to an .npz of Q, K, V)
WEIGHTS: Mapping[str, WeightsFamily] = _families(
    WeightsFamily(
        "worked-example", "the d = 3 worked example of MATH.md", 3, (), _worked_example_3d,
        _worked_example_3d_label,
    ),
    WeightsFamily(
        "worked-example-2d", "the d = 2 worked example of MATH.md", 2, (), _worked_example_2d,
        _worked_example_2d_label,
    ),
    WeightsFamily(
        "random", "seeded random weights of an ensemble (conditioned: V = S B^{-T} with S symmetric "
        "unless symmetric = false; gaussian, goe, gpt2-init)", None,
        ("weights_seed", "symmetric", "ensemble"), _random, _random_label, drawn=True,
    ),
    WeightsFamily(
        "identity", "Q = K = V = I, the phase diagrams' weights", None, (), _identity, _identity_label,
    ),
)  # fmt: skip
