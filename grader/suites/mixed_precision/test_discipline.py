"""Discipline (2 points), judged here from the submitted amp.py's source, read with `ast` in this
process (no rank runs it, so nothing the submission does at run time can hide or fake it):

- `round_to` and `Fp8Linear`, with every function, class and module-level constant of amp.py
  they reach by name (transitively), may not name a low-precision dtype: torch.bfloat16,
  torch.float16 / torch.half, any torch.float8_* (as an attribute, an import or a string such
  as getattr's), nor call `.bfloat16()` / `.half()`: no `.to`, `.type`, `.view` or `dtype=` into
  them. `torch.finfo(<dtype>)` is allowed; bit reinterpretation (`x.view(torch.int32)`) and
  float32 / float64 arithmetic are what the contract asks for (README §3).
- amp.py may not use `GradScaler` anywhere (attribute, import or string), README §5.

Docstrings and comments never count. A stubbed function fails as "not implemented yet", so the
points stay with the functions they judge (partial credit). A mutant is read as the source it
runs: the solution with its replacements applied (`grader.screen.files.screen_mutant`), its own
definitions overriding the solution's.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from grader.screen.files import screen_mutant
from harness.impl import module_path

LOW_DTYPE = r"(?:bfloat16|float16|half|float8_\w+|BFloat16Tensor|HalfTensor)"
LOW_ATTRIBUTE = re.compile(LOW_DTYPE)
LOW_STRING = re.compile(r"(?:torch\.)?(?:cuda\.)?" + LOW_DTYPE)
SCALER = re.compile(r"GradScaler|grad_scaler")
SCALER_STRING = re.compile(r".*(?:GradScaler|grad_scaler).*", re.DOTALL)
CAST_HINT = ("round on float32's bits (x.view(torch.int32)) or with exact float64 arithmetic, "
             "and quantise in Fp8Linear with your round_to (README §3)")
SCALER_HINT = "write the scaler's rules yourself (README §5)"


def amp_tree(impl: Any) -> ast.Module:
    """The submitted amp.py as a module AST (a mutant: the source it runs)."""
    path = module_path(impl, "mixed_precision", "amp")
    try:
        if impl.kind == "mutant" and path.parent.name == "mutants":
            solution = Path(impl.root) / "mixed_precision" / "amp.py"
            parts = [ast.parse(s.text) for s in screen_mutant(path, solution, [])]
            tree = parts[0]
            for extra in parts[1:]:
                overlay(tree, extra)
            return tree
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError) as exc:
        raise AssertionError(f"amp.py could not be read as Python ({type(exc).__name__}: "
                             f"{exc}); submit a module that imports") from None


def overlay(tree: ast.Module, extra: ast.Module) -> None:
    """`extra`'s top-level definitions replace `tree`'s of the same name, others are added."""
    where = {name: i for i, node in enumerate(tree.body) for name in defined(node)}
    for node in extra.body:
        names = defined(node)
        if names and names[0] in where:
            tree.body[where[names[0]]] = node
        else:
            tree.body.append(node)


def defined(node: ast.stmt) -> list[str]:
    """The names a top-level statement defines (functions, classes, assigned names)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def docstrings(tree: ast.AST) -> set[int]:
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)}


def reached(tree: ast.Module, roots: tuple[str, ...]) -> dict[str, ast.stmt]:
    """The top-level definitions `roots` reach by name, transitively (a class: all of it)."""
    index: dict[str, ast.stmt] = {}
    for node in tree.body:
        for name in defined(node):
            index.setdefault(name, node)
    seen: dict[str, ast.stmt] = {}
    todo = [r for r in roots if r in index]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen[name] = index[name]
        for node in ast.walk(index[name]):
            if isinstance(node, ast.Name) and node.id in index and node.id not in seen:
                todo.append(node.id)
    return seen


def called(call: ast.Call) -> str:
    """The last name of what `call` calls (`torch.finfo(...)` -> "finfo")."""
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else \
        func.id if isinstance(func, ast.Name) else ""


def shown(node: ast.Attribute) -> str:
    """`torch.bfloat16`, `x.half` as written (short), else `....attr`."""
    text = ast.unparse(node)
    return text if len(text) <= 40 else f"...{node.attr}"


def low_aliases(tree: ast.Module) -> set[str]:
    """Names bound by `from torch import bfloat16 [as b]`."""
    return {a.asname or a.name for node in tree.body if isinstance(node, ast.ImportFrom)
            and (node.module or "").startswith("torch") for a in node.names
            if LOW_ATTRIBUTE.fullmatch(a.name)}


def low_dtype_uses(tree: ast.Module, roots: tuple[str, ...]) -> list[str]:
    """"line N: torch.bfloat16 (in round_to)" for every low-precision dtype the definitions
    reached from `roots` name, outside docstrings and torch.finfo(...)."""
    aliases = low_aliases(tree)
    skip = docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and called(node) == "finfo":
            skip |= {id(n) for arg in (*node.args, *(k.value for k in node.keywords))
                     for n in ast.walk(arg)}
    found: list[tuple[int, str]] = []
    for owner, top in reached(tree, roots).items():
        for node in ast.walk(top):
            if id(node) in skip:
                continue
            name = None
            if isinstance(node, ast.Attribute) and LOW_ATTRIBUTE.fullmatch(node.attr):
                name = shown(node)
            elif isinstance(node, ast.Name) and node.id in aliases:
                name = node.id
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and LOW_STRING.fullmatch(node.value):
                name = repr(node.value)
            if name is not None:
                found.append((getattr(node, "lineno", 0), f"{name} (line "
                              f"{getattr(node, 'lineno', 0)}, in {owner})"))
    return [text for _, text in sorted(found)]


def scaler_uses(tree: ast.Module) -> list[str]:
    """Every GradScaler amp.py names anywhere, outside docstrings."""
    skip = docstrings(tree)
    found = []
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Attribute) and SCALER.fullmatch(node.attr):
            name = shown(node)
        elif isinstance(node, ast.ImportFrom):
            name = next((a.name for a in node.names if SCALER.fullmatch(a.name)), None)
            if name is None and SCALER.search(node.module or ""):
                name = node.module
        elif isinstance(node, ast.Import):
            name = next((a.name for a in node.names if SCALER.search(a.name)), None)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in skip and SCALER_STRING.fullmatch(node.value):
            name = repr(node.value)
        if name is not None:
            found.append(f"{name} (line {getattr(node, 'lineno', 0)})")
    return found


def require_implemented(tree: ast.Module, names: tuple[str, ...]) -> None:
    """Raise NotImplementedError (reported as "not implemented yet") for a stubbed name: a
    function, or a class with a method, whose body raises NotImplementedError at its top."""
    tops = {node.name: node for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    for name in names:
        top = tops.get(name)
        if top is None:
            raise AssertionError(f"amp.py defines no {name} (README §10)")
        functions = [top] if not isinstance(top, ast.ClassDef) else \
            [n for n in top.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for function in functions:
            for statement in function.body:
                message = stub_message(statement)
                if message is not None:
                    raise NotImplementedError(message or name)


def stub_message(statement: ast.stmt) -> str | None:
    """The message of `raise NotImplementedError(...)` ("" without one), else None."""
    if not isinstance(statement, ast.Raise) or statement.exc is None:
        return None
    exc = statement.exc
    call = exc if isinstance(exc, ast.Call) else None
    target = call.func if call is not None else exc
    if not (isinstance(target, ast.Name) and target.id == "NotImplementedError"):
        return None
    if call is not None and call.args and isinstance(call.args[0], ast.Constant):
        return str(call.args[0].value)
    return ""


@pytest.fixture(scope="module")
def source(impl):
    return amp_tree(impl)


@pytest.mark.points(1)
@pytest.mark.exercises("round_to", "Fp8Linear")
def test_round_to_and_fp8_linear_do_not_cast_to_low_precision(source):
    roots = ("round_to", "Fp8Linear")
    uses = low_dtype_uses(source, roots)
    if uses:
        raise AssertionError(
            f"round_to and Fp8Linear may not cast to a low-precision dtype: amp.py names "
            f"{uses[0]}" + (f" and {len(uses) - 1} more" if len(uses) > 1 else "") +
            f"; {CAST_HINT}")
    require_implemented(source, roots)


@pytest.mark.points(1)
@pytest.mark.exercises("DynamicLossScaler")
def test_the_scaler_does_not_use_gradscaler(source):
    uses = scaler_uses(source)
    if uses:
        raise AssertionError(
            f"DynamicLossScaler may not use torch.amp.GradScaler: amp.py names {uses[0]}"
            + (f" and {len(uses) - 1} more" if len(uses) > 1 else "") + f"; {SCALER_HINT}")
    require_implemented(source, ("DynamicLossScaler",))
