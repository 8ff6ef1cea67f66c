"""The report of a real run: report.md and report.html are documents (tables and prose, never a
literal), with the rows of summary.md."""

from __future__ import annotations

import json

from attnflow import experiments
from attnflow.io import read_dataset
from documents import html_tables, markdown_tables


def test_report_of_a_run_is_tables_and_prose(finished, tmp_path):
    ds = read_dataset(finished / "result.zarr")
    summary = json.loads((finished / "summary.json").read_text())
    # the shape the zero-temperature reference gives (zero_reference = true): local rates as records
    summary["zero_temperature"]["local_rates"] = [
        {"window": [0.0, 4.0], "rate": 0.405, "err": 0.002},
        {"window": [4.0, 8.0], "rate": 0.526, "err": 0.002},
    ]
    md = experiments.write_report(ds, summary, [], tmp_path).read_text()
    assert "{'" not in md and '{"' not in md and "[{" not in md
    assert "per_beta." not in md and "convergence.10." not in md
    assert "### per_beta\n\n| beta | status | N | t_star |" in md
    claims = "| key | claim | kind | measured | error | betas | left_out | verdict | meaning |"
    assert f"### claims\n\n{claims}" in md
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
    # the summary's tables in the report are those of summary.md (and the local rates added here)
    section = md[md.index("## Summary") : md.index("## Fits")]
    summary_md = markdown_tables((finished / "summary.md").read_text())
    rates = [
        ["#", "window", "rate", "err"],
        ["1", "[0, 4]", "0.405", "0.002"],
        ["2", "[4, 8]", "0.526", "0.002"],
    ]
    k = next(i for i, t in enumerate(summary_md) if t[1][0] == "kind")  # zero_temperature's scalars
    assert markdown_tables(section) == [*summary_md[: k + 1], rates, *summary_md[k + 1 :]]
    assert html_tables((tmp_path / "report.html").read_text()) == markdown_tables(md)
