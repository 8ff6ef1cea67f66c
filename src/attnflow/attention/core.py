"""The attention weights themselves: `Attention` (Q, K, V and beta; B = Q^T K and A = V B^T, MATH.md),
the spectral data the theory reads (`Spectrum`, `EigenSpace`, `spectrum_of`, `top_eigenspace`,
from r x r pieces for a single head), `attention_from_A`, which builds weights from A and B, and
`check_attention`; the tolerances SYMMETRY_TOL, TOP_TOL, COND_B_MAX and MAX_ENTRY."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike

from .._checks import check_beta, check_matrix

SYMMETRY_TOL = 1e-10  # relative antisymmetric part below which A is treated as symmetric
TOP_TOL = 1e-9  # eigenvalues within TOP_TOL * spectral radius of mu_1 count as top
COND_B_MAX = 1e12  # B with a larger 2-norm condition number counts as singular


@dataclass(frozen=True)
class EigenSpace:
    """An invariant subspace of a matrix.

    Attributes
    ----------
    eigenvalues : array (m,)
        The eigenvalues it carries.
    basis : array (d, m)
        An orthonormal basis.
    """

    eigenvalues: np.ndarray  # (m,) real or complex
    basis: np.ndarray  # (d, m), orthonormal columns spanning the real invariant subspace

    @property
    def dim(self) -> int:
        return int(self.basis.shape[1])

    @property
    def projector(self) -> np.ndarray:
        """Orthogonal projector (d, d) onto the subspace."""
        return np.asarray(self.basis @ self.basis.T)


@dataclass(frozen=True)
class Spectrum:
    """Spectral data of A = V B^T (and of V) used by the theory.

    Attributes
    ----------
    eigenvalues : array (d,)
        Eigenvalues of A, descending by real part (real float64 when A is symmetric).
    eigenvectors : array (d, d)
        Columns u_k matching `eigenvalues` (orthonormal when A is symmetric).
    mu1, mu2 : float
        Top eigenvalue and the next distinct one strictly below (real parts); mu2 is None when A has
        a single distinct eigenvalue.
    gap : float
        mu1 - mu2 (0.0 when mu2 is None).
    multiplicity : int
        Dimension of the top eigenspace.
    symmetric : bool
        Whether A is symmetric; asymmetry says how far it is from it.
    top : EigenSpace
        Top eigenspace of A.
    top_projector : array (d, d)
        P_1, orthogonal when A is symmetric, the spectral (Riesz) projector otherwise (all NaN when
        the top eigenvalue is defective).
    v_top_real, v_top_magnitude : EigenSpace
        Top eigenspace of V by largest real part and by largest modulus (computed on first use:
        checking the assumptions does not need V's spectrum).
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
    """Top eigenspace of a real square matrix M, by largest real part or modulus.

    For a complex pair the real invariant plane spanned by Re u and Im u is returned.

    Parameters
    ----------
    M : array (d, d)
        Real, square.
    by : str
        "real" (largest real part) or "magnitude" (largest modulus).

    Returns
    -------
    EigenSpace
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


def _eig_sorted(
    A: np.ndarray, factors: tuple[np.ndarray, np.ndarray] | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    """Spectral data of A (and V); see `Spectrum`.

    Parameters
    ----------
    A, V : array (d, d)
        The matrices.
    factors : (array, array), optional
        (F, W) with A = F W of rank r < d (a single head), to decompose a non-symmetric A from
        r x r pieces.

    Returns
    -------
    Spectrum
    """
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
        P = np.asarray(L @ R)
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

    Derived: B = Q^T K (so that <Q x, K y> = x^T B y) and A = V B^T. Instances are immutable;
    `with_beta` makes a copy.

    Parameters
    ----------
    Q, K, V : array (d, d)
        Query, key and value weights.
    beta : float
        In (0, inf]; beta = inf is the zero-temperature limit.
    """

    def __init__(self, Q: ArrayLike, K: ArrayLike, V: ArrayLike, beta: float = 1.0) -> None:
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
        return int(self.Q.shape[0])

    @cached_property
    def B(self) -> np.ndarray:
        """B = Q^T K, (d, d). ValueError when its entries leave the range of MAX_ENTRY.  For one
        head of a layer (`_head_rows`) from its r nonzero rows: Q_r^T K_r, r/d of the work."""
        keep = self._head_rows
        if keep is None:
            return _product(self.Q.T, self.K, "B = Q^T K", "Q and K")
        return _product(self.Q[keep].T, self.K[keep], "B = Q^T K", "Q and K")

    @cached_property
    def A(self) -> np.ndarray:
        """A = V B^T, (d, d). ValueError when its entries leave the range of MAX_ENTRY.  For one
        head of a layer: (V K_r^T) Q_r, two products of width r instead of one of width d."""
        keep = self._head_rows
        if keep is None:
            return _product(self.V, self.B.T, "A = V B^T", "V, Q and K")
        self.B  # noqa: B018 -- B's own range check first, as in the dense path
        with np.errstate(all="ignore"):  # an overflow shows in the product, which names it
            F = self.V @ self.K[keep].T
        return _product(F, self.Q[keep], "A = V B^T", "V, Q and K")

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


def attention_from_A(A: ArrayLike, B: ArrayLike, beta: float = 1.0) -> Attention:
    """Attention with Q = I, K = B and V = A B^{-T}, so that B and A are the given matrices.

    This is how MATH.md builds examples whose A is symmetric.

    Parameters
    ----------
    A : array (d, d)
        The matrix A = V B^T.
    B : array (d, d)
        The matrix B = Q^T K; must be invertible.
    beta : float
        Inverse temperature, in (0, inf].

    Returns
    -------
    Attention

    Raises
    ------
    ValueError
        When B's condition number exceeds COND_B_MAX.
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


def check_attention(att: Any, name: str = "att") -> Attention:
    """The argument itself when it is an attnflow.Attention.

    Parameters
    ----------
    att : Attention
        The value to check.
    name : str
        The argument's name, for the message.

    Returns
    -------
    Attention

    Raises
    ------
    TypeError
        When att is not an Attention.
    """
    if not isinstance(att, Attention):
        raise TypeError(f"{name} must be an attnflow.Attention, got {type(att).__name__}")
    return att
