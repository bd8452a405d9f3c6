"""The static screen's rules: what each one screens and why no solution needs it.

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
    no-files             open(), pathlib, shutil, tempfile, os file operations, file-backed
                         tensors and stores (torch.from_file, .from_file, FileStore)
    no-environment       os.environ, os.getenv, ...
    no-course-internals  grader.*, solutions.*, harness.* other than harness.graphs;
                         torch.ops, torch.distributed's private modules (`_functional_
                         collectives`, `_world`, ...)
    (any rule)           a module reached through another module's attributes is screened as
                         itself (`torch.os.fork` is `os.fork`, `numpy.os` is `os`), and a
                         screened builtin used as a value (`_ga = getattr`) is screened
    kernel-wrappers      in a module that imports triton: torch's compilers, tracers and
                         dispatch internals (torch.compile, torch.jit, torch.utils, ...);
                         numpy; reading tensor data into Python (.tolist(), .numpy(),
                         .data_ptr(), storages, .apply_(), ...); grader/screen/kernels.py
    syntax               the module does not parse

An assignment may allow names or whole rules in the manifest: `screen_allow = ["os.environ"]`
in its `[[assignment]]` table (`grader/manifest.py` checks each entry is a rule id or a name the
screen knows).

The AST walk that applies them is `grader/screen/scan.py`; this module is data and the lookups on
it, so the manifest can check `screen_allow` without the rest of the screen.
"""

from __future__ import annotations

from collections.abc import Iterable

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
MODULES: dict[str, tuple[str, ...]] = {
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
                 "os.fdopen", "os.lseek", "os.stat", "os.lstat", "os.path",
                 # tensors and stores backed by a file: a shared mmap moves data with no
                 # write(2) for the traffic counter to see
                 "torch.from_file", "torch.UntypedStorage.from_file",
                 "torch.TypedStorage.from_file", "numpy.memmap", "numpy.lib.format.open_memmap",
                 "torch.distributed.FileStore", "torch.distributed.TCPStore"),
    "no-environment": ("os.environ", "os.environb", "os.getenv", "os.getenvb", "os.putenv",
                       "os.unsetenv"),
    "no-course-internals": ("grader", "solutions", "harness", "_pytest", "pytest", "conftest",
                            "torch.distributed._world", "torch.ops", "torch._ops",
                            "torch.distributed._functional_collectives",
                            "torch.distributed._functional_collectives_impl"),
}
# Private torch.distributed modules (`torch.distributed._<name>`): their collectives reach the
# backend without passing through the functions the harness wraps.
PRIVATE_PREFIXES = {"torch.distributed._": "no-course-internals"}
# Standard modules that packages re-export as attributes (`torch.os`, `torch.sys`, `numpy.os`):
# a chain through one of them is screened as the module itself.
# (Not `signal`, `select` or `io`: torch.signal and torch.select are torch's own.)
REEXPORTED_MODULES = frozenset({
    "os", "sys", "subprocess", "builtins", "importlib", "ctypes", "socket", "pickle", "shutil",
    "threading", "multiprocessing", "gc", "inspect", "marshal", "weakref", "traceback",
    "tempfile", "pathlib", "glob", "atexit", "runpy", "_thread", "cloudpickle", "faulthandler",
    "linecache",
})
# Modules that, reached through another module, are screened even when nothing follows
# (`o = numpy.os` hands out the module and every screened function in it).
REEXPORT_RULE = "no-interpreter-state"
# Exceptions to no-course-internals: the rank-side helpers the stubs document.
COURSE_HELPERS = ("harness.graphs", "assignments")

# Builtin functions by rule (only while the name is not rebound in the module).
BUILTINS: dict[str, str] = {
    "exec": "no-dynamic-code", "eval": "no-dynamic-code", "compile": "no-dynamic-code",
    "__import__": "no-dynamic-code", "breakpoint": "no-dynamic-code",
    "globals": "no-interpreter-state", "locals": "no-interpreter-state",
    "vars": "no-interpreter-state", "__builtins__": "no-interpreter-state",
    "open": "no-files", "input": "no-files",
}

# Attribute names by rule, on any object (the screen cannot know types).
ATTRIBUTES: dict[str, str] = {
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
    "_C": "no-native-code", "ctypeslib": "no-native-code",
    "load_library": "no-native-code", "cpp_extension": "no-native-code",
    "from_file": "no-files", "_get_default_store": "no-course-internals",
}

ATTRIBUTE_FUNCTIONS = {"getattr", "setattr", "delattr", "hasattr"}


def known_names() -> set[str]:
    """Everything `screen_allow` may name: rule ids, screened names, builtins and attributes."""
    names = set(RULES) | set(BUILTINS) | set(ATTRIBUTES)
    for modules in MODULES.values():
        names.update(modules)
    return names


def allowed(name: str, rule: str, allow: Iterable[str]) -> bool:
    """Whether `allow` (an assignment's `screen_allow`) lets `name` through `rule`: it names the
    rule, the name, or a dotted prefix of the name."""
    return any(entry in (rule, name) or name.startswith(entry + ".") for entry in allow)


def through_module(dotted: str) -> tuple[str, str] | None:
    """(the standard module reached, the rest from it) when `dotted` goes through a standard
    module re-exported by another one (`torch.os.fork` -> ("os", "os.fork")); else None."""
    parts = dotted.split(".")
    for i, part in enumerate(parts[1:], start=1):
        if part in REEXPORTED_MODULES:
            return part, ".".join(parts[i:])
    return None


def is_course_helper(dotted: str) -> bool:
    """Whether a dotted name is (under) a rank-side helper the stubs document."""
    return any(dotted == h or dotted.startswith(h + ".") for h in COURSE_HELPERS)


def module_rule(dotted: str) -> tuple[str, str] | None:
    """(rule, matched name) of a dotted name under a screened module or function; the longest
    screened name wins, and a course helper is never screened."""
    if is_course_helper(dotted):
        return None
    best: tuple[str, str] | None = None
    for prefix, rule in PRIVATE_PREFIXES.items():
        if dotted.startswith(prefix):
            best = (rule, ".".join(dotted.split(".")[:3]))
    for rule, names in MODULES.items():
        for name in names:
            if (dotted == name or dotted.startswith(name + ".")) \
                    and (best is None or len(name) > len(best[1])):
                best = (rule, name)
    return best
