"""The table model of summaries and reports, and its renderers: Markdown, HTML and the terminal draw
the same rows; no nested summary is ever printed as a literal."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnflow.experiments import summary_markdown
from attnflow.experiments.render import to_html, to_markdown
from attnflow.experiments.tables import (
    CLAIM_COLUMNS,
    Document,
    Prose,
    Section,
    Table,
    cell_text,
    records_table,
    summary_blocks,
    summary_document,
)
from documents import html_tables, markdown_tables, terminal, terminal_tables

#: the shape of a concentration summary (summary.json), with local rates as the zero reference gives
SUMMARY = {
    "experiment": "concentration",
    "N": 24,
    "per_beta": {
        "10": {"status": "converged", "N": 512, "t_star": 2.0, "min_w2": 0.511, "t_depart": None},
        "100": {"status": "under-resolved", "N": 24, "t_star": 2.0, "min_w2": 0.5001, "t_depart": None},
    },
    "claims": [
        {
            "claim": "t*(beta) grows like log beta",
            "measured": None,
            "error": None,
            "betas": [],
            "verdict": "not resolved",
            "left_out": {"10": "status under-resolved"},
            "note": "0 converged beta(s); 3 needed",
        },
        {"claim": "zero temperature: rate >= gamma/(2||B||)", "measured": 0.52, "verdict": "holds"},
    ],
    "convergence": {
        "10": {
            "status": "converged",
            "levels": [256, 512],
            "t_star": {"value": 2.0, "estimate": 2.0, "error": 0.01, "converged": True, "reason": "ok"},
        }
    },
    "zero_temperature": {
        "kind": "N = infinity reference",
        "c_star": 0.5857,
        "local_rates": [{"window": [0.0, 4.0], "rate": 0.4054, "err": 0.002}],
    },
    "separatrices": {},
    "warnings": ["beta = 100 is under-resolved at N = 24: resolution ratio 12.3 >= 0.5 (raise N)"],
    "wall_time_s": 1.43,
}


def test_a_summary_becomes_tables_and_prose():
    blocks = summary_blocks(SUMMARY)
    titles = [b.title for b in blocks]
    assert titles == [
        "",
        "per_beta",
        "claims",
        "convergence",
        "zero_temperature",
        "zero_temperature: local_rates",
        "warnings",
    ]  # separatrices (empty) left out
    head, per_beta, claims, conv, zero, rates, warns = blocks
    assert head.rows == (("experiment", "concentration"), ("N", "24"), ("wall_time_s", "1.43"))
    assert per_beta.columns == ("beta", "status", "N", "t_star", "min_w2", "t_depart")
    assert per_beta.rows[1] == ("100", "under-resolved", "24", "2", "0.5001", "—")
    assert claims.columns == ("#", "claim", "measured", "error", "betas", "left_out", "verdict", "note")
    assert claims.rows[0][4:6] == ("none", "10: status under-resolved")
    assert claims.rows[1][-1] == "" and claims.rows[1][2] == "0.52"  # a field a row lacks: empty
    assert conv.rows[0] == ("10", "converged", "[256, 512]", "2.000 ± 0.010 ✓")  # digits of the error
    assert zero.rows == (("kind", "N = infinity reference"), ("c_star", "0.5857"))
    assert rates.rows == (("1", "[0, 4]", "0.4054", "0.002"),)
    assert isinstance(warns, Prose) and warns.bullets and warns.paragraphs == tuple(SUMMARY["warnings"])


def test_claim_rows_take_the_claim_columns_first():
    rows = [
        {"note": "n", "verdict": "holds", "meaning": "what it says", "claim": "c", "key": "t_star_log"},
        {"key": "min_w2_power", "claim": "d", "kind": "bound", "extra": 1},
    ]
    table = records_table(rows, "claims", first=CLAIM_COLUMNS)
    assert table.columns == ("key", "claim", "kind", "verdict", "meaning", "note", "extra")  # no "#": keys
    assert table.rows[0] == ("t_star_log", "c", "", "holds", "what it says", "n", "")
    main, extra = summary_blocks({"claims": rows})
    assert main.columns == ("key", "claim", "kind", "verdict", "meaning", "note")  # details go below
    assert extra.title == "claims: min_w2_power" and extra.rows == (("extra", "1"),)


def test_claim_rows_print_the_digits_their_error_supports():
    rows = [
        {"key": "a", "measured": 0.162843, "error": 3.9e-4, "verdict": "consistent"},
        {"key": "b", "measured": 2.5137, "error": 0.043, "verdict": "consistent"},
        {"key": "c", "measured": 0.5, "error": None, "verdict": "not resolved"},
    ]
    table = records_table(rows, "claims", first=CLAIM_COLUMNS)
    assert [r[1:3] for r in table.rows] == [("0.1628", "0.0004"), ("2.51", "0.04"), ("0.5", "—")]
    fits = {"key": "law", "fits": {"beta": {"law": "t* = a + b beta", "b": 0.342, "rms": 0.5}}}
    blocks = summary_blocks({"claims": [fits]})
    text = " ".join(c for b in blocks if isinstance(b, Table) for r in b.rows for c in r)
    assert "{" not in text and "t* = a + b beta" in text


def test_cells():
    assert cell_text({"value": 1.23456, "error": None, "converged": False}) == "1.235 (not converged)"
    assert cell_text({"value": None, "converged": True}) == "— (not determined)"  # never "— ✓"
    # a quantity that does not exist says why, never "(not converged)"
    absent = {"value": None, "error": None, "converged": False, "reason": "no departure: no metastable phase"}
    assert cell_text(absent) == "— (no departure: no metastable phase)"
    assert cell_text({"a": 1, "b": {"c": 2, "d": [1, 2]}}) == "a: 1; b: (c: 2; d: [1, 2])"
    assert cell_text([{"a": 1}, 2]) == "a: 1; 2"
    assert cell_text([]) == cell_text({}) == "none"
    assert cell_text("two\nlines") == "two lines"
    assert cell_text(float("inf")) == "∞"
    with pytest.raises(ValueError, match="cells for"):
        Table(("a", "b"), (("1",),))
    with pytest.raises(TypeError, match="summary must be a dict"):
        summary_document([1, 2])  # type: ignore[arg-type]


# ------------------------------------------------------------------- the same rows everywhere


def _rows(table: Table) -> list[list[str]]:
    return [list(table.columns), *map(list, table.rows)]


def _check_same_rows(doc: Document) -> None:
    expected = [_rows(t) for t in doc.tables()]
    assert markdown_tables(to_markdown(doc)) == expected
    assert html_tables(to_html(doc)) == expected
    assert terminal_tables(terminal(doc, 100, wide=True)) == [
        [[c.strip() for c in r] for r in t] for t in expected
    ]


def test_summary_md_report_and_show_draw_the_same_rows():
    doc = summary_document(SUMMARY, "attnflow run: concentration")
    _check_same_rows(doc)
    md = to_markdown(doc)
    assert md == summary_markdown(SUMMARY, "attnflow run: concentration")
    assert md.startswith("# attnflow run: concentration\n\n| quantity | value |\n")
    assert "## per_beta\n\n| beta | status |" in md
    assert "- beta = 100 is under-resolved" in md


def test_terminal_fits_the_width_or_shows_records():
    doc = summary_document(SUMMARY, "attnflow run: concentration")
    for width in (60, 80, 100):
        text = terminal(doc, width)
        assert max(map(len, text.splitlines())) <= width, text
        for table in doc.tables():  # every cell is there, as a table cell or in a record
            for row in table.rows:
                for cell in row:
                    assert cell in " ".join(text.split()), (width, cell)
    narrow = terminal(doc, 80)
    assert "┃ quantity    ┃ value" in narrow  # a table that fits stays a table
    assert "1 — claim: t*(beta) grows like log beta;" in narrow  # the claims as records
    wide = terminal(doc, 80, wide=True)
    assert max(map(len, wide.splitlines())) > 80 and "┃ # ┃ claim" in wide


def test_markdown_within_a_width_keeps_every_cell():
    long = "a meaning that goes on " * 12
    doc = Document(
        "", (Section("s", (Table(("parameter", "default", "meaning"), (("betas", "[10.0, 30.0]", long),)),)),)
    )
    md = to_markdown(doc, width=60)
    assert max(map(len, md.splitlines())) <= 60
    assert "- **betas** — default: [10.0, 30.0]; meaning:" in md  # a short cell is never broken
    assert " ".join(md.split()).count(" ".join(long.split())) == 1
    assert "| betas |" in to_markdown(doc)  # no width: a table


alphabet = st.characters(codec="ascii", categories=("L", "N", "P", "Zs"), exclude_characters="{}'\"[]\\`*")
text = st.text(alphabet, min_size=1, max_size=8)
leaf = st.one_of(st.floats(allow_nan=True), st.integers(), st.booleans(), st.none(), text)
value = st.recursive(
    leaf,
    lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(text, c, max_size=3)),
    max_leaves=12,
)


@settings(max_examples=80, deadline=None)
@given(summary=st.dictionaries(text, value, max_size=5))
def test_any_nested_summary_is_tables_and_prose_never_a_literal(summary):
    doc = summary_document(summary, "run")
    _check_same_rows(doc)
    md = to_markdown(doc)
    assert "{" not in md and "'" not in md and "[{" not in md  # no dict literal, no repr
    for table in doc.tables():
        for row in table.rows:
            assert all("\n" not in c for c in row)
