"""The report of a real run: report.md and report.html are documents (tables and prose, never a
literal), read top to bottom (the theorem, the verdicts, the figures, then the detail tables), with
the rows of summary.md among the details; report.html stands alone (its images embedded)."""

from __future__ import annotations

import base64
import json
import re

from attnflow import experiments
from attnflow.experiments.brief import THEOREM
from attnflow.experiments.report import PROSE_CELL, WIDE
from attnflow.io import read_dataset
from documents import html_tables, markdown_tables

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def _report(finished, tmp_path, figures=()):
    ds = read_dataset(finished / "result.zarr")
    summary = json.loads((finished / "summary.json").read_text())
    # the shape the zero-temperature reference gives (zero_reference = true): local rates as records
    summary["zero_temperature"]["local_rates"] = [
        {"window": [0.0, 4.0], "rate": 0.405, "err": 0.002},
        {"window": [4.0, 8.0], "rate": 0.526, "err": 0.002},
    ]
    md = experiments.write_report(ds, summary, list(figures), tmp_path).read_text()
    return summary, md, (tmp_path / "report.html").read_text()


def test_report_of_a_run_is_tables_and_prose(finished, tmp_path):
    summary, md, page = _report(finished, tmp_path)
    assert "{'" not in md and '{"' not in md and "[{" not in md
    assert "per_beta." not in md and "convergence.10." not in md
    assert "### per_beta\n\n| beta | status | N | t_star |" in md
    # a claims row is one table of its fields in the details (11 columns do not fit a page)
    first = summary["claims"][0]
    assert f"### claims: {first['key']}\n\n| field | value |\n|---|---|\n| claim | {first['claim']} |" in md
    assert (
        "### zero_temperature: local_rates\n\n| # | window | rate | err |\n|---|---|---|---|\n| 1 | [0, 4] |"
        in md
    )
    assert "## Warnings\n\n- beta = 10 is under-resolved" in md  # the run's, in the summary's order
    assert "\n- beta = 20 is under-resolved" in md
    assert "## Configuration\n\n| parameter | value |" in md and "| N | 24 |" in md
    assert "### versions\n\n| quantity | value |" in md  # provenance, nested as tables too
    for line in md.splitlines():  # every line is a heading, a table row, a list item or prose
        assert not line.startswith(("{", "[", "```")), line
    # the detail tables are those of summary.md (the local rates added here, the claims one per row)
    details = markdown_tables(md[md.index("## Detail tables") : md.index("## Fits")])
    summary_md = [t for t in markdown_tables((finished / "summary.md").read_text()) if t[0][0] != "key"]
    assert [t for t in details if t[0] != ["field", "value"] and t[0][0] != "#"] == [
        t for t in summary_md if t[0][0] != "#"
    ]
    assert html_tables(page) == markdown_tables(md)


def test_report_reads_top_to_bottom(finished, tmp_path):
    summary, md, _ = _report(finished, tmp_path)
    body = md.split("\n", 2)[2]
    assert body.startswith(THEOREM[0])  # the theorem first, then what was run
    assert "What was run: concentration; " in body and "; N = " in body and "token:" not in body
    headings = re.findall(r"^## (.+)$", md, flags=re.M)
    assert headings == [
        "Warnings",
        "Verdicts and statuses",
        "Figures",
        "Detail tables",
        "Fits (least-squares descriptions of the data, not bounds)",
        "Configuration",
        "Provenance",
    ]
    verdicts = markdown_tables(md[md.index("## Verdicts") : md.index("### Status per β")])[0]
    assert verdicts[0] == ["row", "kind", "verdict", "measured", "what it means"]
    assert [r[0] for r in verdicts[1:]] == [c["key"] for c in summary["claims"]]  # one line per row
    assert [r[2] for r in verdicts[1:]] == [c["verdict"] for c in summary["claims"]]
    statuses = markdown_tables(md[md.index("### Status per β") : md.index("## Figures")])[0]
    assert [r[1] for r in statuses[1:]] == [v["status"] for v in summary["per_beta"].values()]
    assert "under-resolved: N is too small" in md  # the words defined where they are used


def test_report_html_stands_alone_and_fits_a_page(finished, tmp_path):
    figdir = tmp_path / "figures"
    figdir.mkdir()
    (figdir / "w2.png").write_bytes(PNG)
    _, _, page = _report(finished, tmp_path, [figdir / "w2.png"])
    assert 'src="data:image/png;base64,' + base64.b64encode(PNG).decode() + '"' in page
    assert 'src="figures/' not in page  # nothing to lose by moving the page alone
    assert "max-width:1000px" in page
    assert page.count("<details>") == 4  # detail tables, fits, configuration, provenance folded
    assert page.index("<details>") > page.index("<figure>")
    for table in html_tables(page):  # a wide table never holds a prose cell
        if len(table[0]) > WIDE:
            assert max(len(c) for row in table for c in row) <= PROSE_CELL, table[0]
