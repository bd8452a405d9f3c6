"""Step 3 of grading a pull request: validate the grader's output and render the comment.

    python -m grader pr-comment --out OUT [--comment OUT/comment.md] [--check OUT/check.json]

The comment job trusts nothing it downloads: `results.json` is read back by
`grader.report.gradescope` (under its `MAX_INPUT_BYTES`, valid against
`grader/schemas/results.schema.json` of the trusted checkout, whole numbers for every score, totals
that add up); `pr-files.json` must have the expected shape.
The comment is then rendered afresh from those validated values — every string made inert by
`grader.report.markdown_safe`, the whole under GitHub's 65,536-character limit — rather than posting
the `summary.md` the grading job wrote. It starts with `MARKER`, so the poster finds and updates
the same comment on every push. `check.json` holds the check run's conclusion, title (the
score) and summary.

When the output is missing or invalid, the comment says that grading failed (never a score)
and the check run concludes "failure".
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.manifest import Course
from grader.pr.apply import FILES_JSON, Change, PrFiles
from grader.pr.grade import NOTHING_TO_GRADE
from grader.report import markdown_safe
from grader.report.gradescope import RESULTS_JSON, load_results_json, read_json, run_of
from grader.report.gradescope import ResultsJsonError as InvalidOutput
from grader.report.render import COMMENT_LIMIT, md_escape, summary_markdown
from grader.report.results import clip_reason

MARKER = "<!-- mlsys-labs:grade -->"
MAX_IGNORED_ROWS = 30


@dataclass(frozen=True)
class Rendered:
    """The comment and the check run, ready to post."""

    comment: str
    conclusion: str  # "success" (graded), "neutral" (nothing to grade), "failure"
    title: str
    summary: str

    def check_json(self) -> str:
        return json.dumps({"conclusion": self.conclusion, "title": self.title,
                           "summary": self.summary}, indent=2) + "\n"


def validated_files(data: Any) -> PrFiles:
    """pr-files.json, checked field by field."""
    try:
        changes = tuple(
            Change(**{k: str(c[k]) for k in ("path", "status", "action", "reason",
                                               "assignment")})
            for c in data["changes"])
        files = PrFiles(str(data["base"]), str(data["head"]), str(data["merge_base"]), changes,
                        _count(data.get("more_ignored", 0)))
    except (KeyError, TypeError, AttributeError) as exc:
        raise InvalidOutput(f"pr-files.json: unexpected shape ({exc!r})") from exc
    if any(c.action not in ("applied", "ignored") for c in changes):
        raise InvalidOutput("pr-files.json: an action is neither 'applied' nor 'ignored'")
    return files


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidOutput(f"pr-files.json more_ignored: {value!r} is not a whole number")
    return value


def files_section(files: PrFiles) -> str:
    """Which files were graded, and which changes were ignored and why."""
    lines = ["", "### Files taken from this pull request", ""]
    if files.applied:
        lines += [f"- {md_escape(c.path)}" for c in files.applied]
    else:
        lines.append("None: this pull request changes no file that is graded.")
    ignored = files.ignored
    if ignored:
        count = len(ignored) + files.more_ignored
        lines += ["", f"**{count} change(s) ignored** — only the files listed for each "
                  "assignment in its README are graded:", "", "| file | why |", "|---|---|"]
        lines += [f"| {md_escape(c.path)} | {md_escape(c.reason)} |"
                  for c in ignored[:MAX_IGNORED_ROWS]]
        if count > MAX_IGNORED_ROWS:
            lines.append(f"| … and {count - MAX_IGNORED_ROWS} more | |")
    return "\n".join(lines) + "\n"


def render(out: Path, course: Course) -> Rendered:
    """Validate OUT's files and render the comment and check run from them."""
    titles = {a.id: a.title for a in course.assignments}
    problems = []
    files = None
    try:
        files = validated_files(read_json(out / FILES_JSON))
    except InvalidOutput as exc:
        problems.append(str(exc))
    tail = files_section(files) if files is not None else ""
    if (out / NOTHING_TO_GRADE).is_file() and not (out / RESULTS_JSON).exists():
        body = "## mlsys-labs grade: nothing to grade\n\nThis pull request changes none of " \
               "the files an assignment grades, so no tests ran.\n"
        return _assemble(body, tail, "neutral", "Nothing to grade", problems)
    try:
        run = run_of(load_results_json(out / RESULTS_JSON))
    except InvalidOutput as exc:
        problems.append(str(exc))
        body = "## mlsys-labs grade: grading failed\n\nNo score is posted: the grader's " \
               "output did not pass validation. Your instructors can see the workflow log.\n"
        return _assemble(body, tail, "failure", "Grading failed", problems)
    budget = COMMENT_LIMIT - len(MARKER) - len(tail) - 2048
    body = summary_markdown(run, titles, limit=budget)
    title = f"Score: {run.score} / {run.max_score}"
    conclusion = "failure" if run.collection_errors else "success"
    return _assemble(body, tail, conclusion, title, problems)


def _assemble(body: str, tail: str, conclusion: str, title: str,
              problems: list[str]) -> Rendered:
    note = ""
    if problems:
        conclusion = "failure" if conclusion != "neutral" else conclusion
        shown = [f"- {markdown_safe.code(clip_reason(p), table=False)}" for p in problems[:5]]
        note = "\n**Problems with the grader's output:**\n\n" + "\n".join(shown) + "\n"
    comment = f"{MARKER}\n{body}{note}{tail}"
    if len(comment) > COMMENT_LIMIT:  # cannot happen with the budgets above; be certain
        comment = comment[: COMMENT_LIMIT - 40] + "\n\n> (comment truncated)\n"
    summary = body.split("\n### ", 1)[0][:60_000]
    return Rendered(comment, conclusion, title, summary)


# --- command line -----------------------------------------------------------------------------


def register(sub: argparse._SubParsersAction) -> None:
    """`python -m grader pr-comment --out OUT`."""
    parser = sub.add_parser("pr-comment", help="validate grading output and render the PR "
                            "comment and check run")
    parser.add_argument("--out", type=Path, required=True,
                        help=f"the grading job's output: results.json, {FILES_JSON}")
    parser.add_argument("--comment", type=Path, default=None,
                        help="where to write the comment (default: OUT/comment.md)")
    parser.add_argument("--check", type=Path, default=None,
                        help="where to write the check run (default: OUT/check.json)")
    parser.set_defaults(handler=_command)


def _command(args: argparse.Namespace, course: Course) -> int:
    args.out.mkdir(parents=True, exist_ok=True)  # no artifact at all: still say so
    rendered = render(args.out, course)
    comment = args.comment or args.out / "comment.md"
    check = args.check or args.out / "check.json"
    comment.write_text(rendered.comment, encoding="utf-8")
    check.write_text(rendered.check_json(), encoding="utf-8")
    print(f"{rendered.title} ({rendered.conclusion}); comment: {len(rendered.comment)} "
          f"characters in {comment}")
    if rendered.conclusion == "failure":
        print("note: the grading output was invalid or incomplete; the comment says so",
              file=sys.stderr)
    return 0
