"""Which files an implementation under test is made of, as the static screen reads them.

`sources` lists the files a rank may import as an assignment's implementation (the editable
modules, a submitted folder's other siblings, a mutant as the source it runs);
`grader/screen/scan.py` screens each. Nothing here is imported or run: files are read as text.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Source:
    """One file to screen: its text and the name shown in messages."""

    shown: str
    text: str


def sources(impl_kind: str, root: Path, assignment: str, modules: Sequence[str],
            course_root: Path, mutant: tuple[Path, str] | None = None,
            notes: list[str] | None = None) -> list[Source]:
    """The files the rank may import as the implementation of `assignment`.

    - `assignments`, `solutions`: the editable `modules` under `root/<assignment>/`.
    - a directory (`dir`): those, and every other `.py` file under `root/<assignment>/` that a
      module could import as a sibling, unless it is byte-identical to the course's own file
      at the same place under `course_root/assignments/<assignment>/` (a provided module, the
      public tests): the pull-request workflow copies only the editable modules, but a
      directory graded as it is may carry anything.
    - `mutant` (`(mutant file, module it replaces)`): the mutated module is
      screened as the source that runs, the solution with the mutant's literal replacements
      applied, plus whatever else the mutant file does (`screen_mutant`).
    """
    notes = notes if notes is not None else []
    folder = root / assignment
    found: list[Source] = []
    seen: set[Path] = set()
    for module in modules:
        path = folder / f"{module}.py"
        seen.add(path)
        if mutant is not None and mutant[1] == module:
            found += screen_mutant(mutant[0], path, notes)
            continue
        if path.is_file():
            found.append(Source(path.name, path.read_text(encoding="utf-8", errors="replace")))
        else:
            notes.append(f"{assignment}/{module}.py is missing (nothing to screen)")
    if impl_kind == "dir" and folder.is_dir():
        course = course_root / "assignments" / assignment
        # Siblings only: a module imports what lies beside it; a pull request holds nothing
        # but the editable modules (pr-apply), and a checkout's subfolders (mutants/) are not
        # part of the implementation.
        for path in sorted(folder.glob("*.py")):
            if path in seen:
                continue
            relative = path.relative_to(folder)
            ours = course / relative
            text = path.read_bytes()
            if ours.is_file() and ours.read_bytes() == text:
                continue
            found.append(Source(str(relative), text.decode("utf-8", errors="replace")))
    return found


# The mutators mutants call: the harness's, and one assignment's own helper module (a private
# module of its mutants folder, named without the folder so no mutant path ships).
_MUTATORS = ("harness.mutation.mutate", "mutate_kernels")


def screen_mutant(mutant_path: Path, solution_path: Path,
                  notes: list[str]) -> list[Source]:
    """What a mutant runs: the solution with the replacements applied, and the mutant's own code.

    A mutant file (instructor code) calls `mutate(globals(), ..., replace=[(old, new), ...])`,
    which executes the patched solution. The screen reads the literal replacements, applies them
    to the solution's text and screens that, as it would a student's module; the mutant file
    itself is screened without the mutator's import and call. A mutant whose replacements are
    not literal is screened as it is (and the mutator import is reported).
    """
    text = mutant_path.read_text(encoding="utf-8")
    shown = f"mutants/{mutant_path.name}"
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return [Source(shown, text)]
    local: dict[str, str] = {}
    keep: list[ast.stmt] = []
    replaced: list[tuple[str, str]] | None = None
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any(
                f"{(node.module or '')}.{a.name}".endswith(m) for a in node.names
                for m in _MUTATORS):
            for a in node.names:
                local[a.asname or a.name] = a.name
            continue
        call = node.value if isinstance(node, ast.Expr) else None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) \
                and call.func.id in local and replaced is None:
            candidates = [k.value for k in call.keywords if k.arg == "replace"]
            candidates += [a for a in call.args if isinstance(a, (ast.List, ast.Tuple))]
            try:
                value = ast.literal_eval(candidates[0]) if candidates else []
                replaced = [(str(old), str(new)) for old, new in value]
                continue
            except (ValueError, TypeError, SyntaxError):
                notes.append(f"{shown}: replacements are not literal; screened as it is")
                return [Source(shown, text)]
        keep.append(node)
    if replaced is None:  # a whole-file mutant
        return [Source(shown, text)]
    source = solution_path.read_text(encoding="utf-8")
    for old, new in replaced:
        source = source.replace(old, new, 1)
    notes.append(f"{shown}: screened as {solution_path.name} with its replacements applied")
    rest = ast.unparse(ast.Module(body=keep, type_ignores=[]))
    return [Source(f"{solution_path.name} ({shown})", source), Source(shown, rest)]

