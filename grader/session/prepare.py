"""What a graded pytest session sets up before its first launch: the implementation under test,
the hidden suites' package, seeds and rank threads, and the sandbox.

Called once, from the plugin's `pytest_configure`; each function raises `pytest.UsageError`
with the fix when the command line asks for something this machine or checkout cannot give.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from harness.impl import REPO_ROOT, ImplSpec, resolve_impl


def implementation(text: str, rootdir: Path) -> ImplSpec:
    """Resolve `--impl` once for the session.

    Named implementations (`assignments`, `solutions`, mutants) come from the session's rootdir
    when it is another course checkout (`python -m grader --root OTHER grade`), else from this
    one.
    """
    name = "solutions" if text.startswith("mutant:") else text
    rootdir = rootdir.resolve()
    base = rootdir if rootdir != REPO_ROOT and (rootdir / name).is_dir() else REPO_ROOT
    try:
        return resolve_impl(text, base)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


# Grader modules that rank code uses: imported once by the forkserver, or (the suites, which
# sandboxed ranks cannot see, also when they come from --suites PATH) sent with the rank function.
RANK_PRELOAD = ("grader.compare", "grader.seeds")
RANK_BY_VALUE_PACKAGES = ("grader.suites",)
# The grader's part of what sandboxed ranks may read of the checkout (harness.sandbox binds the
# harness and assignments/ itself): the modules rank functions import, seeds and tolerances
# (compare, which records for the leak check), and the GPU suite's timing runs (bench).
# harness/tests/test_sandbox.py checks every suite's imports against it.
RANK_CHECKOUT = ("grader/__init__.py", "grader/seeds.py", "grader/compare.py",
                 "grader/leakcheck.py", "grader/bench",
                 # imported by mixed_precision's discipline test in the parent (a mutant read as
                 # the code it runs); listed since the check reads imports, not where they run
                 "grader/screen/__init__.py", "grader/screen/files.py")


def configure_ranks() -> None:
    """Tell the harness which grader modules its ranks preload or receive by value."""
    from harness import launcher

    launcher.configure(preload=RANK_PRELOAD, by_value_packages=RANK_BY_VALUE_PACKAGES)


def set_variation(seed_shift: int, rank_threads: int) -> None:
    """Apply --seed-shift and --rank-threads (before any launch starts the forkserver)."""
    from grader import seeds
    from harness import launcher

    try:
        seeds.set_shift(seed_shift)
        launcher.set_rank_threads(rank_threads)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def provide_suites_package(hidden_roots: list[Path]) -> None:
    """Hidden suites import `grader.suites.<id>._common`. A student release ships no
    grader/suites, so when the suites come from elsewhere (`--suites PATH`), make
    `grader.suites` the package whose folder is that path."""
    if (REPO_ROOT / "grader" / "suites").is_dir() or not hidden_roots:
        return
    import types

    import grader

    package = types.ModuleType("grader.suites")
    package.__path__ = [str(p) for p in hidden_roots]
    package.__package__ = "grader.suites"
    sys.modules.setdefault("grader.suites", package)
    grader.suites = sys.modules["grader.suites"]  # type: ignore[attr-defined]


def enable_sandbox(mode: str, impl: ImplSpec, hidden_roots: list[Path]) -> dict[str, Any]:
    """Sandbox this process's ranks; hide suites, solutions (unless under test) and git history."""
    from harness import sandbox

    if mode == "off":
        return sandbox.status().to_plain()
    solutions = REPO_ROOT / "solutions"
    hide = [str(p) for p in hidden_roots] + [str(REPO_ROOT / ".git")]
    if not (impl.kind in ("solutions", "mutant") and Path(impl.root) == solutions):
        hide.append(str(solutions))
    readable = [impl.root]  # the code under test: the sandbox binds only what ranks need
    status = sandbox.enable(sandbox.SandboxConfig(hide=tuple(hide), readable=tuple(readable),
                                                checkout=RANK_CHECKOUT))
    if mode == "strict" and status.mode != "full":
        raise pytest.UsageError(f"{status.summary}; --sandbox strict needs the full sandbox")
    return status.to_plain()
