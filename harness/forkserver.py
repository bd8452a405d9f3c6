"""The forkserver every rank is forked from, and what reaches a rank through it.

One forkserver per process (stdlib multiprocessing 'forkserver' context), started at the first
launch with the rank environment. Before it starts, it can be prepared:
- `preload(*modules)` / `configure(preload=...)`: modules it imports once, so no rank pays for
  them (the harness's own rank entry point, cloudpickle and numpy always);
- `configure(by_value_packages=...)`: packages whose code travels with the rank function
  instead of being imported in the rank (suites the rank may not be able to see);
- `use_wrapper(Wrapper(...))`: start Python under a command (the sandbox, `harness.sandbox`)
  and keep rank work folders where that command lets ranks write.
The harness names none of its callers' modules: a caller (a pytest plugin) passes them in.
"""

from __future__ import annotations

import atexit
import io
import multiprocessing
import multiprocessing.forkserver
import os
import shlex
import shutil
import sys
import time
import types
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from harness import procfs, proctree, tempdirs

# What every rank would otherwise import for itself. numpy.random (its seeding: about 9 C
# extension modules) and torch's serialization helpers (the job's arguments) cost tens of ms per
# rank; torch's symbolic shapes (sympy, mpmath), imported on a rank's first `backward(grad)`,
# cost about 0.4 s per rank, against once per forkserver here. Suites add their own (`preload`:
# zero2 and gpt add torch._dynamo, which torch.optim imports on first use).
PRELOAD = ["harness.rankmain", "cloudpickle", "numpy", "numpy.random", "torch.utils.serialization",
           "torch.fx.experimental.symbolic_shapes", "torch.distributed._functional_collectives"]
BY_VALUE_PACKAGES: list[str] = []
RANK_UIDS = 64  # ranks per launch that can each have a user of their own (Wrapper.rank_uid_base)
RANK_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "TORCH_SHOW_CPP_STACKTRACES": "0", "PYTHONFAULTHANDLER": "0"}


@dataclass(frozen=True)
class Wrapper:
    """How ranks start when something (the sandbox) wraps them.

    `command` goes before Python, `setup_lines` are shell lines run first (e.g. joining a
    cgroup); rank work folders are made under `workdir_base` (visible and writable inside);
    `max_processes`, when set, is the RLIMIT_NPROC each rank puts on itself (only where ranks
    run as a user of their own, since the limit counts all of that user's processes);
    `rank_uid_base`, when set, gives rank r the user id `rank_uid_base + r` (the forkserver then
    runs as root with only the capabilities to change user).
    """

    command: tuple[str, ...]
    setup_lines: tuple[str, ...] = ()
    workdir_base: str | None = None
    max_processes: int | None = None
    rank_uid_base: int | None = None
    folder_owner: int | None = None  # ranks all run as this user (no user of their own)
    memory_bytes: int | None = None  # per launch, where the launch's control group can cap it
    # Ranks make themselves not dumpable (a peer cannot read their memory); only where the
    # parent keeps the right to read their /proc/<pid>/io (root, or bwrap's user namespace).
    private_memory: bool = False


_context: Any = None
_wrapper: Wrapper | None = None


def running() -> bool:
    """Whether this process's forkserver has started (its preparation is then fixed)."""
    server = multiprocessing.forkserver._forkserver
    return _context is not None or bool(getattr(server, "_forkserver_pid", None))


def stop() -> set[int]:
    """End this process's forkserver and every process below it (its wrapper, the sandbox's
    namespace), so that the next launch starts a fresh one under the wrapper `use_wrapper` sets
    by then; the preload list and by-value packages stay. Call only between launches.

    Returns what was still alive below it besides its wrapper and itself (`stray_processes`:
    processes that outlived their launches), as found before the kill; empty when none ran."""
    global _context, _wrapper, _server_pid
    server: Any = multiprocessing.forkserver._forkserver
    launcher = getattr(server, "_forkserver_pid", None)
    strays = stray_processes(set()) if launcher is not None else set()
    if launcher is not None:
        proctree.kill_tree(launcher)
        server._stop()  # closes the alive pipe, reaps the launcher, unlinks the socket
    _context, _wrapper, _server_pid = None, None, None
    return strays


def preload(*modules: str) -> bool:
    """Have the forkserver import `modules` once, so no rank pays for them (e.g. torch._dynamo,
    which torch.optim imports on first use: seconds per rank). Call before the first launch;
    returns False (and changes nothing) once the forkserver runs."""
    return _extend_preload(modules)


def configure(*, preload: Iterable[str] = (), by_value_packages: Iterable[str] = ()) -> bool:
    """Add modules to preload (see `preload`) and packages to send by value.

    A rank function's own module always travels by value; `by_value_packages` adds packages its
    code may use that ranks cannot or should not import (hidden suites). Either list only
    grows. Returns False when the preload list could no longer change (the forkserver runs);
    the by-value packages apply to every later launch regardless.
    """
    if isinstance(preload, str) or isinstance(by_value_packages, str):
        raise TypeError("configure takes lists of module names, not a single str")
    BY_VALUE_PACKAGES.extend(p for p in by_value_packages if p not in BY_VALUE_PACKAGES)
    return _extend_preload(preload)


def use_wrapper(wrapper: Wrapper) -> None:
    """Start the forkserver (so every rank) under `wrapper`. Raises RuntimeError once it runs."""
    global _wrapper
    if running():
        raise RuntimeError("the rank wrapper (sandbox) must be set before the first launch in "
                           "this process")
    _wrapper = wrapper


def wrapper() -> Wrapper | None:
    """The wrapper ranks start under, or None."""
    return _wrapper


def workdir_base() -> str | None:
    """Where rank work folders must be made (visible and writable inside the wrapper), if any."""
    return _wrapper.workdir_base if _wrapper else None


def rank_env() -> dict[str, str]:
    """The environment every rank (and the forkserver) starts with, on top of its own."""
    env = dict(RANK_ENV)
    if "TRITON_INTERPRET" not in os.environ and not _has_cuda():
        # Triton runs on the CPU only in its interpreter, and it fixes the mode of its own
        # library's kernels when imported: a forkserver that preloads torch._dynamo imports
        # Triton, which must then be in the mode every rank of this machine needs.
        env["TRITON_INTERPRET"] = "1"
    if os.path.isdir("/sys/class/net/lo") and "GLOO_SOCKET_IFNAME" not in os.environ:
        env["GLOO_SOCKET_IFNAME"] = "lo"  # loopback only: fast, and works without a network
    return env


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def mp_context() -> Any:
    """The forkserver context, started once per process with the rank environment."""
    global _context
    if _context is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        command, setup_lines = (_wrapper.command, _wrapper.setup_lines) if _wrapper else ((), ())
        ctx.set_executable(_write_interpreter(list(command), list(setup_lines)))
        with _temporary_env(rank_env()), _spawn_preparation(workdir_base()):
            multiprocessing.forkserver.ensure_running()
        _context = ctx
    return _context


def start_process(target: Callable[..., Any], args: tuple[Any, ...], name: str) -> Any:
    """Fork a daemon process from the forkserver running `target(*args)`; return it started.

    `proc.pid` is the process id as this process sees it, also when the forkserver runs in a
    PID namespace of its own (the sandbox), where it reports the id inside that namespace.
    """
    proc = mp_context().Process(target=target, args=args, name=name, daemon=True)
    with _spawn_preparation(workdir_base()):
        proc.start()
    server = server_pid()
    if server is not None and len(procfs.namespace_pids(server)) > 1:
        host = _host_pid(server, proc.pid)
        # multiprocessing signals and kills by this pid (the exit status comes by the pipe).
        proc._popen.pid = host if host is not None else _GONE_PID
    return proc


_GONE_PID = 2**22 + 1  # above pid_max: a rank that died before it could be found
_server_pid: int | None = None


def server_pid() -> int | None:
    """The forkserver's Python process (the one that forks ranks), as this process sees it;
    None before it runs. Under a wrapper it sits below the wrapper's own processes (bwrap)."""
    global _server_pid
    launcher = getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None)
    if launcher is None:
        return None
    deadline = time.monotonic() + 10.0  # the wrapper may still be on its way to Python
    while (_server_pid is None or not procfs.stat_fields(_server_pid)) and \
            procfs.stat_fields(launcher) and time.monotonic() < deadline:
        _server_pid = None
        shim = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim.py")
        pid = launcher  # the topmost process running the shim: the forkserver itself
        for _ in range(8):
            if procfs.cmdline(pid)[:3] == [sys.executable, "-I", shim]:
                _server_pid = pid
                break
            children = _children(pid)
            if len(children) != 1:
                break
            pid = children[0]
        else:
            break
        if _server_pid is None:
            time.sleep(0.01)
    return _server_pid


def wrapper_pids() -> set[int]:
    """The forkserver and the processes of its wrapper above it (bwrap and its init): what
    stays alive between launches. Empty before the forkserver runs."""
    launcher = getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None)
    server = server_pid()
    if launcher is None or server is None:
        return set()
    parents = procfs.parents()
    chain, pid = {server}, server
    while pid != launcher and pid in parents and len(chain) < 16:
        pid = parents[pid]
        chain.add(pid)
    return chain


def _children(pid: int) -> list[int]:
    listed = procfs.children(pid)
    if listed is None:
        listed = [child for child, parent in procfs.parents().items() if parent == pid]
    return listed


def _host_pid(server: int, inner: int) -> int | None:
    """The pid, as we see it, of the forkserver's child whose pid in its namespace is `inner`."""
    for _ in range(100):
        for pid in _children(server):
            nspids = procfs.namespace_pids(pid)
            if nspids and nspids[-1] == inner:
                return pid
        if not procfs.stat_fields(server):
            return None
        time.sleep(0.002)  # the child exists once its pid is sent; a rescan finds it
    return None


def stray_processes(exclude: set[int]) -> set[int]:
    """Live processes below the forkserver's launcher that are neither its wrapper's nor the
    forkserver itself nor in `exclude` (ranks of launches still running, with what they started).

    The forkserver is a child subreaper (harness/shim.py) and, under the sandbox, the init of
    its PID namespace is bwrap's: an orphan — double-forked, `setsid` or not — comes back below
    the launcher, so after a launch whatever is found here outlived it."""
    launcher = getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None)
    if launcher is None:
        return set()
    keep = wrapper_pids() | exclude
    found: set[int] = set()
    stack = [launcher]
    while stack:
        for child in _children(stack.pop()):
            if child not in found and child not in exclude:
                found.add(child)
                stack.append(child)
    return {pid for pid in found - keep if not procfs.is_zombie(pid)}


def pickle_rank_function(fn: Callable) -> bytes:
    """The rank function, by value: ranks never import (or even see) the test module.

    The function's own module and the by-value packages are pickled by value (only what the
    function references travels, not the parent's expected-value code); everything else, such
    as torch and harness, by reference.
    """
    import cloudpickle  # preloaded in the forkserver; imported here only when a launch needs it

    qualname = getattr(fn, "__qualname__", "")
    if not callable(fn) or "<locals>" in qualname or "<lambda>" in qualname or not qualname:
        raise ValueError(f"launch needs a module-level function, not {fn!r}: define it at the "
                         "top level of the test module")
    names = {fn.__module__} | {p for p in BY_VALUE_PACKAGES if p in sys.modules}
    names = {n for n in names if n in sys.modules and n != "__main__"}
    registered = []
    try:
        for name in names:
            try:
                cloudpickle.register_pickle_by_value(sys.modules[name])
                registered.append(name)
            except ValueError:  # already registered by a concurrent caller
                pass
        global _AnonymisingPickler
        if _AnonymisingPickler is None:
            _AnonymisingPickler = _anonymising_pickler()
        buffer = io.BytesIO()
        _AnonymisingPickler(buffer, _package_folders(BY_VALUE_PACKAGES)).dump(fn)
        return buffer.getvalue()
    finally:
        for name in registered:
            cloudpickle.unregister_pickle_by_value(sys.modules[name])


HIDDEN_FILENAME = "<hidden>"


def _package_folders(packages: Iterable[str]) -> tuple[str, ...]:
    """The folders of the by-value packages (code the rank may not see), each ending in a /."""
    folders = []
    for name in packages:
        module = sys.modules.get(name)
        paths = list(getattr(module, "__path__", None) or ())
        for path in paths:
            folders.append(os.path.join(os.path.realpath(path), ""))
    return tuple(folders)


def _anonymising_pickler() -> type:
    """cloudpickle's Pickler, but code from the by-value packages' folders travels anonymised:
    file name `HIDDEN_FILENAME`, lines counted from the function's first, no docstring, and
    its globals without `__file__`. A submission that walks the stack into such a frame finds
    neither the file nor the line (it still finds the code itself: see docs/trust.md)."""
    import cloudpickle
    from cloudpickle import cloudpickle as internals

    class Pickler(cloudpickle.Pickler):
        def __init__(self, file: Any, folders: tuple[str, ...]) -> None:
            self.folders = folders
            # Read by the C pickler when it initialises: set before.
            self.dispatch_table = {**dict(cloudpickle.Pickler.dispatch_table),
                                   types.CodeType: self._code}
            super().__init__(file)

        def _hidden(self, code: types.CodeType) -> bool:
            filename = code.co_filename
            return bool(self.folders) and not filename.startswith("<") and \
                os.path.realpath(filename).startswith(self.folders)

        def _code(self, code: types.CodeType) -> Any:
            if self._hidden(code):
                code = code.replace(co_filename=HIDDEN_FILENAME, co_firstlineno=1)
            return internals._code_reduce(code)

        def _function_getnewargs(self, func: Any) -> Any:
            code, base_globals, name, defaults, closure = super()._function_getnewargs(func)
            if self._hidden(code):
                base_globals.pop("__file__", None)
                doc = func.__doc__
                if isinstance(doc, str) and code.co_consts and code.co_consts[0] == doc:
                    code = code.replace(co_consts=(None, *code.co_consts[1:]))
            return code, base_globals, name, defaults, closure

        def _dynamic_function_reduce(self, func: Any) -> Any:
            reduced = super()._dynamic_function_reduce(func)
            if self._hidden(func.__code__):
                state, slots = reduced[2]
                reduced = (*reduced[:2], (state, {**slots, "__doc__": None}), *reduced[3:])
            return reduced

    return Pickler


_AnonymisingPickler: Any = None


def _extend_preload(modules: Iterable[str]) -> bool:
    if _context is not None:
        return False
    PRELOAD.extend(m for m in modules if m not in PRELOAD)
    return True


@contextmanager
def _temporary_env(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def _remove_folder(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    tempdirs.release(folder)


def _write_interpreter(prefix: list[str], setup_lines: list[str]) -> str:
    """A wrapper that starts Python (under `prefix`, e.g. the sandbox) through harness/shim.py."""
    shim = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim.py")
    tempdirs.sweep_once()  # the folders of sessions that were killed before their clean-up
    folder = tempdirs.make("mlsys-interpreter-")
    os.chmod(folder, 0o755)
    atexit.register(_remove_folder, folder)
    path = os.path.join(folder, "python")
    command = [*prefix, sys.executable, "-I", shim]
    with open(path, "w") as f:
        f.write("\n".join(["#!/bin/sh", *setup_lines,
                           "exec " + " ".join(shlex.quote(a) for a in command) + ' "$@"']) + "\n")
    os.chmod(path, 0o755)
    return path


@contextmanager
def _spawn_preparation(cwd: str | None = None) -> Iterator[None]:
    """Shape what multiprocessing tells a new rank about this process.

    `__main__` is hidden so the child does not re-run the parent's script (`python -m pytest`, a
    benchmark): rank functions travel by value instead. Under the sandbox the working directory
    is switched to one the rank can see, since the child starts by changing into it.
    """
    saved = sys.modules.get("__main__")
    blank = types.ModuleType("__main__")
    blank.__spec__ = None
    sys.modules["__main__"] = blank
    old_cwd = os.getcwd() if cwd else None
    if cwd:
        os.chdir(cwd)
    try:
        yield
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved
        if old_cwd:
            os.chdir(old_cwd)
