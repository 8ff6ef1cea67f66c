"""A run's report: `report.md` (Markdown, images by relative path) and `report.html` (one
self-contained page, images embedded), two renderings of one `Document`
(`attnflow.experiments.tables`), read top to bottom.

It opens with the theorem in two sentences and what was run (`brief.intro`), the run's warnings,
the verdict table (one line per claims row) and the status of each beta; then every figure with the
title and caption its experiment gives it (`Experiment.captions`); then, collapsed in the HTML, the
detail tables (those of summary.md and `attnflow show`, a table too wide for a page one table per
row), the fits, the configuration and the provenance stored in the Dataset's attrs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .._text import format_value
from ..io import atomic_write_text, json_attr
from .brief import BETA_STATUS, intro, verdict_table
from .layout import REPORT_HTML, REPORT_MD
from .render import to_html, to_markdown
from .tables import (
    THRESHOLD,
    Block,
    Document,
    Figure,
    Prose,
    Section,
    Table,
    cell_text,
    records_table,
    summary_blocks,
)

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["IMAGE_SUFFIXES", "report_document", "write_report"]

IMAGE_SUFFIXES = (".png", ".gif", ".svg", ".jpg", ".jpeg")
#: a table with more columns than this and a cell longer than PROSE_CELL is shown one table per row
WIDE = 6
PROSE_CELL = 60
#: the title of the fits: least-squares descriptions of the data, never bounds
FITS_TITLE = "Fits (least-squares descriptions of the data, not bounds)"
#: what the less obvious fields of the detail tables mean
FIELDS = {
    "threshold": THRESHOLD,
    "left_out": "the betas a row did not use, each with its reason",
    "resolution_ratio": "spacing(N) √(β max|Bᵀx|): a β is resolved where it lies below its limit",
    "estimate": "the doubling ladder's N → ∞ estimate of a quantity",
    "tol": "the tolerance a quantity was judged converged at",
    "error_parts": "the parts of a quantity's error: N (the ladder), time step, save grid, flatness, seeds",
    "probe's integration (tighter)": "the time-step probe: one β run again with a tighter integrator; "
    "'changes' are how much each quantity moved (the run's own integration is the next row)",
}
#: what a quantity's cell says of it (docs/guide.md, "Statuses")
QUANTITY_STATUS = (
    "A quantity: ✓ converged in N (value ± its error); (not converged): shown, never used in a "
    "verdict; — (reason): it does not exist, e.g. no departure without a metastable phase."
)


def _warnings(summary: Mapping[str, object]) -> list[str]:
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
    """The report's title and what was run: the betas, N (the tokens simulated, not the subset
    stored), the time span, seed, kernel and integrator."""
    exp = str(ds.attrs.get("experiment", "run"))
    bits = []
    if "beta" in ds.coords:
        b = np.asarray(ds["beta"].values, dtype=float)
        bits.append("β = " + ", ".join(format_value(x) for x in b[:12]) + (" …" if b.size > 12 else ""))
    N = _simulated_N(ds)
    if N:
        bits.append(f"N = {N}")
    if "time" in ds.coords and ds.sizes.get("time", 0) > 1:
        t = np.asarray(ds["time"].values, dtype=float)
        bits.append(f"t from {format_value(t[0])} to {format_value(t[-1])} ({t.size} saved times)")
    for k in ("seed", "kernel", "integrator"):
        if k in ds.attrs:
            bits.append(f"{k} = {ds.attrs[k]}")
    return f"attnflow report: {exp}", "; ".join(bits)


def _simulated_N(ds: xr.Dataset) -> str:
    """The number of tokens simulated: per beta where N was chosen per beta (N_used), else the
    config's N; "" when neither is known."""
    if "N_used" in ds.variables:
        used = sorted({int(n) for n in np.atleast_1d(ds["N_used"].values) if np.isfinite(n)})
        return ", ".join(map(str, used)) + (" (per β, by the doubling ladder)" if len(used) > 1 else "")
    config = json_attr(ds, "config")
    N = config.get("N") if isinstance(config, Mapping) else None
    return "" if N is None else format_value(N)


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


def _narrow(block: Block) -> list[Block]:
    """A table too wide for a page (more than WIDE columns and a cell of prose) as one two-column
    table per row, titled by the row's first cell; any other block as it is."""
    if not (isinstance(block, Table) and len(block.columns) > WIDE):
        return [block]
    if max((len(c) for r in block.rows for c in r), default=0) <= PROSE_CELL:
        return [block]
    tables: list[Block] = []
    for row in block.rows:
        fields = tuple((c, v) for c, v in zip(block.columns[1:], row[1:], strict=True) if v)
        tables.append(Table(("field", "value"), fields, _join(block.title, row[0])))
    return tables


def _join(title: str, name: str) -> str:
    return f"{title}: {name}" if title else name


def _glossary(blocks: list[Block]) -> list[Block]:
    """What the detail tables' less obvious fields mean: those of FIELDS that the tables use."""
    words = {c for b in blocks if isinstance(b, Table) for c in (*b.columns, *(r[0] for r in b.rows))}
    used = tuple(f"{name}: {meaning}" for name, meaning in FIELDS.items() if name in words)
    return [Prose(used, "What the fields mean", bullets=True)] if used else []


def _top(summary: Mapping[str, object]) -> list[Block]:
    """The verdict table (one line per claims row) and the status of each beta, where the summary
    has them."""
    blocks: list[Block] = []
    claims = summary.get("claims")
    if isinstance(claims, list) and claims:
        blocks.append(verdict_table(claims))
    per_beta = summary.get("per_beta")
    if (
        isinstance(per_beta, Mapping)
        and per_beta
        and all(isinstance(v, Mapping) and "status" in v for v in per_beta.values())
    ):
        table = records_table(per_beta, "Status per β", label="beta")
        words = tuple(f"{k}: {v}." for k, v in BETA_STATUS.items())
        blocks.append(Table(table.columns, table.rows, table.title, (*words, QUANTITY_STATUS)))
    return blocks


def report_document(
    ds: xr.Dataset,
    summary: Mapping[str, object],
    figures: list[tuple[Path, str]],
    captions: Mapping[str, tuple[str, str]],
) -> Document:
    """The report as a Document, to be read top to bottom: the theorem and what was run, the
    warnings, the verdicts and statuses, the figures; then, collapsed, the detail tables (those of
    summary.md), the fits, the configuration and the provenance."""
    title, subtitle = _heading(ds)
    sections = [Section("", (intro(summary, subtitle),))]
    warns = _warnings(summary)
    if warns:
        sections.append(Section("Warnings", (Prose(tuple(warns), bullets=True),)))
    top = _top(summary)
    if top:
        sections.append(Section("Verdicts and statuses", tuple(top)))
    sections.append(Section("Figures", tuple(figure_blocks(figures, captions))))
    rest = {k: v for k, v in summary.items() if k != "warnings"}
    detail = [b for block in summary_blocks(rest) for b in _narrow(block)]
    sections.append(Section("Detail tables", tuple(_glossary(detail) + detail), collapsed=True))
    fits = json_attr(ds, "fits")
    if isinstance(fits, Mapping) and fits:
        sections.append(Section(FITS_TITLE, tuple(summary_blocks(fits)), collapsed=True))
    config = json_attr(ds, "config")
    if isinstance(config, Mapping) and config:
        rows = tuple((str(k), cell_text(v)) for k, v in config.items())
        sections.append(Section("Configuration", (Table(("parameter", "value"), rows),), collapsed=True))
    prov = json_attr(ds, "provenance")
    if isinstance(prov, Mapping) and prov:
        sections.append(Section("Provenance", tuple(summary_blocks(prov)), collapsed=True))
    return Document(title, tuple(sections))


def write_report(
    ds: xr.Dataset,
    summary: Mapping[str, object],
    figures: Iterable[str | Path],
    outdir: str | Path,
    captions: Mapping[str, tuple[str, str]] | None = None,
) -> Path:
    """Write outdir/report.md and outdir/report.html; returns the path of report.md.

    summary: headline numbers (nested dicts allowed) shown as tables, as in summary.md.  figures:
    the files of the experiment's figures; images (PNG, GIF) are shown by path relative to outdir
    in report.md and embedded in report.html, PDFs and MP4s linked.  captions: {file stem: (title,
    caption)} (`Experiment.captions`); a figure without one is titled by its stem.  The fits,
    configuration and provenance come from ds.attrs["fits"], ["config"], ["provenance"].
    """
    if not (hasattr(ds, "attrs") and hasattr(ds, "sizes")):
        raise TypeError(f"ds must be an xarray.Dataset, got {type(ds).__name__}")
    if not isinstance(summary, Mapping):
        raise TypeError(f"summary must be a dict of headline numbers, got {type(summary).__name__}")
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    doc = report_document(ds, summary, _check_figures(figures, outdir), dict(captions or {}))
    md_path = atomic_write_text(outdir / REPORT_MD, to_markdown(doc))
    atomic_write_text(outdir / REPORT_HTML, to_html(doc, base=outdir))
    return md_path
