"""The table model of what attnflow prints: a `Document` of titled sections holding tables, prose
and figures, drawn by every renderer (`attnflow.experiments.render`: summary.md, report.md,
report.html, `attnflow show`, `attnflow list`). Cells are text already, so every renderer shows
the same rows.

`summary_blocks(summary)` turns a nested summary (an experiment's `summarize`, summary.json) into
blocks, by the shape of each value, never printing a literal:

- numbers, strings, lists of numbers and measured quantities ({value, error, converged}) go into
  a `quantity | value` table;
- a mapping of records ({"10": {"status": ..., "N": ...}, ...}, e.g. `per_beta`) is a table with
  one row per key (its first column is named X for a key `per_X`);
- a list of records (the claims) is a table with one row per record, the CLAIM_COLUMNS first; a
  record with a `key` (a claims row) shows its further fields in a section of its own below;
- a list of sentences (the warnings) is a bulleted list;
- any other mapping is a section of its own, its scalars in a table, its nested values below.

Imports NumPy (through `_text.format_value`) and nothing else of attnflow.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import SupportsFloat, TypeGuard

from .._text import format_value, format_with_error

__all__ = [
    "CLAIM_COLUMNS",
    "THRESHOLD",
    "Document",
    "Figure",
    "Prose",
    "Section",
    "Table",
    "cell_text",
    "is_measured",
    "records_table",
    "summary_blocks",
    "summary_document",
]

#: columns of a claims row, in this order where a row has them (other fields follow)
CLAIM_COLUMNS = ("key", "claim", "kind", "measured", "error", "betas", "left_out", "verdict", "meaning")
#: further fields of a claims row shown in its table; the others are shown below the table
CLAIM_EXTRA = ("threshold", "note")
#: what a claims row's `threshold` is, said under every claims table
THRESHOLD = (
    "the number a row's measured value is compared with (the exponent, rate or constant the theorem "
    "guarantees, or a heuristic's limit); the verdict says on which side it lies"
)
#: fields of a measured quantity: shown as one cell "value ± error ✓", its digits those the error
#: supports (the tolerance it was judged at, `tol`, and the parts of its error stay in the record)
MEASURED_FIELDS = frozenset({"value", "estimate", "error", "converged", "reason", "tol", "error_parts"})
#: a list of strings is prose (a bulleted list) when one of them is a sentence this long
SENTENCE = 40


@dataclass(frozen=True)
class Table:
    """A titled table: `columns` (header texts), `rows` (tuples of cell texts, one per column),
    `notes` (sentences shown under it)."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    title: str = ""
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        bad = [r for r in self.rows if len(r) != len(self.columns)]
        if bad:
            raise ValueError(
                f"Table {self.title!r}: a row has {len(bad[0])} cells for {len(self.columns)} columns"
            )


@dataclass(frozen=True)
class Prose:
    """Paragraphs of text under an optional title; bullets=True: a bulleted list, one per item."""

    paragraphs: tuple[str, ...]
    title: str = ""
    bullets: bool = False


@dataclass(frozen=True)
class Figure:
    """A figure of a report: its name (the file stem), title, caption, the image shown (path
    relative to the report, or ""), a video shown where there is no image, and links to every
    file (label, relative path)."""

    name: str
    title: str
    caption: str
    image: str = ""
    video: str = ""
    files: tuple[tuple[str, str], ...] = ()


Block = Table | Prose | Figure


@dataclass(frozen=True)
class Section:
    """A titled group of blocks ("" for none: the blocks sit under the document's title);
    collapsed: shown folded (a detail the reader opens) where the renderer can fold."""

    title: str
    blocks: tuple[Block, ...]
    collapsed: bool = False


@dataclass(frozen=True)
class Document:
    """What a renderer draws: a title and sections."""

    title: str
    sections: tuple[Section, ...]

    def tables(self) -> list[Table]:
        """Every table, in order."""
        return [b for s in self.sections for b in s.blocks if isinstance(b, Table)]


# ------------------------------------------------------------------------------------ cells


def is_measured(v: object) -> TypeGuard[Mapping[str, object]]:
    """A measured quantity of the convergence ladder: a mapping with `value` and only its fields."""
    return isinstance(v, Mapping) and "value" in v and set(v) <= MEASURED_FIELDS


def cell_text(v: object) -> str:
    """One value as the text of a cell: numbers to 4 digits, None as —, a measured quantity as
    "v ± e ✓" (✓: converged) or "v ± e (not converged)", one that does not exist as "— (its
    reason)", a mapping as "k: v; k: v", lists joined, an empty one as "none"; one line."""
    if isinstance(v, Mapping | list | tuple) and not v:
        return "none"
    if is_measured(v) and v.get("value") is None:  # a quantity that does not exist: why
        text = f"— ({v['reason']})" if v.get("reason") else "— (not determined)"
    elif is_measured(v):
        if v.get("error") is not None:
            value, error = format_with_error(_float(v.get("value")), _float(v["error"]))
            text = f"{value} ± {error}"
        else:
            text = format_value(v.get("value"))
        if "converged" in v:
            text += " ✓" if v["converged"] else " (not converged)"
    elif isinstance(v, Mapping):
        text = "; ".join(f"{k}: {_nested_cell(x)}" for k, x in v.items())
    elif isinstance(v, list | tuple) and any(isinstance(x, Mapping | list | tuple) for x in v):
        text = "; ".join(_nested_cell(x) for x in v)
    else:
        text = format_value(v)
    return " ".join(text.split())


def _nested_cell(v: object) -> str:
    text = cell_text(v)
    return f"({text})" if isinstance(v, Mapping) and not is_measured(v) and len(v) > 1 else text


def _is_cell(v: object) -> bool:
    """Whether v is shown as one cell of a `quantity | value` table."""
    if is_measured(v):
        return True
    if isinstance(v, Mapping):
        return False
    if isinstance(v, list | tuple):
        return not _is_prose(v) and not any(isinstance(x, Mapping) for x in v)
    return True


def _is_prose(v: object) -> TypeGuard[Sequence[str]]:
    return (
        isinstance(v, list | tuple)
        and bool(v)
        and all(isinstance(x, str) for x in v)
        and any(len(x) >= SENTENCE and " " in x for x in v)
    )


def _is_records(v: object) -> TypeGuard[Mapping[str, Mapping[str, object]]]:
    """A non-empty mapping whose values are all mappings (not measured quantities)."""
    return (
        isinstance(v, Mapping)
        and bool(v)
        and all(isinstance(x, Mapping) and not is_measured(x) for x in v.values())
    )


# ----------------------------------------------------------------------------------- tables


def _columns(records: Iterable[Mapping[str, object]], first: Sequence[str] = ()) -> list[str]:
    """The fields of records: those of `first` that occur, in that order, then the others as met."""
    seen = list(dict.fromkeys(k for r in records for k in r))
    return [c for c in first if c in seen] + [c for c in seen if c not in first]


def records_table(
    records: Sequence[Mapping[str, object]] | Mapping[str, Mapping[str, object]],
    title: str = "",
    label: str = "",
    first: Sequence[str] = (),
) -> Table:
    """One row per record. A mapping of records: its keys in a first column headed `label`. A list:
    a first column "#" (1, 2, ...) unless the records have a `key`. Columns: `first` where present,
    then every other field in order of appearance; a field a record lacks is an empty cell."""
    if isinstance(records, Mapping):
        names, rows = [str(k) for k in records], list(records.values())
    else:
        rows = list(records)
        names = [] if any("key" in r for r in rows) else [str(i + 1) for i in range(len(rows))]
        label = "#"
    cols = _columns(rows, first)
    cells = [tuple(_cells(r, cols)) for r in rows]
    if names:
        return Table((label, *cols), tuple((n, *c) for n, c in zip(names, cells, strict=True)), title)
    return Table(tuple(cols), tuple(cells), title)


def _cells(record: Mapping[str, object], columns: Sequence[str]) -> list[str]:
    """The cells of one record; a number `measured` with a number `error` (a claims row) is written
    to the digits its error supports, and the error to one or two significant digits."""
    cells = [cell_text(record[c]) if c in record else "" for c in columns]
    m, e = record.get("measured"), record.get("error")
    if _number(m) and _number(e) and "measured" in columns and "error" in columns:
        value, error = format_with_error(m, e)
        cells[list(columns).index("measured")] = value
        cells[list(columns).index("error")] = error
    return cells


def _number(v: object) -> TypeGuard[int | float]:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _float(v: object) -> SupportsFloat | None:
    """v where it is a number (NumPy's included), else None (a measured value or error is one)."""
    return v if isinstance(v, SupportsFloat) else None


def _quantities(items: Iterable[tuple[str, object]], title: str) -> Table:
    return Table(("quantity", "value"), tuple((str(k), cell_text(v)) for k, v in items), title)


def _join(title: str, key: str) -> str:
    return f"{title}: {key}" if title else key


def _row_label(key: str) -> str:
    """The header of the key column of a mapping of records: X for `per_X`, else none."""
    return key[4:] if key.startswith("per_") else ""


def summary_blocks(summary: Mapping[str, object], title: str = "") -> list[Block]:
    """The blocks of a nested summary (see the module's docstring): first a `quantity | value`
    table of its scalars titled `title`, then one block (or more) per nested value, in order.
    Empty lists and mappings are left out."""
    if not isinstance(summary, Mapping):
        raise TypeError(f"summary must be a dict of headline numbers, got {type(summary).__name__}")
    present = {str(k): v for k, v in summary.items() if not (isinstance(v, Mapping | list | tuple) and not v)}
    scalars = [(k, v) for k, v in present.items() if _is_cell(v)]
    blocks: list[Block] = [_quantities(scalars, title)] if scalars else []
    for key, value in present.items():
        if _is_cell(value):
            continue
        name = _join(title, key)
        if _is_prose(value):
            blocks.append(Prose(tuple(value), name, bullets=True))
        elif _is_records(value):
            blocks.append(records_table(value, name, label=_row_label(key)))
        elif isinstance(value, list | tuple):
            blocks += _list_blocks(value, name)
        elif isinstance(value, Mapping):  # every value that is no mapping is a cell or a list
            blocks += summary_blocks(value, name)
    return blocks


def _list_blocks(items: Sequence[object], title: str) -> list[Block]:
    """A list holding records (and maybe other values): one row per item (a non-record: a row with
    its text in a column `value`). Records with a `key` (claims rows) show CLAIM_COLUMNS and
    CLAIM_EXTRA in the table, and each row's further fields (fits, per-time results, ...) below it,
    in a section of its own titled by its key."""
    records = [x if isinstance(x, Mapping) else {"value": x} for x in items]
    if not all("key" in r for r in records):
        return [records_table(records, title, first=CLAIM_COLUMNS)]
    shown = (*CLAIM_COLUMNS, *CLAIM_EXTRA)
    main = [{k: v for k, v in r.items() if k in shown} for r in records]
    table = records_table(main, title, first=shown)
    notes = (f"threshold: {THRESHOLD}.",) if "threshold" in table.columns else ()
    blocks: list[Block] = [Table(table.columns, table.rows, table.title, notes)]
    for r in records:
        rest = {k: v for k, v in r.items() if k not in shown}
        if rest:
            blocks += summary_blocks(rest, _join(title, str(r["key"])))
    return blocks


def summary_document(summary: Mapping[str, object], title: str = "") -> Document:
    """A summary as a document titled `title` (default: its `experiment`)."""
    if not isinstance(summary, Mapping):
        raise TypeError(f"summary must be a dict of headline numbers, got {type(summary).__name__}")
    heading = title or str(summary.get("experiment") or "attnflow run")
    return Document(heading, (Section("", tuple(summary_blocks(summary))),))
