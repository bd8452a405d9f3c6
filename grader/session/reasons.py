"""The one-line reason a failing test reports, built in the grading process and scrubbed of
whatever names the hidden suites.

A hidden test's rank function runs in the submission's address space: it travels by value, and
the submission can walk the stack to its frame and read its code object, constants, globals and
locals (harness/forkserver.py gives that code a neutral file name and first line, so a stack
walk shows no path or line). What it learns can come back in an exception message, or in a value
a hidden test quotes in its own assertion message. So every reason is built here from the
failure's first line and, before it reaches any report or progress line:

- made one line without invisible characters (`grader.report.markdown_safe.clean`);
- stripped of Python reprs that name code (`<code object ...>`, `<frame ...>`,
  `<function ... at 0x...>`, `<module ... from ...>`, anything `at 0x...`);
- stripped of paths under a hidden root, of dotted `grader.suites.*` module names and of the
  hidden files' names, with any line number that follows them;
- stripped of the identifiers the hidden modules define (functions, classes, module-level
  constants, the modules themselves) that look like identifiers (with `_`, a digit or an inner
  capital: a plain word such as `cache` names nothing) and that no public file uses;
- stripped of the hidden modules' string constants (`MIN_CONSTANT_CHARS` or more, and each
  line of a longer one) except those that are failure messages themselves (in an `assert`, a
  `raise`, an f-string, `pytest.fail`/`skip`'s text, a `hint=`, `what=` or `message=`
  argument, the `what` of `case_value(s)`), which a failing test shows anyway — and the text
  such a message names at module level: a string constant bound to a name (`HINT = "..."`) or
  returned by a function (`def _hint(...): return "..."`) that a message uses; short ones
  stay, since a rank's answer ("no error") is often one of them and a reason quotes it.

  The declared hint channel, never scrubbed (`test_a_declared_hint_is_never_blanked`):
  text bound to a hint-like name (`HINT_NAMES`: `hint`, `hints`, `what`, `label`, `message`,
  `msg`, `reason`, `why`, `cause`, `situation`, `when`, `*_hint`, `*_HINT`) in any scope,
  whatever its use; text bound to a
  local variable that a message of the same function uses (`hint = "..."` then
  `assert ok, f"{what}: {hint}"`); an argument passed, by keyword or by position, to a
  parameter of a hidden function whose name is hint-like (`def check(got, name, what, hint)`
  called as `check(got, "greedy", "greedy generate", "feed only the new token")`); and the
  argument of `hint("...")`/`said(hint=...)`, markers a suite may define;
- cut to `grader.report.results.REASON_CHARS`.

What is collected comes from the hidden suite files with `ast` (never imported here), once per
set of hidden roots. Public vocabulary — every identifier and text of the assignments' READMEs,
public tests and provided modules and of the harness, which students can read anyway — is never
scrubbed, so `ring_all_reduce` or "not implemented yet" keep their place in a reason. What this
cannot stop (a message that encodes what it read, a number it quotes) is in docs/trust.md.
"""

from __future__ import annotations

import ast
import builtins
import functools
import keyword
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from grader.manifest import load_manifest
from grader.report.markdown_safe import clean
from grader.report.results import REASON_CHARS, clip_reason
from harness.errors import NotImplementedInRank
from harness.impl import REPO_ROOT

HIDDEN = "<hidden>"
SCRUB_INPUT_CHARS = 4000  # of a failure's first line: more never reaches REASON_CHARS
MIN_CONSTANT_CHARS = 16
MIN_CONSTANT_LINE_CHARS = 24
# Calls whose string arguments are failure text meant for students.
_MESSAGE_CALLS = {"fail", "skip", "xfail", "skipif", "importorskip", "UsageError", "exit",
                  "case_value", "case_values", "hint", "said"}
# Names whose value, argument or parameter is a declared hint (see the module docstring).
HINT_NAMES = frozenset({"reason", "msg", "match", "message", "hint", "hints", "what", "label",
                        "why", "cause", "description", "situation", "when"})
_MESSAGE_KEYWORDS = HINT_NAMES
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WORD = re.compile(r"[A-Za-z0-9_]+")
_INNER = r"(?:[^<>]|<[^<>]{0,24}>)*"  # a repr's text, with file names such as "<hidden>"
_REPRS = [
    # (a repr cut short by whoever wrote the message has no closing ">": up to the next "<")
    (re.compile(r"<code object " + _INNER + r"(?:>|(?=<)|$)"), "<code>"),
    (re.compile(r"<frame at " + _INNER + r"(?:>|(?=<)|$)"), "<frame>"),
    (re.compile(r"<module " + _INNER + r"(?:>|(?=<)|$)"), "<module>"),
    (re.compile(r"<(?:function|bound method|built-in method|cell|generator|coroutine|"
                r"traceback)\b" + _INNER + r"(?:>|(?=<)|$)"), "<object>"),
    (re.compile(r"<[^<>]*\bat 0x[0-9A-Fa-f]+" + _INNER + r"(?:>|(?=<)|$)"), "<object>"),
]
_LINE_AFTER_HIDDEN = re.compile(re.escape(HIDDEN) + r"""(["']?)(?:,? line \d+|:\d+(?::\d+)?)""")
_REPEATED_HIDDEN = re.compile(re.escape(HIDDEN) + r"(?:[./:]?" + re.escape(HIDDEN) + r")+")
_SUITE_MODULES = re.compile(r"\bgrader\.suites(?:\.[A-Za-z0-9_]+)*")
_PATH_TAIL = r"""[^\s'"(),;<>\[\]]*"""


@dataclass(frozen=True)
class Scrubber:
    """What names the hidden suites, and `scrub()` to take it out of a reason."""

    roots: tuple[str, ...]  # hidden roots, as given and resolved
    files: frozenset[str]  # hidden files' names (test_values.py)
    names: frozenset[str]  # distinctive identifiers the hidden modules define
    constants: tuple[str, ...]  # their non-message string constants, longest first
    vocabulary: frozenset[str] = frozenset()  # identifiers students can read anyway

    @functools.cached_property
    def _paths(self) -> re.Pattern[str] | None:
        parts = [re.escape(r) + _PATH_TAIL for r in sorted(self.roots, key=len, reverse=True)]
        parts.append(r"(?<![A-Za-z0-9_])grader[/\\]suites(?:[/\\]" + _PATH_TAIL + ")?")
        if self.files:
            names = "|".join(re.escape(f) for f in sorted(self.files, key=len, reverse=True))
            parts.append(_PATH_TAIL.replace("<>", "<>:") + r"(?<![A-Za-z0-9_])(?:"
                         + names + r")(?![A-Za-z0-9_])")
        return re.compile("|".join(parts))

    @functools.cached_property
    def _names(self) -> re.Pattern[str] | None:
        if not self.names:
            return None
        alternatives = "|".join(re.escape(n) for n in sorted(self.names, key=len, reverse=True))
        # `_` also bounds a name: rank_probe_SECRET_SIZES hides two of them
        return re.compile(r"(?<![A-Za-z0-9])(?:" + alternatives + r")(?![A-Za-z0-9])")

    def _scrub_word(self, match: re.Match[str]) -> str:
        word = match.group(0)
        if word in self.vocabulary or self._names is None:
            return word
        return self._names.sub(HIDDEN, word)

    def scrub(self, text: str) -> str:
        """`text` on one line with everything that names the hidden suites replaced."""
        text = clean(text)
        for pattern, replacement in _REPRS:
            text = pattern.sub(replacement, text)
        if self._paths is not None:
            text = self._paths.sub(HIDDEN, text)
        text = _SUITE_MODULES.sub(HIDDEN, text)
        text = _LINE_AFTER_HIDDEN.sub(HIDDEN + r"\1", text)
        for constant in self.constants:
            if constant in text:
                text = text.replace(constant, HIDDEN)
        text = _WORD.sub(self._scrub_word, text)
        return _REPEATED_HIDDEN.sub(HIDDEN, text)


def failure_reason(exc: BaseException | None, hidden_roots: Sequence[Path] = (),
                   test_path: Path | None = None) -> tuple[str, str]:
    """(the scrubbed one-line reason, its kind: "not_implemented" | "assertion" | "error").

    Only this line reaches students for hidden tests: never the source, the inputs, or what a
    submission read of the hidden code. The kind comes from the exception's class, which the
    grading process made (a rank's own exception type is only ever text in the message).
    """
    if exc is None:
        return "", "error"
    folders = (tuple(Path(r) for r in hidden_roots), suite_folders(hidden_roots, test_path))
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    if isinstance(exc, NotImplementedInRank):
        return _scrubbed(first, folders), "not_implemented"
    if isinstance(exc, NotImplementedError):
        return _scrubbed(f"not implemented yet: {first}", folders), "not_implemented"
    if isinstance(exc, AssertionError):
        return _scrubbed(first or "assertion failed", folders), "assertion"
    return _scrubbed(f"{type(exc).__name__}: {first}", folders), "error"


def skip_reason(text: str, hidden_roots: Sequence[Path] = (),
                test_path: Path | None = None) -> str:
    """A skip's reason, scrubbed the same way (a hidden test may quote a rank's value)."""
    roots = tuple(Path(r) for r in hidden_roots)
    return _scrubbed(text, (roots, suite_folders(roots, test_path)))


def suite_folders(hidden_roots: Sequence[Path], test_path: Path | None) -> tuple[Path, ...]:
    """The hidden folders whose code a test's ranks can reach: its assignment's folder in each
    hidden root (a test of `ring_allreduce`, public or hidden, runs only ring_allreduce's hidden
    modules), plus the roots' own top-level modules; every root when the assignment is unknown.
    """
    roots = tuple(Path(r) for r in hidden_roots)
    assignment = ""
    if test_path is not None:
        path = Path(test_path).resolve()
        for base in (*roots, REPO_ROOT / "assignments"):
            if path.is_relative_to(base) and len(path.relative_to(base).parts) > 1:
                assignment = path.relative_to(base).parts[0]
                break
    if not assignment:
        return roots
    return tuple(p for r in roots for p in (r / assignment, r / "__init__.py") if p.exists())


def _scrubbed(text: str, where: tuple[tuple[Path, ...], tuple[Path, ...]]) -> str:
    cut = len(text) > SCRUB_INPUT_CHARS
    text = scrubber(*where).scrub(text[:SCRUB_INPUT_CHARS])
    if cut and len(text) < REASON_CHARS:
        # The cut may have split a name the scrub then missed, and the scrub made the text
        # short enough for that end to show: drop the partial word.
        text = re.sub(r"[^\s]*$", "", text).rstrip() + " …"
    return clip_reason(text)


# -- what the hidden suites define ------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def scrubber(hidden_roots: tuple[Path, ...], sources: tuple[Path, ...] | None = None) -> Scrubber:
    """The scrubber for these hidden roots (paths under them), knowing the names and constants
    of `sources` (folders or files; default: the roots), read with `ast`; cached."""
    roots = {str(p) for r in hidden_roots for p in (r, r.resolve())}
    files: set[str] = set()
    names: set[str] = set()
    trees: list[ast.Module] = []
    for source in hidden_roots if sources is None else sources:
        for path in sorted(source.rglob("*.py")) if source.is_dir() else [source]:
            try:
                tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
            except (OSError, SyntaxError, ValueError):
                continue
            if path.name != "__init__.py":
                files.add(path.name)
                names.add(path.stem)
            names.update(_module_names(tree))
            trees.append(tree)
    said: set[str] = set()  # words of the suites' own messages: shown anyway
    constants = set(_data_constants(trees, names, said))
    vocabulary, public_text = _public()
    names = {n for n in names if _distinctive(n) and n not in vocabulary and n not in said}
    kept = {c for c in constants if c not in public_text and c not in vocabulary}
    return Scrubber(roots=tuple(sorted(r for r in roots if r not in ("", "."))),
                    files=frozenset(files), names=frozenset(names),
                    constants=tuple(sorted(kept, key=len, reverse=True)),
                    vocabulary=vocabulary)


def _module_names(tree: ast.Module) -> Iterable[str]:
    """Names assigned at module level (functions and classes are found by `_data_constants`)."""
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for target in targets:
            yield from (n.id for n in ast.walk(target) if isinstance(n, ast.Name))


def _data_constants(trees: list[ast.Module], names: set[str],
                    said: set[str] | None = None) -> Iterable[str]:
    """String constants of the modules that are data, not a failure message; adds the names of
    the functions and classes they define to `names` on the way, and the words of the message
    text to `said`. A top-level name a message uses may be defined in another of the modules
    (a hint constant in a shared helper)."""
    texts: dict[str, list[ast.expr]] = {}
    for tree in trees:
        for name, nodes in _message_texts(tree).items():
            texts.setdefault(name, []).extend(nodes)
    data: set[str] = set()
    message: set[str] = set()
    used: set[str] = set()  # top-level names a message refers to
    params = _hint_parameters(trees)
    _walk_constants([(tree, False) for tree in trees], names, data, message, used, params)
    for tree in trees:  # local variables a message of their function uses
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                _local_messages(function, names, data, message, used, params)
    done: set[str] = set()
    while used - done:  # message text named at top level is message text too, transitively
        name = sorted(used - done)[0]
        done.add(name)
        _walk_constants([(node, True) for node in texts.get(name, ())], names, data, message,
                        used)
    if said is not None:
        said.update(w for text in message for w in _IDENTIFIER.findall(text))
    yield from (piece for text in data - message for piece in _pieces(text))


def _message_texts(tree: ast.Module) -> dict[str, list[ast.expr]]:
    """Top-level names whose value is text: `NAME = "..."` (or an f-string), and functions
    (any nesting) that return text; name -> those text nodes."""
    def is_text(node: ast.expr | None) -> bool:
        return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant)
                                                   and isinstance(node.value, str))

    out: dict[str, list[ast.expr]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and is_text(node.value):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out.setdefault(target.id, []).append(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.value is not None and is_text(node.value):
            out.setdefault(node.target.id, []).append(node.value)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            returns = [r.value for r in ast.walk(node) if isinstance(r, ast.Return)
                       and r.value is not None and is_text(r.value)]
            if returns:
                out.setdefault(node.name, []).extend(returns)
    return out


def is_hint_name(name: str) -> bool:
    """A name whose value is a declared hint: one of `HINT_NAMES`, or ending in `_hint`/`_HINT`
    (`CACHE_HINT`, `parity_hint`)."""
    return name in HINT_NAMES or name.lower().endswith(("_hint", "_hints"))


def _hint_parameters(trees: list[ast.Module]) -> dict[str, tuple[frozenset[int],
                                                                   frozenset[str]]]:
    """Functions of the hidden modules with hint-like parameters: name -> (positions of those
    parameters in a call, their names). A method's `self`/`cls` takes no position."""
    out: dict[str, tuple[frozenset[int], frozenset[str]]] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            positional = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
            if positional and positional[0] in ("self", "cls"):
                positional = positional[1:]
            every = positional + [a.arg for a in node.args.kwonlyargs]
            hinted = frozenset(a for a in every if is_hint_name(a))
            if hinted:
                positions = frozenset(i for i, a in enumerate(positional) if a in hinted)
                old = out.get(node.name, (frozenset(), frozenset()))
                out[node.name] = (old[0] | positions, old[1] | hinted)
    return out


def _assigned(function: ast.AST) -> dict[str, list[ast.expr]]:
    """Names a function (with the functions nested in it) binds -> the values bound. A loop
    over a literal binds each of its targets to the matching element of each item
    (`for label, shape in (("a 1-d tensor", (3,)), ...)`: `label` -> "a 1-d tensor")."""
    out: dict[str, list[ast.expr]] = {}
    for node in ast.walk(function):
        pairs: list[tuple[ast.expr, ast.expr]] = []
        if isinstance(node, ast.Assign):
            pairs = [(t, node.value) for t in node.targets]
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) \
                and node.value is not None:
            pairs = [(node.target, node.value)]
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            items = node.iter.elts if isinstance(node.iter, (ast.Tuple, ast.List, ast.Set)) \
                else [node.iter]
            pairs = [pair for item in items for pair in _unpacked(node.target, item)]
        for target, value in pairs:
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    out.setdefault(name.id, []).append(value)
    return out


def _unpacked(target: ast.expr, value: ast.expr) -> list[tuple[ast.expr, ast.expr]]:
    """(target, value) pairs of an unpacking: element by element where both sides are literal
    sequences of one length (no starred target), else the whole value to the whole target."""
    if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
            and len(target.elts) == len(value.elts) \
            and not any(isinstance(t, ast.Starred) for t in target.elts):
        return [pair for t, v in zip(target.elts, value.elts) for pair in _unpacked(t, v)]
    return [(target, value)]


def _local_messages(function: ast.AST, names: set[str], data: set[str], message: set[str],
                    used: set[str], params: dict[str, tuple[frozenset[int], frozenset[str]]],
                    ) -> None:
    """Text bound to a local variable of `function` that one of its messages uses (or whose
    name is hint-like) is message text, transitively."""
    local_used: set[str] = set()
    _walk_constants([(function, False)], names, set(), set(), local_used, params)
    assigned = _assigned(function)
    local_used |= {n for n in assigned if is_hint_name(n)}
    done: set[str] = set()
    while (local_used & assigned.keys()) - done:
        name = sorted((local_used & assigned.keys()) - done)[0]
        done.add(name)
        _walk_constants([(value, True) for value in assigned[name]], names, data, message,
                        local_used, params)
    used |= local_used - assigned.keys()  # a module-level name the local message quotes


def _walk_constants(stack: list[tuple[ast.AST, bool]], names: set[str], data: set[str],
                    message: set[str], used: set[str],
                    params: dict[str, tuple[frozenset[int], frozenset[str]]] | None = None,
                    ) -> None:
    """Sort the string constants under `stack` into data and message text (a node's flag says
    whether it is inside a message); names read inside a message go to `used`. `params`: the
    hidden functions whose hint-like parameters make an argument message text."""
    params = params or {}
    while stack:
        node, in_message = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                (message if in_message else data).add(node.value)
            continue
        if isinstance(node, ast.Name) and in_message:
            used.add(node.id)
        if isinstance(node, (ast.JoinedStr, ast.Raise)):
            in_message = True
        elif isinstance(node, ast.Assert):
            stack += [(node.test, in_message)] + ([(node.msg, True)] if node.msg else [])
            continue
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            in_args = in_message or called in _MESSAGE_CALLS or called.endswith(
                ("Error", "Exception"))
            if in_message and isinstance(func, ast.Name):
                used.add(func.id)
            positions, keywords = params.get(called, (frozenset(), frozenset()))
            stack.append((func, in_message))
            stack += [(arg, in_args or i in positions) for i, arg in enumerate(node.args)]
            stack += [(kw.value, in_message or kw.arg in _MESSAGE_KEYWORDS
                       or kw.arg in keywords) for kw in node.keywords]
            continue
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
                isinstance(t, ast.Name) and is_hint_name(t.id)
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])):
            if node.value is not None:
                stack.append((node.value, True))
            continue
        stack += [(child, in_message) for child in ast.iter_child_nodes(node)]


def _pieces(value: str) -> Iterable[str]:
    whole = " ".join(value.split())
    if len(whole) >= MIN_CONSTANT_CHARS:
        yield whole
    for line in value.splitlines():
        line = " ".join(line.split())
        if len(line) >= MIN_CONSTANT_LINE_CHARS and line != whole:
            yield line


def _distinctive(name: str) -> bool:
    """A name worth hiding: identifier-shaped (`_`, digit or inner capital), not a test's name
    (reports show those), not a dunder."""
    if len(name) < 3 or name.startswith("test_") or (name.startswith("__")
                                                      and name.endswith("__")):
        return False
    return "_" in name or any(c.isdigit() for c in name) or any(c.isupper() for c in name[1:])


@functools.lru_cache(maxsize=1)
def _public() -> tuple[frozenset[str], str]:
    """Identifiers and text students can read anyway: the assignments' READMEs, public tests and
    provided modules (never the modules a student edits: in a pull request's grading those are
    the student's, and words they could choose must not unblank a hidden one), the harness, the
    grader's rank-side modules; Python's builtins and keywords."""
    provided = [REPO_ROOT / "assignments" / a.id / f"{name}.py"
                for a in load_manifest().assignments for name in a.provided]
    files = [*REPO_ROOT.glob("assignments/*/README.md"),
             *REPO_ROOT.glob("assignments/*/test_*.py"), *provided,
             *REPO_ROOT.glob("harness/*.py"),
             REPO_ROOT / "grader" / "compare.py", REPO_ROOT / "grader" / "seeds.py",
             REPO_ROOT / "grader" / "report" / "results.py"]
    texts = []
    for path in files:
        try:
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
    text = "\n".join(texts)
    words = set(_IDENTIFIER.findall(text)) | set(dir(builtins)) | set(keyword.kwlist)
    return frozenset(words), " ".join(text.split())
