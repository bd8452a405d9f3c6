"""Which implementation is under test, and how a rank imports it.

`--impl` (pytest option, `MLSYS_IMPL`, command-line flag) takes one of:
- `assignments` (default): the student's stubs under assignments/<id>/;
- `solutions`: the reference under solutions/<id>/;
- `mutant:<id>/<name>`: solutions/<id>/mutants/<name>.py replaces the module its `MUTATES`
  names; every other module comes from solutions/;
- a directory laid out like assignments/ (e.g. `submission/ring_allreduce/ring.py`).

`resolve_impl` is the one parser of that value: the caller resolves it once per run (the CLI,
or the pytest plugin of each session) and passes the `ImplSpec` on; `IMPL_HELP` is the help text
of every `--impl` option. `resolve_impl` runs in the parent and only checks paths; `load_module`
runs in a rank and is the only place code under test is imported.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import types
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
IMPL_HELP = ("code under test: assignments, solutions, mutant:<id>/<name>, or a directory laid "
             "out like assignments/ (default: %(default)s)")


@dataclass(frozen=True)
class ImplSpec:
    """A resolved `--impl`: `kind` is assignments | solutions | mutant | dir."""

    kind: str
    root: str
    mutant_assignment: str = ""
    mutant_name: str = ""
    text: str = "assignments"

    @property
    def argument(self) -> str:
        """The `--impl` value that resolves to this spec again, from any working directory."""
        return self.root if self.kind == "dir" else self.text


def mutant_target(path: Path) -> str | None:
    """The module a mutant file replaces, read statically from its `MUTATES = "..."` line."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        is_mutates = any(isinstance(t, ast.Name) and t.id == "MUTATES" for t in node.targets)
        if is_mutates and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            return node.value.value
    return None


def resolve_impl(impl: str, repo_root: Path = REPO_ROOT) -> ImplSpec:
    """Check `impl` and turn it into an ImplSpec. Raises ValueError with the fix in the message."""
    impl = (impl or "assignments").strip()
    if impl in ("assignments", "solutions"):
        root = repo_root / impl
        if not root.is_dir():
            raise ValueError(f"--impl {impl}: there is no {root} in this checkout")
        return ImplSpec(kind=impl, root=str(root), text=impl)
    if impl.startswith("mutant:"):
        ref = impl[len("mutant:"):]
        assignment, _, name = ref.partition("/")
        path = repo_root / "solutions" / assignment / "mutants" / f"{name}.py"
        if not assignment or not name or not path.is_file():
            folder = repo_root / "solutions" / assignment / "mutants"
            known = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__") \
                if folder.is_dir() else []
            raise ValueError(f"--impl {impl}: no mutant file {path}; use mutant:<id>/<name>"
                             f" (known for {assignment or '?'}: {', '.join(known) or 'none'})")
        return ImplSpec(kind="mutant", root=str(repo_root / "solutions"),
                        mutant_assignment=assignment, mutant_name=name, text=impl)
    root = Path(impl).expanduser()
    if not root.is_absolute():
        root = Path.cwd() / root
    if not root.is_dir():
        raise ValueError(f"--impl {impl}: not 'assignments', 'solutions', 'mutant:<id>/<name>' "
                         f"or a directory laid out like assignments/ (e.g. submission/<id>/x.py)")
    return ImplSpec(kind="dir", root=str(root.resolve()), text=impl)


def module_path(spec: ImplSpec, assignment_id: str, module_name: str) -> Path:
    """The file that provides `<assignment_id>.<module_name>` under `spec`."""
    if spec.kind == "mutant" and spec.mutant_assignment == assignment_id:
        mutant = Path(spec.root) / assignment_id / "mutants" / f"{spec.mutant_name}.py"
        modules_here = sorted(p.stem for p in (Path(spec.root) / assignment_id).glob("*.py")
                              if p.stem != "__init__")
        target = mutant_target(mutant) or (modules_here[0] if len(modules_here) == 1 else None)
        if target is None:
            raise ValueError(f"mutant {mutant} must say which module it replaces: "
                             f'MUTATES = "<module>" (one of {modules_here})')
        if target == module_name:
            return mutant
    return Path(spec.root) / assignment_id / f"{module_name}.py"


def load_module(spec: ImplSpec, assignment_id: str, module_name: str) -> types.ModuleType:
    """Import the code under test (rank side only). Repeated calls return the same module.

    The module is registered as `mlsys_impl.<assignment_id>.<module_name>`, inside a package
    whose path is the file's folder, so relative imports of siblings work.
    """
    qualified = f"mlsys_impl.{assignment_id}.{module_name}"
    if qualified in sys.modules:
        return sys.modules[qualified]
    path = module_path(spec, assignment_id, module_name)
    if not path.is_file():
        raise FileNotFoundError(f"the implementation under test ({spec.text}) has no "
                                f"{assignment_id}/{module_name}.py (looked for {path})")
    for package, folder in (("mlsys_impl", path.parent.parent),
                            (f"mlsys_impl.{assignment_id}", path.parent)):
        if package not in sys.modules:
            module = types.ModuleType(package)
            module.__path__ = [str(folder)]
            sys.modules[package] = module
    module_spec = importlib.util.spec_from_file_location(qualified, path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"cannot import {path} (the implementation under test, {spec.text})")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[qualified] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[qualified]
        raise
    return module
