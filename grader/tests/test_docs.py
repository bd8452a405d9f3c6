"""Every relative link in the project's Markdown resolves: to a file that exists and, with a
`#anchor`, to a heading of that file (GitHub's anchor rules)."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

from grader.manifest import REPO_ROOT

DOCS = ["README.md", "docs/*.md", "assignments/*/README.md"]
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_INLINE_CODE = re.compile(r"(`+).*?\1")
# [text](target "title") and ![alt](target); the text may hold one level of brackets.
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]"  # [text], one level of [..] inside
                          r"\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")  # (target "title")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_SKIPPED_SCHEMES = re.compile(r"^(https?:|mailto:)", re.IGNORECASE)


def _markdown_files() -> list[Path]:
    return sorted({p for pattern in DOCS for p in REPO_ROOT.glob(pattern)})


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code removed."""
    lines, fenced = [], None
    for number, line in enumerate(text.splitlines(), start=1):
        fence = _FENCE.match(line)
        if fence:
            if fenced is None:
                fenced = fence.group(1)
            elif fence.group(1) == fenced:
                fenced = None
            continue
        if fenced is None:
            lines.append((number, _INLINE_CODE.sub("", line)))
    return lines


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every inline link, image and reference definition."""
    found = []
    for number, line in _prose_lines(text):
        found += [(number, m.group(1)) for m in _INLINE_LINK.finditer(line)]
        reference = _REFERENCE.match(line)
        if reference:
            found.append((number, reference.group(1)))
    return found


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text, lower-cased, punctuation dropped, spaces
    turned into hyphens (`## 2. The cost model (α–β)` → `2-the-cost-model-α`)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LMN")
    return kept.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a Markdown document, with GitHub's -1, -2 for repeats."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in _prose_lines(text):
        match = _HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def test_the_slug_rules():
    assert github_slug("How it works") == "how-it-works"
    assert github_slug("Instructors: publishing the course") == "instructors-publishing-the-course"
    assert github_slug("`launch()` and the [harness](x.md)") == "launch-and-the-harness"
    assert github_slug("2. Cost (α–β), in bytes") == "2-cost-αβ-in-bytes"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n## A\n") == {"a", "a-1", "a-2"}
    assert links("see [x](a.md#b) and `[y](c.md)`\n```\n[z](d.md)\n```\n[r]: e.md\n") == [
        (1, "a.md#b"), (5, "e.md")]


@pytest.mark.parametrize("doc", _markdown_files(),
                         ids=lambda p: p.relative_to(REPO_ROOT).as_posix())
def test_every_relative_link_resolves(doc: Path):
    text = doc.read_text(encoding="utf-8")
    broken = []
    for number, target in links(text):
        if not target or _SKIPPED_SCHEMES.match(target):
            continue
        path_part, _, anchor = target.partition("#")
        path = (doc.parent / path_part).resolve() if path_part else doc
        where = f"{doc.relative_to(REPO_ROOT)}:{number}: {target}"
        if not path.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and path.suffix == ".md" and anchor.lower() not in anchors(
                path.read_text(encoding="utf-8")):
            broken.append(f"{where} (no heading with that anchor)")
    assert not broken, "broken links:\n  " + "\n  ".join(broken)


# ---- paths written in code spans --------------------------------------------------------------

PATH_DOCS = ["README.md", "docs/*.md"]
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_PLACEHOLDER = re.compile(r"[<>{}$]|\.\.\.")
# Folders the tools write (gitignored): a path under them names an output, not a file here.
OUTPUT_FOLDERS = {"grading", "release", "build", "dist"}


def code_span_paths(text: str) -> list[tuple[int, str]]:
    """(line number, path) of every code span outside fenced blocks that names a path of this
    repository: it has a `/`, no space, and starts with one of the repository's top-level
    folders (`grader/`, `docs/`, ...). A `:line` or `#anchor` tail is dropped; spans with
    placeholders (`<id>`, `{x}`, `...`) are not paths of the tree and are left out."""
    tops = {p.name for p in REPO_ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")
            } - OUTPUT_FOLDERS
    found = []
    fenced = None
    for number, line in enumerate(text.splitlines(), start=1):
        fence = _FENCE.match(line)
        if fence:
            fenced = fence.group(1) if fenced is None else (None if fence.group(1) == fenced
                                                            else fenced)
            continue
        if fenced is not None:
            continue
        for match in _CODE_SPAN.finditer(line):
            span = match.group(2).strip()
            if " " in span or "/" not in span or _PLACEHOLDER.search(span):
                continue
            path = span.split(":")[0].split("#")[0]
            if path.split("/")[0] in tops:
                found.append((number, path))
    return found


def test_code_span_paths_are_found():
    text = ("see `grader/cli.py:12`, `harness/`, `grading/results.json`, `grader/suites/<id>/`\n"
            "```\n`grader/nothing.py`\n```\n`python -m grader`\n")
    assert code_span_paths(text) == [(1, "grader/cli.py"), (1, "harness/")]


@pytest.mark.parametrize("doc", sorted({p for g in PATH_DOCS for p in REPO_ROOT.glob(g)}),
                         ids=lambda p: p.relative_to(REPO_ROOT).as_posix())
def test_every_path_in_a_code_span_exists(doc: Path):
    stale = [f"{doc.relative_to(REPO_ROOT)}:{number}: {path}"
             for number, path in code_span_paths(doc.read_text(encoding="utf-8"))
             if not (any(REPO_ROOT.glob(path)) if "*" in path else (REPO_ROOT / path).exists())]
    assert not stale, "paths in code spans that do not exist (fix the doc):\n  " + \
        "\n  ".join(stale)
