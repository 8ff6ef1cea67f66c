"""Single-head attention weights on the sphere: B = Q^T K, A = V B^T and their spectra (MATH.md);
the worked examples, seeded random weights (ENSEMBLES) and weights from a file; WEIGHTS, the named
ones."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any, cast

import numpy as np

from ._checks import SeedLike, check_beta, check_matrix, rng_from

SYMMETRY_TOL = 1e-10  # relative antisymmetric part below which A is treated as symmetric
TOP_TOL = 1e-9  # eigenvalues within TOP_TOL * spectral radius of mu_1 count as top
COND_B_MAX = 1e12  # B with a larger 2-norm condition number counts as singular


@dataclass(frozen=True)
class EigenSpace:
    """An invariant subspace of a matrix: eigenvalues it carries and an orthonormal basis (d, m)."""

    eigenvalues: np.ndarray  # (m,) real or complex
    basis: np.ndarray  # (d, m), orthonormal columns spanning the real invariant subspace

    @property
    def dim(self) -> int:
        return self.basis.shape[1]

    @property
    def projector(self) -> np.ndarray:
        """Orthogonal projector (d, d) onto the subspace."""
        return self.basis @ self.basis.T


@dataclass(frozen=True)
class Spectrum:
    """Spectral data of A = V B^T (and of V) used by the theory.

    eigenvalues: (d,) eigenvalues of A, descending by real part (real float64 when A is symmetric).
    eigenvectors: (d, d) columns u_k matching `eigenvalues` (orthonormal when A is symmetric).
    mu1, mu2: top eigenvalue and the next distinct one strictly below (real parts); mu2 is None when
        A has a single distinct eigenvalue.  gap = mu1 - mu2 (0.0 when mu2 is None).
    multiplicity: dimension of the top eigenspace.
    top: top eigenspace of A; top_projector: P_1, orthogonal when A is symmetric, the spectral
        (Riesz) projector otherwise (all NaN when the top eigenvalue is defective).
    v_top_real, v_top_magnitude: top eigenspace of V by largest real part and by largest modulus
        (computed on first use: checking the assumptions does not need V's spectrum).
    """

    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    mu1: float
    mu2: float | None
    gap: float
    multiplicity: int
    symmetric: bool
    asymmetry: float
    top: EigenSpace
    top_projector: np.ndarray
    V: np.ndarray = field(repr=False)

    @cached_property
    def v_top_real(self) -> EigenSpace:
        return top_eigenspace(self.V, "real")

    @cached_property
    def v_top_magnitude(self) -> EigenSpace:
        return top_eigenspace(self.V, "magnitude")


def _top_group(values: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Indices whose key is within TOP_TOL * spectral radius of the largest key."""
    scale = max(float(np.max(np.abs(values))), np.finfo(float).tiny)
    return np.flatnonzero(key >= key.max() - TOP_TOL * scale)


def _real_basis(vectors: np.ndarray) -> np.ndarray:
    """Orthonormal real basis (d, m) of the real span of complex vectors (d, k)."""
    R = np.concatenate([vectors.real, vectors.imag], axis=1)
    U, s, _ = np.linalg.svd(R, full_matrices=False)
    rank = int(np.sum(s > 1e-10 * max(s[0], np.finfo(float).tiny)))
    return U[:, :rank]


def top_eigenspace(M: np.ndarray, by: str = "real") -> EigenSpace:
    """Top eigenspace of a real square matrix M, by largest real part (`by="real"`) or modulus.

    For a complex pair the real invariant plane spanned by Re u and Im u is returned.
    """
    if by not in ("real", "magnitude"):
        raise ValueError(f"by must be 'real' or 'magnitude', got {by!r}")
    if np.allclose(M, M.T, rtol=0, atol=SYMMETRY_TOL * max(float(np.linalg.norm(M)), 1e-300)):
        w, U = np.linalg.eigh((M + M.T) / 2)
        idx = _top_group(w, w if by == "real" else np.abs(w))
        return EigenSpace(w[idx][::-1].copy(), U[:, idx][:, ::-1].copy())
    w, U = np.linalg.eig(M)
    idx = _top_group(w, w.real if by == "real" else np.abs(w))
    return EigenSpace(w[idx], _real_basis(U[:, idx]))


def _eig_low_rank(F: np.ndarray, W: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(eigenvalues, left, right eigenvectors) of A = F W, F (d, r) and W (r, d) of rank r < d.

    A's nonzero eigenvalues are those of W F (r x r), with right eigenvectors F y and left ones
    W^T z; the other d - r are exact zeros, with the null spaces of W and F^T.  None when F or W
    has rank < r (then the zeros need the dense decomposition).
    """
    import scipy.linalg

    d, r = F.shape
    QW, RW = np.linalg.qr(W.T, mode="complete")  # null(W) = QW[:, r:], null(F^T) = QF[:, r:]
    QF, RF = np.linalg.qr(F, mode="complete")
    for R in (RW, RF):
        diag = np.abs(np.diag(R))
        if diag.min() <= np.finfo(float).eps * d * diag.max():
            return None
    lam, Z, Y = scipy.linalg.eig(W @ F, left=True, right=True)
    R, L = F @ Y, W.T @ Z
    R, L = R / np.linalg.norm(R, axis=0), L / np.linalg.norm(L, axis=0)
    w = np.concatenate([lam, np.zeros(d - r)])
    return w, np.hstack([L, QF[:, r:]]), np.hstack([R, QW[:, r:]])


def _eig_sorted(A: np.ndarray, factors: tuple[np.ndarray, np.ndarray] | None):
    """Eigenvalues, left and right eigenvectors of a non-symmetric A, by descending real part.

    With factors (F, W) of a low-rank A = F W, from r x r pieces unless the top eigenvalue is one of
    the structural zeros (then its eigenspace needs the dense decomposition).
    """
    import scipy.linalg

    low = _eig_low_rank(*factors) if factors is not None else None
    if low is not None:
        w, L, U = low
        order = np.lexsort((-w.imag, -w.real))
        top = order[_top_group(w[order], w.real[order])]  # original indices: >= r are structural zeros
        if factors is not None and np.all(top < factors[0].shape[1]):
            return w[order], L[:, order], U[:, order]
    w, L, U = scipy.linalg.eig(A, left=True, right=True)
    order = np.lexsort((-w.imag, -w.real))
    return w[order], L[:, order], U[:, order]


def spectrum_of(
    A: np.ndarray, V: np.ndarray, factors: tuple[np.ndarray, np.ndarray] | None = None
) -> Spectrum:
    """Spectral data of A (and V); see `Spectrum`.  factors: (F, W) with A = F W of rank r < d (a
    single head), to decompose a non-symmetric A from r x r pieces."""
    norm = np.linalg.norm(A)
    asym = float(np.linalg.norm(A - A.T) / 2 / norm) if norm > 0 else 0.0
    symmetric = asym <= SYMMETRY_TOL
    if symmetric:
        w, U = np.linalg.eigh((A + A.T) / 2)
        w, U = w[::-1].copy(), U[:, ::-1].copy()
        idx = _top_group(w, w)
        top = EigenSpace(w[idx], U[:, idx])
        P1 = top.projector
        key = w
    else:
        w, L, U = _eig_sorted(A, factors)
        idx = _top_group(w, w.real)
        top = EigenSpace(w[idx], _real_basis(U[:, idx]))
        # Riesz projector R (L^H R)^{-1} L^H onto the top eigenspace, from its own left and right
        # eigenvectors only (A diagonalisable on it); NaN where L^H R is singular (a defective top).
        R, Lt = U[:, idx], L[:, idx].conj().T
        G = Lt @ R
        if np.linalg.cond(G) < 1e12:
            P1 = np.real(R @ np.linalg.solve(G, Lt))
        else:
            P1 = np.full_like(A, np.nan)
        key = w.real
    m = len(idx)
    mu1 = float(key[0])
    below = key[m:]
    mu2 = float(below[0]) if below.size else None
    gap = mu1 - mu2 if mu2 is not None else 0.0
    return Spectrum(
        eigenvalues=w,
        eigenvectors=U,
        mu1=mu1,
        mu2=mu2,
        gap=gap,
        multiplicity=m,
        symmetric=symmetric,
        asymmetry=asym,
        top=top,
        top_projector=P1,
        V=V,
    )


#: largest |entry| of B and A: products and norms of such matrices stay finite in float64 (1e308)
MAX_ENTRY = 1e150


def _product(L: np.ndarray, R: np.ndarray, what: str, weights: str) -> np.ndarray:
    """L @ R, read-only; ValueError naming `what` when an entry is above MAX_ENTRY or not finite
    (NumPy's overflow warnings are never shown: the error says it instead)."""
    with np.errstate(all="ignore"):
        P = L @ R
        big = float(np.max(np.abs(P)))
    if not big <= MAX_ENTRY:
        raise ValueError(
            f"{what} has entries of size {big:.3g}, beyond {MAX_ENTRY:.0e} (float64 overflows in its "
            f"products and norms): rescale {weights}"
        )
    P.setflags(write=False)
    return P


class Attention:
    """Single-head attention on S^{d-1}: weights Q, K, V (d, d) and inverse temperature beta.

    beta is in (0, inf]; beta = inf is the zero-temperature limit.  Derived: B = Q^T K (so that
    <Q x, K y> = x^T B y) and A = V B^T.  Instances are immutable; `with_beta` makes a copy.
    """

    def __init__(self, Q, K, V, beta: float = 1.0) -> None:
        Q = check_matrix(Q, "Q")
        d = Q.shape[0]
        K = check_matrix(K, "K", d)
        V = check_matrix(V, "V", d)
        for M in (Q, K, V):
            M.setflags(write=False)
        self.Q, self.K, self.V = Q, K, V
        self.beta = check_beta(beta)

    @property
    def d(self) -> int:
        return self.Q.shape[0]

    @cached_property
    def B(self) -> np.ndarray:
        """B = Q^T K, (d, d). ValueError when its entries leave the range of MAX_ENTRY."""
        return _product(self.Q.T, self.K, "B = Q^T K", "Q and K")

    @cached_property
    def A(self) -> np.ndarray:
        """A = V B^T, (d, d). ValueError when its entries leave the range of MAX_ENTRY."""
        return _product(self.V, self.B.T, "A = V B^T", "V, Q and K")

    @cached_property
    def _head_rows(self) -> np.ndarray | None:
        """The r rows where Q and K are both nonzero, when r <= d / 2 (one head of a layer: Q and
        K padded with zero rows): then B = Q_r^T K_r and A = (V K_r^T) Q_r have rank <= r and their
        spectra come from r x r pieces.  None otherwise."""
        keep = np.any(self.Q != 0, axis=1) & np.any(self.K != 0, axis=1)
        r = int(keep.sum())
        return keep if 0 < r and 2 * r <= self.d else None

    @cached_property
    def singular_values_B(self) -> np.ndarray:
        """Singular values of B, descending (d,); exact zeros for the padded rows of a head."""
        keep = self._head_rows
        if keep is None:
            s = np.linalg.svd(self.B, compute_uv=False)
        else:  # B = (Q_r^T)(K_r^T)^T = U1 R1 R2^T U2^T with thin QR factors
            # NumPy's stubs type qr(mode="r") as QRResult; it returns the R array
            R1 = cast(np.ndarray, np.linalg.qr(self.Q[keep].T, mode="r"))
            R2 = cast(np.ndarray, np.linalg.qr(self.K[keep].T, mode="r"))
            s = np.concatenate(
                [np.linalg.svd(R1 @ R2.T, compute_uv=False), np.zeros(self.d - int(keep.sum()))]
            )
        s.setflags(write=False)
        return s

    @cached_property
    def cond_B(self) -> float:
        """2-norm condition number of B (inf when B is singular)."""
        s = self.singular_values_B
        return float(s[0] / s[-1]) if s[-1] > 0 else math.inf

    @cached_property
    def norm_B(self) -> float:
        """Operator 2-norm ||B||."""
        return float(self.singular_values_B[0])

    def spectrum(self) -> Spectrum:
        """Eigenvalues of A (descending), top eigenspace with multiplicity, gap, top eigenspace of V."""
        return self._spectrum

    @cached_property
    def _spectrum(self) -> Spectrum:
        keep = self._head_rows
        factors = None if keep is None else (self.V @ self.K[keep].T, self.Q[keep])
        return spectrum_of(np.asarray(self.A), np.asarray(self.V), factors)

    def with_beta(self, beta: float) -> Attention:
        """The same weights at another inverse temperature."""
        return Attention(self.Q, self.K, self.V, beta)

    def __repr__(self) -> str:
        return f"Attention(d={self.d}, beta={self.beta:g})"


def attention_from_A(A, B, beta: float = 1.0) -> Attention:
    """Attention with Q = I, K = B and V = A B^{-T}, so that B and A are the given matrices.

    B must be invertible.  This is how MATH.md builds examples whose A is symmetric.
    """
    A = check_matrix(A, "A")
    B = check_matrix(B, "B", A.shape[0])
    cond = np.linalg.cond(B)
    if not cond <= COND_B_MAX:
        raise ValueError(
            f"B must be invertible to build V = A B^{{-T}}: its condition number is {cond:.3g} > "
            f"{COND_B_MAX:.0e}"
        )
    V = np.linalg.solve(B, A.T).T  # A B^{-T}
    return Attention(np.eye(A.shape[0]), B, V, beta)


def worked_example(beta: float = 100.0, d: int = 3) -> Attention:
    """The worked examples of MATH.md, d = 3 (default) or d = 2: both phases are visible.

    d = 3: Q = I, K = diag(3, 1, 1/3), A = [[0, 0, 1], [0, -1/2, 0], [1, 0, 0]], V = A B^{-T}.
    A has eigenvalues 1, -1/2, -1 (gap 3/2, u_1 = (1, 0, 1)/sqrt 2); V's top eigenvector is
    (3, 0, 1)/sqrt 10, so the terminal phase moves mass away from A's top eigenspace.
    d = 2: Q = I, K = diag(3, 1/3), A = [[1/4, 3/4], [3/4, 1/4]], V = A B^{-T}. A has eigenvalues 1,
    -1/2 (gap 3/2, u_1 = (1, 1)/sqrt 2); V's top eigenvalue 1.2374 has eigenvector (0.8898, 0.4564),
    17.8 degrees from u_1. In both, ||B|| = 3 and |B^T u_1| = 2.134.
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
    [1/2, 2] (COND_SPREAD), so cond(B) <= 4 and 1/2 <= |B^T x| <= 2.
    symmetric=True (default): V = S B^{-T} with S = U_S diag(1, mu_2, ..., mu_d) U_S^T symmetric,
    mu_k uniform in [-1, 1/2], so A = V B^T = S is symmetric with a simple top eigenvalue 1 and a
    spectral gap >= 1/2 (MIN_GAP): the theorem applies. symmetric=False: V Gaussian with entries of
    variance 1/d (A then is generically not symmetric). The same seed gives the same weights.
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
    """Seeded weights of a random-matrix ensemble (d, d):

    "gaussian"   Q, K, V with i.i.d. N(0, 1/d) entries (B = Q^T K has entries of variance 1/d)
    "goe"        Q = I, K and V independent GOE matrices (symmetric; off-diagonal N(0, 1/d),
                 diagonal N(0, 2/d)): B = K symmetric
    "gpt2-init"  Q, K, V with i.i.d. N(0, 0.02^2) entries (GPT-2's initialisation)
    "conditioned" `random_attention(d, seed, beta)` (B well conditioned, A symmetric with a gap)
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


_SAVE_HINT = "save the weights with numpy.savez(path, Q=Q, K=K, V=V)"


def load_attention(path: str | os.PathLike[str], beta: float = 1.0) -> Attention:
    """Attention from an .npz file holding Q, K, V (each d x d, the same d), e.g. written by
    `numpy.savez(path, Q=Q, K=K, V=V)`. Errors are one line naming the file and the problem: a
    missing file or key, a shape, NaN or inf, and a singular B at beta = inf (the zero-temperature
    field divides by |B^T x|; at finite beta `check_assumptions` reports B's condition number).
    """
    from .io.arrays import load_arrays

    name = os.fspath(path)
    beta = check_beta(beta)
    if not os.path.isfile(name):
        raise FileNotFoundError(f"{name}: no such file (attention weights: an .npz holding Q, K, V)")
    archive = load_arrays(name)  # never unpickles: a pickle or an object array is refused, naming the file
    if not isinstance(archive, dict):
        raise ValueError(f"{name}: a single array, not an .npz archive; {_SAVE_HINT}")
    missing = [k for k in ("Q", "K", "V") if k not in archive]
    if missing:
        found = ", ".join(archive) or "nothing"
        raise ValueError(f"{name}: missing {', '.join(missing)} (found {found}); {_SAVE_HINT}")
    arrays = {k: archive[k] for k in ("Q", "K", "V")}
    for k, M in arrays.items():
        if M.dtype.kind not in "biuf":
            raise ValueError(f"{name}: {k} must be a real matrix, got dtype {M.dtype}")
    try:
        att = Attention(arrays["Q"], arrays["K"], arrays["V"], beta)
    except ValueError as err:
        raise ValueError(f"{name}: {err}") from None
    if math.isinf(beta) and not att.cond_B <= COND_B_MAX:
        raise ValueError(
            f"{name}: B = Q^T K is singular (condition number {att.cond_B:.3g} > {COND_B_MAX:.0e}), "
            "so the zero-temperature field at beta = inf is undefined; use a finite beta"
        )
    return att


# ------------------------------------------------------------------------------------- WEIGHTS


#: the largest d of drawn weights (WeightsFamily.max_d), whose spectra a config check computes on one
#: BLAS thread: 1.3 s for a non-symmetric A at d = 512 (two shared cores, load 5)
MAX_DRAWN_D = 512


@dataclass(frozen=True)
class WeightsFamily:
    """A named family of weights Q, K, V: an entry of WEIGHTS (the experiments' `weights` key).

    summary: what it is, in a few words; d: the dimension it fixes, or None when the experiments' `d`
    key chooses it (default `default_d`, at most `max_d`); keys: the config keys it reads besides d,
    passed to `build` and `label` as keywords. build(d, **keys) -> Attention at beta = 1;
    label(**keys) -> its name with those keys, for titles. drawn: the weights are random draws, and
    build also takes draw = (h, k), the draw of head h in segment k of redrawn weights (0, 0: the
    family's one draw), so that several heads (`heads`) and redrawn weights (`redraw`) are independent
    draws; a family that is not drawn gives the same head for every (h, k). Adding a family is its
    build function and one line of WEIGHTS.
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


def check_attention(att: Any, name: str = "att") -> Attention:
    """An attnflow.Attention (TypeError otherwise)."""
    if not isinstance(att, Attention):
        raise TypeError(f"{name} must be an attnflow.Attention, got {type(att).__name__}")
    return att
