"""The token animation (GIF, or MP4 with ffmpeg) and `token_figures`, the snapshots and the
animation an experiment draws from its run's `x` (the scene and its axes: `tokens`)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._checks import check_positive
from .style import DPI, config_value, freeze_layout, new_figure
from .tokens import (
    ANIMATION_FILE,
    Scene,
    has_tokens,
    plane_axes,
    plot_snapshots,
    scene,
    sphere_axes,
)

if TYPE_CHECKING:
    import xarray as xr
    from matplotlib.figure import Figure


def _animation_axes(sc: Scene) -> tuple[Figure, Any]:
    """The figure and axes of an animation: the sphere (d = 3) or the plane of the two leading
    directions."""
    if sc.d == 3:
        fig, _ = new_figure(1, 1, (5.0, 5.2))
        fig.clear()
        ax = fig.add_subplot(1, 1, 1, projection="3d")
        sphere_axes(ax, sc.U, sc.labels, sc.v)
    else:
        fig, axes = new_figure(1, 1, (5.0, 5.2))
        ax = axes[0][0]
        plane_axes(ax, sc.labels[0], sc.labels[1], None if sc.v is None else sc.v @ sc.U[:, :2])
    return fig, ax


def _frame_drawer(ds: xr.Dataset, sc: Scene, fig: Figure, ax: Any) -> Callable[[int], None]:
    """draw(k): the tokens at saved time k, and a title saying which."""
    lines = []
    for _, st in sc.groups:
        (ln,) = ax.plot([], [], **st)
        lines.append(ln)
    ax.legend(loc="upper left", fontsize="x-small")
    title = fig.suptitle("", fontsize="medium")
    N = config_value(ds, "N", "n_tokens", "n")
    shown = f"{sc.X.shape[1]} of N = {N} tokens" if isinstance(N, int) else f"{sc.X.shape[1]} tokens"
    head = f"{ds.attrs.get('experiment', '')}: {shown} on $S^{{{sc.d - 1}}}$, {sc.label}".lstrip(": ")

    def draw(k: int) -> None:
        for ln, (mask, _) in zip(lines, sc.groups, strict=True):
            P = sc.X[k][mask]
            if sc.d == 3:
                ln.set_data_3d(P[:, 0], P[:, 1], P[:, 2])
            else:
                Q = P @ sc.U[:, :2]
                ln.set_data(Q[:, 0], Q[:, 1])
        title.set_text(f"{head}\nt = {sc.t[k]:.4g}  (frame {k + 1}/{len(sc.t)})")

    return draw


def animate(
    ds: xr.Dataset,
    path: str | Path,
    beta: float | None = None,
    fps: int = 8,
    dpi: int = 100,
    label: str = "",
) -> list[Path]:
    """Animation of the tokens, one frame per saved time: a GIF (PillowWriter) always, and an MP4
    next to it (same stem) when an ffmpeg program is found (`ffmpeg_path`).

    d = 3: 3-D scatter on the sphere with A's top eigenvectors; otherwise the projection onto the
    plane of the two leading directions (u1, u2 or principal axes).  Needs `x`; beta and label as
    in `plot_snapshots`.  path: the .gif file.  Returns the written paths.
    """
    path = Path(path)
    if path.suffix.lower() != ".gif":
        raise ValueError(f"path must name a .gif file, got {str(path)!r}")
    fps = int(check_positive(fps, "fps", integer=True))
    dpi = int(check_positive(dpi, "dpi", integer=True))
    sc = scene(ds, beta, label, n_flat=2)
    fig, ax = _animation_axes(sc)
    draw = _frame_drawer(ds, sc, fig, ax)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_gif(fig, path, len(sc.t), draw, fps, dpi)
    written = [path]
    mp4 = _write_mp4(fig, path.with_suffix(".mp4"), len(sc.t), draw, fps, dpi)
    if mp4 is not None:
        written.append(mp4)
    fig.clear()
    return written


def _write_mp4(
    fig: Figure, path: Path, n_frames: int, draw: Callable[[int], None], fps: int, dpi: int
) -> Path | None:
    """The frames as an MP4 at `path` when an ffmpeg program is found (`ffmpeg_path`), else None."""
    ffmpeg = ffmpeg_path()
    if not ffmpeg:
        return None
    from matplotlib import rc_context
    from matplotlib.animation import FFMpegWriter

    writer = FFMpegWriter(fps=fps)
    with rc_context({"animation.ffmpeg_path": ffmpeg}), writer.saving(fig, str(path), dpi):
        for k in range(n_frames):
            draw(k)
            writer.grab_frame()
    return path


def _write_gif(
    fig: Figure, path: Path, n_frames: int, draw: Callable[[int], None], fps: int, dpi: int
) -> None:
    """A looping GIF of the frames draw(0), ..., draw(n_frames - 1).

    The first frame's layout serves them all (`freeze_layout`), and each frame gets its palette from
    a fast octree: PIL's default median cut on antialiased RGBA frames took half the animation's time.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image

    canvas = fig.canvas
    assert isinstance(canvas, FigureCanvasAgg)  # new_figure's canvas
    fig.set_dpi(dpi)
    frames = []
    for k in range(n_frames):
        draw(k)
        canvas.draw()
        if k == 0:
            freeze_layout(fig)
        rgb = np.asarray(canvas.buffer_rgba())[..., :3]
        frames.append(
            Image.fromarray(np.ascontiguousarray(rgb)).quantize(256, method=Image.Quantize.FASTOCTREE)
        )
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=round(1000 / fps), loop=0)


def ffmpeg_path() -> str | None:
    """The ffmpeg program that writes MP4: `ffmpeg` on the PATH, else the one bundled with the
    optional package imageio-ffmpeg (`pip install "attnflow[video]"`), else None (GIF only)."""
    found = shutil.which("ffmpeg")
    if found:
        return found
    try:
        import imageio_ffmpeg
    except ImportError:
        return None
    try:
        return str(imageio_ffmpeg.get_ffmpeg_exe())
    except (RuntimeError, OSError):  # the package without a usable binary for this platform
        return None


def token_figures(
    ds: xr.Dataset,
    outdir: str | Path,
    *,
    animation: bool = False,
    dpi: int = DPI,
    mark: str | None = None,
    second: tuple[str, str] | None = None,
    label: str = "",
) -> list[Path]:
    """Snapshots (and with animation=True the GIF, and the MP4 where `ffmpeg_path` finds ffmpeg) when
    the run kept tokens, else [].

    mark, second, label: as in `plot_snapshots`.  Captions: TOKEN_CAPTIONS.
    """
    if not has_tokens(ds):
        return []
    paths = plot_snapshots(ds, outdir, dpi=dpi, mark=mark, second=second, label=label)
    if animation:
        paths += animate(ds, Path(outdir) / ANIMATION_FILE, label=label)
    return paths
