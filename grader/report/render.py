"""Reports of one graded run: summary.md, junit.xml and the terminal table (results.json is
written through `grader/report/gradescope.py`).

Every report is built from the plugin's `RunResult` only, so hidden tests show exactly what the
plugin let through — name, points and a one-line reason — never source or tracebacks (that is
why junit.xml is written here rather than by pytest's `--junitxml`).

- `write_reports()`: results.json, summary.md and junit.xml into one folder;
- `summary_markdown()`: the PR comment, at most `COMMENT_LIMIT` characters;
- `junit_xml()`: one `<testsuite>` per assignment, points as a property of each case;
- `terminal_report()`: plain-text tables for the console.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path

from grader.report import markdown_safe
from grader.report.gradescope import write_results_json
from grader.report.results import (
    NOT_GRADED_HERE,
    AssignmentScore,
    RunResult,
    TestResult,
    clip_reason,
    error_summary,
)

COMMENT_LIMIT = 65_536  # GitHub rejects longer issue and PR comments.
MAX_ERRORS_SHOWN = 10
_TRUNCATED = "\n\n> **Report truncated** ({shown} of {total} test rows shown) to fit a comment. "
_TRUNCATED += "The full results are in `results.json` and `junit.xml`.\n"


def write_reports(run: RunResult, out_dir: Path, titles: dict[str, str] | None = None,
                  course: Mapping[str, str] | None = None) -> None:
    """Write results.json, summary.md and junit.xml into `out_dir` (created if needed).

    `course` ({"name", "version"} of the manifest) goes into results.json, so a gradebook can
    refuse results of another course version.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    write_results_json(run, out_dir, tuple(titles or ()), course)
    (out_dir / "summary.md").write_text(summary_markdown(run, titles), encoding="utf-8")
    (out_dir / "junit.xml").write_text(junit_xml(run), encoding="utf-8")


def summary_markdown(
    run: RunResult, titles: dict[str, str] | None = None, limit: int = COMMENT_LIMIT
) -> str:
    """The PR comment: totals, then a table per assignment with each test's result."""
    titles = titles or {}
    assignments = run.by_assignment(tuple(titles))
    head = [f"## mlsys-labs grade: {run.score} / {run.max_score}", ""]
    head += [f"Graded implementation: {markdown_safe.code(run.impl, table=False)}", ""]
    if run.sandbox_summary:
        head += [f"Rank processes ran in the {md_escape(run.sandbox_summary)}", ""]
    if run.collection_errors:
        head += ["**The grader could not collect every test** (this is not your score):", ""]
        errors = [f"- {markdown_safe.code(clip_reason(error_summary(e)), table=False)}"
                  for e in run.collection_errors]
        if len(errors) > MAX_ERRORS_SHOWN:
            hidden = len(errors) - MAX_ERRORS_SHOWN
            errors = errors[:MAX_ERRORS_SHOWN] + [f"- … and {hidden} more"]
        head += errors + [""]
    head += ["| assignment | score | passed | failed | not graded here |"]
    head += ["|---|---:|---:|---:|---:|"]
    for a in assignments:
        title = f"{a.id}: {titles[a.id]}" if a.id in titles else a.id
        head.append(
            f"| {md_escape(title)} | {a.score} / {a.max_score} | {a.count('passed')} "
            f"| {a.count('failed')} | {a.count('excluded')} |"
        )
    excluded = sum(a.excluded_points for a in assignments)
    if excluded:
        head += ["", f"GPU-only tests worth {excluded} points were not graded on this machine "
                 "(no GPU); their points are excluded from the maximum."]
    blocks = [(_assignment_head(a), [_test_row(t) for t in a.tests]) for a in assignments]
    return _fit("\n".join(head) + "\n", blocks, limit)


def _assignment_head(a: AssignmentScore) -> str:
    lines = ["", f"### {md_escape(a.id)}: {a.score} / {a.max_score}", ""]
    if len(a.parts()) > 1:
        lines += [" · ".join(f"{_PART_NAMES[p]} {sc} / {mx}" for p, (sc, mx) in a.parts().items()),
                  ""]
    if a.excluded_points:
        lines += [f"{a.excluded_points} points {NOT_GRADED_HERE} (GPU-only).", ""]
    lines += ["| test | suite | points | result |", "|---|---|---:|---|"]
    return "\n".join(lines) + "\n"


def _test_row(test: TestResult) -> str:
    if test.passed:
        result = "✅ passed"
    elif test.not_graded_here:
        result = f"⏭️ {markdown_safe.code(clip_reason(test.feedback))}"
    else:
        result = f"❌ {markdown_safe.code(clip_reason(test.feedback))}"
    points = f"– / {test.points}" if test.not_graded_here else f"{test.score} / {test.points}"
    return f"| {md_escape(test.name)} | {_suite(test)} | {points} | {result} |\n"


_PART_NAMES = {"suite": "suites", "worksheet": "worksheet"}


def _suite(test: TestResult) -> str:
    """The "suite" column: public/hidden, prefixed with the part for worksheet cells."""
    return test.visibility if test.part == "suite" else f"{test.part} {test.visibility}"


def _fit(head: str, blocks: list[tuple[str, list[str]]], limit: int) -> str:
    """Join head and blocks, cutting whole rows so the text plus a note stays within `limit`."""
    total_rows = sum(len(rows) for _, rows in blocks)
    budget = limit - len(_TRUNCATED.format(shown=total_rows, total=total_rows)) - 1
    parts, size, shown = [head], len(head), 0
    for block_head, rows in blocks:
        if size + len(block_head) > budget:
            break
        parts.append(block_head)
        size += len(block_head)
        for row in rows:
            if size + len(row) > budget:
                break
            parts.append(row)
            size += len(row)
            shown += 1
        else:
            continue
        break
    if shown < total_rows:
        parts.append(_TRUNCATED.format(shown=shown, total=total_rows))
    return "".join(parts)


def md_escape(text: str) -> str:
    """Text safe inside a Markdown table cell or list item (`grader.report.markdown_safe.text`)."""
    return markdown_safe.text(text)


_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def junit_xml(run: RunResult) -> str:
    """JUnit XML with one testsuite per assignment; reasons are the short, sanitised ones."""
    root = ET.Element("testsuites", name="mlsys-labs")
    for a in run.by_assignment():
        suite = ET.SubElement(root, "testsuite", name=a.id)
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for test in a.tests:
            counts["tests"] += 1
            case = ET.SubElement(
                suite, "testcase", classname=f"{a.id}.{_suite(test).replace(' ', '.')}",
                name=_xml_text(test.name), time=f"{test.duration:.3f}",
            )
            props = ET.SubElement(case, "properties")
            ET.SubElement(props, "property", name="points", value=str(test.points))
            ET.SubElement(props, "property", name="score", value=str(test.score))
            message = _xml_text(clip_reason(test.feedback))
            if test.outcome == "skipped":
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=message)
            elif test.outcome == "error":
                counts["errors"] += 1
                ET.SubElement(case, "error", message=message)
            elif test.outcome == "failed":
                counts["failures"] += 1
                ET.SubElement(case, "failure", message=message)
        suite.attrib.update({k: str(v) for k, v in counts.items()})
        suite.set("time", f"{sum(t.duration for t in a.tests):.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def _xml_text(text: str) -> str:
    return _XML_INVALID.sub("?", text)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table; numeric columns are right-aligned."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [
        bool(rows) and all(isinstance(r[i], (int, float)) for r in rows)
        for i in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        padded = [v.rjust(w) if n else v.ljust(w) for v, w, n in zip(values, widths, numeric)]
        return "  ".join(padded).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule] + [line(r) for r in cells])


def terminal_report(run: RunResult, titles: dict[str, str] | None = None) -> str:
    """Per-test tables per assignment, then the totals, for the console."""
    titles = titles or {}
    blocks = []
    for a in run.by_assignment(tuple(titles)):
        rows = []
        for t in a.tests:
            verdict = "PASS" if t.passed else ("n/a" if t.not_graded_here else "FAIL")
            points = f"-/{t.points}" if t.not_graded_here else f"{t.score}/{t.points}"
            rows.append([t.name, _suite(t), points, verdict, clip_reason(t.feedback)])
        blocks.append(f"{a.id}: {a.score}/{a.max_score}")
        blocks.append(format_table(["test", "suite", "points", "result", "reason"], rows))
        blocks.append("")
    totals: list[list[object]] = [
        [a.id, f"{a.score}/{a.max_score}", a.count("passed"), a.count("failed"),
         a.count("excluded")]
        for a in run.by_assignment(tuple(titles))
    ]
    totals.append(["total", f"{run.score}/{run.max_score}", "", "", ""])
    headers = ["assignment", "score", "passed", "failed", "not graded here"]
    blocks.append(format_table(headers, totals))
    excluded = sum(t.points for t in run.tests if t.not_graded_here)
    if excluded:
        blocks.append(f"{excluded} points of GPU-only tests {NOT_GRADED_HERE}; "
                      "excluded from the maximum.")
    for error in run.collection_errors:
        blocks.append(f"collection error: {clip_reason(error_summary(error))}")
    return "\n".join(blocks)
