"""The closing summary of `attnflow run` (`brief_lines`): under 30 lines however many betas, every
claims row's verdict, the status words defined where they are used, where the report is."""

from __future__ import annotations

from attnflow.experiments.brief import BETA_STATUS, brief_lines

ROWS = [
    {
        "key": "error_vanishes",
        "kind": "theorem",
        "verdict": "consistent",
        "measured": 3.7574,
        "error": 0.1633,
    },
    {"key": "bound_envelope", "kind": "theorem", "verdict": "not resolved", "measured": None, "error": None},
    {"key": "law_t_star", "kind": "observed", "verdict": "observed", "measured": 0.18, "error": 0.03},
]


def _per_beta(n: int) -> dict:
    statuses = list(BETA_STATUS)
    return {
        f"{b:g}": {
            "status": statuses[i % 3],
            "N": 512,
            "t_star": {"value": 5.4321, "error": 0.21, "converged": True},
            "t_depart": {
                "value": None,
                "error": None,
                "converged": False,
                "reason": "no departure: no metastable phase",
            },
        }
        for i, b in enumerate(range(5, 5 + n))
    }


def test_few_betas_one_line_each_and_the_verdicts():
    summary = {"experiment": "concentration", "per_beta": _per_beta(3), "claims": ROWS, "warnings": ["w"]}
    lines = brief_lines(summary, "attnflow run: concentration", "out/report.html", "attnflow show out")
    text = "\n".join(lines)
    assert "  β = 5: converged, N = 512; t_star = 5.43 ± 0.21 ✓" in text  # digits its error supports
    assert "  β = 7: under-resolved, N = 512" in lines  # no quantities: they are not the mean-field ones
    assert "  error_vanishes: consistent (measured 3.76 ± 0.16)" in lines
    assert "  bound_envelope: not resolved" in lines  # nothing measured, nothing printed as measured
    assert "law_t_star observed" in text and "not verdicts on the theorem" in text
    for status, meaning in BETA_STATUS.items():  # each word defined once, in the header
        assert f"{status}: {meaning}" in lines[1]
    assert lines[-2:] == ["report: out/report.html", "every table: attnflow show out"]
    assert "1 warning(s)" in text


def test_many_betas_are_grouped_by_status_and_the_summary_stays_short():
    summary = {"experiment": "concentration", "per_beta": _per_beta(40), "claims": ROWS * 3}
    lines = brief_lines(summary, "attnflow run: concentration", "r.html", "attnflow show o")
    assert len(lines) < 30
    grouped = [line for line in lines if line.startswith("  converged: β = ")]
    assert grouped and grouped[0].startswith("  converged: β = 5, 8, 11")


def test_a_summary_without_betas_shows_its_numbers_and_sentences():
    summary = {"experiment": "layers", "order": 1.0318, "law": ["t lasts about log N."], "wall_time_s": 3.0}
    lines = brief_lines(summary, "attnflow run: layers")
    assert lines == ["attnflow run: layers", "  order: 1.032", "  law: t lasts about log N."]
