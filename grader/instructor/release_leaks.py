"""The release's leak check: does a student release contain anything only instructors may see?

`find_leaks(source_root, release_dir)` collects the secrets of the source checkout and looks
for each of them in every file of the release:

- **solution bodies**: every function and method of `solutions/<id>/*.py` whose body differs
  from the body of the same-named function in the stubs (`assignments/<id>/*.py`);
- **mutants**: the file names of `solutions/<id>/mutants/*.py` and their function bodies;
- **hidden tests**: the names of the `test*` functions of `grader/suites/` (unless a public
  test has the same name) and the bodies of every function there (tests and helpers);
- **paths**: anything under the instructor's folders (`INSTRUCTOR_PATHS`: `solutions/`,
  `grader/instructor/`, `grader/suites/`, the tests) or a `mutants/` folder, and the nbgrader
  source notebooks' solution and hidden-test lines.

A body is compared two ways: as a normalised AST (docstring dropped, no line numbers), against
every function of every Python file, Markdown code block and notebook cell of the release, so
reformatting does not hide a copy; and as text (lines stripped, blank and comment lines
dropped), against every text file, so a body pasted into prose or a YAML file is found too.
Bodies under `MIN_NODES` AST nodes (`return x`) are too common to mean anything and are skipped.
With `allow_hidden_tests` (a self-study release) hidden tests are not secret, but solutions and
mutants still are.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MIN_NODES = 12
MIN_TEXT_CHARS = 40
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
# Folders only instructors see (prefixes of paths in the checkout): never in a release, and
# `grader.instructor.release` ships nothing under them.
INSTRUCTOR_PATHS = ("solutions/", "grader/instructor/", "grader/suites/", "grader/tests/",
                    "harness/tests/")


@dataclass(frozen=True)
class Leak:
    """One instructor-only item found in the release: where, and what it is."""

    path: str
    what: str

    def __str__(self) -> str:
        return f"{self.path}: {self.what}"


@dataclass(frozen=True)
class Secret:
    """A function body that must not be released; `origin` names it for the report."""

    kind: str  # "solution", "mutant" or "hidden test"
    origin: str  # e.g. solutions/ring_allreduce/ring.py::ring_all_reduce
    fingerprint: str  # normalised AST of the body
    text: str  # normalised source lines of the body, "\n"-joined


@dataclass(frozen=True)
class Secrets:
    bodies: tuple[Secret, ...]
    names: dict[str, str]  # word -> what it is ("mutant ring_allreduce/calls_all_reduce")


# --- normalising code ---------------------------------------------------------------------------


def normal_lines(text: str) -> str:
    """Lines stripped, blank and comment-only lines dropped, joined with "\\n"."""
    lines = (line.strip() for line in text.splitlines())
    return "\n".join(line for line in lines if line and not line.startswith("#"))


def _body(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.stmt]:
    body = node.body
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
            and isinstance(first.value.value, str):
        body = body[1:]
    return body


def functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function and method in `tree`, nested ones included."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_names(tree: ast.AST) -> Iterator[str]:
    """The names of a test module's tests: functions named test*, and module-level names test*
    bound by assignment (a test made by a factory, `test_x = CASES.test(2, "x")`)."""
    for node in functions(tree):
        if node.name.startswith("test"):
            yield node.name
    for statement in tree.body if isinstance(tree, ast.Module) else []:
        if isinstance(statement, ast.Assign):
            for target in statement.targets:
                if isinstance(target, ast.Name) and target.id.startswith("test"):
                    yield target.id


def fingerprint(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The normalised AST of the body without its docstring."""
    module = ast.Module(body=_body(node), type_ignores=[])
    return ast.dump(module, annotate_fields=False, include_attributes=False)


def body_size(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Number of AST nodes in the body without its docstring."""
    return sum(1 for stmt in _body(node) for _ in ast.walk(stmt))


def _body_text(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> str:
    """The body's source lines (docstring dropped), normalised; `lines` is the file's."""
    body = _body(node)
    if not body:
        return ""
    return normal_lines("\n".join(lines[body[0].lineno - 1: body[-1].end_lineno]))


def _parse(path: Path) -> tuple[ast.AST, str] | None:
    try:
        source = path.read_text(encoding="utf-8")
        return ast.parse(source), source
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None


# --- the secrets of the source checkout ---------------------------------------------------------


def collect_secrets(root: Path, *, allow_hidden_tests: bool = False) -> Secrets:
    """Solution bodies, mutants, and (unless allowed) hidden test names and bodies of `root`."""
    bodies: list[Secret] = []
    names: dict[str, str] = {}
    public_bodies = {fp for path in (root / "assignments").rglob("*.py")
                     for fp in _fingerprints(path)}
    solutions = root / "solutions"
    for path in sorted(solutions.glob("*/*.py")):
        bodies += _secrets(path, root, "solution", public_bodies)
    for path in sorted(solutions.glob("*/mutants/*.py")):
        if path.name == "__init__.py":
            continue
        bodies += _secrets(path, root, "mutant", public_bodies)
        names[path.stem] = f"mutant name {path.parent.parent.name}/{path.stem}"
    if not allow_hidden_tests:
        public_names = {name for path in (root / "assignments").rglob("test_*.py")
                        if (parsed := _parse(path)) for name in test_names(parsed[0])}
        for path in sorted((root / "grader" / "suites").rglob("*.py")):
            bodies += _secrets(path, root, "hidden test", public_bodies)
            parsed = _parse(path)
            if parsed is None or not path.name.startswith("test_"):
                continue
            for name in test_names(parsed[0]):
                if name not in public_names:
                    names[name] = f"hidden test name {_rel(path, root)}::{name}"
    return Secrets(tuple(bodies), names)


def _fingerprints(path: Path) -> set[str]:
    parsed = _parse(path)
    return {fingerprint(node) for node in functions(parsed[0])} if parsed else set()


def _secrets(path: Path, root: Path, kind: str, public: set[str]) -> list[Secret]:
    parsed = _parse(path)
    if parsed is None:
        return []
    tree, source = parsed
    lines = source.splitlines()
    found = []
    for node in functions(tree):
        print_ = fingerprint(node)
        if body_size(node) < MIN_NODES or print_ in public:
            continue
        found.append(Secret(kind, f"{_rel(path, root)}::{node.name}", print_,
                            _body_text(node, lines)))
    return found


def _rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


# --- looking for them in the release ------------------------------------------------------------


def find_leaks(source_root: Path, release_dir: Path, *,
               allow_hidden_tests: bool = False) -> list[Leak]:
    """Every secret of `source_root` found in `release_dir`, one `Leak` per (file, secret)."""
    secrets = collect_secrets(source_root, allow_hidden_tests=allow_hidden_tests)
    by_print = {s.fingerprint: s for s in secrets.bodies}
    by_text = [s for s in secrets.bodies if len(s.text) >= MIN_TEXT_CHARS]
    name_pattern = _words(secrets.names)
    leaks: list[Leak] = []
    for path in sorted(p for p in release_dir.rglob("*") if p.is_file()):
        relative = _rel(path, release_dir)
        leaks += _path_leaks(relative, allow_hidden_tests)
        if name_pattern is not None:
            for match in sorted(set(name_pattern.findall(relative))):
                leaks.append(Leak(relative, f"{secrets.names[match]} in the file's path"))
        text = _text(path)
        if text is None:
            continue
        seen: set[str] = set()
        for code in _code_of(path, text):
            for node in functions(code):
                secret = by_print.get(fingerprint(node))
                if secret is not None and secret.origin not in seen:
                    seen.add(secret.origin)
                    leaks.append(Leak(relative, f"the body of {secret.kind} {secret.origin} "
                                                f"(as {node.name})"))
        flat = "\n" + normal_lines(_plain(path, text)) + "\n"
        for secret in by_text:
            if secret.origin not in seen and "\n" + secret.text + "\n" in flat:
                seen.add(secret.origin)
                leaks.append(Leak(relative, f"the source of {secret.kind} {secret.origin}"))
        if name_pattern is not None:
            for match in sorted(set(name_pattern.findall(text))):
                leaks.append(Leak(relative, secrets.names[match]))
    leaks += _worksheet_leaks(source_root, release_dir)
    return leaks


def _path_leaks(relative: str, allow_hidden_tests: bool) -> list[Leak]:
    for prefix in INSTRUCTOR_PATHS:
        if relative.startswith(prefix) and not (allow_hidden_tests and prefix == "grader/suites/"):
            return [Leak(relative, f"instructor-only path ({prefix})")]
    if "mutants" in Path(relative).parts:
        return [Leak(relative, "instructor-only path (a mutants/ folder)")]
    return []


def _words(names: dict[str, str]) -> re.Pattern[str] | None:
    if not names:
        return None
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<![A-Za-z0-9_])(?:{alternatives})(?![A-Za-z0-9_])")


def _text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", "replace")


def _plain(path: Path, text: str) -> str:
    """The text to search line by line: a notebook's cell sources, else the file itself."""
    if path.suffix == ".ipynb":
        return "\n".join(_cells(text)) or text
    return text


def _cells(text: str) -> list[str]:
    try:
        cells = json.loads(text).get("cells", [])
    except (ValueError, AttributeError):
        return []
    out = []
    for cell in cells if isinstance(cells, list) else []:
        source = cell.get("source", "") if isinstance(cell, dict) else ""
        out.append("".join(source) if isinstance(source, list) else str(source))
    return out


def _code_of(path: Path, text: str) -> Iterator[ast.AST]:
    """Python syntax trees in a file: the file itself, Markdown code blocks, notebook cells."""
    if path.suffix == ".py":
        snippets = [text]
    elif path.suffix == ".ipynb":
        snippets = _cells(text)
    elif path.suffix in (".md", ".rst", ".txt"):
        snippets = [m.group(1) for m in _FENCE.finditer(text)]
    else:
        snippets = []
    for snippet in snippets:
        try:
            yield ast.parse(snippet)
        except (SyntaxError, ValueError):
            continue


def _worksheet_leaks(source_root: Path, release_dir: Path) -> list[Leak]:
    """Solution and hidden-test lines of nbgrader source notebooks in released notebooks."""
    from grader.instructor.worksheets import leaks
    from grader.worksheets.nbgrade import NOTEBOOK, WorksheetError

    found = []
    for source in sorted((source_root / "solutions").glob(f"*/{NOTEBOOK}")):
        released = release_dir / "assignments" / source.parent.name / NOTEBOOK
        if not released.is_file():
            continue
        try:
            problems = leaks(source, released)
        except WorksheetError as exc:
            problems = [f"cannot be checked: {exc}"]
        found += [Leak(_rel(released, release_dir), p) for p in problems]
    return found
