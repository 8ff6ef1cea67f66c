"""Reading back what the renderers of the table model drew (the tests of summaries, reports and
the command line): the tables of Markdown, HTML and Rich's terminal output as rows of cells."""

from __future__ import annotations

import html.parser
import io

from rich.console import Console

from attnflow.experiments.render import to_terminal
from attnflow.experiments.tables import Document


def markdown_tables(md: str) -> list[list[list[str]]]:
    """The pipe tables of Markdown: a list of rows (header first) of cells."""
    tables, current = [], None
    for line in md.splitlines():
        if line.startswith("| ") and line.endswith(" |"):
            cells = [c.replace("\\|", "|") for c in line[2:-2].split(" | ")]
            if current is None:
                current = []
                tables.append(current)
            if not set(line) <= set("|-"):
                current.append(cells)
        elif not line.startswith("|---"):
            current = None
    return tables


class _HtmlTables(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[str]]] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.tables[-1][-1].append("".join(self.cell))
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


def html_tables(page: str) -> list[list[list[str]]]:
    parser = _HtmlTables()
    parser.feed(page)
    return parser.tables


def terminal(doc: Document, width: int, wide: bool = False) -> str:
    buf = io.StringIO()
    to_terminal(doc, Console(file=buf, width=width, color_system=None, legacy_windows=False), wide=wide)
    return buf.getvalue()


def terminal_tables(text: str) -> list[list[list[str]]]:
    """The box tables of Rich's output (every row on one line: wide=True)."""
    tables, current = [], None
    for line in text.splitlines():
        if line.startswith(("┏", "┌")):
            current = []
            tables.append(current)
        elif line.startswith(("┃", "│")) and current is not None:
            current.append([c.strip() for c in line[1:-1].split(line[0])])
        elif line.startswith("└"):
            current = None
    return tables
