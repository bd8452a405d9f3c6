"""Public names and signatures of a module, read from its source with `ast` (never imported).

Selfcheck uses this to prove that a stub and its solution expose the same API: a student who
fills the stub must be able to call everything the suites call. The public surface is

- top-level functions, classes and constants whose names do not start with `_` (or exactly the
  names in a literal `__all__` when the module defines one); imports are not part of it unless
  `__all__` lists them;
- per class: its decorators and bases, public and dunder methods, properties (with setter and
  deleter), and annotated class attributes (dataclass fields) with their defaults;
- per function: `def`/`async def`, staticmethod/classmethod, and every parameter's name, kind,
  default and annotation, plus the return annotation — all as normalised source text.

`compare_sources()` returns readable differences; an empty list means the surfaces match.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

_METHOD_KINDS = ("staticmethod", "classmethod")


@dataclass(frozen=True)
class Difference:
    """One mismatch between stub and solution; `name` is dotted (`Class.method`)."""

    name: str
    stub: str | None  # None: missing in the stub
    solution: str | None  # None: missing in the solution

    def __str__(self) -> str:
        if self.stub is None:
            return f"{self.name}: in the solution but missing from the stub ({self.solution})"
        if self.solution is None:
            return f"{self.name}: in the stub but missing from the solution ({self.stub})"
        return f"{self.name}: stub has `{self.stub}`, solution has `{self.solution}`"


def public_api(source: str, filename: str = "<module>") -> dict[str, str]:
    """Map each public dotted name of the module source to its signature text.

    Raises `SyntaxError` when the source does not parse.
    """
    tree = ast.parse(source, filename=filename)
    exported = _literal_all(tree)
    api: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and exported is None:
            continue  # an import is public only when `__all__` re-exports it
        for name, text in _top_level(node):
            if (name in exported) if exported is not None else _is_public(name):
                api[name] = text
            if isinstance(node, ast.ClassDef) and name in api:
                api.update(_class_members(node))
    return api


def compare_sources(stub: str, solution: str) -> list[Difference]:
    """Differences between the public APIs of two module sources, sorted by name."""
    return _differences(public_api(stub, "stub"), public_api(solution, "solution"))


def compare_files(stub: Path, solution: Path) -> list[str]:
    """Compare two module files; problems (missing file, syntax error, mismatch) as messages."""
    apis = []
    for path in (stub, solution):
        if not path.is_file():
            return [f"{path} is missing"]
        try:
            apis.append(public_api(path.read_text(encoding="utf-8"), str(path)))
        except SyntaxError as exc:
            return [f"cannot parse {path} line {exc.lineno}: {exc.msg}"]
    return [str(d) for d in _differences(*apis)]


def _differences(stub_api: dict[str, str], solution_api: dict[str, str]) -> list[Difference]:
    names = sorted(set(stub_api) | set(solution_api))
    return [
        Difference(name, stub_api.get(name), solution_api.get(name))
        for name in names
        if stub_api.get(name) != solution_api.get(name)
    ]


def _is_public(name: str) -> bool:
    return not name.startswith("_")


def _literal_all(tree: ast.Module) -> set[str] | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            try:
                return set(ast.literal_eval(node.value))
            except ValueError:
                return None
    return None


def _top_level(node: ast.stmt) -> list[tuple[str, str]]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [(node.name, _function(node))]
    if isinstance(node, ast.ClassDef):
        return [(node.name, _class(node))]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [(node.target.id, f"{node.target.id}: {_annotation(node.annotation)}")]
    if isinstance(node, ast.Assign):
        names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        return [(name, f"{name} = ...") for name in names if name != "__all__"]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        source = ""
        if isinstance(node, ast.ImportFrom):
            source = f"from {'.' * node.level}{node.module or ''} "
        return [
            ((a.asname or a.name).split(".")[0], f"{source}import {a.name}") for a in node.names
        ]
    return []


def _class(node: ast.ClassDef) -> str:
    decorators = "".join(f"@{ast.unparse(d)} " for d in node.decorator_list)
    bases = [ast.unparse(b) for b in node.bases] + [ast.unparse(k) for k in node.keywords]
    return f"{decorators}class {node.name}({', '.join(bases)})"


def _class_members(node: ast.ClassDef) -> dict[str, str]:
    members: dict[str, str] = {}
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if not (_is_public(item.name) or _is_dunder(item.name)):
                continue
            role = _property_role(item)
            key = f"{node.name}.{item.name}"
            if role is None:
                members[key] = _function(item)
            elif role == "getter":
                members[key] = f"property {item.name} -> {_annotation(item.returns)}"
            else:
                members[f"{key}.{role}"] = _function(item)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            name = item.target.id
            if _is_public(name):
                default = "" if item.value is None else f" = {ast.unparse(item.value)}"
                members[f"{node.name}.{name}"] = f"{name}: {_annotation(item.annotation)}{default}"
        elif isinstance(item, ast.Assign):
            for target in item.targets:
                if isinstance(target, ast.Name) and _is_public(target.id):
                    members[f"{node.name}.{target.id}"] = f"{target.id} = ..."
    return members


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _property_role(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    for decorator in node.decorator_list:
        text = ast.unparse(decorator)
        if text in ("property", "functools.cached_property", "cached_property"):
            return "getter"
        for role in ("setter", "deleter"):
            if text.endswith(f".{role}"):
                return role
    return None


def _function(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    kinds = [k for k in _METHOD_KINDS if k in {ast.unparse(d) for d in node.decorator_list}]
    if kinds:
        prefix = f"@{kinds[0]} {prefix}"
    returns = f" -> {_annotation(node.returns)}" if node.returns is not None else ""
    return f"{prefix} {node.name}({_parameters(node.args)}){returns}"


def _parameters(args: ast.arguments) -> str:
    positional = args.posonlyargs + args.args
    # Defaults align with the last positional parameters.
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += args.defaults
    parts = [_parameter(a, d) for a, d in zip(positional, defaults)]
    if args.posonlyargs:
        parts.insert(len(args.posonlyargs), "/")
    if args.vararg is not None:
        parts.append("*" + _parameter(args.vararg, None))
    elif args.kwonlyargs:
        parts.append("*")
    parts += [_parameter(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg is not None:
        parts.append("**" + _parameter(args.kwarg, None))
    return ", ".join(parts)


def _parameter(arg: ast.arg, default: ast.expr | None) -> str:
    text = arg.arg
    if arg.annotation is not None:
        text += f": {_annotation(arg.annotation)}"
    if default is not None:
        # PEP 8 spacing, as `inspect.signature` prints it.
        equals = " = " if arg.annotation is not None else "="
        text += f"{equals}{ast.unparse(default)}"
    return text


def _annotation(node: ast.expr | None) -> str:
    """Source text of an annotation; a string annotation is read as the expression it quotes."""
    if node is None:
        return "<none>"
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return ast.unparse(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return node.value
    return ast.unparse(node)


def without_annotations(source: str) -> str:
    """The module source with the annotations of every function's parameters and return
    dropped (dataclass fields keep theirs): how an implementation written without type hints
    is compared with the stub."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
            arguments = node.args
            for arg in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                        arguments.vararg, arguments.kwarg):
                if arg is not None:
                    arg.annotation = None
    return ast.unparse(tree)


def only_optional_extras(stub_sig: str, other_sig: str | None) -> bool:
    """Whether function signature `stub_sig` is `other_sig` plus trailing parameters that all
    have defaults: the opt-in of an optional part (a stretch goal) that `other` leaves out."""
    if other_sig is None or not stub_sig.startswith("def ") or not other_sig.startswith("def "):
        return False
    try:
        ours, theirs = (ast.parse(f"{sig}:\n    pass").body[0] for sig in (stub_sig, other_sig))
    except SyntaxError:
        return False
    assert isinstance(ours, ast.FunctionDef) and isinstance(theirs, ast.FunctionDef)
    a, b = ours.args, theirs.args
    n = len(b.args)
    if (b.posonlyargs or b.kwonlyargs or b.vararg or b.kwarg or a.posonlyargs or a.vararg
            or a.kwarg or a.kwonlyargs or len(a.args) <= n):
        return False
    extras = len(a.args) - n
    if len(a.defaults) < extras:  # an extra parameter without a default
        return False
    if [ast.dump(x) for x in a.args[:n]] != [ast.dump(x) for x in b.args]:
        return False
    shared_defaults = a.defaults[:len(a.defaults) - extras]
    return [ast.dump(d) for d in shared_defaults] == [ast.dump(d) for d in b.defaults]


def missing_from(stub: Path, other: Path, optional_extras: bool = False) -> list[str]:
    """What `other` (an independent implementation) lacks of the stub's public API: each stub
    name it does not define, or defines with other parameters (names, kinds, defaults; type
    hints aside). Names only `other` defines are its own business. Problems as messages.
    With `optional_extras` (it leaves out an optional part, NOT_ATTEMPTED), a stub function
    that only adds trailing parameters with defaults (the part's opt-in) is not a problem."""
    apis = []
    for path in (stub, other):
        if not path.is_file():
            return [f"{path} is missing"]
        try:
            apis.append(public_api(without_annotations(path.read_text(encoding="utf-8")),
                                   str(path)))
        except SyntaxError as exc:
            return [f"cannot parse {path} line {exc.lineno}: {exc.msg}"]
    ours, theirs = apis
    return [str(Difference(name, ours[name], theirs.get(name)))
            for name in sorted(ours) if ours[name] != theirs.get(name)
            and not (optional_extras and only_optional_extras(ours[name], theirs.get(name)))]
