"""A run's report: `report.md` (Markdown) and `report.html` (self-contained except for the images),
two renderings of one `Document` (`attnflow.experiments.tables`).

The report shows the run's warnings, the summary's tables (the same as summary.md and `attnflow
show`), the fits, every figure by relative path with the title and caption its experiment gives it
(`Experiment.captions`), the configuration and the provenance stored in the Dataset's attrs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._text import format_value
from ..io import atomic_write_text, json_attr
from .layout import REPORT_HTML, REPORT_MD
from .render import to_html, to_markdown
from .tables import Document, Figure, Prose, Section, Table, cell_text, summary_blocks

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["IMAGE_SUFFIXES", "report_document", "write_report"]

IMAGE_SUFFIXES = (".png", ".gif", ".svg", ".jpg", ".jpeg")


def _warnings(summary: Mapping[str, Any]) -> list[str]:
    """summary["warnings"] (a string or a list of strings) as a list, shown first."""
    w = summary.get("warnings")
    if isinstance(w, str):
        return [w] if w else []
    if isinstance(w, list | tuple):
        return [str(x) for x in w]
    return []


def _check_figures(figures: Iterable[str | Path], outdir: Path) -> list[tuple[Path, str]]:
    """Existing figure files -> [(path, path relative to outdir with / separators)]."""
    if isinstance(figures, str | Path):
        raise TypeError("figures must be a list of paths, got a single path")
    out, missing = [], []
    for f in figures:
        p = Path(f)
        if not p.is_file():
            missing.append(str(p))
            continue
        out.append((p, Path(os.path.relpath(p.resolve(), outdir.resolve())).as_posix()))
    if missing:
        raise ValueError(f"figures: these files do not exist: {missing}")
    return out


def _heading(ds: xr.Dataset) -> tuple[str, str]:
    exp = str(ds.attrs.get("experiment", "run"))
    bits = []
    if "beta" in ds.coords:
        b = np.asarray(ds["beta"].values, dtype=float)
        bits.append("β = " + ", ".join(format_value(x) for x in b[:12]) + (" …" if b.size > 12 else ""))
    for name in ("time", "N", "seed", "token", "dim", "L"):
        if name in ds.sizes:
            bits.append(f"{name}: {ds.sizes[name]}")
    for k in ("seed", "kernel", "integrator"):
        if k in ds.attrs:
            bits.append(f"{k} = {ds.attrs[k]}")
    return f"attnflow report: {exp}", "; ".join(bits)


def figure_blocks(figures: list[tuple[Path, str]], captions: Mapping[str, tuple[str, str]]) -> list[Figure]:
    """One Figure per file stem: the first image shown (or the video where there is none), every
    format linked; titled and captioned by `captions` ({stem: (title, caption)}), else by its stem."""
    stems: dict[str, list[tuple[Path, str]]] = {}
    for p, rel in figures:
        stems.setdefault(p.stem, []).append((p, rel))
    blocks = []
    for stem, files in stems.items():
        title, caption = captions.get(stem, (stem, ""))
        images = [rel for p, rel in files if p.suffix.lower() in IMAGE_SUFFIXES]
        videos = [rel for p, rel in files if p.suffix.lower() == ".mp4"]
        links = tuple((p.suffix.lstrip(".").upper(), rel) for p, rel in files)
        image = images[0] if images else ""
        video = videos[0] if videos and not image else ""
        blocks.append(Figure(stem, title, caption, image=image, video=video, files=links))
    return blocks


def report_document(
    ds: xr.Dataset,
    summary: Mapping[str, Any],
    figures: list[tuple[Path, str]],
    captions: Mapping[str, tuple[str, str]],
) -> Document:
    """The report as a Document: heading, warnings, summary, fits, figures, configuration, provenance."""
    title, subtitle = _heading(ds)
    sections = [Section("", (Prose((subtitle,)),))] if subtitle else []
    warns = _warnings(summary)
    if warns:
        sections.append(Section("Warnings", (Prose(tuple(warns), bullets=True),)))
    rest = {k: v for k, v in summary.items() if k != "warnings"}
    sections.append(Section("Summary", tuple(summary_blocks(rest))))
    fits = json_attr(ds, "fits")
    if isinstance(fits, Mapping) and fits:
        sections.append(Section("Fits", tuple(summary_blocks(fits))))
    sections.append(Section("Figures", tuple(figure_blocks(figures, captions))))
    config = json_attr(ds, "config")
    if isinstance(config, Mapping) and config:
        rows = tuple((str(k), cell_text(v)) for k, v in config.items())
        sections.append(Section("Configuration", (Table(("parameter", "value"), rows),)))
    prov = json_attr(ds, "provenance")
    if isinstance(prov, Mapping) and prov:
        sections.append(Section("Provenance", tuple(summary_blocks(prov))))
    return Document(title, tuple(sections))


def write_report(
    ds: xr.Dataset,
    summary: Mapping[str, Any],
    figures: Iterable[str | Path],
    outdir: str | Path,
    captions: Mapping[str, tuple[str, str]] | None = None,
) -> Path:
    """Write outdir/report.md and outdir/report.html; returns the path of report.md.

    summary: headline numbers (nested dicts allowed) shown as tables, as in summary.md.  figures:
    the files of the experiment's figures; images (PNG, GIF) are embedded by path relative to
    outdir, PDFs and MP4s linked.  captions: {file stem: (title, caption)} (`Experiment.captions`);
    a figure without one is titled by its stem.  The fits, configuration and provenance come from
    ds.attrs["fits"], ["config"], ["provenance"].
    """
    if not (hasattr(ds, "attrs") and hasattr(ds, "sizes")):
        raise TypeError(f"ds must be an xarray.Dataset, got {type(ds).__name__}")
    if not isinstance(summary, Mapping):
        raise TypeError(f"summary must be a dict of headline numbers, got {type(summary).__name__}")
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    doc = report_document(ds, summary, _check_figures(figures, outdir), dict(captions or {}))
    md_path = atomic_write_text(outdir / REPORT_MD, to_markdown(doc))
    atomic_write_text(outdir / REPORT_HTML, to_html(doc))
    return md_path
