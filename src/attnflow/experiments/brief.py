"""The short reading of a run's summary: the theorem in two sentences, what was run, the verdicts of
the claims rows and the status of each beta. The report opens with it (`report.report_document`)
and `attnflow run` ends with it (`brief_lines`, under 30 lines); the full tables stay in
summary.md, `attnflow show` and the report's detail tables.

The words of status are those of docs/guide.md ("Statuses"): a beta is converged, resolved or
under-resolved; a quantity is converged (✓), not converged, or does not exist (its reason said).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .._text import format_value, format_with_error
from .tables import Prose, Table, cell_text, is_measured

__all__ = ["BETA_STATUS", "THEOREM", "brief_lines", "intro", "status_lines", "verdict_table"]

#: Theorem 1 (docs/math.md) in two sentences, for a reader who knows the maths but not attnflow
THEOREM = (
    "Theorem 1: under its assumptions 1-3, the tokens at inverse temperature β stay close to Π#ρ₀ "
    "(ρ₀ projected on the top eigenspace of A, the zero-temperature limit): "
    "W₂(ρ_t^β, Π#ρ₀) ≤ K₁ a(β) e^{C₁t} + K₂ e^{-ct} for all t, with a(β) = √(log(β+1)/β), "
    "c = γ/(2‖B‖) and constants that do not depend on β.",
    "It bounds W₂ from above only: curves that concentrate closer or longer than the bound are "
    "consistent with it, and it says nothing about the time t* of closest approach "
    "(the observed laws below are reported beside the verdicts, never as verdicts).",
)

#: what a beta's status means (docs/guide.md, "Statuses")
BETA_STATUS = {
    "converged": "its curve stops changing when N doubles (or its grading is refined)",
    "resolved": "N is above the mean-field resolution, but doubling N still changes the curve",
    "under-resolved": "N is too small for this β: its curve is not the mean-field one",
}

#: the most betas listed one per line; more are grouped by status
MAX_BETA_LINES = 8
#: the most top-level numbers, and sentences per key, listed for a summary without betas or claims
MAX_SCALARS = 8
MAX_SENTENCES = 3


def _has_theorem_rows(summary: Mapping[str, object]) -> bool:
    claims = summary.get("claims")
    return isinstance(claims, list) and any(
        isinstance(r, Mapping) and r.get("kind") == "theorem" for r in claims
    )


def _ran(summary: Mapping[str, object], heading: str) -> str:
    """One sentence: what was run (experiment, model, betas and N, the heading's other facts)."""
    bits = [str(summary.get("experiment") or "run")]
    if summary.get("model"):
        bits.append(str(summary["model"]))
    if heading:
        bits.append(heading)
    return "What was run: " + "; ".join(bits) + "."


def intro(summary: Mapping[str, object], heading: str = "") -> Prose:
    """The report's opening: the theorem in two sentences (where the run has theorem rows), whether
    it applies here, and what was run."""
    paragraphs: list[str] = []
    if _has_theorem_rows(summary):
        paragraphs.append(" ".join(THEOREM))
        theorem = summary.get("theorem")
        if isinstance(theorem, Mapping) and theorem.get("applies") is False:
            paragraphs.append(f"The theorem does not apply to this run: {theorem.get('reason')}")
    paragraphs.append(_ran(summary, heading))
    return Prose(tuple(paragraphs))


def _measured(row: Mapping[str, object]) -> str:
    m, e = row.get("measured"), row.get("error")
    if m is None:
        return "—"
    if isinstance(m, int | float) and isinstance(e, int | float):
        value, error = format_with_error(m, e)
        return f"{value} ± {error}"
    return cell_text(m)


def verdict_table(claims: Sequence[Mapping[str, object]]) -> Table:
    """One line per claims row: its key, kind, verdict, measured value (± error) and what it means."""
    rows = tuple(
        (
            str(r.get("key", "")),
            str(r.get("kind", "")),
            str(r.get("verdict", "")),
            _measured(r),
            " ".join(str(r.get("meaning") or r.get("claim") or "").split()),
        )
        for r in claims
        if isinstance(r, Mapping)
    )
    return Table(("row", "kind", "verdict", "measured", "what it means"), rows)


def _quantity(name: str, v: object) -> str:
    return f"{name} = {cell_text(v)}"


def status_lines(per_beta: Mapping[str, Mapping[str, object]]) -> list[str]:
    """One line per beta (its status, N and first two measured quantities), or, for many betas,
    one line per status listing its betas."""
    if len(per_beta) > MAX_BETA_LINES:
        groups: dict[str, list[str]] = {}
        for beta, rec in per_beta.items():
            groups.setdefault(str(rec.get("status", "?")), []).append(beta)
        return [f"  {status}: β = {', '.join(b)}" for status, b in groups.items()]
    lines = []
    for beta, rec in per_beta.items():
        head = [str(rec["status"])] if "status" in rec else []
        if "N" in rec:
            head.append(f"N = {format_value(rec['N'])}")
        shown = [
            (k, v) for k, v in rec.items() if k not in ("status", "N") and (is_measured(v) or _scalar(v))
        ]
        if rec.get("status") == "under-resolved":  # its quantities are not the mean-field ones
            shown = []
        quantities = "; ".join(_quantity(k, v) for k, v in shown[:2])
        lines.append(f"  β = {beta}: " + "; ".join(x for x in (", ".join(head), quantities) if x))
    return lines


def _scalar(v: object) -> bool:
    return v is None or isinstance(v, int | float | str)


def _measured_note(row: Mapping[str, object]) -> str:
    return "" if row.get("measured") is None else f" (measured {_measured(row)})"


def _claim_lines(claims: Sequence[Mapping[str, object]]) -> list[str]:
    """The theorem rows one per line; the others (heuristic, conjecture, observed) on one line."""
    rows = [r for r in claims if isinstance(r, Mapping)]
    theorem = [r for r in rows if r.get("kind") == "theorem"]
    lines = ["verdicts on the theorem:"] if theorem else []
    lines += [f"  {r.get('key')}: {r.get('verdict')}{_measured_note(r)}" for r in theorem]
    others = [f"{r.get('key')} {r.get('verdict')}" for r in rows if r.get("kind") != "theorem"]
    if others:
        lines.append("other rows (not verdicts on the theorem): " + "; ".join(others))
    return lines


def _other_lines(summary: Mapping[str, object]) -> list[str]:
    """The top-level numbers (at most MAX_SCALARS) and sentences (a law, ...) of a summary without
    betas or claims; the warnings, statuses' glossary and wall time left out."""
    skip = ("experiment", "model", "warnings", "statuses", "wall_time_s")
    scalars = [(k, v) for k, v in summary.items() if _scalar(v) and k not in skip]
    lines = [f"  {k}: {format_value(v)}" for k, v in scalars[:MAX_SCALARS]]
    for key, value in summary.items():
        if key not in skip and isinstance(value, list) and value and all(isinstance(x, str) for x in value):
            lines += [f"  {key}: {x}" for x in value[:MAX_SENTENCES]]
    return lines


def brief_lines(summary: Mapping[str, object], title: str, report: str = "", show: str = "") -> list[str]:
    """What `attnflow run` prints at its end (under 30 lines): the statuses of the betas, the
    verdicts, the warnings' count, and where the report and the full tables are."""
    lines = [title + (f" — {summary['model']}" if summary.get("model") else "")]
    per_beta = summary.get("per_beta")
    if isinstance(per_beta, Mapping) and per_beta and all(isinstance(v, Mapping) for v in per_beta.values()):
        statuses = {str(v.get("status")) for v in per_beta.values() if "status" in v}
        words = [f"{s}: {BETA_STATUS[s]}" for s in BETA_STATUS if s in statuses]
        lines.append("per β" + (f" ({'; '.join(words)})" if words else "") + ":")
        lines += status_lines(per_beta)
    claims = summary.get("claims")
    if isinstance(claims, list) and claims:
        lines += _claim_lines(claims)
    if len(lines) == 1:  # neither betas nor claims: the top-level numbers and sentences
        lines += _other_lines(summary)
    warnings = summary.get("warnings")
    count = len(warnings) if isinstance(warnings, list) else int(bool(warnings))
    if count:
        lines.append(f"{count} warning(s), printed above: the report and `attnflow show` list them")
    if report:
        lines.append(f"report: {report}")
    if show:
        lines.append(f"every table: {show}")
    return lines
