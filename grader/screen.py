"""The static screen: what no solution needs, rejected in the parent before anything runs.

The editable modules of the implementation under test are parsed with `ast` (never imported,
never run) and every construct below is reported with the file, the line and the rule. A
submission the screen rejects has its assignment's tests not run (`grader/screen_plugin.py`):
the constructs screened are the tools of the attacks on the grader's instruments (reaching the
communication log through closures or frames, loading native code, forging result files, raw
sockets, forking away from the harness), and no correct implementation of any assignment uses
them.

It is a first line, not a proof. Python is too dynamic for a parser to see everything a module
can do, so every defence behind it (the sandbox, the payload checks, the instruments outside
the rank) must hold on its own; `python -m grader adversarial` proves those with the screen
off. What the screen buys is a clear, early reason for the attacks it recognises, and a much
smaller surface for the ones it does not.

Rules (`RULES`), each a set of dotted names resolved through the module's own imports
(`import os as o; o.fork()` is `os.fork`, `from sys import _getframe` is `sys._getframe`):

    no-dynamic-code      exec, eval, compile, __import__, importlib, marshal, runpy, ...
    no-native-code       ctypes, cffi, torch.utils.cpp_extension, load_library, ...
    no-introspection     gc, inspect, sys._getframe, frame/traceback/closure/code attributes
    no-computed-attribute getattr/setattr/delattr/hasattr with a name that is not a literal
    no-interpreter-state builtins, __builtins__, sys.modules, sys.path, globals(), vars(), ...
    no-monkeypatching    assigning to an attribute of an imported module (torch.allclose = ...)
    no-process-control   subprocess, multiprocessing, signal, os.fork/kill/system/exec*/...
    no-network           socket, ssl, http, urllib, ...
    no-serialisation     pickle, dill, torch.save/torch.load, zipfile, __reduce__, ...
    no-files             open(), pathlib, shutil, tempfile, os file operations
    no-environment       os.environ, os.getenv, ...
    no-course-internals  grader.*, solutions.*, harness.* other than harness.graphs
    kernel-wrappers      in a module that imports triton: torch names other than allocation,
                         dtypes and device queries; numpy; reading tensor data into Python
                         (.tolist(), .numpy(), .data_ptr(), storages, .apply_(), ...)
    syntax               the module does not parse

An assignment may allow names or whole rules in the manifest: `screen_allow = ["os.environ"]`
in its `[[assignment]]` table (`grader/manifest.py` checks each entry is a rule id or a name the
screen knows).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# rule id -> (what it screens, why no solution needs it): the second half of every message.
RULES: dict[str, str] = {
    "no-dynamic-code": "the grader runs no dynamic code",
    "no-native-code": "no assignment needs native code outside torch and triton",
    "no-introspection": "no solution inspects frames, closures, code objects or the heap",
    "no-computed-attribute": "attribute names must be literals, so the screen can read them",
    "no-interpreter-state": "no solution touches the interpreter's module table or builtins",
    "no-monkeypatching": "no solution replaces attributes of modules it imports",
    "no-process-control": "the harness owns processes and signals",
    "no-network": "ranks talk only through torch.distributed",
    "no-serialisation": "results go back as return values, never through files or pickles",
    "no-files": "every input comes as an argument; no solution reads or writes files",
    "no-environment": "no solution reads the environment",
    "no-course-internals": "a submission may use torch and the documented helpers only",
    "kernel-wrappers": "a kernel wrapper only allocates, views, copies and launches kernels",
    "syntax": "the module does not parse",
}

# Modules (and everything under them) by rule. A module is matched as a dotted prefix.
_MODULES: dict[str, tuple[str, ...]] = {
    "no-dynamic-code": ("importlib", "imp", "marshal", "runpy", "zipimport", "pkgutil",
                        "code", "codeop", "pdb", "bdb", "types.CodeType", "types.FunctionType",
                        "opcode", "dis", "py_compile", "compileall"),
    "no-native-code": ("ctypes", "_ctypes", "cffi", "torch.utils.cpp_extension",
                       "torch.ops.load_library", "torch.classes.load_library",
                       "numpy.ctypeslib", "mmap"),
    "no-introspection": ("gc", "inspect", "traceback", "linecache", "tracemalloc",
                         "sys._getframe", "sys._current_frames", "sys._current_exceptions",
                         "sys.exc_info", "sys.exception", "sys.last_traceback", "sys.settrace",
                         "sys.setprofile", "sys.gettrace", "sys.getprofile",
                         "sys.addaudithook", "sys.monitoring", "threading.settrace",
                         "threading.setprofile", "weakref", "operator.attrgetter",
                         "operator.methodcaller", "faulthandler"),
    "no-interpreter-state": ("builtins", "__builtin__", "sys.modules", "sys.path",
                             "sys.meta_path", "sys.path_hooks", "sys.path_importer_cache",
                             "sys.setrecursionlimit", "sys.setswitchinterval", "site",
                             "sitecustomize", "usercustomize", "atexit"),
    "no-process-control": ("subprocess", "multiprocessing", "concurrent", "signal", "pty",
                           "resource", "os.fork", "os.forkpty", "os.setsid", "os.setpgid",
                           "os.setpgrp", "os.kill", "os.killpg", "os.system", "os.popen",
                           "os.execl", "os.execle", "os.execlp", "os.execlpe", "os.execv",
                           "os.execve", "os.execvp", "os.execvpe", "os.spawnl", "os.spawnle",
                           "os.spawnlp", "os.spawnlpe", "os.spawnv", "os.spawnve",
                           "os.spawnvp", "os.spawnvpe", "os.posix_spawn", "os.posix_spawnp",
                           "os._exit", "os.abort", "os.register_at_fork", "os.pidfd_open",
                           "os.setuid", "os.setgid", "os.nice", "os.sched_setaffinity",
                           "_thread", "threading", "asyncio"),
    "no-network": ("socket", "_socket", "ssl", "http", "urllib", "requests", "socketserver",
                   "ftplib", "smtplib", "xmlrpc", "select", "selectors", "telnetlib",
                   "urllib3", "httpx", "aiohttp"),
    "no-serialisation": ("pickle", "_pickle", "cPickle", "cloudpickle", "dill", "shelve",
                         "copyreg", "pickletools", "torch.save", "torch.load",
                         "torch.serialization", "zipfile", "tarfile", "numpy.save",
                         "numpy.load", "numpy.savez", "numpy.tofile", "numpy.fromfile"),
    "no-files": ("pathlib", "shutil", "tempfile", "glob", "fcntl", "fileinput", "io.open",
                 "io.FileIO", "os.open", "os.read", "os.write", "os.remove", "os.unlink",
                 "os.rename", "os.renames", "os.replace", "os.truncate", "os.ftruncate",
                 "os.mkdir", "os.makedirs", "os.rmdir", "os.removedirs", "os.symlink",
                 "os.link", "os.readlink", "os.chmod", "os.chown", "os.listdir", "os.scandir",
                 "os.walk", "os.fwalk", "os.chdir", "os.dup", "os.dup2", "os.pipe",
                 "os.mkfifo", "os.mknod", "os.memfd_create", "os.sendfile", "os.utime",
                 "os.fdopen", "os.lseek", "os.stat", "os.lstat", "os.path"),
    "no-environment": ("os.environ", "os.environb", "os.getenv", "os.getenvb", "os.putenv",
                       "os.unsetenv"),
    "no-course-internals": ("grader", "solutions", "harness", "_pytest", "pytest", "conftest"),
}
# Exceptions to no-course-internals: the rank-side helpers the stubs document.
_COURSE_HELPERS = ("harness.graphs", "assignments")

# Builtin functions by rule (only while the name is not rebound in the module).
_BUILTINS: dict[str, str] = {
    "exec": "no-dynamic-code", "eval": "no-dynamic-code", "compile": "no-dynamic-code",
    "__import__": "no-dynamic-code", "breakpoint": "no-dynamic-code",
    "globals": "no-interpreter-state", "locals": "no-interpreter-state",
    "vars": "no-interpreter-state", "__builtins__": "no-interpreter-state",
    "open": "no-files", "input": "no-files",
}

# Attribute names by rule, on any object (the screen cannot know types).
_ATTRIBUTES: dict[str, str] = {
    **{name: "no-introspection" for name in (
        "__closure__", "__code__", "__globals__", "__subclasses__", "__dict__", "__mro__",
        "__bases__", "__base__", "__self__", "__func__", "__wrapped__", "__defaults__",
        "__kwdefaults__", "__getattribute__", "__traceback__", "__context__", "__cause__",
        "tb_frame", "tb_next", "f_back", "f_globals", "f_locals", "f_code", "f_builtins",
        "f_trace", "f_lasti", "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame",
        "ag_code", "co_code", "co_filename", "co_consts", "co_names", "co_name",
        "co_qualname", "cell_contents", "_getframe")},
    "__builtins__": "no-interpreter-state",
    "__reduce__": "no-serialisation", "__reduce_ex__": "no-serialisation",
    "__getstate__": "no-serialisation", "__setstate__": "no-serialisation",
    "_get_backend": "no-course-internals", "distributed_c10d": "no-course-internals",
    "_world": "no-course-internals", "_C": "no-native-code", "ctypeslib": "no-native-code",
    "load_library": "no-native-code", "cpp_extension": "no-native-code",
}

_ATTRIBUTE_FUNCTIONS = {"getattr", "setattr", "delattr", "hasattr"}


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


# -- allowances ---------------------------------------------------------------------------------
def known_names() -> set[str]:
    """Everything `screen_allow` may name: rule ids, screened names, builtins and attributes."""
    names = set(RULES) | set(_BUILTINS) | set(_ATTRIBUTES)
    for modules in _MODULES.values():
        names.update(modules)
    return names


def _allowed(name: str, rule: str, allow: Iterable[str]) -> bool:
    return any(entry in (rule, name) or name.startswith(entry + ".") for entry in allow)


# -- the screen of one source -------------------------------------------------------------------
def screen_source(source: str, file: str, allow: Sequence[str] = ()) -> list[Finding]:
    """The findings of one module's source, in line order (`file` is only for messages)."""
    try:
        tree = ast.parse(source, filename=file)
    except SyntaxError as exc:
        return [Finding(file, exc.lineno or 0, "syntax", f"does not parse ({exc.msg})")]
    visitor = _Screen(file, tuple(allow))
    visitor.visit(tree)
    if visitor.imports_triton and not _allowed("kernel-wrappers", "kernel-wrappers", allow):
        wrappers = _KernelWrappers(file, visitor.aliases)
        wrappers.visit(tree)
        visitor.findings += wrappers.findings
    unique = {(f.line, f.rule, f.what): f for f in visitor.findings}
    return sorted(unique.values(), key=lambda f: (f.line, f.rule, f.what))


def _module_rule(dotted: str) -> tuple[str, str] | None:
    """(rule, matched name) of a dotted name under a screened module or function."""
    if any(dotted == h or dotted.startswith(h + ".") for h in _COURSE_HELPERS):
        return None
    best: tuple[str, str] | None = None
    for rule, names in _MODULES.items():
        for name in names:
            if (dotted == name or dotted.startswith(name + ".")) \
                    and (best is None or len(name) > len(best[1])):
                best = (rule, name)
    return best


class _Screen(ast.NodeVisitor):
    def __init__(self, file: str, allow: tuple[str, ...]) -> None:
        self.file = file
        self.allow = allow
        self.findings: list[Finding] = []
        self.aliases: dict[str, str] = {}  # local name -> dotted name it was imported as
        self.rebound: set[str] = set()  # builtin names the module defines itself
        self.imports_triton = False

    def add(self, node: ast.AST, rule: str, what: str, name: str) -> None:
        if not _allowed(name, rule, self.allow):
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
            if _module_rule(dotted) is None and any(
                    dotted == h or dotted.startswith(h + ".") for h in _COURSE_HELPERS):
                continue  # `from harness import graphs`
            if not self._check_module(node, base, f"imports from {base}"):
                self._check_module(node, dotted, f"imports {dotted}")
            rule = _ATTRIBUTES.get(alias.name)
            if rule:
                self.add(node, rule, f"imports {dotted}", dotted)

    def _check_module(self, node: ast.AST, dotted: str, what: str) -> bool:
        self.imports_triton |= dotted == "triton" or dotted.startswith("triton.")
        found = _module_rule(dotted)
        if found is None:
            return False
        self.add(node, found[0], what, dotted)
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
            found = _module_rule(dotted)
            if found is not None and not isinstance(node.ctx, ast.Store):
                self.add(node, found[0], f"uses {dotted}", dotted)
            return
        rule = _BUILTINS.get(node.id)
        if rule and (node.id not in self.rebound or node.id == "__builtins__"):
            self.add(node, rule, f"calls {node.id}()" if node.id != "__builtins__"
                     else "uses __builtins__", node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = self._dotted(node)
        if dotted is not None:
            found = _module_rule(dotted)
            if found is not None:
                self.add(node, found[0], f"uses {dotted}", dotted)
                return  # the chain is reported once, at its longest screened name
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                self.add(node, "no-monkeypatching", f"assigns {dotted}", dotted)
        rule = _ATTRIBUTES.get(node.attr)
        if rule:
            self.add(node, rule, f"uses .{node.attr}", node.attr)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.id if isinstance(func, ast.Name) and func.id not in self.rebound else None
        if isinstance(func, ast.Attribute) and func.attr in ("__getattribute__",
                                                              "__setattr__", "__delattr__"):
            name = func.attr
        if name in _ATTRIBUTE_FUNCTIONS or name in ("__getattribute__", "__setattr__",
                                                    "__delattr__"):
            index = 1 if isinstance(func, ast.Name) or len(node.args) > 1 else 0
            if isinstance(func, ast.Attribute) and len(node.args) == 1:
                index = 0
            literal = node.args[index] if len(node.args) > index else None
            if isinstance(literal, ast.Constant) and isinstance(literal.value, str):
                rule = _ATTRIBUTES.get(literal.value)
                if rule:
                    self.add(node, rule, f"uses .{literal.value} through {name}()",
                             literal.value)
            elif literal is not None:
                self.add(node, "no-computed-attribute",
                         f"calls {name}() with a name that is not a string literal",
                         str(name))
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        rule = _ATTRIBUTES.get(node.name)
        if rule == "no-serialisation":  # def __reduce__: a pickle payload
            self.add(node, rule, f"defines {node.name}", node.name)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]


# -- kernel-wrappers: the parent-side half of harness.compute_guard ------------------------------
# torch names a Triton wrapper may use: allocation, dtypes, devices and metadata. Every other
# torch name computes (torch.exp), or leaves the compute guard's sight (torch.from_numpy,
# torch.jit.fork on another thread, torch.utils._python_dispatch, torch.compile).
_WRAPPER_TORCH = frozenset({
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
_DATA_ESCAPES = frozenset({
    "tolist", "numpy", "data_ptr", "untyped_storage", "storage", "_storage", "__array__",
    "__array_interface__", "__array_priority__", "__dlpack__", "__cuda_array_interface__",
    "apply_", "map_", "map2_", "backward", "register_hook", "share_memory_",
})


class _KernelWrappers(ast.NodeVisitor):
    """The `kernel-wrappers` rule over a module that imports triton (see the module docstring).

    Kernels (functions decorated from the triton package) are read too: under the interpreter
    a kernel body is plain Python, so numpy or torch there would compute outside Triton."""

    def __init__(self, file: str, aliases: dict[str, str]) -> None:
        self.file = file
        self.aliases = aliases
        self.findings: list[Finding] = []

    def add(self, node: ast.AST, what: str) -> None:
        self.findings.append(Finding(self.file, getattr(node, "lineno", 0), "kernel-wrappers",
                                     what))

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
        elif dotted.startswith("torch.") and dotted[len("torch."):] not in _WRAPPER_TORCH:
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
        if node.attr in _DATA_ESCAPES:
            self.add(node, f"uses .{node.attr}, which reads tensor data outside any kernel")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        dotted = self.aliases.get(node.id)
        if dotted is not None and dotted != "torch":
            self._check(node, dotted, "uses")
        elif node.id == "memoryview":
            self.add(node, "uses memoryview, which reads tensor data outside any kernel")


# -- which files an implementation under test is made of -----------------------------------------
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
