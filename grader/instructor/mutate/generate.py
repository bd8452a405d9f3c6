"""Generate the mutants of one assignment: every operator's edit of every solution module.

`generate(assignment, root)` reads `solutions/<id>/<module>.py` for each module the manifest
lists, asks `operators.find_edits` for edits and turns each into a `Mutant`: the module, line
and operator that name it, and a stable id. The id hashes what the edit is — module, enclosing
function, operator, the text before and after, and which occurrence of that same change in that
function it is — but not the line, so editing one function leaves the ids (and the reviewed
equivalent-mutant list) of the others valid.

An edit whose result does not compile is kept as a *stillborn* mutant (counted, never run); an
edit that leaves the module's AST unchanged, or gives the same source as an earlier edit, is no
mutant and is dropped.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType

from grader.instructor.mutate.operators import find_edits
from grader.manifest import Assignment

# Bumped whenever the operators change what they generate: a summary made by another version
# is stale (grader/instructor/mutate/summary.py).
GENERATOR_VERSION = 1


@dataclass(frozen=True)
class Mutant:
    """One textual change to one module of a solution."""

    assignment: str
    module: str
    line: int
    operator: str
    mutant_id: str  # 8 hex digits, stable while the function it lives in is unchanged
    before: str  # the replaced text
    after: str  # its replacement
    start: int  # byte offsets of the replaced text in the module's source
    end: int
    compiles: bool

    @property
    def name(self) -> str:
        """`ring.py:88:cmp_flip:3f9a21c0`."""
        return f"{self.module}.py:{self.line}:{self.operator}:{self.mutant_id}"

    @property
    def slug(self) -> str:
        """A file-system-safe name: `ring_88_cmp_flip_3f9a21c0`."""
        return f"{self.module}_{self.line}_{self.operator}_{self.mutant_id}"

    def apply(self, source: str) -> str:
        data = source.encode()
        return (data[:self.start] + self.after.encode() + data[self.end:]).decode()

    def diff(self, source: str, context: int = 2) -> str:
        """The unified diff of the module, solution → mutant."""
        path = f"solutions/{self.assignment}/{self.module}.py"
        lines = difflib.unified_diff(
            source.splitlines(keepends=True), self.apply(source).splitlines(keepends=True),
            fromfile=path, tofile=f"{path} ({self.name})", n=context,
        )
        return "".join(lines)

    def last_line(self, source: str) -> int:
        """The last line the replaced text touches (1-based)."""
        return self.line + source.encode()[self.start:self.end].count(b"\n")

    def one_line(self, source: str) -> str:
        """`old → new` for the first line the mutant changes, stripped."""
        old, new = source.splitlines(), self.apply(source).splitlines()
        for before, after in zip(old, new):
            if before != after:
                return f"{before.strip()}  →  {after.strip()}"
        return f"{self.before.strip()}  →  {self.after.strip()}"


@dataclass(frozen=True)
class Generation:
    """All mutants of one assignment, and the sources they were made from."""

    assignment: str
    mutants: tuple[Mutant, ...]
    sources: dict[str, str] = field(default_factory=dict)  # module -> solution source

    @property
    def stillborn(self) -> tuple[Mutant, ...]:
        return tuple(m for m in self.mutants if not m.compiles)

    @property
    def runnable(self) -> tuple[Mutant, ...]:
        return tuple(m for m in self.mutants if m.compiles)

    def by_id(self) -> dict[str, Mutant]:
        return {m.mutant_id: m for m in self.mutants}


def solution_sources(assignment: Assignment, root: Path) -> dict[str, str]:
    """module -> source of `solutions/<id>/<module>.py`, in manifest order."""
    sources = {}
    for module in assignment.modules:
        path = root / "solutions" / assignment.id / f"{module}.py"
        try:
            sources[module] = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise FileNotFoundError(f"{path}: cannot read the solution module {module!r} the "
                                    f"manifest lists for {assignment.id} ({exc.strerror})") \
                from exc
    return sources


def generate(assignment: Assignment, root: Path) -> Generation:
    """Every mutant of the assignment's solution modules, in module then source order."""
    sources = solution_sources(assignment, root)
    mutants: list[Mutant] = []
    for module, source in sources.items():
        mutants += mutants_of_module(assignment.id, module, source)
    ids = [m.mutant_id for m in mutants]
    if len(set(ids)) != len(ids):
        clash = sorted({i for i in ids if ids.count(i) > 1})
        raise RuntimeError(f"{assignment.id}: mutant ids collide ({', '.join(clash)}); "
                           "lengthen the id in grader/instructor/mutate/generate.py")
    return Generation(assignment.id, tuple(mutants), sources)


def mutants_of_module(assignment_id: str, module: str, source: str) -> list[Mutant]:
    """The mutants of one module's source (deterministic: same source, same list)."""
    data = source.encode()
    original = ast.dump(ast.parse(source))
    original_code = _code_key(compile(source, f"{module}.py", "exec", dont_inherit=True))
    line_starts = [0]
    for line in data.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))
    seen: set[str] = set()
    occurrences: dict[tuple[str, str, str, str], int] = {}
    mutants = []
    for edit in find_edits(source):
        try:
            mutated = edit.apply(data).decode()
        except UnicodeDecodeError:
            continue
        if mutated in seen:
            continue
        code = _compiled(mutated, module)
        compiles = code is not None
        # The same AST compiles to the same bytecode, so only an edit whose bytecode is the
        # original's can have left the AST as it was; the AST comparison (milliseconds per
        # mutant, most of the generation's time) is made for those alone.
        if code is not None and _code_key(code) == original_code \
                and ast.dump(ast.parse(mutated)) == original:
            continue  # changed a comment or spacing only: no mutant
        seen.add(mutated)
        before = data[edit.start:edit.end].decode()
        key = (edit.scope, edit.operator, " ".join(before.split()), edit.text)
        occurrences[key] = occurrences.get(key, 0) + 1
        mutants.append(Mutant(
            assignment=assignment_id, module=module, line=_line_of(line_starts, edit.start),
            operator=edit.operator, mutant_id=_stable_id(module, key, occurrences[key]),
            before=before, after=edit.text, start=edit.start, end=edit.end, compiles=compiles,
        ))
    return mutants


def _compiled(source: str, module: str) -> CodeType | None:
    """The module's code object, None when it does not compile."""
    try:
        return compile(source, f"{module}.py", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None


def _code_key(code: CodeType) -> tuple:
    """What a code object's behaviour rests on, positions left out (lines and columns move with
    spacing): equal ASTs give equal keys, so different keys mean different ASTs."""
    consts = tuple(_code_key(c) if isinstance(c, CodeType) else (type(c).__name__, c)
                   for c in code.co_consts)
    return (code.co_code, consts, code.co_names, code.co_varnames, code.co_freevars,
            code.co_cellvars, code.co_flags, code.co_argcount, code.co_posonlyargcount,
            code.co_kwonlyargcount, code.co_name)


def _line_of(line_starts: list[int], offset: int) -> int:
    low, high = 0, len(line_starts) - 1
    while low < high:  # the last line start <= offset
        middle = (low + high + 1) // 2
        if line_starts[middle] <= offset:
            low = middle
        else:
            high = middle - 1
    return low + 1


def _stable_id(module: str, key: tuple[str, str, str, str], occurrence: int) -> str:
    text = "\x1f".join((module, *key, str(occurrence)))
    return hashlib.sha1(text.encode()).hexdigest()[:8]

