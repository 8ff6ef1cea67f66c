"""The flow a model of self-attention defines beyond the single head (docs/math.md, "Beyond the
single head"): `Dynamics`, next to `Attention`.

    dyn = Dynamics((att1, att2), mask="causal")      # two heads, averaged (W_O^h = I / H)
    dyn = Dynamics(heads, W_O=blocks)                # output blocks W_O^h (d, d_h), V_h d_h x d
    dyn = Dynamics(att, normalization="usa")         # unnormalised attention (no denominator)
    dyn = Dynamics(att, normalization="hardmax")     # each token attends to its maximisers
    dyn = Dynamics(att, layer_norm="pre", noise=0.1) # tokens in R^d, Brownian noise on the sphere

For token i and head h, m_i^h = sum_j w_ij^h V_h x_j (softmax weights, or the unnormalised
exp(beta x_i^T B_h x_j) / N); the heads' outputs are mixed by W_O: m_i = sum_h W_O^h m_i^h; the
layer norm makes the field from m (post: P_x^perp m on the sphere; pre: m in R^d; peri: m / |m| in
R^d; ngpt: alpha P_x^perp m / |m| on the sphere). A bare `Attention` is `Dynamics(att)`: the paper's
flow, computed by the single-head kernels exactly as before.

Immutable.  `theorem_applies()` says whether the paper's theorem speaks about the model (one
softmax head, no mask, post-LN, no noise, fixed weights) and, when not, why.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import SupportsFloat, TypedDict

import numpy as np
from numpy.typing import ArrayLike

from ._checks import check_beta, check_choice, to_numpy
from .attention import Attention, check_attention

__all__ = [
    "LAYER_NORMS",
    "MASKS",
    "NOISE_KINDS",
    "NORMALIZATIONS",
    "ON_SPHERE",
    "USA_TIMES",
    "Dynamics",
    "Redraw",
    "as_dynamics",
    "check_model",
    "padded_head",
]

MASKS = ("none", "causal")
NORMALIZATIONS = ("softmax", "usa", "hardmax", "localmax")
LAYER_NORMS = ("post", "pre", "peri", "ngpt")
#: independent: one Brownian motion per token, sigma P_x^perp o dW_i; common: one shared by every
#: token of a cloud, a Brownian rotation sigma o dW x with W on so(d) (docs/math.md, "Common noise")
NOISE_KINDS = ("independent", "common")
#: the time of unnormalised attention: the model's own, or rescaled by e^{-beta max_h ||B_h||}
USA_TIMES = ("model", "rescaled")
#: where the state of each layer norm lives: True on S^{d-1}, False in R^d (x = r theta, |theta| = 1)
ON_SPHERE = {"post": True, "pre": False, "peri": False, "ngpt": True}


def padded_head(Q_h: ArrayLike, K_h: ArrayLike, V_h: ArrayLike, beta: float = 1.0) -> Attention:
    """One head of a layer as an Attention whose Q, K and V are padded by zero rows to (d, d).

    B = Q_h^T K_h, and with the output block W_O^h (d, d_h) of `Dynamics(heads, W_O=...)` the
    head's values are W_O^h V_h x.

    Parameters
    ----------
    Q_h, K_h, V_h : array (d_h, d)
        The head's weights, d_h <= d.
    beta : float
        Inverse temperature.

    Returns
    -------
    Attention
    """
    mats = []
    for name, M in (("Q_h", Q_h), ("K_h", K_h), ("V_h", V_h)):
        A = np.array(to_numpy(M), dtype=np.float64)
        if A.ndim != 2 or A.shape[0] > A.shape[1] or A.shape[0] < 1:
            raise ValueError(f"{name} must be a (d_h, d) matrix with 1 <= d_h <= d, got shape {A.shape}")
        mats.append(A)
    if len({m.shape for m in mats}) != 1:
        raise ValueError(f"Q_h, K_h, V_h must have one shape (d_h, d), got {[m.shape for m in mats]}")
    d_h, d = mats[0].shape
    Q, K, V = (np.vstack([m, np.zeros((d - d_h, d))]) for m in mats)
    return Attention(Q, K, V, beta)


@dataclass(frozen=True)
class Redraw:
    """Weights redrawn every `period` units of time, piecewise constant.

    Segment k covers [k period, (k + 1) period); segment 0 has the Dynamics' own heads.

    Parameters
    ----------
    period : float
        > 0, in units of time.
    draw : callable
        draw(k) -> the heads of segment k >= 1 (at any beta: the Dynamics sets its own).
    label : str
        How they are drawn, in words.
    """

    period: float
    draw: Callable[[int], Sequence[Attention]]
    label: str = "redrawn"

    def __post_init__(self) -> None:
        if not (isinstance(self.period, (int, float)) and math.isfinite(self.period) and self.period > 0):
            raise ValueError(f"redraw period must be a finite number > 0, got {self.period!r}")
        if not callable(self.draw):
            raise TypeError(f"redraw draw must be callable (segment k -> heads), got {self.draw!r}")


def _check_heads(heads: object) -> tuple[Attention, ...]:
    if isinstance(heads, Attention):
        return (heads,)
    if isinstance(heads, (str, bytes)) or not isinstance(heads, Sequence) or not heads:
        raise TypeError(
            f"heads must be an attnflow.Attention or a non-empty sequence of them, got {type(heads).__name__}"
        )
    out = tuple(check_attention(h, f"heads[{i}]") for i, h in enumerate(heads))
    d, betas = out[0].d, [h.beta for h in out]
    for i, h in enumerate(out):
        if h.d != d:
            raise ValueError(f"heads[{i}] has d = {h.d}, heads[0] has d = {d}: the heads act on one R^d")
    if len(set(betas)) > 1:
        raise ValueError(
            f"the heads have betas {betas}: a Dynamics has one beta (fold a head's own scale into its Q or K)"
        )
    return out


def _check_outputs(
    W_O: ArrayLike | Sequence[ArrayLike] | None, heads: tuple[Attention, ...]
) -> tuple[np.ndarray, ...] | None:
    """W_O: None (averaged heads) or one block (d, d_h) per head, each head's V zero beyond row d_h."""
    if W_O is None:
        return None
    if isinstance(W_O, np.ndarray) and W_O.ndim == 2:
        W_O = [W_O]
    if isinstance(W_O, (str, bytes)) or not isinstance(W_O, Sequence) or len(W_O) != len(heads):
        raise ValueError(f"W_O must be None or {len(heads)} blocks (d, d_h), one per head, got {W_O!r:.80}")
    d, blocks = heads[0].d, []
    for h, (att, M) in enumerate(zip(heads, W_O, strict=True)):
        W = np.array(to_numpy(M), dtype=np.float64)
        if W.ndim != 2 or W.shape[0] != d or not 1 <= W.shape[1] <= d or not np.all(np.isfinite(W)):
            raise ValueError(
                f"W_O[{h}] must be a finite ({d}, d_h) block with 1 <= d_h <= {d}, got shape {W.shape}"
            )
        if np.any(att.V[W.shape[1] :] != 0):
            raise ValueError(
                f"heads[{h}].V has nonzero rows beyond the d_h = {W.shape[1]} columns of W_O[{h}]: V_h is "
                "d_h x d, padded by zero rows (attnflow.padded_head builds such a head)"
            )
        W.setflags(write=False)
        blocks.append(W)
    return tuple(blocks)


def _check_nonnegative(x: SupportsFloat, name: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number >= 0, got {x!r}") from None
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {x!r}")
    return v


class _Options(TypedDict):
    """The keyword arguments of a Dynamics besides its heads (`Dynamics._options`)."""

    W_O: tuple[np.ndarray, ...] | None
    mask: str
    normalization: str
    layer_norm: str
    noise: float
    noise_kind: str
    usa_time: str
    sensitivity: float
    alpha: float
    redraw: Redraw | None
    softcap: float | None


class Dynamics:
    """A model of attention dynamics: heads, their output mix, the mask, the normalisation of the
    attention weights, the layer norm, Brownian noise and time-dependent weights (docs/math.md).

    Parameters
    ----------
    heads : Attention or sequence of Attention
        The same d and beta.
    W_O : optional
        None for averaged heads, W_O^h = I / H (each V_h d x d), or one output block (d, d_h) per
        head (V_h d_h x d: its head's V padded by zero rows, `padded_head`).
    mask : str
        "none" or "causal" (token i attends to j <= i in row order).
    normalization : str
        "softmax", "usa" (w_ij = exp(beta x_i^T B x_j) / N, no denominator), "hardmax" (token i
        attends equally to its maximisers of x_i^T B x_j, rounding ties shared; no beta) or
        "localmax" (to the tokens within `sensitivity` r > 0 of that maximum).
    layer_norm : str
        "post", "pre", "peri" or "ngpt" (`ON_SPHERE` says where each state lives).
    noise : float
        sigma >= 0 of the Stratonovich noise.
    noise_kind : str
        "independent" (sigma P_x^perp o dW_i, one W_i per token) or "common" (sigma o dW x, one
        Brownian motion W on so(d) shared by every token of a cloud: the whole cloud turns; each
        token alone has the same law).
    usa_time : str
        "model" (the formula as written: its speed grows like e^{beta ||B||}) or "rescaled" (the
        field divided by e^{beta max_h ||B_h||}, a change of time).
    sensitivity : float
        r of "localmax".
    alpha : float
        nGPT's step (dtheta/dt = alpha P^perp m / |m|).
    redraw : Redraw or None
        Fresh weights every period.
    softcap : float or None
        c > 0 caps every score, beta x_i^T B_h x_j -> c tanh(beta x_i^T B_h x_j / c) (Gemma-2's
        attention logit soft-capping).
    """

    def __init__(
        self,
        heads: Attention | Sequence[Attention],
        *,
        W_O: ArrayLike | Sequence[ArrayLike] | None = None,
        mask: str = "none",
        normalization: str = "softmax",
        layer_norm: str = "post",
        noise: float = 0.0,
        noise_kind: str = "independent",
        usa_time: str = "model",
        sensitivity: float = 0.0,
        alpha: float = 1.0,
        redraw: Redraw | None = None,
        softcap: float | None = None,
    ) -> None:
        self.heads = _check_heads(heads)
        self.W_O = _check_outputs(W_O, self.heads)
        self.mask = check_choice(mask, "mask", MASKS)
        self.normalization = check_choice(normalization, "normalization", NORMALIZATIONS)
        self.layer_norm = check_choice(layer_norm, "layer_norm", LAYER_NORMS)
        self.usa_time = check_choice(usa_time, "usa_time", USA_TIMES)
        self.noise = _check_nonnegative(noise, "noise")
        self.noise_kind = check_choice(noise_kind, "noise_kind", NOISE_KINDS)
        self.sensitivity = _check_nonnegative(sensitivity, "sensitivity")
        if (self.normalization == "localmax") != (self.sensitivity > 0):
            raise ValueError(
                f"sensitivity = {self.sensitivity:g} with normalization = {self.normalization!r}: localmax "
                "needs sensitivity r > 0 (r = 0 is hardmax), and only localmax takes one"
            )
        self.alpha = _check_nonnegative(alpha, "alpha")
        if self.alpha == 0:
            raise ValueError("alpha must be a finite number > 0 (nGPT's step), got 0")
        if redraw is not None and not isinstance(redraw, Redraw):
            raise TypeError(f"redraw must be an attnflow.flow.Redraw or None, got {type(redraw).__name__}")
        self.redraw = redraw
        self.softcap = None if softcap is None else _check_nonnegative(softcap, "softcap")
        if self.softcap == 0:
            raise ValueError(
                "softcap must be a finite number > 0 (the cap c of c tanh(s / c)) or None, got 0"
            )

    # ------------------------------------------------------------------------------ structure

    @property
    def H(self) -> int:
        return len(self.heads)

    @property
    def d(self) -> int:
        return self.heads[0].d

    @property
    def beta(self) -> float:
        return self.heads[0].beta

    @property
    def on_sphere(self) -> bool:
        """Whether the tokens live on S^{d-1} (post, ngpt) or in R^d (pre, peri)."""
        return ON_SPHERE[self.layer_norm]

    @cached_property
    def values(self) -> tuple[np.ndarray, ...]:
        """Each head's value map into the output, (d, d): V_h / H (averaged) or W_O^h V_h."""
        if self.W_O is None:
            out = tuple(h.V / self.H for h in self.heads)
        else:
            out = tuple(W @ h.V[: W.shape[1]] for W, h in zip(self.W_O, self.heads, strict=True))
        for V in out:
            V.setflags(write=False)
        return out

    @cached_property
    def identical_heads(self) -> bool:
        """All heads have the same Q, K, V and are averaged: the model has one head."""
        first = self.heads[0]
        return self.W_O is None and all(
            all(np.array_equal(getattr(h, m), getattr(first, m)) for m in ("Q", "K", "V"))
            for h in self.heads[1:]
        )

    @property
    def head(self) -> Attention | None:
        """The one head when there is one (H = 1 averaged, or identical averaged heads), else None.
        (With an output block, W_O^1 V_1 is its head's V: not that Attention, so None.)"""
        return self.heads[0] if self.identical_heads else None

    @property
    def norm_B(self) -> float:
        """max_h ||B_h||: the scores are at most beta times this."""
        return max(h.norm_B for h in self.heads)

    # ------------------------------------------------------------------------------ meaning

    def departures(self) -> list[str]:
        """How the model differs from the paper's flow, in words (empty: it is the paper's)."""
        out = []
        if self.head is None:
            out.append(f"{self.H} heads" + (" with output blocks W_O" if self.W_O is not None else ""))
        if self.mask != "none":
            out.append(f"mask = {self.mask}")
        if self.normalization != "softmax":
            out.append(f"normalization = {self.normalization}")
        if self.layer_norm != "post":
            out.append(f"layer_norm = {self.layer_norm}")
        if self.noise > 0:
            out.append(f"noise = {self.noise:g}" + (" (common)" if self.noise_kind == "common" else ""))
        if self.redraw is not None:
            out.append(f"weights redrawn every {self.redraw.period:g}")
        if self.softcap is not None:
            out.append(f"scores soft-capped at {self.softcap:g}")
        return out

    @property
    def single(self) -> Attention | None:
        """The Attention when the model is the paper's flow (one softmax head, no mask, post-LN, no
        noise, fixed weights): the single-head kernels compute it exactly as before. Else None."""
        return None if self.departures() else self.heads[0]

    def theorem_applies(self) -> tuple[bool, str]:
        """(True, "") for the paper's flow; else (False, why): the theorem, Pi and the exact
        zero-temperature flow are about one softmax head, no mask, post-LN, no noise and fixed weights."""
        off = self.departures()
        if not off:
            return True, ""
        return False, (
            "the theorem is about one softmax head without a mask, post-LN, without noise and with fixed "
            f"weights; this model has {', '.join(off)}"
        )

    def describe(self) -> str:
        """The model in a few words, for titles and attrs."""
        parts = [f"{self.H} heads" + (" (averaged)" if self.W_O is None else " (output blocks)")]
        if self.H == 1:
            parts = ["1 head"]
        parts += [f"{self.normalization}", f"{self.layer_norm}-LN"]
        if self.mask != "none":
            parts.append(f"{self.mask} mask")
        if self.normalization == "usa" and self.usa_time == "rescaled":
            parts.append("time rescaled by e^(-beta ||B||)")
        if self.normalization == "localmax":
            parts.append(f"sensitivity r = {self.sensitivity:g}")
        if self.layer_norm == "ngpt" and self.alpha != 1.0:
            parts.append(f"alpha = {self.alpha:g}")
        if self.noise > 0:
            parts.append(f"{'common ' if self.noise_kind == 'common' else ''}noise sigma = {self.noise:g}")
        if self.redraw is not None:
            parts.append(f"weights {self.redraw.label} every {self.redraw.period:g}")
        if self.softcap is not None:
            parts.append(f"scores capped at {self.softcap:g} tanh(s / {self.softcap:g})")
        return ", ".join(parts)

    def log_time_scale(self, beta: float | None = None) -> float:
        """log of the factor dividing the field (usa_time = "rescaled": beta max_h ||B_h||; else 0)."""
        if self.normalization != "usa" or self.usa_time != "rescaled":
            return 0.0
        return float(self.beta if beta is None else beta) * self.norm_B

    # ------------------------------------------------------------------------------ copies

    def _options(self) -> _Options:
        return {
            "W_O": self.W_O,
            "mask": self.mask,
            "normalization": self.normalization,
            "layer_norm": self.layer_norm,
            "noise": self.noise,
            "noise_kind": self.noise_kind,
            "usa_time": self.usa_time,
            "sensitivity": self.sensitivity,
            "alpha": self.alpha,
            "redraw": self.redraw,
            "softcap": self.softcap,
        }

    def with_beta(self, beta: float) -> Dynamics:
        """The same model at another inverse temperature (every head)."""
        beta = check_beta(beta)
        return Dynamics([h.with_beta(beta) for h in self.heads], **self._options())

    def segment(self, k: int) -> Dynamics:
        """The model on [k period, (k + 1) period) of its redraw (k = 0, or no redraw: itself)."""
        if k == 0 or self.redraw is None:
            return self
        heads = [check_attention(h, f"redraw.draw({k})[{i}]").with_beta(self.beta)
                 for i, h in enumerate(self.redraw.draw(k))]  # fmt: skip
        if len(heads) != self.H:
            raise ValueError(f"redraw.draw({k}) gave {len(heads)} heads, the model has {self.H}")
        return Dynamics(heads, **self._options())

    def same_but_beta(self, other: Dynamics) -> str | None:
        """None when `other` is this model at another beta; else what differs, in words."""
        mine, others = dict(self._options()), dict(other._options())
        if mine.keys() != others.keys() or self.H != other.H:
            return "the number of heads"
        for key, value in mine.items():
            theirs = others[key]
            same = value is theirs if key in ("W_O", "redraw") else value == theirs
            if not same:
                return key
        for i, (a, b) in enumerate(zip(self.heads, other.heads, strict=True)):
            for m in ("Q", "K", "V"):
                if not np.array_equal(getattr(a, m), getattr(b, m)):
                    return f"heads[{i}].{m}"
        return None

    def __repr__(self) -> str:
        return f"Dynamics(d={self.d}, beta={self.beta:g}: {self.describe()})"


def as_dynamics(model: Attention | Dynamics) -> Dynamics:
    """A Dynamics: the model itself, or Dynamics(att) for a bare Attention."""
    return model if isinstance(model, Dynamics) else Dynamics(check_attention(model, "model"))


def check_model(model: object, name: str = "att") -> Attention | Dynamics:
    """An attnflow.Attention or attnflow.Dynamics (TypeError otherwise)."""
    if isinstance(model, (Attention, Dynamics)):
        return model
    raise TypeError(f"{name} must be an attnflow.Attention or attnflow.Dynamics, got {type(model).__name__}")
