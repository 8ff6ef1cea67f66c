"""Tokens on the sphere: snapshots at chosen times and an animation, from a run's `x` variable.

Schema (shared by every experiment that keeps token positions): `x` with dims ((beta,) time, token,
dim), float; optional `basis_A` (dim, k), the top eigenvectors of A drawn as axes, and `basis_V`
(dim, kv), V's top eigenvector marked with diamonds. Tokens are marked by the sign of <x_i(0), u1>
so that clusters can be followed in greyscale.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .style import DPI, beta_label, new_figure, require, run_title, save

if TYPE_CHECKING:
    import xarray as xr
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from mpl_toolkits.mplot3d import Axes3D

#: captions of the token figures, for an experiment's `captions`
TOKEN_CAPTIONS: dict[str, tuple[str, str]] = {
    "snapshots": (
        "Token snapshots",
        "Token snapshots at chosen times (t* among them); stars: ±u₁, A's top eigenvector; "
        "diamonds: ±v₁, V's top eigenvector, where the run follows it.",
    ),
    "tokens": ("Animation", "Animation of the tokens, one frame per saved time."),
}
ANIMATION_FILE = "tokens.gif"
#: how to get MP4 animations when no ffmpeg is found
FFMPEG_HINT = 'pip install "attnflow[video]" (a bundled ffmpeg), or put an ffmpeg program on the PATH'


def _select_positions(
    ds: xr.Dataset, beta: float | None, var: str = "x", label: str = ""
) -> tuple[np.ndarray, np.ndarray, str]:
    """(times (T,), positions (T, n, d), label) of ds[var] at the chosen beta.

    beta None: the largest finite beta.  A beta not in the coordinate is a ValueError.  label: the
    label of a variable without a beta dim (e.g. the zero-temperature flow).
    """
    require(ds, [var], "token figures")
    x = ds[var]
    if "beta" in x.dims:
        betas = np.asarray(ds["beta"].values, dtype=float)
        if beta is None:
            fin = np.flatnonzero(np.isfinite(betas))
            i = int(fin[np.argmax(betas[fin])]) if fin.size else len(betas) - 1
        else:
            b = float(beta)
            close = np.flatnonzero(np.isclose(betas, b, rtol=1e-9, atol=0) | (betas == b))
            if close.size == 0:
                raise ValueError(f"beta = {beta!r} is not in ds['beta'] (values {betas.tolist()})")
            i = int(close[0])
        x = x.isel(beta=i)
        label = beta_label(float(betas[i]))
    if set(x.dims) != {"time", "token", "dim"}:
        raise ValueError(f"ds[{var!r}] must have dims (beta,) time, token, dim; got {ds[var].dims}")
    X = np.asarray(x.transpose("time", "token", "dim").values, dtype=float)
    if X.shape[1] == 0:
        raise ValueError(f"ds[{var!r}] holds no tokens (token dimension has size 0)")
    return np.asarray(ds["time"].values, dtype=float), X, label


def has_tokens(ds: xr.Dataset, var: str = "x") -> bool:
    """Whether the run kept token positions to draw (`x` present with at least one token)."""
    return var in ds.variables and ds[var].sizes.get("token", 0) > 0


def _marked_time(ds: xr.Dataset, var: str | None, label: str) -> float | None:
    """The value of the (beta,) variable `var` (e.g. t*) at the beta shown."""
    if var is None or var not in ds.variables or ds[var].dims != ("beta",) or not label.startswith("β = "):
        return None
    betas = np.asarray(ds["beta"].values, dtype=float)
    bsel = betas[np.flatnonzero([beta_label(b) == label for b in betas])[0]]
    return float(ds[var].sel(beta=bsel).values)


def _directions(ds: xr.Dataset, X: np.ndarray, want: int) -> tuple[np.ndarray, list[str]]:
    """`want` orthonormal directions (d, want) with labels: A's top eigenvectors from `basis_A`,
    completed by the principal axes of the token cloud orthogonal to them."""
    d = X.shape[-1]
    want = min(want, d)
    cols, labels = [], []
    if "basis_A" in ds.variables:
        Bv = ds["basis_A"]
        other = [dd for dd in Bv.dims if dd != "dim"]
        Bm = np.asarray(Bv.transpose("dim", *other).values, dtype=float).reshape(d, -1)
        for j in range(min(Bm.shape[1], want)):
            cols.append(Bm[:, j] / np.linalg.norm(Bm[:, j]))
            labels.append(f"u{j + 1}")
    U = np.array(cols).T if cols else np.zeros((d, 0))
    if len(cols) < want:
        R = X.reshape(-1, d)
        R = R - (R @ U) @ U.T
        _, _, Vt = np.linalg.svd(R, full_matrices=False)
        for j in range(want - len(cols)):
            v = Vt[j] - U @ (U.T @ Vt[j])
            U = np.column_stack([U, v / np.linalg.norm(v)])
            labels.append(f"w{j + 1}")
    return U, labels


_SUBSCRIPTS = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")
LABEL_BOX = {"fc": "white", "ec": "none", "alpha": 0.7, "pad": 1}  # behind an axis label on the sphere


def _sub(label: str) -> str:
    """A direction's label as drawn: u1 -> u₁ (its index as a subscript)."""
    return label.translate(_SUBSCRIPTS)


def _hemisphere_groups(X0: np.ndarray, u: np.ndarray) -> list[tuple[np.ndarray, dict[str, Any]]]:
    """Tokens split by the sign of <x_i(0), u1>: filled circles and open triangles (greyscale-safe).

    Each group: (mask (N,), keyword arguments of `ax.plot` for its markers).
    """
    s = X0 @ u >= 0
    dots = {"ls": "", "ms": 4}
    return [
        (s, {**dots, "marker": "o", "mec": "#1f3b73", "mfc": "#1f3b73", "label": "⟨x(0), u₁⟩ ≥ 0"}),
        (~s, {**dots, "marker": "^", "mec": "#b2520e", "mfc": "white", "label": "⟨x(0), u₁⟩ < 0"}),
    ]


def _default_time_indices(t: np.ndarray, t_star: float | None, n: int = 4) -> list[int]:
    """Indices of n snapshot times: first, nearest t*, a middle one, last."""
    T = len(t)
    idx = {0, T - 1, T // 2}
    if t_star is not None and np.isfinite(t_star):
        idx.add(int(np.argmin(np.abs(t - t_star))))
    for k in np.linspace(0, T - 1, n).round().astype(int):
        if len(idx) >= min(n, T):
            break
        idx.add(int(k))
    return sorted(idx)


def _time_indices(t: np.ndarray, times: Sequence[float] | None, t_star: float | None) -> list[int]:
    if times is None:
        return _default_time_indices(t, t_star)
    tt = np.atleast_1d(np.asarray(times, dtype=float))
    if tt.ndim != 1 or tt.size == 0 or not np.all(np.isfinite(tt)):
        raise ValueError(f"times must be a non-empty 1-D sequence of finite times, got {times!r}")
    return sorted({int(np.argmin(np.abs(t - s))) for s in tt})


def _v_direction(ds: xr.Dataset, d: int) -> np.ndarray | None:
    """V's top eigenvector (d,) from `basis_V` (dim, kv) when the run stored it, else None."""
    if "basis_V" not in ds.variables or "dim" not in ds["basis_V"].dims:
        return None
    Bv = ds["basis_V"]
    M = np.asarray(Bv.transpose("dim", *[dd for dd in Bv.dims if dd != "dim"]).values, dtype=float)
    M = M.reshape(d, -1)
    if M.shape[1] == 0 or not np.all(np.isfinite(M[:, 0])) or np.linalg.norm(M[:, 0]) == 0:
        return None
    return M[:, 0] / np.linalg.norm(M[:, 0])


V_STYLE: dict[str, Any] = {"ls": "", "marker": "D", "ms": 8, "mfc": "none", "mec": "0.35", "mew": 1.2}
U_STYLE: dict[str, Any] = {
    "ls": "",
    "marker": "*",
    "ms": 12,
    "mfc": "none",
    "mec": "black",
    "mew": 0.9,
    "zorder": 4,
}


def _wireframe(n_lat: int = 5, n_lon: int = 4) -> list[np.ndarray]:
    """Segments (k, 3) of a light wireframe of the unit sphere: parallels and half meridians."""
    g = np.linspace(0, 2 * np.pi, 37)
    h = np.linspace(-np.pi / 2, np.pi / 2, 19)
    segs = [
        np.column_stack([np.cos(g) * np.cos(lat), np.sin(g) * np.cos(lat), np.full_like(g, np.sin(lat))])
        for lat in np.linspace(-60, 60, n_lat) * np.pi / 180
    ]
    for lon in np.linspace(0, np.pi, n_lon, endpoint=False):
        for s in (1.0, -1.0):
            segs.append(
                np.column_stack([s * np.cos(h) * np.cos(lon), s * np.cos(h) * np.sin(lon), np.sin(h)])
            )
    return segs


def sphere_axes(ax: Axes3D, U: np.ndarray, labels: list[str], v: np.ndarray | None = None) -> None:
    """A 3-D axes with a light wireframe sphere and the axes +-u_k drawn through it (only A's
    eigenvectors u_k; the principal axis w1 when there are none); +-v1 (V's top) when given.

    No panes, ticks or axis labels: the sphere and the labelled eigenvector axes carry the geometry
    (and the 3-D axis machinery cost most of the drawing time).
    """
    from mpl_toolkits.mplot3d.art3d import Line3DCollection

    n_u = max(sum(lab.startswith("u") for lab in labels), 1)
    U, labels = U[:, :n_u], labels[:n_u]
    ax.add_collection3d(Line3DCollection(_wireframe(), colors="0.82", linewidths=0.6))
    for j, (lab, ls) in enumerate(zip(labels, ("-", "--", ":"), strict=False)):
        u = 1.25 * U[:, j]
        ax.plot([-u[0], u[0]], [-u[1], u[1]], [-u[2], u[2]], color="black", lw=1.6 if j == 0 else 1.0, ls=ls)
        ax.text(*(1.1 * u), f"±{_sub(lab)}", fontsize=8, bbox=LABEL_BOX)
    if U.shape[1] and labels[0] == "u1":
        u = U[:, 0]
        ax.plot(
            [u[0], -u[0]],
            [u[1], -u[1]],
            [u[2], -u[2]],
            ls="",
            marker="*",
            ms=11,
            mfc="none",
            mec="black",
            mew=0.9,
        )
    if v is not None:
        w = 1.25 * v
        ax.plot([-w[0], w[0]], [-w[1], w[1]], [-w[2], w[2]], color="0.45", lw=1.2, ls="-.")
        ax.plot([v[0], -v[0]], [v[1], -v[1]], [v[2], -v[2]], label="±v₁ (top of V)", **V_STYLE)
        ax.text(*(1.1 * w), "±v₁", fontsize=8, bbox=LABEL_BOX)
    ax.set_xlim(-1, 1)
    ax.set_ylim(-1, 1)
    ax.set_zlim(-1, 1)
    ax.set_box_aspect((1, 1, 1), zoom=1.25)
    ax.set_axis_off()
    for axis in (ax.xaxis, ax.yaxis, ax.zaxis):  # hidden, but the layout would still measure their labels
        axis.set_ticks([])
    if U.shape[1]:
        ax.view_init(elev=20, azim=float(np.degrees(np.arctan2(U[1, 0], U[0, 0]))) + 40.0)


def plane_axes(ax: Axes, li: str, lj: str, v: np.ndarray | None = None) -> None:
    """Unit circle, axes labelled <x, li>, <x, lj>; v: V's top eigenvector in plane coordinates."""
    if v is not None:
        ax.plot([v[0], -v[0]], [v[1], -v[1]], label="±v₁ (top of V), projected", **V_STYLE)
    if li == "u1":  # A's top eigenvector: the caption's stars, at (+-1, 0) of this plane
        ax.plot([1.0, -1.0], [0.0, 0.0], label="±u₁ (top of A)", **U_STYLE)
    g = np.linspace(0, 2 * np.pi, 200)
    ax.plot(np.cos(g), np.sin(g), color="0.8", lw=0.8)
    ax.axhline(0, color="0.85", lw=0.6)
    ax.axvline(0, color="0.85", lw=0.6)
    ax.set_xlim(-1.08, 1.08)
    ax.set_ylim(-1.08, 1.08)
    ax.set_aspect("equal")
    ax.set_xlabel(f"⟨x, {_sub(li)}⟩")
    ax.set_ylabel(f"⟨x, {_sub(lj)}⟩")


def _legend_below(fig: Figure, ax: Axes) -> None:
    """The markers' legend under the panels, off the data."""
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=3, fontsize="small")


def _planes(labels: list[str]) -> list[tuple[int, int]]:
    n = len(labels)
    return [(i, j) for i in range(n) for j in range(i + 1, n)][:3]


SNAPSHOT_SIZE = 3.2  # inches per snapshot panel


@dataclass(frozen=True)
class Scene:
    """What a token figure draws: saved times t (T,), positions X (T, n, d) at one beta and its label,
    directions U (d, k) with their labels (`_directions`), V's top eigenvector v (d,) or None, and
    the marker groups (`_hemisphere_groups`)."""

    t: np.ndarray
    X: np.ndarray
    label: str
    U: np.ndarray
    labels: list[str]
    v: np.ndarray | None
    groups: list[tuple[np.ndarray, dict[str, Any]]]

    @property
    def d(self) -> int:
        return self.X.shape[-1]


def scene(ds: xr.Dataset, beta: float | None, label: str, n_flat: int) -> Scene:
    """The scene of ds's `x` at beta: three directions on S^2 (d = 3), n_flat in plane projections."""
    t, X, label = _select_positions(ds, beta, label=label)
    d = X.shape[-1]
    U, labels = _directions(ds, X, 3 if d == 3 else n_flat)
    return Scene(t, X, label, U, labels, _v_direction(ds, d), _hemisphere_groups(X[0], U[:, 0]))


def _second_row(ds: xr.Dataset, second: tuple[str, str] | None, n: int) -> list[tuple[np.ndarray, str]]:
    """[(positions (T, n, d), label)] of `second` = (variable, label) when ds holds it for the same n
    tokens, else []."""
    if second is None or second[0] not in ds.variables or ds[second[0]].sizes.get("token", 0) != n:
        return []
    return [(_select_positions(ds, None, *second)[1], second[1])]


def _sphere_grid(sc: Scene, rows: list[tuple[np.ndarray, str]], idx: list[int]) -> Figure:
    """Snapshots on the sphere (d = 3): one row per (positions (T, n, 3), label), one column per time."""
    size = SNAPSHOT_SIZE
    fig, _ = new_figure(1, 1, (size * len(idx) + 0.4, size * len(rows) + 0.8))
    fig.clear()
    for r, (Xr, lab) in enumerate(rows):
        for c, k in enumerate(idx):
            ax = fig.add_subplot(len(rows), len(idx), r * len(idx) + c + 1, projection="3d")
            sphere_axes(ax, sc.U, sc.labels, sc.v)
            for mask, st in sc.groups:
                P = Xr[k][mask]
                ax.plot(P[:, 0], P[:, 1], P[:, 2], **st, alpha=0.9)
            ax.set_title(f"{lab}, t = {sc.t[k]:.3g}", fontsize="medium")
    _legend_below(fig, fig.axes[0])
    return fig


def _plane_grid(sc: Scene, idx: list[int]) -> Figure:
    """Snapshots projected onto planes of pairs of directions (d != 3): one row per plane."""
    planes = _planes(sc.labels)
    size = SNAPSHOT_SIZE
    fig, axes = new_figure(len(planes), len(idx), (size * len(idx) + 0.4, size * len(planes) + 0.8))
    for r, (i, j) in enumerate(planes):
        for c, k in enumerate(idx):
            ax = axes[r][c]
            plane_axes(ax, sc.labels[i], sc.labels[j], None if sc.v is None else sc.v @ sc.U[:, [i, j]])
            for mask, st in sc.groups:
                P = sc.X[k][mask] @ sc.U[:, [i, j]]
                ax.plot(P[:, 0], P[:, 1], **st, alpha=0.9)
            if r == 0:
                ax.set_title(f"{sc.label}, t = {sc.t[k]:.3g}", fontsize="medium")
    _legend_below(fig, axes[0][0])
    return fig


def plot_snapshots(
    ds: xr.Dataset,
    outdir: str | Path,
    beta: float | None = None,
    times: Sequence[float] | None = None,
    dpi: int = DPI,
    *,
    mark: str | None = None,
    second: tuple[str, str] | None = None,
    label: str = "",
) -> list[Path]:
    """Tokens at chosen times, one panel per time (one row per plane for d > 3).

    d = 3: 3-D scatter on the sphere with A's top eigenvectors (`basis_A`) drawn as axes.  d != 3:
    projections onto the planes spanned by pairs of A's top eigenvectors (completed by principal
    axes of the cloud when basis_A has fewer than three).  Tokens are marked by the sign of
    <x_i(0), u1> so clusters can be followed in greyscale; V's top eigenvector is marked (diamonds)
    when `basis_V` is present.

    Needs `x` ((beta,) time, token, dim).  beta: which beta (default: largest finite); times:
    nearest saved times (default: start, the marked time, middle, end).  mark: a (beta,) variable
    whose time is among the default ones (t*, a terminal time).  second: (variable, label) of
    positions without beta drawn as a second row at the same times (d = 3), e.g. the
    zero-temperature flow.  label: the row label when `x` has no beta.  Writes snapshots.png / .pdf.
    """
    sc = scene(ds, beta, label, n_flat=3)
    idx = _time_indices(sc.t, times, _marked_time(ds, mark, sc.label))
    rows = [(sc.X, sc.label), *_second_row(ds, second, sc.X.shape[1])]
    fig = _sphere_grid(sc, rows, idx) if sc.d == 3 else _plane_grid(sc, idx)
    what = f"Tokens on $S^{{{sc.d - 1}}}$ ({sc.X.shape[1]} shown)"
    if sc.d != 3:
        what += ": projections onto planes of A's top eigenvectors u_k (w_k: principal axes ⊥ u)"
    fig.suptitle(run_title(ds, what))
    return save(fig, outdir, "snapshots", dpi)
