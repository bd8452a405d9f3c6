"""The screen's `kernel-wrappers` rule: the parent-side half of `harness.compute_guard`.

In a module that imports triton, the Python around the kernels may allocate, view, copy and
launch, and nothing else: every other torch name computes (`torch.exp`) or leaves the compute
guard's sight (`torch.from_numpy`, `torch.jit.fork` on another thread, `torch.compile`); numpy
computes outside any kernel; `.tolist()`, `.numpy()`, storages and `.apply_()` hand tensor
data to Python with no operator the guard could see. Kernel bodies are read too: under the
interpreter a kernel is plain Python, so numpy or torch there would compute outside Triton.
"""

from __future__ import annotations

import ast

# torch names a Triton wrapper may use: allocation, dtypes, devices and metadata.
WRAPPER_TORCH = frozenset({
    "Tensor", "Size", "dtype", "device", "Generator", "empty", "empty_like", "empty_strided",
    "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "arange", "is_tensor",
    "is_floating_point", "is_complex", "finfo", "iinfo", "get_default_dtype", "promote_types",
    "result_type", "broadcast_shapes", "no_grad", "inference_mode", "float16", "half",
    "bfloat16", "float32", "float", "float64", "double", "int8", "uint8", "int16", "short",
    "int32", "int", "int64", "long", "bool", "float8_e4m3fn", "float8_e5m2",
    "cuda.is_available", "cuda.current_device", "cuda.device_count", "cuda.device",
    "cuda.get_device_capability", "cuda.get_device_properties", "cuda.synchronize",
    "cuda.set_device", "cuda.current_stream", "cuda.Stream",
})
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
        elif dotted.startswith("torch.") and dotted[len("torch."):] not in WRAPPER_TORCH:
            self.add(node, f"{what} {dotted}, which is not allocation or metadata")

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
