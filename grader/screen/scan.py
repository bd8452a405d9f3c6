"""The static screen: what no solution needs, rejected in the parent before anything runs.

The editable modules of the implementation under test are parsed with `ast` (never imported,
never run) and every construct below is reported with the file, the line and the rule. A
submission the screen rejects has its assignment's tests not run (`grader/session/screen_gate.py`):
the constructs screened are the tools of the attacks on the grader's instruments (reaching the
communication log through closures or frames, loading native code, forging result files, raw
sockets, forking away from the harness), and no correct implementation of any assignment uses
them.

It is a first line, not a proof. Python is too dynamic for a parser to see everything a module
can do, so every defence behind it (the sandbox, the payload checks, the instruments outside
the rank) must hold on its own; `python -m grader adversarial` proves those with the screen
off. What the screen buys is a clear, early reason for the attacks it recognises, and a much
smaller surface for the ones it does not.

The rules, what each screens and why, are `grader/screen/rules.py` (`RULES`); which files an
implementation is made of, `grader/screen/files.py`. This module walks each file's AST and
reports what it finds (`Finding`, `Verdict`).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from grader.screen.files import Source, screen_mutant, sources
from grader.screen.kernels import kernel_wrapper_findings
from grader.screen.rules import (
    ATTRIBUTE_FUNCTIONS,
    ATTRIBUTES,
    BUILTINS,
    REEXPORT_RULE,
    RULES,
    allowed,
    is_course_helper,
    known_names,
    module_rule,
    through_module,
)

__all__ = ["RULES", "Finding", "Source", "Verdict", "known_names", "screen", "screen_mutant",
           "screen_source", "sources"]


@dataclass(frozen=True)
class Finding:
    """One screened construct: where, which rule, and what it is (`calls eval()`)."""

    file: str  # as shown to the student: `ring.py`, `ring_allreduce/ring.py`
    line: int
    rule: str
    what: str

    def message(self) -> str:
        """`ring.py:12 calls eval(); the grader runs no dynamic code — rule no-dynamic-code`."""
        return f"{self.file}:{self.line} {self.what}; {RULES[self.rule]} — rule {self.rule}"


@dataclass
class Verdict:
    """The screen of one assignment's implementation under test."""

    assignment: str
    findings: list[Finding] = field(default_factory=list)
    screened: list[str] = field(default_factory=list)  # files read, as shown
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.findings

    def reason(self, prefix: str = "screen") -> str:
        """One line: the first finding, and how many more there are."""
        if not self.findings:
            return ""
        more = len(self.findings) - 1
        tail = f" (+{more} more)" if more else ""
        return f"{prefix}: {self.findings[0].message()}{tail}"

    def report(self) -> str:
        """Every finding, one per line, first line as `reason()`."""
        if not self.findings:
            return f"screen: passed ({', '.join(self.screened) or 'no file'})"
        return "\n".join([self.reason(), *(f.message() for f in self.findings[1:])])


# -- the screen of one source -------------------------------------------------------------------
def screen_source(source: str, file: str, allow: Sequence[str] = ()) -> list[Finding]:
    """The findings of one module's source, in line order (`file` is only for messages)."""
    try:
        tree = ast.parse(source, filename=file)
    except SyntaxError as exc:
        return [Finding(file, exc.lineno or 0, "syntax", f"does not parse ({exc.msg})")]
    visitor = _Screen(file, tuple(allow))
    visitor.visit(tree)
    if visitor.imports_triton and not allowed("kernel-wrappers", "kernel-wrappers", allow):
        visitor.findings += [Finding(file, line, "kernel-wrappers", what)
                             for line, what in kernel_wrapper_findings(tree, visitor.aliases)]
    unique = {(f.line, f.rule, f.what): f for f in visitor.findings}
    return sorted(unique.values(), key=lambda f: (f.line, f.rule, f.what))


class _Screen(ast.NodeVisitor):
    def __init__(self, file: str, allow: tuple[str, ...]) -> None:
        self.file = file
        self.allow = allow
        self.findings: list[Finding] = []
        self.aliases: dict[str, str] = {}  # local name -> dotted name it was imported as
        self.rebound: set[str] = set()  # builtin names the module defines itself
        self.called: set[int] = set()  # ids of the Name nodes that are called (`getattr(...)`)
        self.imports_triton = False

    def add(self, node: ast.AST, rule: str, what: str, name: str) -> None:
        if not allowed(name, rule, self.allow):
            self.findings.append(Finding(self.file, getattr(node, "lineno", 0), rule, what))

    # imports
    def visit_Module(self, node: ast.Module) -> None:
        for child in ast.walk(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.rebound.add(child.name)
            elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                self.rebound.add(child.id)
            elif isinstance(child, ast.arg):
                self.rebound.add(child.arg)
        self.rebound -= {"__builtins__"}
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(node, alias.name, f"imports {alias.name}")
            local = alias.asname or alias.name.split(".")[0]
            self.aliases[local] = alias.name if alias.asname else alias.name.split(".")[0]
            self.rebound.discard(local)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:  # a sibling module of the submission: screened as a file of its own
            return
        base = node.module or ""
        for alias in node.names:
            dotted = f"{base}.{alias.name}"
            self.aliases[alias.asname or alias.name] = dotted
            if is_course_helper(dotted):
                continue  # `from harness import graphs`
            if not self._check_module(node, base, f"imports from {base}"):
                self._check_module(node, dotted, f"imports {dotted}")
            rule = ATTRIBUTES.get(alias.name)
            if rule:
                self.add(node, rule, f"imports {dotted}", dotted)

    def _check_module(self, node: ast.AST, dotted: str, what: str) -> bool:
        self.imports_triton |= dotted == "triton" or dotted.startswith("triton.")
        found = module_rule(dotted)
        if found is None:
            return self._check_through(node, dotted)
        self.add(node, found[0], what, dotted)
        return True

    def _check_through(self, node: ast.AST, dotted: str) -> bool:
        """A chain through a standard module another one re-exports (`torch.os.fork`,
        `numpy.os`): screened as that module's name, or as reaching the module at all."""
        through = through_module(dotted)
        if through is None:
            return False
        module, rest = through
        found = module_rule(rest)
        if found is not None:
            self.add(node, found[0], f"uses {rest} through {dotted}", rest)
        else:
            self.add(node, REEXPORT_RULE, f"reaches the {module} module through {dotted}",
                     module)
        return True

    # names and attributes
    def _dotted(self, node: ast.expr) -> str | None:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.aliases:
            return None
        return ".".join([self.aliases[node.id], *reversed(parts)])

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.aliases:
            dotted = self.aliases[node.id]
            found = module_rule(dotted)
            if isinstance(node.ctx, ast.Store):
                return
            if found is not None:
                self.add(node, found[0], f"uses {dotted}", dotted)
            else:
                self._check_through(node, dotted)
            return
        if node.id in ATTRIBUTE_FUNCTIONS and node.id not in self.rebound \
                and id(node) not in self.called:  # `_ga = getattr`: calls the screen misses
            self.add(node, "no-computed-attribute", f"uses {node.id} as a value (only direct "
                     f"calls with a literal name are read)", node.id)
        rule = BUILTINS.get(node.id)
        if rule and (node.id not in self.rebound or node.id == "__builtins__"):
            self.add(node, rule, f"calls {node.id}()" if node.id != "__builtins__"
                     else "uses __builtins__", node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = self._dotted(node)
        if dotted is not None:
            found = module_rule(dotted)
            if found is not None:
                self.add(node, found[0], f"uses {dotted}", dotted)
                return  # the chain is reported once, at its longest screened name
            if self._check_through(node, dotted):
                return
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                self.add(node, "no-monkeypatching", f"assigns {dotted}", dotted)
        rule = ATTRIBUTES.get(node.attr)
        if rule:
            self.add(node, rule, f"uses .{node.attr}", node.attr)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            self.called.add(id(func))
        name = func.id if isinstance(func, ast.Name) and func.id not in self.rebound else None
        if isinstance(func, ast.Attribute) and func.attr in ("__getattribute__",
                                                              "__setattr__", "__delattr__"):
            name = func.attr
        if name in ATTRIBUTE_FUNCTIONS or name in ("__getattribute__", "__setattr__",
                                                    "__delattr__"):
            index = 1 if isinstance(func, ast.Name) or len(node.args) > 1 else 0
            if isinstance(func, ast.Attribute) and len(node.args) == 1:
                index = 0
            literal = node.args[index] if len(node.args) > index else None
            if isinstance(literal, ast.Constant) and isinstance(literal.value, str):
                rule = ATTRIBUTES.get(literal.value)
                if rule:
                    self.add(node, rule, f"uses .{literal.value} through {name}()",
                             literal.value)
                owner = self._dotted(node.args[0]) if index == 1 else None
                found = module_rule(f"{owner}.{literal.value}") if owner else None
                if found is not None:  # getattr(dist, "_world") is dist._world
                    self.add(node, found[0], f"uses {owner}.{literal.value} through {name}()",
                             f"{owner}.{literal.value}")
                elif owner:  # getattr(torch, "os") is torch.os
                    self._check_through(node, f"{owner}.{literal.value}")
            elif literal is not None:
                self.add(node, "no-computed-attribute",
                         f"calls {name}() with a name that is not a string literal",
                         str(name))
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        rule = ATTRIBUTES.get(node.name)
        if rule == "no-serialisation":  # def __reduce__: a pickle payload
            self.add(node, rule, f"defines {node.name}", node.name)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]


def screen(impl_kind: str, root: Path, assignment: str, modules: Sequence[str],
           allow: Sequence[str], course_root: Path,
           mutant: tuple[Path, str] | None = None) -> Verdict:
    """Screen the implementation of `assignment`; see `sources` for which files."""
    verdict = Verdict(assignment)
    for source in sources(impl_kind, root, assignment, modules, course_root, mutant,
                          verdict.notes):
        verdict.screened.append(source.shown)
        verdict.findings += screen_source(source.text, source.shown, allow)
    return verdict
