"""Renderers of the table model (`attnflow.experiments.tables`): Markdown, HTML and the terminal.

    to_markdown(doc)              summary.md, report.md, `attnflow show` when piped
    to_markdown(doc, width=120)   the same, every line at most 120 characters: a table too wide
                                  for that is a bulleted list of its rows (`attnflow list` piped)
    to_html(doc, base)            report.html (one page: its images embedded from base)
    to_terminal(doc, console)     `attnflow show` and `attnflow list` in a terminal (Rich): a table
                                  that does not fit the width wraps its long columns, or else
                                  shows each row as a record; wide=True: every table whole

Every renderer draws the same rows of the same tables, in the same order.
"""

from __future__ import annotations

import base64
import html
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .tables import Block, Document, Figure, Prose, Section, Table

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

__all__ = ["to_html", "to_markdown", "to_terminal"]

INDENT = "  "  # continuation lines of a wrapped list item


# ----------------------------------------------------------------------------------- Markdown


def to_markdown(doc: Document, width: int | None = None) -> str:
    """`doc` as Markdown (GitHub tables); width: the longest line allowed (None: no limit)."""
    lines = [f"# {doc.title}", ""] if doc.title else []
    for section in doc.sections:
        lines += _md_section(section, width)
    return "\n".join(lines).rstrip("\n") + "\n"


def _md_section(section: Section, width: int | None) -> list[str]:
    lines = [f"## {section.title}", ""] if section.title else []
    level = "###" if section.title else "##"
    for block in section.blocks:
        if block.title:
            lines += [f"{level} {block.title}", ""]
        lines += _md_block(block, width)
        lines.append("")
    return lines


def _md_block(block: Block, width: int | None) -> list[str]:
    if isinstance(block, Table):
        table = _md_table(block)
        if width is not None and max(map(len, table)) > width:
            table = _md_records(block, width)
        return [*table, "", *_wrapped(block.notes, width)] if block.notes else table
    if isinstance(block, Prose):
        if block.bullets:
            return [line for p in block.paragraphs for line in _wrap_item(f"- {p}", width)]
        return [line for p in block.paragraphs for line in [*_wrapped([p], width), ""]][:-1]
    return _md_figure(block)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _md_table(table: Table) -> list[str]:
    lines = ["| " + " | ".join(map(_md_cell, table.columns)) + " |", "|" + "---|" * len(table.columns)]
    return lines + ["| " + " | ".join(map(_md_cell, row)) + " |" for row in table.rows]


def _md_records(table: Table, width: int) -> list[str]:
    """Each row as one list item: its first cell in bold, then "column: cell" for the others."""
    return [
        line for row in table.rows for line in _record_lines(f"- **{_md_cell(row[0])}**", table, row, width)
    ]


def _record_lines(head: str, table: Table, row: tuple[str, ...], width: int) -> list[str]:
    """One row as lines of at most `width` characters: head, then "column: cell" for each other
    non-empty cell, a cell broken across lines only where it is longer than a line."""
    fields = [f"{c}: {v}" if c else v for c, v in zip(table.columns[1:], row[1:], strict=True) if v]
    return _wrap_chunks(head, [_md_cell(f) for f in fields] if head.startswith("- ") else fields, width)


def _wrap_chunks(head: str, chunks: list[str], width: int) -> list[str]:
    """head — chunks separated by "; ", wrapped at width: the first chunk follows the head, each
    other one starts a new (indented) line rather than being broken, unless it is longer than one."""
    if not chunks:
        return [head]
    pieces = [c + ";" for c in chunks[:-1]] + [chunks[-1]]
    *lines, line = _wrap_item(f"{head} — {pieces[0]}", width)
    for piece in pieces[1:]:
        if len(line) + 1 + len(piece) <= width:
            line += " " + piece
        elif len(INDENT) + len(piece) <= width:
            lines.append(line)
            line = INDENT + piece
        else:
            *done, line = _wrap_item(f"{line} {piece}", width)
            lines += done
    return [*lines, line]


def _wrap_item(text: str, width: int | None) -> list[str]:
    if width is None:
        return [text]
    return textwrap.wrap(text, width, subsequent_indent=INDENT, break_on_hyphens=False) or [""]


def _wrapped(paragraphs: tuple[str, ...] | list[str], width: int | None) -> list[str]:
    if width is None:
        return list(paragraphs)
    return [line for p in paragraphs for line in (textwrap.wrap(p, width, break_on_hyphens=False) or [""])]


def _md_figure(fig: Figure) -> list[str]:
    lines = [f"![{fig.name}]({fig.image})", ""] if fig.image else []
    links = ", ".join(f"[{label}]({rel})" for label, rel in fig.files)
    return [*lines, f"{fig.caption} Files: ".lstrip() + links]


# --------------------------------------------------------------------------------------- HTML

#: a page 1000 px wide: tables never wider than it (long cells wrap), images scaled to it
STYLE = (
    "body{font-family:sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#111}"
    "table{border-collapse:collapse;margin:0.5em 0;max-width:100%}td,th{border:1px solid #999;"
    "padding:3px 8px;text-align:left;vertical-align:top;overflow-wrap:anywhere}"
    "img,video{max-width:100%;border:1px solid #ddd}figure{margin:1.5em 0}"
    "details>summary{cursor:pointer}details>summary>h2{display:inline}"
)
#: the media types of the images embedded in report.html
MEDIA = {
    ".png": "image/png",
    ".gif": "image/gif",
    ".svg": "image/svg+xml",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
}


def to_html(doc: Document, base: Path | None = None) -> str:
    """`doc` as one HTML page (UTF-8, an inline style sheet); every text escaped; a collapsed
    section folded (<details>). base: the folder the figures' paths are relative to, their images
    then embedded (data URIs) so that the page stands alone; None: images linked by path."""
    e = html.escape
    page = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(doc.title)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{e(doc.title)}</h1>",
    ]
    for section in doc.sections:
        page += _html_section(section, base)
    page.append("</body></html>")
    return "\n".join(page) + "\n"


def _html_section(section: Section, base: Path | None) -> list[str]:
    e = html.escape
    heading = f"<h2>{e(section.title)}</h2>" if section.title else ""
    lines = [f"<details><summary>{heading}</summary>" if section.collapsed else heading] if heading else []
    level = "h3" if section.title else "h2"
    for block in section.blocks:
        if block.title:
            lines.append(f"<{level}>{e(block.title)}</{level}>")
        lines.append(_html_block(block, base))
    if heading and section.collapsed:
        lines.append("</details>")
    return lines


def _image_src(rel: str, base: Path | None) -> str:
    """The src of an image: a data URI of its bytes when base holds it, else its relative path."""
    path = base / rel if base is not None else None
    if path is None or not path.is_file() or path.suffix.lower() not in MEDIA:
        return rel
    return f"data:{MEDIA[path.suffix.lower()]};base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _html_block(block: Block, base: Path | None = None) -> str:
    e = html.escape
    if isinstance(block, Table):
        head = "".join(f"<th>{e(c)}</th>" for c in block.columns)
        body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in block.rows)
        notes = "".join(f"<p>{e(n)}</p>" for n in block.notes)
        return f"<table><tr>{head}</tr>{body}</table>{notes}"
    if isinstance(block, Prose):
        if block.bullets:
            return "<ul>" + "".join(f"<li>{e(p)}</li>" for p in block.paragraphs) + "</ul>"
        return "".join(f"<p>{e(p)}</p>" for p in block.paragraphs)
    shown = (
        f'<img src="{e(_image_src(block.image, base))}" alt="{e(block.name)}">'
        if block.image
        else (f'<video controls src="{e(block.video)}"></video>' if block.video else "")
    )
    links = ", ".join(f'<a href="{e(rel)}">{e(label)}</a>' for label, rel in block.files)
    caption = e(f"{block.caption} Files: ".lstrip())
    return f"<figure>{shown}<figcaption>{caption}{links}</figcaption></figure>"


# ----------------------------------------------------------------------------------- terminal

#: a column whose widest cell is longer than this is prose: the one kind of column that wraps
PROSE = 60
#: the narrowest a prose column may get before the table is shown as records instead
MIN_WRAP = 30


def to_terminal(doc: Document, console: Console, wide: bool = False) -> None:
    """Print `doc` on a Rich console: headings in bold, each table as a table that fits the
    console's width (its prose columns wrapped) or else as one record per row; wide=True: every
    table with one line per row, however wide."""
    from rich.text import Text

    if doc.title:
        console.print(Text(doc.title, style="bold underline"))
        console.print()
    for section in doc.sections:
        if section.title:
            console.print(Text(section.title, style="bold underline"))
        for block in section.blocks:
            for item in _terminal_block(block, console.width, wide):
                _print(console, item, wide)
            console.print()


def _print(console: Console, item: RenderableType, wide: bool) -> None:
    """Print item; wide: a table at its natural width, one line per row (Rich would fold it to the
    console's width)."""
    from rich.console import Console
    from rich.table import Table as RichTable

    if not (wide and isinstance(item, RichTable)):
        console.print(item)
        return
    width = console.width
    console.width = max(width, Console(width=100_000).measure(item).maximum)
    try:
        console.print(item, crop=False)
    finally:
        console.width = width


def _terminal_block(block: Block, width: int, wide: bool) -> Iterator[RenderableType]:
    from rich.text import Text

    title = Text(block.title, style="bold") if block.title else None
    if isinstance(block, Table):
        yield from [title] if title else []
        yield _rich_table(block, width, wide)
        yield from (Text(n, style="dim") for n in block.notes)
    elif isinstance(block, Prose):
        yield from [title] if title else []
        for p in block.paragraphs:
            yield Text("\n".join(_wrap_item(f"• {p}", width) if block.bullets else _wrapped([p], width)))
    else:
        yield Text(block.title, style="bold")
        yield Text(f"{block.image or block.video}  {block.caption}".strip())


def _widths(table: Table) -> list[int]:
    from rich.cells import cell_len

    return [max([cell_len(c), *(cell_len(r[i]) for r in table.rows)]) for i, c in enumerate(table.columns)]


def _rich_table(table: Table, width: int, wide: bool) -> RenderableType:
    """A Rich table when the table fits `width` (or wide), its prose columns wrapped if need be;
    else its rows as records."""
    from rich.table import Table as RichTable
    from rich.text import Text

    widths = _widths(table)
    frame = 3 * len(widths) + 1
    fits = wide or sum(widths) + frame <= width
    if not fits and sum(w if w <= PROSE else MIN_WRAP for w in widths) + frame > width:
        return _rich_records(table, width)
    out = RichTable(expand=False)
    for name, w in zip(table.columns, widths, strict=True):
        prose = not fits and w > PROSE
        out.add_column(Text(name), no_wrap=not prose, overflow="fold", min_width=MIN_WRAP if prose else None)
    for row in table.rows:
        out.add_row(*map(Text, row))
    return out


def _rich_records(table: Table, width: int) -> RenderableType:
    """Each row as a record (the lines of the piped Markdown's list items), its first cell in bold."""
    from rich.text import Text

    lines = Text()
    for row in table.rows:
        for k, line in enumerate(_record_lines(row[0], table, row, width)):
            text = Text(line + "\n")
            if k == 0:
                text.stylize("bold", 0, len(row[0]))
            lines.append_text(text)
    lines.rstrip()
    return lines
