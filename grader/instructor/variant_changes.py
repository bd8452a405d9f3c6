"""Which functions of the solution a variant changes, read statically (selfcheck's coverage
plan, grader/instructor/plugin_coverage.py).

- A partial-credit variant stubs one public name: it changes that name (a class: its methods).
- A hand-written mutant patches the solution's source (`harness.mutation.mutate`): it changes
  the functions whose text a replacement falls in — the outermost function or method around it,
  so that a function defined inside counts with it. A replacement outside every function (a
  constant, a class attribute, an import) or a mutant that does more than `mutate(...)` (a
  redefinition after the call, a patch) may change anything: `None`, and nothing is inferred.
"""

from __future__ import annotations

import ast
from pathlib import Path

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _offsets(source: str) -> list[int]:
    """Character offset of the start of each line (1-based line numbers index it from 1)."""
    starts, total = [0, 0], 0
    for line in source.splitlines(keepends=True):
        total += len(line)
        starts.append(total)
    return starts


def _functions(tree: ast.Module, source: str) -> list[tuple[int, int, str]]:
    """(start, end, qualname) character spans of the whole lines of every top-level function
    and method (with its decorators and defaults), outermost only."""
    starts = _offsets(source)
    spans = []

    def span(node: ast.stmt) -> tuple[int, int]:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        last = node.end_lineno or node.lineno
        return starts[first], starts[min(last + 1, len(starts) - 1)]

    for node in tree.body:
        if isinstance(node, _FUNCTIONS):
            spans.append((*span(node), node.name))
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, _FUNCTIONS):
                    spans.append((*span(item), f"{node.name}.{item.name}"))
    return spans


def _literal_replacements(call: ast.Call) -> list[tuple[str, str]] | None:
    replace = next((k.value for k in call.keywords if k.arg == "replace"), None)
    if replace is None and len(call.args) > 3:
        replace = call.args[3]
    if replace is None:
        return []
    try:
        pairs = ast.literal_eval(replace)
    except ValueError:
        return None
    if not all(isinstance(p, tuple) and len(p) == 2 and all(isinstance(s, str) for s in p)
               for p in pairs):
        return None
    return list(pairs)


def _mutate_call(tree: ast.Module) -> ast.Call | None:
    """The module's one `mutate(...)` call, when everything else is a docstring, an import or a
    constant; None otherwise."""
    call = None
    for index, node in enumerate(tree.body):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and index == 0:
            continue  # the docstring
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Constant, ast.Tuple)) \
                and all(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets):
            continue  # MUTATES, FEEDBACK
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Name) and node.value.func.id == "mutate" \
                and call is None:
            call = node.value
            continue
        return None
    return call


def mutant_changes(mutant: Path, solution_dir: Path) -> tuple[str, ...] | None:
    """`module:qualname` of each solution function the mutant changes; None when it may change
    more than functions (then every test runs for it)."""
    call = _mutate_call(ast.parse(mutant.read_text(encoding="utf-8")))
    if call is None or len(call.args) < 3 or not isinstance(call.args[2], ast.Constant):
        return None
    module = str(call.args[2].value)
    path = solution_dir / f"{module}.py"
    replacements = _literal_replacements(call)
    if replacements is None or not replacements or not path.is_file():
        return None
    source = path.read_text(encoding="utf-8")
    spans = _functions(ast.parse(source), source)
    changed: list[str] = []
    for old, _new in replacements:
        if source.count(old) != 1:
            return None  # it matches only the source another replacement made: not read here
        start = source.index(old)
        owner = next((name for lo, hi, name in spans if lo <= start and start + len(old) <= hi),
                     None)
        if owner is None:
            return None
        changed.append(f"{module}:{owner}")
    return tuple(dict.fromkeys(changed))


def lines_changes(source: str, module: str, first: int, last: int) -> tuple[str, ...] | None:
    """The function or method whose lines hold lines `first`..`last` of `source` (a generated
    mutant's change); None when they are not all inside one (module level)."""
    starts = _offsets(source)
    lo, hi = starts[first], starts[min(last, len(starts) - 2)]
    owner = next((name for start, end, name in _functions(ast.parse(source), source)
                  if start <= lo and hi < end), None)
    return None if owner is None else (f"{module}:{owner}",)


def stub_changes(module: str, name: str) -> tuple[str, ...]:
    """A partial-credit variant with `name` of `module` stubbed changes `name` (its methods)."""
    return (f"{module}:{name}",)
