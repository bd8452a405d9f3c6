"""The screen's `kernel-wrappers` rule: the parent-side half of `harness.compute_guard`.

In a module that imports triton, the Python around the kernels may allocate, view, copy, do
integer bookkeeping and launch (README §8 of triton_kernels). The compute guard sees every torch
operator a wrapper runs and judges it by dtype, so torch functions themselves are its business,
not the screen's. The screen rejects what the guard cannot see: torch's compilers, tracers,
dispatch and autograd internals (`torch.jit`, `torch.compile`, `torch.utils._python_dispatch`,
`torch.library`, `torch.func`, `torch.autograd`, `torch.from_numpy`, ...), numpy, and the
attributes that hand tensor data to Python with no operator (`.tolist()`, `.numpy()`,
`.data_ptr()`, storages, `.apply_()`, ...). Integers are read with `int(t)` or `.item()`, which
the guard sees. Kernel bodies are read too: under the interpreter a kernel is plain Python.
"""

from __future__ import annotations

import ast

# torch namespaces (and functions) whose work the compute guard cannot see: compiled or traced
# code, another thread, dispatch and autograd machinery, memory shared with numpy.
HIDDEN_FROM_GUARD = (
    "jit", "compile", "_dynamo", "_inductor", "export", "fx", "utils", "library", "_C", "func",
    "autograd", "multiprocessing", "overrides", "_ops", "ops", "futures", "_refs", "_prims",
    "_decomp", "_subclasses", "_tensor", "from_numpy", "frombuffer", "from_dlpack",
)
# Attributes that hand tensor data to Python, or run Python per element, with no operator the
# compute guard could see; and autograd, which may run work where the guard does not look.
DATA_ESCAPES = frozenset({
    "tolist", "numpy", "data_ptr", "untyped_storage", "storage", "_storage", "__array__",
    "__array_interface__", "__array_priority__", "__dlpack__", "__cuda_array_interface__",
    "apply_", "map_", "map2_", "backward", "register_hook", "share_memory_",
})


def kernel_wrapper_findings(tree: ast.Module, aliases: dict[str, str]) -> list[tuple[int, str]]:
    """(line, what) for every construct of `tree` the rule rejects; `aliases` maps the module's
    local names to the dotted names they were imported as (the screen's own walk builds it)."""
    walk = _KernelWrappers(aliases)
    walk.visit(tree)
    return walk.findings


def _hidden(name: str) -> bool:
    return any(name == h or name.startswith(h + ".") for h in HIDDEN_FROM_GUARD)


class _KernelWrappers(ast.NodeVisitor):
    def __init__(self, aliases: dict[str, str]) -> None:
        self.aliases = aliases
        self.findings: list[tuple[int, str]] = []

    def add(self, node: ast.AST, what: str) -> None:
        self.findings.append((getattr(node, "lineno", 0), what))

    def _dotted(self, node: ast.expr) -> str | None:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.aliases:
            return None
        return ".".join([self.aliases[node.id], *reversed(parts)])

    def _check(self, node: ast.AST, dotted: str, what: str) -> None:
        if dotted == "numpy" or dotted.startswith("numpy."):
            self.add(node, f"{what} {dotted} (numpy computes outside any kernel)")
        elif dotted.startswith("torch.") and _hidden(dotted[len("torch."):]):
            self.add(node, f"{what} {dotted}, whose work the compute guard cannot see")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name != "torch":
                self._check(node, alias.name, "imports")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            return
        for alias in node.names:
            self._check(node, f"{node.module}.{alias.name}", "imports")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = self._dotted(node)
        if dotted is not None and (dotted.startswith(("torch.", "numpy.")) or dotted == "numpy"):
            self._check(node, dotted, "uses")
            return  # reported once, at the longest name of the chain
        if node.attr in DATA_ESCAPES:
            self.add(node, f"uses .{node.attr}, which reads tensor data outside any kernel")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        dotted = self.aliases.get(node.id)
        if dotted is not None and dotted != "torch":
            self._check(node, dotted, "uses")
        elif node.id == "memoryview":
            self.add(node, "uses memoryview, which reads tensor data outside any kernel")
