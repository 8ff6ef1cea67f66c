"""A run's report: `report.md` (Markdown) and `report.html` (self-contained except for the images).

The report shows the summary table (headline numbers), every figure by relative path, the
configuration and the provenance stored in the Dataset's attrs.
"""

from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import xarray as xr

IMAGE_SUFFIXES = (".png", ".gif", ".svg", ".jpg", ".jpeg")

CAPTIONS = {
    "w2": "Exact W₂(ρ_t^β, Π#ρ₀) against t (log scale), one line per β; stars mark t*(β); thick dashed: "
    "zero temperature. Right: the synchronous coupling bound (an upper bound only).",
    "t_star": "Time of closest approach t*(β) against log β, with its plateau and the linear fit in log β.",
    "min_w2": "min_t W₂ against β (log-log) with the reference √(log(β+1)/β) and the fitted power of it.",
    "mass": "Fraction of tokens within ε of the top eigenspaces of A and of V against t.",
    "snapshots": "Token snapshots at chosen times with A's top eigenvectors marked.",
    "tokens": "Animation of the tokens, one frame per saved time.",
    "zero_temperature": "Zero temperature: W₂ to Π#ρ₀ against t with the fitted, guaranteed and "
    "predicted rates.",
    "resolution": "Mean-field resolution: min W₂ and t* against the number of tokens N.",
    "layers": "Error of the L-layer transformer (Euler with renormalisation) against the step h = T/L.",
    "sweep": "Sweep: t* and min W₂ against β, median over seeds with the min–max spread, per N.",
}


TITLES = {
    "w2": "Distance to the zero-temperature limit",
    "t_star": "Time of closest approach t*(β)",
    "min_w2": "Closest approach min_t W₂ against β",
    "mass": "Mass near the top eigenspaces",
    "snapshots": "Token snapshots",
    "tokens": "Animation",
    "zero_temperature": "Zero-temperature convergence",
    "resolution": "Mean-field resolution",
    "layers": "Layers as Euler steps",
    "sweep": "Sweep over β, N and seeds",
}


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


def format_value(v: Any) -> str:
    """A headline number as text: floats to 4 significant digits, lists comma-separated."""
    if v is None:
        return "—"
    if isinstance(v, bool | np.bool_):
        return "yes" if v else "no"
    if isinstance(v, int | np.integer):
        return str(int(v))
    if isinstance(v, float | np.floating):
        f = float(v)
        if math.isnan(f):
            return "NaN"
        if math.isinf(f):
            return "∞" if f > 0 else "−∞"
        return f"{f:.4g}"
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, list | tuple) and v and all(isinstance(x, str) for x in v):
        return "; ".join(v)
    if isinstance(v, list | tuple):
        items = [format_value(x) for x in v]
        return "[" + ", ".join(items if len(items) <= 10 else [*items[:8], "…", items[-1]]) + "]"
    return str(v)


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


def _json_attr(ds: xr.Dataset, key: str) -> Any:
    raw = ds.attrs.get(key)
    if raw is None:
        return None
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


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
) -> Path:
    """Write outdir/report.md and outdir/report.html; returns the path of report.md.

    summary: headline numbers (nested dicts allowed) shown as a table.  figures: files made by
    `plot_run` / `animate`; images (PNG, GIF) are embedded by path relative to outdir, PDFs and MP4s
    linked.  The configuration and provenance come from ds.attrs["config"], ["provenance"].
    """
    if not (hasattr(ds, "attrs") and hasattr(ds, "sizes")):
        raise TypeError(f"ds must be an xarray.Dataset, got {type(ds).__name__}")
    table = summary_table(summary)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    figs = _check_figures(figures, outdir)
    title, subtitle = _heading(ds)
    config = _json_attr(ds, "config")
    prov = _json_attr(ds, "provenance")
    fits = _json_attr(ds, "fits")

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
        caption = CAPTIONS.get(stem, stem)
        md.append(f"### {TITLES.get(stem, stem)}")
        md.append("")
        imgs = [rel for p, rel in files if p.suffix.lower() in IMAGE_SUFFIXES]
        if imgs:
            md.append(f"![{stem}]({imgs[0]})")
            md.append("")
        links = [f"[{p.suffix.lstrip('.').upper()}]({rel})" for p, rel in files]
        md += [f"{caption} Files: " + ", ".join(links), ""]
    if config is not None:
        md += ["## Configuration", "", "```json", json.dumps(config, indent=2, default=str), "```", ""]
    if isinstance(prov, Mapping) and prov:
        md += ["## Provenance", "", summary_table(prov), ""]
    md_path = outdir / "report.md"
    _atomic_write(md_path, "\n".join(md))

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
        caption = CAPTIONS.get(stem, stem)
        h.append(f"<h3>{e(TITLES.get(stem, stem))}</h3><figure>")
        imgs = [rel for p, rel in files if p.suffix.lower() in IMAGE_SUFFIXES]
        if imgs:
            h.append(f'<img src="{e(imgs[0])}" alt="{e(stem)}">')
        videos = [rel for p, rel in files if p.suffix.lower() == ".mp4"]
        if videos and not imgs:
            h.append(f'<video controls src="{e(videos[0])}"></video>')
        anchors = ", ".join(f'<a href="{e(rel)}">{e(p.suffix.lstrip(".").upper())}</a>' for p, rel in files)
        h.append(f"<figcaption>{e(caption)} Files: {anchors}</figcaption></figure>")
    if config is not None:
        h += ["<h2>Configuration</h2>", f"<pre>{e(json.dumps(config, indent=2, default=str))}</pre>"]
    if isinstance(prov, Mapping) and prov:
        h += ["<h2>Provenance</h2>", _html_table(prov)]
    h.append("</body></html>")
    _atomic_write(outdir / "report.html", "\n".join(h))
    return md_path


def _html_table(d: Mapping[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(format_value(v))}</td></tr>"
        for k, v in _flatten(d)
    )
    return f"<table><tr><th>quantity</th><th>value</th></tr>{rows}</table>"
