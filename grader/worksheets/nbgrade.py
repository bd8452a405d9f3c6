"""Running nbgrader: generate and autograde notebooks in a temporary course directory.

`autograde()` copies source notebooks into `source/<id>/worksheet.ipynb` of a fresh course
directory, submissions into `submitted/<student>/<id>/`, and runs one nbgrader process
(`grader.worksheets.nbworker`, run with `-m`) that generates every assignment, so the
gradebook knows each cell's source and checksum, then autogrades every submission and writes
the grades as JSON. Assignments are split over at most `workers` (2) such directories run
side by side.

nbgrader traps handled here (tests: grader/tests/test_worksheets.py):
- any stderr output zeroes a cell: the kernel runs with warnings silenced (`KERNEL_ENV`);
- the gradebook shells out to `alembic`: the venv's bin directory goes first on PATH;
- the `python3` kernelspec may start whatever `python` is on PATH: a kernelspec written into
  the course directory runs this interpreter (`sys.executable`), first on JUPYTER_PATH;
- cells time out (30 s by default): the limit is explicit, a timed-out cell scores zero and
  the rest of the notebook is still graded; the whole nbgrader process has a wall-clock limit;
- students delete or edit cells: test and read-only cells are restored from the gradebook
  (`OverwriteCells.add_missing_cells`), so a deleted or emptied test still runs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

NOTEBOOK = "worksheet.ipynb"
CELL_TIMEOUT_S = 30
RUN_TIMEOUT_S = 600.0
# The kernel's environment: no warning may reach stderr (nbgrader scores such a cell zero).
KERNEL_ENV = {
    "PYTHONWARNINGS": "ignore",
    "TORCH_CPP_LOG_LEVEL": "ERROR",
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    "JUPYTER_PLATFORM_DIRS": "1",
    "MPLBACKEND": "Agg",
    "OMP_NUM_THREADS": "1",
}


class WorksheetError(RuntimeError):
    """A worksheet source is malformed, or nbgrader could not be run at all."""


@dataclass(frozen=True)
class Submission:
    """One notebook to autograde: `notebook` None when the student submitted none."""

    assignment: str
    student: str
    notebook: Path | None


@dataclass(frozen=True)
class CellGrade:
    """What nbgrader gave one grade cell of one submission."""

    assignment: str
    student: str
    grade_id: str
    score: float
    max_score: float
    error: str = ""  # "Type: message" of the cell's own error, or its stderr
    answer_error: str = ""  # the same for the answer (solution) cell just above it
    not_implemented: bool = False


@dataclass(frozen=True)
class Autograded:
    """Everything one autograde call produced."""

    grades: tuple[CellGrade, ...]
    releases: Mapping[str, Path]  # freshly generated student notebooks, by assignment
    problems: Mapping[tuple[str, str], str]  # (assignment, student) -> why it was not graded
    wall_s: float = 0.0


def read_notebook(path: Path) -> dict:
    """The notebook as JSON; `WorksheetError` naming the file when it is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WorksheetError(f"{path}: not a readable notebook ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise WorksheetError(f"{path}: not a notebook (no 'cells' list)")
    return data


def cell_source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def nbgrader_meta(cell: dict) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def autograde(
    submissions: Sequence[Submission],
    sources: Mapping[str, Path],
    *,
    workers: int = 2,
    cell_timeout: int = CELL_TIMEOUT_S,
    timeout: float = RUN_TIMEOUT_S,
    echo: Callable[[str], None] | None = None,
    release_dir: Path | None = None,
) -> Autograded:
    """Generate every assignment in `sources` and autograde `submissions` with nbgrader.

    Assignments are split over at most `workers` course directories, each graded by one
    nbgrader process (`nbworker`); a process that runs past `timeout` seconds is killed and its
    submissions are reported in `problems`. The student notebooks generated on the way are
    copied to `release_dir/<id>/worksheet.ipynb` when it is given (`releases` lists them).
    """
    started = time.perf_counter()
    ids = sorted(sources)
    groups = [ids[i::max(1, workers)] for i in range(max(1, min(workers, len(ids))))]
    tmp = Path(tempfile.mkdtemp(prefix="mlsys-worksheets-"))
    try:
        with ThreadPoolExecutor(max_workers=len(groups)) as pool:
            futures = [
                pool.submit(_grade_group, tmp / f"course{i}", {a: sources[a] for a in group},
                            [s for s in submissions if s.assignment in group],
                            cell_timeout, timeout, echo)
                for i, group in enumerate(groups) if group
            ]
            parts = [f.result() for f in futures]
        grades = tuple(g for part in parts for g in part.grades)
        problems = {k: v for part in parts for k, v in part.problems.items()}
        releases: dict[str, Path] = {}
        for part in parts:
            if release_dir is None:
                break
            for assignment_id, path in part.releases.items():
                target = release_dir / assignment_id / NOTEBOOK
                target.parent.mkdir(parents=True, exist_ok=True)
                releases[assignment_id] = Path(shutil.copy(path, target))
        return Autograded(grades, releases, problems, time.perf_counter() - started)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _grade_group(course: Path, sources: Mapping[str, Path], submissions: Sequence[Submission],
                 cell_timeout: int, timeout: float,
                 echo: Callable[[str], None] | None) -> Autograded:
    problems: dict[tuple[str, str], str] = {}
    for assignment_id, source in sources.items():
        (course / "source" / assignment_id).mkdir(parents=True)
        shutil.copy(source, course / "source" / assignment_id / NOTEBOOK)
    for sub in submissions:
        if sub.notebook is None or not Path(sub.notebook).is_file():
            problems[(sub.assignment, sub.student)] = f"no {NOTEBOOK} was submitted"
            continue
        try:
            read_notebook(Path(sub.notebook))
        except WorksheetError as exc:
            problems[(sub.assignment, sub.student)] = str(exc).split(": ", 1)[-1]
            continue
        folder = course / "submitted" / sub.student / sub.assignment
        folder.mkdir(parents=True)
        shutil.copy(sub.notebook, folder / NOTEBOOK)
    jupyter = write_kernelspec(course / "jupyter")
    result_file = course / "result.json"
    command = [sys.executable, "-m", "grader.worksheets.nbworker", "_worker", str(course),
               str(result_file), str(cell_timeout)]
    env = worker_env(jupyter)
    code, timed_out, tail = _run_worker(command, env, timeout, echo)
    try:
        data = json.loads(result_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        why = (f"nbgrader ran past {timeout:.0f} s and was killed" if timed_out
               else f"nbgrader failed (exit {code}): {_last_line(tail)}")
        if not submissions:  # a release: nobody to report it to but the caller
            raise WorksheetError(f"{why}") from None
        for sub in submissions:
            problems.setdefault((sub.assignment, sub.student), why)
        return Autograded((), {}, problems)
    grades = tuple(CellGrade(**g) for g in data["grades"])
    for key, why in data["problems"]:
        problems.setdefault(tuple(key), why)
    if timed_out:
        graded = {(g.assignment, g.student) for g in grades}
        for sub in submissions:
            if (sub.assignment, sub.student) not in graded:
                problems.setdefault((sub.assignment, sub.student),
                                    f"nbgrader ran past {timeout:.0f} s and was killed")
    releases = {a: course / "release" / a / NOTEBOOK for a in sources
                if (course / "release" / a / NOTEBOOK).is_file()}
    return Autograded(grades, releases, problems)


def write_kernelspec(jupyter_dir: Path) -> Path:
    """A `python3` kernelspec running this interpreter with warnings silenced; returns the dir.

    Put the returned directory first on JUPYTER_PATH so it shadows any other `python3` spec.
    """
    spec = jupyter_dir / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    kernel = {
        "argv": [sys.executable, "-Xfrozen_modules=off", "-m", "ipykernel_launcher",
                 "-f", "{connection_file}"],
        "display_name": "Python 3 (mlsys-labs grader)",
        "language": "python",
        "env": KERNEL_ENV,
    }
    (spec / "kernel.json").write_text(json.dumps(kernel, indent=1), encoding="utf-8")
    return jupyter_dir


def worker_env(jupyter_dir: Path) -> dict[str, str]:
    """The nbgrader process's environment: this venv's bin first on PATH (nbgrader runs
    `alembic`, which `make test` does not put there), our kernelspec first on JUPYTER_PATH."""
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")]).rstrip(os.pathsep)
    env["JUPYTER_PATH"] = os.pathsep.join(
        [str(jupyter_dir), env.get("JUPYTER_PATH", "")]).rstrip(os.pathsep)
    env.update({k: v for k, v in KERNEL_ENV.items() if k != "OMP_NUM_THREADS"})
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run_worker(command: list[str], env: dict[str, str], timeout: float,
                echo: Callable[[str], None] | None) -> tuple[int, bool, str]:
    from grader.manifest import REPO_ROOT

    process = subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True,
    )
    deadline = time.monotonic() + timeout
    tail: list[str] = []
    timed_out = False
    try:
        import selectors

        with selectors.DefaultSelector() as sel:
            sel.register(process.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                if not sel.select(timeout=min(left, 1.0)):
                    if process.poll() is not None:
                        break
                    continue
                line = process.stdout.readline()  # type: ignore[union-attr]
                if not line:
                    break
                line = line.rstrip("\n")
                tail = (tail + [line])[-30:]
                if echo is not None and line.startswith("worksheet "):
                    echo(line)
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the kernels go with it
        except (ProcessLookupError, PermissionError):
            pass
        process.wait()
    return process.returncode, timed_out, "\n".join(tail)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"
