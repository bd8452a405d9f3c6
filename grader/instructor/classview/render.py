"""The report on disk: static HTML (no script, no server), CSV tables, and histogram PNGs.

    report/index.html                  overview: assignments, skipped files, top similar pairs
    report/assignment-<id>.html         histogram, points lost per test, frequent first lines,
                                        tests nearly everyone / nobody fails
    report/students.html                a row per student, a column per assignment, each score
                                        linking to the submission's summary
    report/submissions/<student>/<id>.html
    report/pairs/<id>-<n>.html          side by side, copied spans highlighted
    report/{scores,tests,reasons,pairs,skipped}.csv
    report/img/<id>.png

Every string that came from a submission (student folder names, test names, reasons, code) is
HTML-escaped where it is written, and every page forbids scripts by its Content-Security-Policy,
so a results file that carries markup shows it as text. CSV cells that a spreadsheet would read
as a formula are prefixed with an apostrophe.
"""

from __future__ import annotations

import csv
import hashlib
import re
from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path

from grader.instructor.classview.collect import ClassData, Submission
from grader.instructor.classview.similarity import FLAG_AT, Pair
from grader.instructor.classview.stats import TOP_REASONS, AssignmentStats, histogram

CSP = ("default-src 'none'; img-src 'self' file: data:; style-src 'unsafe-inline'; "
       "base-uri 'none'; form-action 'none'")
STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em auto;max-width:72em;padding:0 1em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;
text-align:left;vertical-align:top}th{background:#f3f3f3}td.n{text-align:right}
.flag{color:#b00;font-weight:bold}.muted{color:#777}mark{background:#ffd54f}
.side{display:flex;gap:1em}.side>div{flex:1;min-width:0}
pre{background:#fafafa;border:1px solid #ddd;padding:.5em;overflow:auto;font-size:12px}
"""
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def slug(name: str) -> str:
    """A file name for `name`: its safe characters and a short hash (two names never clash)."""
    digest = hashlib.sha256(name.encode("utf-8", "replace")).hexdigest()[:8]
    return f"{_UNSAFE.sub('_', name)[:40]}-{digest}"


def page(title: str, body: str, depth: int = 0) -> str:
    """A whole HTML page; `depth` is how far below the report root it lies (for links)."""
    up = "../" * depth
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
            f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>\n"
            f'<p><a href="{up}index.html">overview</a> · <a href="{up}students.html">students'
            f'</a></p>\n<h1>{escape(title)}</h1>\n{body}\n</body></html>\n')


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """An HTML table; cells are HTML already (escape before)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>\n" for row in rows)
    return f"<table><tr>{head}</tr>\n{body}</table>"


def number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"


def write_report(out: Path, data: ClassData, stats: dict[str, AssignmentStats],
                 pairs: dict[str, list[Pair]], top_views: int = 5) -> list[Path]:
    """Write the whole report under `out`; returns the pages written (index first)."""
    out.mkdir(parents=True, exist_ok=True)
    for sub in ("img", "submissions", "pairs"):
        (out / sub).mkdir(exist_ok=True)
    written = [out / "index.html"]
    titles = {a.id: a.title for a in data.course.assignments}
    pair_pages = _pair_pages(out, pairs, top_views)
    for assignment_id, stat in stats.items():
        _histogram_png(out / "img" / f"{assignment_id}.png", stat)
        path = out / f"assignment-{assignment_id}.html"
        text = _assignment_page(stat, titles.get(assignment_id, ""), data.origin)
        text = text.replace("<!--pairs-->", _pairs_table(assignment_id, pairs, pair_pages))
        path.write_text(text, encoding="utf-8")
        written.append(path)
    written.append(_students_page(out, data))
    written += _submission_pages(out, data)
    written += list(pair_pages.values())
    (out / "index.html").write_text(_index(data, stats, pairs, pair_pages), encoding="utf-8")
    _csvs(out, data, stats, pairs)
    return written


def _index(data: ClassData, stats: dict[str, AssignmentStats],
           pairs: dict[str, list[Pair]], pair_pages: dict[tuple[str, int], Path]) -> str:
    course = data.course
    parts = [f"<p>{len(data.students)} students, {len(data.submissions)} submissions, "
             f"read from {'the gradebook' if data.origin == 'gradebook' else 'results files'}"
             f"; {len(data.skipped)} file(s) skipped.</p>"]
    rows = []
    for assignment_id, s in stats.items():
        hardest = s.tests[0].name if s.tests and s.tests[0].points_lost else "-"
        rows.append([f'<a href="assignment-{assignment_id}.html">{escape(assignment_id)}</a>',
                     str(s.submissions), f'<span class="n">{s.mean:.1f} / '
                     f'{number(s.max_score)}</span>', str(len(s.nearly_all_fail)),
                     escape(hardest)])
    parts.append("<h2>Assignments</h2>" + table(
        ["assignment", "submissions", "mean score", "tests ≥80% fail", "most points lost"],
        rows))
    flagged = sorted((p for ps in pairs.values() for p in ps if p.flagged()),
                     key=lambda p: (-p.score, p.assignment, p.first))
    parts.append(f"<h2>Similar submissions</h2><p>Pairs whose overlap reaches "
                 f"{FLAG_AT:.0%} of either side (copydetect, stubs excluded); every assignment's "
                 "top pairs are on its page.</p>")
    if flagged:
        parts.append(table(["assignment", "students", "overlap", ""], [
            [escape(p.assignment), f"{escape(p.first)} ↔ {escape(p.second)}",
             f'<span class="flag">{p.share_first:.0%} / {p.share_second:.0%}</span>',
             _pair_link(p, pairs, pair_pages, "")] for p in flagged]))
    else:
        parts.append("<p>No pair flagged.</p>")
    parts.append("<h2>Skipped files</h2>")
    if data.skipped:
        parts.append(table(["file", "why"], [[f"<code>{escape(path)}</code>", escape(why)]
                                             for path, why in data.skipped]))
    else:
        parts.append("<p>None.</p>")
    return page(f"{course.name} {course.version}: class report", "\n".join(parts))


def _pairs_table(assignment_id: str, pairs: dict[str, list[Pair]],
                 pair_pages: dict[tuple[str, int], Path]) -> str:
    ranked = pairs.get(assignment_id, [])
    if not ranked:
        return "<p>No two submissions share code beyond the stub (or none came with code).</p>"
    return table(["rank", "students", "overlap", "flagged", ""], [
        [str(rank), f"{escape(p.first)} ↔ {escape(p.second)}",
         f"{p.share_first:.0%} / {p.share_second:.0%}",
         '<span class="flag">flagged</span>' if p.flagged() else "",
         _pair_link(p, pairs, pair_pages, "")] for rank, p in enumerate(ranked, start=1)])


def _pair_link(pair: Pair, pairs: dict[str, list[Pair]],
               pair_pages: dict[tuple[str, int], Path], up: str) -> str:
    rank = pairs[pair.assignment].index(pair)
    path = pair_pages.get((pair.assignment, rank))
    return f'<a href="{up}pairs/{path.name}">side by side</a>' if path else ""


def _assignment_page(s: AssignmentStats, title: str, origin: str) -> str:
    parts = [f"<p>{escape(title)}</p><p>{s.submissions} submissions; mean "
             f"{s.mean:.1f} of {number(s.max_score)}.</p>",
             f'<img src="img/{s.assignment}.png" alt="score histogram of {escape(s.assignment)}"'
             ' width="480">']
    if origin == "gradebook":
        parts.append("<p>From the gradebook: scores only (no tests, reasons or code).</p>")
    parts.append("<h2>Points lost per test</h2>" + table(
        ["test", "visibility", "points", "failed", "of", "points lost"],
        [[escape(t.name), t.visibility, str(t.points), str(t.failed), str(t.graded),
          str(t.points_lost)] for t in s.tests]))
    parts.append("<h2>Most frequent first lines of failures</h2>"
                 f"<p class='muted'>The {TOP_REASONS} most frequent of {len(s.reasons)} "
                 "(all in reasons.csv); “not implemented” failures are left out.</p>" + table(
                     ["count", "test", "first line"],
                     [[str(c), escape(name), escape(line)]
                      for name, line, c in s.reasons[:TOP_REASONS]]))
    parts.append("<h2>Most similar pairs</h2><!--pairs-->")
    nearly = ", ".join(escape(t.name) for t in s.nearly_all_fail) or "none"
    nobody = ", ".join(escape(t.name) for t in s.nobody_fails) or "none"
    parts.append(f"<h2>Tests nearly everyone fails (≥80%)</h2><p>{nearly}</p>"
                 f"<h2>Tests nobody fails</h2><p>{nobody}</p>")
    return page(f"{s.assignment}", "\n".join(parts))


def _students_page(out: Path, data: ClassData) -> Path:
    ids = [a for a in data.course.ids if any(k[1] == a for k in data.submissions)]
    rows = []
    for student in data.students:
        row = [escape(student)]
        for assignment_id in ids:
            sub = data.submissions.get((student, assignment_id))
            row.append("" if sub is None else
                       f'<a href="submissions/{slug(student)}/{assignment_id}.html">'
                       f"{number(sub.score)}/{number(sub.max_score)}</a>")
        rows.append(row)
    path = out / "students.html"
    path.write_text(page("Students", table(["student", *ids], rows)), encoding="utf-8")
    return path


def _submission_pages(out: Path, data: ClassData) -> list[Path]:
    written = []
    for (student, assignment_id), sub in sorted(data.submissions.items()):
        folder = out / "submissions" / slug(student)
        folder.mkdir(exist_ok=True)
        path = folder / f"{assignment_id}.html"
        path.write_text(_submission_page(sub), encoding="utf-8")
        written.append(path)
    return written


def _submission_page(sub: Submission) -> str:
    parts = [f"<p>score {number(sub.score)} of {number(sub.max_score)}; from "
             f"<code>{escape(sub.source or 'the gradebook')}</code></p>"]
    if sub.parts:
        parts.append(table(["grade cell", "points"],
                           [[escape(k), number(v)] for k, v in sorted(sub.parts.items())]))
    if sub.tests:
        parts.append(table(["test", "visibility", "points", "verdict"], [
            [escape(t.name), t.visibility, f"{t.score}/{t.max_score}",
             "passed" if t.passed else escape(t.feedback)] for t in sub.tests]))
    if sub.code:
        parts.append("<h2>Submitted modules</h2>" + "".join(
            f"<h3>{escape(name)}.py</h3><pre>{escape(text)}</pre>"
            for name, text in sub.code.items()))
    return page(f"{sub.student}: {sub.assignment}", "\n".join(parts), depth=2)


def _pair_pages(out: Path, pairs: dict[str, list[Pair]], top: int) -> dict[tuple[str, int], Path]:
    written = {}
    for assignment_id, ranked in pairs.items():
        for rank, pair in enumerate(ranked[:top]):
            path = out / "pairs" / f"{assignment_id}-{rank + 1}.html"
            body = (f"<p>overlap: {pair.share_first:.0%} of {escape(pair.first)}'s code, "
                    f"{pair.share_second:.0%} of {escape(pair.second)}'s (stubs excluded)."
                    "</p><div class='side'>"
                    f"<div><h2>{escape(pair.first)}</h2><pre>"
                    f"{highlighted(pair.code_first, pair.spans_first)}</pre></div>"
                    f"<div><h2>{escape(pair.second)}</h2><pre>"
                    f"{highlighted(pair.code_second, pair.spans_second)}</pre></div></div>")
            path.write_text(page(f"{assignment_id}: {pair.first} ↔ {pair.second}", body, 1),
                            encoding="utf-8")
            written[(assignment_id, rank)] = path
    return written


def highlighted(code: str, spans: Sequence[tuple[int, int]]) -> str:
    """`code` escaped, with the `spans` (character ranges) in <mark>."""
    parts, at = [], 0
    for start, end in sorted(spans):
        start, end = max(start, at), min(end, len(code))
        if end <= start:
            continue
        parts += [escape(code[at:start]), "<mark>", escape(code[start:end]), "</mark>"]
        at = end
    parts.append(escape(code[at:]))
    return "".join(parts)


def _histogram_png(path: Path, s: AssignmentStats, bins: int = 10) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = histogram(s.scores, s.max_score, bins)
    width = s.max_score / bins if s.max_score else 1.0
    figure, axes = plt.subplots(figsize=(6, 2.6), dpi=80)
    axes.bar([i * width for i in range(bins)], counts, width=width * 0.9, align="edge")
    axes.set_xlabel(f"score (of {number(s.max_score)})")
    axes.set_ylabel("students")
    axes.set_title(s.assignment)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def _cell(value: object) -> str:
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _write_csv(path: Path, headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(headers)
        writer.writerows([_cell(v) for v in row] for row in rows)


def _csvs(out: Path, data: ClassData, stats: dict[str, AssignmentStats],
          pairs: dict[str, list[Pair]]) -> None:
    _write_csv(out / "scores.csv", ["student", "assignment", "score", "max_score", "source"],
               [[s.student, s.assignment, number(s.score), number(s.max_score), s.source]
                for _, s in sorted(data.submissions.items())])
    _write_csv(out / "tests.csv",
               ["assignment", "test", "visibility", "points", "graded", "failed", "points_lost"],
               [[a, t.name, t.visibility, t.points, t.graded, t.failed, t.points_lost]
                for a, s in stats.items() for t in s.tests])
    _write_csv(out / "reasons.csv", ["assignment", "test", "first_line", "count"],
               [[a, name, line, c] for a, s in stats.items() for name, line, c in s.reasons])
    _write_csv(out / "pairs.csv",
               ["assignment", "first", "second", "share_first", "share_second", "flagged"],
               [[p.assignment, p.first, p.second, f"{p.share_first:.3f}",
                 f"{p.share_second:.3f}", p.flagged()] for ps in pairs.values() for p in ps])
    _write_csv(out / "skipped.csv", ["file", "why"], data.skipped)
