"""A run's report: `report.md` (Markdown) and `report.html` (self-contained except for the images).

The report shows the summary table (headline numbers), every figure by relative path with the
title and caption its experiment gives it (`Experiment.captions`), the configuration and the
provenance stored in the Dataset's attrs.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._text import format_value
from ..io import atomic_write_text, json_attr
from .layout import REPORT_HTML, REPORT_MD

if TYPE_CHECKING:
    import xarray as xr

IMAGE_SUFFIXES = (".png", ".gif", ".svg", ".jpg", ".jpeg")


def _flatten(d: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested mappings -> [(dotted.key, value)] in insertion order."""
    rows: list[tuple[str, Any]] = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            rows += _flatten(v, key + ".")
        else:
            rows.append((key, v))
    return rows


def summary_table(summary: Mapping[str, Any]) -> str:
    """Headline numbers (nested dicts allowed) -> a two-column Markdown table."""
    if not isinstance(summary, Mapping):
        raise TypeError(f"summary must be a dict of headline numbers, got {type(summary).__name__}")
    lines = ["| quantity | value |", "|---|---|"]
    for k, v in _flatten(summary):
        cell = format_value(v).replace("|", r"\|").replace("\n", " ")
        key = str(k).replace("|", r"\|")
        lines.append(f"| {key} | {cell} |")
    return "\n".join(lines)


def _warnings(summary: Mapping[str, Any]) -> list[str]:
    """summary["warnings"] (a string or a list of strings) as a list, shown above the table."""
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


def write_report(
    ds: xr.Dataset,
    summary: Mapping[str, Any],
    figures: Iterable[str | Path],
    outdir: str | Path,
    captions: Mapping[str, tuple[str, str]] | None = None,
) -> Path:
    """Write outdir/report.md and outdir/report.html; returns the path of report.md.

    summary: headline numbers (nested dicts allowed) shown as a table.  figures: the files of the
    experiment's figures; images (PNG, GIF) are embedded by path relative to outdir, PDFs and MP4s
    linked.  captions: {file stem: (title, caption)} (`Experiment.captions`); a figure without one is
    titled by its stem.  The configuration and provenance come from ds.attrs["config"], ["provenance"].
    """
    if not (hasattr(ds, "attrs") and hasattr(ds, "sizes")):
        raise TypeError(f"ds must be an xarray.Dataset, got {type(ds).__name__}")
    table = summary_table(summary)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    figs = _check_figures(figures, outdir)
    title, subtitle = _heading(ds)
    config = json_attr(ds, "config")
    prov = json_attr(ds, "provenance")
    fits = json_attr(ds, "fits")
    captions = dict(captions or {})

    # group figure files by stem: one image, other formats as links
    stems: dict[str, list[tuple[Path, str]]] = {}
    for p, rel in figs:
        stems.setdefault(p.stem, []).append((p, rel))

    warns = _warnings(summary)
    md = [f"# {title}", "", subtitle, ""]
    if warns:
        md += ["## Warnings", "", *[f"- {w}" for w in warns], ""]
    md += ["## Summary", "", table, ""]
    if isinstance(fits, Mapping) and fits:
        md += ["## Fits", "", summary_table(fits), ""]
    md += ["## Figures", ""]
    for stem, files in stems.items():
        title_of, caption = captions.get(stem, (stem, ""))
        md.append(f"### {title_of}")
        md.append("")
        imgs = [rel for p, rel in files if p.suffix.lower() in IMAGE_SUFFIXES]
        if imgs:
            md.append(f"![{stem}]({imgs[0]})")
            md.append("")
        links = [f"[{p.suffix.lstrip('.').upper()}]({rel})" for p, rel in files]
        md += [f"{caption} Files: ".lstrip() + ", ".join(links), ""]
    if config is not None:
        md += ["## Configuration", "", "```json", json.dumps(config, indent=2, default=str), "```", ""]
    if isinstance(prov, Mapping) and prov:
        md += ["## Provenance", "", summary_table(prov), ""]
    md_path = atomic_write_text(outdir / REPORT_MD, "\n".join(md))

    e = html.escape
    h = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#111}"
        "table{border-collapse:collapse}td,th{border:1px solid #999;padding:3px 8px;text-align:left}"
        "img,video{max-width:100%;border:1px solid #ddd}figure{margin:1.5em 0}"
        "pre{background:#f4f4f4;padding:1em;overflow-x:auto}</style></head><body>",
        f"<h1>{e(title)}</h1>",
        f"<p>{e(subtitle)}</p>",
    ]
    if warns:
        h += ["<h2>Warnings</h2>", "<ul>", *[f"<li>{e(w)}</li>" for w in warns], "</ul>"]
    h += ["<h2>Summary</h2>", _html_table(summary)]
    if isinstance(fits, Mapping) and fits:
        h += ["<h2>Fits</h2>", _html_table(fits)]
    h.append("<h2>Figures</h2>")
    for stem, files in stems.items():
        title_of, caption = captions.get(stem, (stem, ""))
        h.append(f"<h3>{e(title_of)}</h3><figure>")
        imgs = [rel for p, rel in files if p.suffix.lower() in IMAGE_SUFFIXES]
        if imgs:
            h.append(f'<img src="{e(imgs[0])}" alt="{e(stem)}">')
        videos = [rel for p, rel in files if p.suffix.lower() == ".mp4"]
        if videos and not imgs:
            h.append(f'<video controls src="{e(videos[0])}"></video>')
        anchors = ", ".join(f'<a href="{e(rel)}">{e(p.suffix.lstrip(".").upper())}</a>' for p, rel in files)
        h.append(f"<figcaption>{e(f'{caption} Files: '.lstrip())}{anchors}</figcaption></figure>")
    if config is not None:
        h += ["<h2>Configuration</h2>", f"<pre>{e(json.dumps(config, indent=2, default=str))}</pre>"]
    if isinstance(prov, Mapping) and prov:
        h += ["<h2>Provenance</h2>", _html_table(prov)]
    h.append("</body></html>")
    atomic_write_text(outdir / REPORT_HTML, "\n".join(h))
    return md_path


def _html_table(d: Mapping[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(format_value(v))}</td></tr>"
        for k, v in _flatten(d)
    )
    return f"<table><tr><th>quantity</th><th>value</th></tr>{rows}</table>"
