"""Mutation operators: single textual changes to a solution that model mistakes of this domain.

`find_edits(source)` parses a module with `ast` and proposes `Edit`s, each a byte span of the
module's UTF-8 source and the text that replaces it. Spans come from the AST's positions
(`col_offset` counts UTF-8 bytes), so an edit changes only the characters of the mistake and
keeps the rest of the file — comments, layout — exactly as it was; the report's diffs stay one
line. The same source always gives the same edits in the same order.

Never mutated: docstrings and other string constants, f-strings, annotations, decorators,
`raise NotImplementedError(...)`, the messages of `raise` and `assert`, and the bodies of
`if __name__ == "__main__":` and `if TYPE_CHECKING:`.

The operators (ideas from mutmut's and cosmic-ray's operator sets, narrowed to the mistakes a
student of ML systems makes):

- `cmp_flip`: `<`↔`<=`, `>`↔`>=`, `==`↔`!=`, `is`↔`is not`, `in`↔`not in` (boundary slips);
- `and_or`: `and`↔`or`; `drop_not`: `not x` → `x` (a wrong or inverted check);
- `range_stop`: `range(n)` → `range(n - 1)`; `slice_bound`: `x[a:b]` → `x[a:b - 1]` or
  `x[a + 1:b]`; `drop_one`: `i + 1`, `i - 1` → `i` (off by one in loops, slices, indices);
- `drop_div`: `x / world_size` → `x` (forgot to average);
- `swap_args`: `f(src, dst)` → `f(dst, src)` for adjacent names (swapped peers, rows/cols);
- `drop_call`: a call statement → `pass` (a skipped `.wait()`, `.copy_()`, `.zero_()`,
  `dist.*`); `drop_raise`: `raise ...` → `pass` (missing validation); `drop_update`:
  `x /= n`, `x += y` → `pass` (a missing update);
- `drop_detach`, `drop_clone`: `x.detach()`, `x.clone()` → `x` (gradient leaks, aliasing);
- `reduction`: `sum`↔`mean`, `max`↔`min`, `amax`↔`amin`, `argmax`↔`argmin`, `all`↔`any`;
- `dim`: `dim=`/`axis=` or a literal positional dim, `0`↔`1`, `-1`↔`-2` (the wrong axis);
- `dtype`: `torch.float32` → `float64` or `bfloat16` and back, `.float()`↔`.double()`;
- `bool_const`: `True`↔`False` (a wrong flag such as `keepdim`);
- `const_nudge`: an int `n` → `n + 1`, a float `x` → `2x` (not 0, not epsilons below 1e-4).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

# The order breaks ties between edits of the same span (the first one is kept when two give
# the same source: `dim=0` → `dim=1` is a `dim` change, not a `const_nudge`).
OPERATORS: tuple[str, ...] = (
    "cmp_flip", "and_or", "drop_not", "range_stop", "slice_bound", "drop_one", "drop_div",
    "swap_args", "drop_call", "drop_raise", "drop_update", "drop_detach", "drop_clone",
    "reduction", "dim", "dtype", "bool_const", "const_nudge",
)

# (pattern of the operator's token in the gap between operands, replacement)
_CMP: dict[type, tuple[bytes, str]] = {
    ast.Lt: (rb"<(?!=)", "<="), ast.LtE: (rb"<=", "<"),
    ast.Gt: (rb">(?!=)", ">="), ast.GtE: (rb">=", ">"),
    ast.Eq: (rb"==", "!="), ast.NotEq: (rb"!=", "=="),
    ast.Is: (rb"\bis\b", "is not"), ast.IsNot: (rb"\bis\s+not\b", "is"),
    ast.In: (rb"\bin\b", "not in"), ast.NotIn: (rb"\bnot\s+in\b", "in"),
}
_REDUCTIONS = {"sum": "mean", "mean": "sum", "max": "min", "min": "max", "amax": "amin",
               "amin": "amax", "argmax": "argmin", "argmin": "argmax", "maximum": "minimum",
               "minimum": "maximum", "all": "any", "any": "all"}
_BUILTIN_REDUCTIONS = {"max": "min", "min": "max", "all": "any", "any": "all"}
_DIM_METHODS = {"sum", "mean", "max", "min", "amax", "amin", "argmax", "argmin", "softmax",
                "log_softmax", "logsumexp", "cumsum", "cumprod", "prod", "std", "var", "norm",
                "unsqueeze", "squeeze", "size", "narrow", "select", "unbind", "all", "any"}
_DIM_FUNCS = _DIM_METHODS | {"cat", "concat", "stack"}
_DIM_MODULES = {"torch", "F", "tl", "np"}
_DTYPE_MODULES = {"torch", "tl"}
_DTYPES = {"float32": ("float64", "bfloat16"), "float64": ("float32",), "bfloat16": ("float32",),
           "float16": ("float32",), "int64": ("int32",), "int32": ("int64",)}
_CAST_METHODS = {"float": "double", "double": "float", "half": "float", "bfloat16": "float"}
_SIMPLE = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant, ast.BinOp,
           ast.UnaryOp)
_SMALLEST_NUDGED_FLOAT = 1e-4  # doubling an epsilon changes nothing a test can see


@dataclass(frozen=True)
class Edit:
    """Replace bytes [start, end) of the module's UTF-8 source with `text`."""

    operator: str
    start: int
    end: int
    text: str
    scope: str  # qualified name of the enclosing def/class; "" at module level

    def __post_init__(self) -> None:
        if self.operator not in OPERATORS:
            raise ValueError(f"unknown mutation operator {self.operator!r}; known: "
                             f"{', '.join(OPERATORS)}")
        if not 0 <= self.start <= self.end:
            raise ValueError(f"edit span [{self.start}, {self.end}) is not a span")

    def apply(self, data: bytes) -> bytes:
        return data[:self.start] + self.text.encode() + data[self.end:]


def find_edits(source: str) -> list[Edit]:
    """Every edit the operators propose for `source`, in source order (then operator order)."""
    finder = _Finder(source)
    finder.visit(ast.parse(source))
    rank = {name: i for i, name in enumerate(OPERATORS)}
    return sorted(finder.edits, key=lambda e: (e.start, e.end, rank[e.operator], e.text))


def _dim_value(node: ast.expr) -> int | None:
    """The int of `0`, `1`, `-1`, ... (a literal dim), else None."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) \
            and isinstance(node.operand, ast.Constant) and type(node.operand.value) is int:
        return -node.operand.value
    return None


def _other_dim(dim: int) -> int:
    """0↔1, -1↔-2; a larger axis moves one towards the middle."""
    return {0: 1, 1: 0, -1: -2, -2: -1}.get(dim, dim - 1 if dim > 0 else dim + 1)


def _is_guard(node: ast.If) -> bool:
    """`if __name__ == "__main__":` or `if TYPE_CHECKING:` (bodies never run under test)."""
    test = node.test
    if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
        return True
    if isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING":
        return True
    return isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) \
        and test.left.id == "__name__"


def _is_not_implemented(node: ast.Raise) -> bool:
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


class _Finder(ast.NodeVisitor):
    """Walks one module and collects the operators' edits."""

    def __init__(self, source: str) -> None:
        self.data = source.encode()
        self.line_starts = [0]
        for line in self.data.splitlines(keepends=True):
            self.line_starts.append(self.line_starts[-1] + len(line))
        self.scope: list[str] = []
        self.edits: list[Edit] = []

    # ---- positions ----------------------------------------------------------------------

    def start(self, node: ast.AST) -> int:
        return self.line_starts[node.lineno - 1] + node.col_offset  # type: ignore[attr-defined]

    def end(self, node: ast.AST) -> int:
        line, col = node.end_lineno, node.end_col_offset  # type: ignore[attr-defined]
        return self.line_starts[line - 1] + col

    def text(self, start: int, end: int) -> str:
        return self.data[start:end].decode()

    def seg(self, node: ast.AST) -> str:
        return self.text(self.start(node), self.end(node))

    def add(self, operator: str, start: int, end: int, text: str) -> None:
        self.edits.append(Edit(operator, start, end, text, ".".join(self.scope)))

    def replace(self, operator: str, node: ast.AST, text: str) -> None:
        self.add(operator, self.start(node), self.end(node), text)

    def operand(self, node: ast.expr) -> str:
        """`node`'s text, parenthesised when `- 1` appended to it would bind differently."""
        text = self.seg(node)
        return text if isinstance(node, _SIMPLE) else f"({text})"

    def left_text(self, node: ast.BinOp) -> str:
        """The source of `node` up to its operator: the left operand with its own brackets."""
        head = self.data[self.start(node):self.start(node.right)]
        return re.sub(rb"[\s\\(]*$", b"", re.sub(rb"[\s\\(]*[-+/][\s\\(]*$", b"", head)) \
            .decode()

    # ---- scopes and what is never mutated -----------------------------------------------

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        # Annotations, the return annotation and decorators are skipped; defaults are code.
        self.scope.append(node.name)
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None:
                self.visit(default)
        for statement in node.body:
            self.visit(statement)
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        for statement in node.body:
            self.visit(statement)
        self.scope.pop()

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit(node.body)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)

    def visit_If(self, node: ast.If) -> None:
        if not _is_guard(node):
            self.generic_visit(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        return  # a message, not behaviour

    def visit_Assert(self, node: ast.Assert) -> None:
        self.visit(node.test)

    def visit_Raise(self, node: ast.Raise) -> None:
        if not _is_not_implemented(node):
            self.replace("drop_raise", node, "pass")

    # ---- statements ----------------------------------------------------------------------

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant):
            return  # a docstring
        call = node.value.value if isinstance(node.value, ast.Await) else node.value
        if isinstance(call, ast.Call) and not (isinstance(call.func, ast.Name)
                                               and call.func.id == "print"):
            self.replace("drop_call", node, "pass")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.replace("drop_update", node, "pass")
        self.generic_visit(node)

    # ---- conditions ----------------------------------------------------------------------

    def visit_Compare(self, node: ast.Compare) -> None:
        left: ast.expr = node.left
        for op, right in zip(node.ops, node.comparators):
            pattern, replacement = _CMP[type(op)]
            gap_start = self.end(left)
            match = re.search(pattern, self.data[gap_start:self.start(right)])
            if match is not None:
                self.add("cmp_flip", gap_start + match.start(), gap_start + match.end(),
                         replacement)
            left = right
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        word, other = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        for left, right in zip(node.values, node.values[1:]):
            gap_start = self.end(left)
            match = re.search(rb"\b" + word.encode() + rb"\b",
                              self.data[gap_start:self.start(right)])
            if match is not None:
                self.add("and_or", gap_start + match.start(), gap_start + match.end(), other)
        self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if isinstance(node.op, ast.Not):
            self.replace("drop_not", node, re.sub(r"^not\b\s*", "", self.seg(node)))
        self.generic_visit(node)

    # ---- arithmetic and indexing ---------------------------------------------------------

    def visit_BinOp(self, node: ast.BinOp) -> None:
        right = node.right
        if isinstance(node.op, (ast.Add, ast.Sub)) and isinstance(right, ast.Constant) \
                and type(right.value) is int and right.value == 1:
            self.replace("drop_one", node, self.left_text(node))
        elif isinstance(node.op, ast.Div) and not isinstance(right, ast.Constant):
            self.replace("drop_div", node, self.left_text(node))
        self.generic_visit(node)

    def visit_Slice(self, node: ast.Slice) -> None:
        if node.upper is not None and _dim_value(node.upper) is None:
            self.replace("slice_bound", node.upper, f"{self.operand(node.upper)} - 1")
        if node.lower is not None and _dim_value(node.lower) is None:
            self.replace("slice_bound", node.lower, f"{self.operand(node.lower)} + 1")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, bool):
            self.replace("bool_const", node, str(not value))
        elif isinstance(value, int):
            self.replace("const_nudge", node, str(value + 1))
        elif isinstance(value, float) and abs(value) >= _SMALLEST_NUDGED_FLOAT \
                and value * 2 != value * 4:  # not inf
            self.replace("const_nudge", node, repr(value * 2))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name) and node.value.id in _DTYPE_MODULES:
            for other in _DTYPES.get(node.attr, ()):
                self.replace_attr("dtype", node, other)
        self.generic_visit(node)

    def replace_attr(self, operator: str, node: ast.Attribute, name: str) -> None:
        end = self.end(node)
        self.add(operator, end - len(node.attr.encode()), end, name)

    # ---- calls ---------------------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> None:
        func, args = node.func, node.args
        plain = not any(isinstance(a, ast.Starred) for a in args)
        if isinstance(func, ast.Name) and func.id == "range" and plain and 1 <= len(args) <= 3:
            stop = args[0] if len(args) == 1 else args[1]
            if _dim_value(stop) is None:
                self.replace("range_stop", stop, f"{self.operand(stop)} - 1")
        if plain:
            for first, second in zip(args, args[1:]):
                if isinstance(first, ast.Name) and isinstance(second, ast.Name) \
                        and first.id != second.id:
                    between = self.text(self.end(first), self.start(second))
                    self.add("swap_args", self.start(first), self.end(second),
                             f"{second.id}{between}{first.id}")
        if isinstance(func, ast.Attribute):
            self.visit_method_call(node, func)
        elif isinstance(func, ast.Name) and func.id in _BUILTIN_REDUCTIONS:
            self.replace("reduction", func, _BUILTIN_REDUCTIONS[func.id])
        for keyword in node.keywords:
            dim = _dim_value(keyword.value)
            if keyword.arg in ("dim", "axis") and dim is not None:
                self.replace("dim", keyword.value, str(_other_dim(dim)))
        self.generic_visit(node)

    def visit_method_call(self, node: ast.Call, func: ast.Attribute) -> None:
        name, bare = func.attr, not node.args and not node.keywords
        if name in ("detach", "clone") and bare:
            receiver = re.sub(r"\s*\.\s*" + name + r"$", "",
                              self.text(self.start(node), self.end(func)))
            self.replace(f"drop_{name}", node, receiver)
        if name in _CAST_METHODS and bare:
            self.replace_attr("dtype", func, _CAST_METHODS[name])
        if name in _REDUCTIONS:
            self.replace_attr("reduction", func, _REDUCTIONS[name])
        is_function = isinstance(func.value, ast.Name) and func.value.id in _DIM_MODULES
        position = 1 if is_function else 0
        if name in (_DIM_FUNCS if is_function else _DIM_METHODS) and len(node.args) > position:
            dim = _dim_value(node.args[position])
            if dim is not None:
                self.replace("dim", node.args[position], str(_other_dim(dim)))
