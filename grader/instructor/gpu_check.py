"""The GPU path, proven in one command: `python -m grader gpu-check` (or `make gpu-check`).

    python -m grader gpu-check [--dry-run] [--out grading] [--ids ID ...] [--budget S]

On a machine with CUDA it grades, for every assignment of the manifest, the solution and the
stub with the GPU visible (all tests: the CPU ones, which must keep their verdicts, and the
`@pytest.mark.gpu` ones, which now run); then the GPU benchmarks (speed ratios measured side by
side in one run), the project's own `@pytest.mark.gpu` tests, and NCCL where there are two
GPUs. It writes `<out>/gpu-check.md` (a table a person reads) and `<out>/gpu-check.json`.

Expected: every solution at full marks with nothing "not graded here", every stub at zero.
The exit status is 0 when that holds, 1 when a step disagrees, 2 on bad arguments.

On a machine without CUDA it prints the plan and "not run: no CUDA device" and exits 0, so a
CPU-only CI never fails on it; `--dry-run` prints the plan anywhere (make test runs it, so the
check cannot rot while no GPU is there). `--force` runs the plan without CUDA, to rehearse
the machinery on a CPU (GPU tests then report "not graded here").

Time: the steps that do not time anything (stubs, and solutions without GPU tests) run several
at a time; the solutions whose GPU tests measure speed run alone, one after another, so no
other work shares the GPU while a ratio is measured. Each step has a time box, and the whole
check a budget; a step that would start after the budget is reported "not run: budget".
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grader.manifest import Course

REPORT_MD = "gpu-check.md"
REPORT_JSON = "gpu-check.json"
DEFAULT_BUDGET_S = 450.0  # the whole check: inside 8 minutes on one H100, start-up included
DEFAULT_STEP_TIMEOUT_S = 240.0
OUTPUT_TAIL_CHARS = 1500
# GPU benchmarks whose side-by-side ratios the report quotes: (bench name, extra argv).
GPU_BENCHES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("triton_kernels", ("--repeats", "5")),
    ("cuda_graph_decode", ("--device", "cuda", "--batches", "1,8", "--steps", "100",
                           "--repeats", "3")),
)
PROJECT_GPU_TESTS = ("harness/tests", "grader/tests")


@dataclass(frozen=True)
class Step:
    """One thing the check runs: a grading, a benchmark, the project's GPU tests, NCCL."""

    kind: str  # "grade" | "bench" | "pytest" | "nccl"
    name: str  # what the table shows in its first column
    argv: tuple[str, ...]
    assignment: str = ""
    impl: str = ""  # "solutions" | "stub" for a grade
    expect: str = ""  # "full" | "zero" for a grade
    gpu_tests: tuple[str, ...] = ()  # the assignment's @pytest.mark.gpu tests
    alone: bool = False  # True: runs with nothing beside it (it measures speed)


@dataclass
class StepResult:
    """What one step gave; `ok` says whether it met its expectation."""

    step: str
    kind: str
    status: str  # "ok" | "FAIL" | "timeout" | "not run: budget" | "error"
    ok: bool
    wall_s: float
    assignment: str = ""
    impl: str = ""
    score: float | None = None
    max_score: float | None = None
    excluded_points: float = 0.0
    gpu_tests: dict[str, str] = field(default_factory=dict)  # test name -> outcome
    lost: list[str] = field(default_factory=list)  # "test: reason" of lost points
    note: str = ""
    output_tail: str = ""


# --- the plan ---------------------------------------------------------------------------------


def gpu_tests_of(root: Path, assignment: str) -> tuple[str, ...]:
    """Names of the `@pytest.mark.gpu` tests of an assignment's public and hidden suites, read
    with `ast` (never imported): functions in a module whose `pytestmark` is the gpu mark, or
    decorated with it."""
    files = [root / "assignments" / assignment / "test_public.py",
             *sorted((root / "grader" / "suites" / assignment).glob("test_*.py"))]
    found: list[str] = []
    for path in files:
        if not path.is_file():
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module_gpu = any(
            isinstance(node, ast.Assign) and _names_gpu_mark(node.value)
            and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
            for node in tree.body)
        for node in tree.body:
            if (isinstance(node, ast.FunctionDef) and node.name.startswith("test")
                    and (module_gpu or any(_names_gpu_mark(d) for d in node.decorator_list))):
                found.append(node.name)
    return tuple(found)


def _names_gpu_mark(node: ast.AST) -> bool:
    """`pytest.mark.gpu`, alone or in a list/tuple of marks."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return any(_names_gpu_mark(e) for e in node.elts)
    return (isinstance(node, ast.Attribute) and node.attr == "gpu"
            and isinstance(node.value, ast.Attribute) and node.value.attr == "mark")


def build_plan(course: Course, root: Path, ids: Sequence[str] = (),
               step_timeout_s: float = DEFAULT_STEP_TIMEOUT_S) -> list[Step]:
    """Every step of the check, in the order they are reported."""
    python = sys.executable
    grade = (python, "-m", "grader", "--root", str(root), "grade")
    steps: list[Step] = []
    for assignment in course.select(list(ids)):
        gpu = gpu_tests_of(root, assignment.id)
        for impl, expect, arg in (("solutions", "full", "solutions"),
                                  ("stub", "zero", "assignments")):
            steps.append(Step(
                kind="grade", name=f"{assignment.id} {impl}", assignment=assignment.id,
                impl=impl, expect=expect, gpu_tests=gpu, alone=bool(gpu) and impl == "solutions",
                argv=(*grade, assignment.id, "--impl", arg, "--no-worksheets",
                      "--timeout", str(step_timeout_s))))
    selected = {a.id for a in course.select(list(ids))}
    for bench, extra in GPU_BENCHES:
        if bench in selected:
            steps.append(Step(kind="bench", name=f"bench {bench}", assignment=bench, alone=True,
                              argv=(python, "-m", "grader", "bench", bench, "--impl",
                                    "solutions", *extra)))
    if not ids:
        steps.append(Step(kind="pytest", name="project @pytest.mark.gpu tests", alone=True,
                          argv=(python, "-m", "pytest", "-q", "-m", "gpu", "-p",
                                "no:cacheprovider", *PROJECT_GPU_TESTS)))
        steps.append(Step(kind="nccl", name="NCCL (multi-rank)", alone=True,
                          argv=(python, "-c", NCCL_PROBE)))
    return steps


# A 2-rank NCCL all-reduce through the harness, only where two GPUs exist.
NCCL_PROBE = """
import sys, torch
if torch.cuda.device_count() < 2:
    print("NCCL: needs >= 2 GPUs (this machine has %d); not run" % torch.cuda.device_count())
    sys.exit(0)
from harness.launcher import launch
def rank(ctx):
    import torch.distributed as dist
    t = torch.ones(4, device="cuda") * (dist.get_rank() + 1)
    dist.all_reduce(t)
    return t.cpu()
result = launch(rank, world_size=2, backend="auto", timeout=120)
assert all(v.tolist() == [3.0] * 4 for v in result.values), result.values
print("NCCL: 2-rank all_reduce through the harness: ok")
"""


def describe_plan(steps: Sequence[Step]) -> str:
    """The plan as a Markdown table: what would run, and whether it runs alone."""
    from grader.report.render import format_table

    rows = []
    for number, step in enumerate(steps, 1):
        expect = {"full": "full marks", "zero": "zero"}.get(step.expect, "passes")
        gpu = ", ".join(step.gpu_tests) if step.gpu_tests else "-"
        rows.append((str(number), step.name, expect, gpu, "alone" if step.alone else "pooled"))
    return format_table(["#", "step", "expected", "GPU tests", "runs"], rows)


# --- running ----------------------------------------------------------------------------------


Runner = Callable[[Step, float], StepResult]


def run_plan(steps: Sequence[Step], *, workers: int, budget_s: float,
             step_timeout_s: float, runner: Runner | None = None,
             echo: Callable[[str], None] = print) -> list[StepResult]:
    """Run the pooled steps `workers` at a time, then the steps that must run alone, one after
    another; results come back in plan order. A step not started within the budget is not run."""
    run_one = runner or run_step
    started = time.perf_counter()
    results: dict[int, StepResult] = {}
    done = [0]

    def timed(index: int) -> None:
        step = steps[index]
        left = budget_s - (time.perf_counter() - started)
        if left <= 0:
            results[index] = StepResult(step.name, step.kind, "not run: budget", False, 0.0,
                                        step.assignment, step.impl)
        else:
            results[index] = run_one(step, min(step_timeout_s, left))
        done[0] += 1
        result = results[index]
        echo(f"[{done[0]}/{len(steps)}] {step.name}: {headline(result)} "
             f"({result.wall_s:.1f} s)")

    pooled = [i for i, s in enumerate(steps) if not s.alone]
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(timed, pooled))
    for index, step in enumerate(steps):
        if step.alone:
            timed(index)
    return [results[i] for i in range(len(steps))]


def run_step(step: Step, timeout_s: float) -> StepResult:
    """Run one step as a child process with a time box, and judge what it gave."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mlsys-gpu-check-") as tmp:
        argv = list(step.argv) + (["--out", tmp] if step.kind == "grade" else [])
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s + 30,
                                  env=env, cwd=_repo_root_of(step))
        except subprocess.TimeoutExpired as exc:
            tail = _tail((exc.stdout or b"") if isinstance(exc.stdout, str) else
                         (exc.stdout or b"").decode(errors="replace"))
            return StepResult(step.name, step.kind, "timeout", False,
                              time.perf_counter() - start, step.assignment, step.impl,
                              note=f"time box of {timeout_s:.0f} s", output_tail=tail)
        wall = time.perf_counter() - start
        output = proc.stdout + proc.stderr
        if step.kind != "grade":
            ok = proc.returncode == 0
            return StepResult(step.name, step.kind, "ok" if ok else "FAIL", ok, wall,
                              step.assignment, note=_last_line(output),
                              output_tail=_tail(output))
        results = Path(tmp) / "results.json"
        if not results.is_file():
            return StepResult(step.name, step.kind, "error", False, wall, step.assignment,
                              step.impl, note=f"no results.json (exit {proc.returncode})",
                              output_tail=_tail(output))
        document = json.loads(results.read_text(encoding="utf-8"))
    return judge_grade(step, document, wall, _tail(output))


def judge_grade(step: Step, document: dict, wall_s: float, output_tail: str = "") -> StepResult:
    """A grading's verdict from its results.json: the solution at full marks with nothing left
    ungraded, the stub at zero; each GPU test's outcome."""
    tests = [t for t in document.get("tests", []) if t.get("extra_data", {}).get("part",
                                                                                  "suite") ==
             "suite"]
    score = float(sum(t.get("score", 0) for t in tests))
    max_score = float(sum(t.get("max_score", 0) for t in tests))
    excluded = float(sum(t["extra_data"].get("points", 0) for t in tests
                         if t["extra_data"].get("not_graded_here")))
    gpu: dict[str, str] = {}
    lost = []
    for test in tests:
        name = str(test.get("name", "")).split(": ", 1)[-1]
        extra = test.get("extra_data", {})
        outcome = "not graded here" if extra.get("not_graded_here") else str(
            extra.get("outcome", "?"))
        if name.split("[", 1)[0] in step.gpu_tests:
            gpu[name] = outcome
        if test.get("score", 0) < test.get("max_score", 0) or extra.get("not_graded_here"):
            lost.append(f"{name}: {str(test.get('output', ''))[:160]}")
    if step.expect == "full":
        ok = bool(tests) and score == max_score and excluded == 0
    else:
        ok = bool(tests) and score == 0
    return StepResult(step.name, step.kind, "ok" if ok else "FAIL", ok, wall_s, step.assignment,
                      step.impl, score, max_score, excluded, gpu,
                      lost if step.expect == "full" else [], output_tail=output_tail)


def headline(result: StepResult) -> str:
    """One line: the verdict, the score, the GPU tests' outcomes."""
    if result.kind != "grade" or result.score is None:
        return f"{result.status}" + (f" - {result.note}" if result.note else "")
    passed = sum(1 for o in result.gpu_tests.values() if o == "passed")
    gpu = f"; GPU tests {passed}/{len(result.gpu_tests)} passed" if result.gpu_tests else ""
    excluded = (f"; {result.excluded_points:g} points not graded here"
                if result.excluded_points else "")
    return (f"{result.status}: {result.score:g}/{result.max_score:g}{excluded}{gpu}")


def _repo_root_of(step: Step) -> str:
    for i, arg in enumerate(step.argv):
        if arg == "--root" and i + 1 < len(step.argv):
            return step.argv[i + 1]
    return str(Path(__file__).resolve().parents[2])


def _tail(text: str) -> str:
    return text[-OUTPUT_TAIL_CHARS:]


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


# --- the report -------------------------------------------------------------------------------


def machine_facts() -> dict[str, str]:
    """What the report says about the machine: Python, torch, Triton, the GPUs."""
    import torch

    facts = {"python": platform.python_version(), "torch": torch.__version__,
             "cuda available": str(torch.cuda.is_available()),
             "cpus": str(os.cpu_count())}
    try:
        import triton

        facts["triton"] = triton.__version__
    except ImportError:  # pragma: no cover - triton is in the grading environment
        facts["triton"] = "not installed"
    if torch.cuda.is_available():
        facts["gpus"] = ", ".join(torch.cuda.get_device_name(i)
                                  for i in range(torch.cuda.device_count()))
        facts["cuda"] = str(torch.version.cuda)
    return facts


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub Markdown table; `|` in a cell is escaped."""
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(headers), line(["---"] * len(headers)), *map(line, rows)])


def render_markdown(results: Sequence[StepResult], facts: dict[str, str], wall_s: float) -> str:
    """The report a person reads: the machine, one row per assignment, the other steps, and
    the output of each benchmark and failing step."""
    ok = all(r.ok for r in results)
    lines = ["# GPU check", "",
             f"Verdict: **{'every step as expected' if ok else 'some steps disagree'}** "
             f"({sum(r.ok for r in results)}/{len(results)} steps ok, {wall_s:.0f} s).", "",
             "Machine: " + "; ".join(f"{k} {v}" for k, v in facts.items()) + ".", "",
             "## Assignments", "",
             "Solution: full marks, nothing left 'not graded here'. Stub: zero.", ""]
    by_assignment: dict[str, dict[str, StepResult]] = {}
    for r in results:
        if r.kind == "grade":
            by_assignment.setdefault(r.assignment, {})[r.impl] = r
    rows = []
    for assignment, pair in by_assignment.items():
        solution, stub = pair.get("solutions"), pair.get("stub")
        gpu = solution.gpu_tests if solution else {}
        passed = sum(1 for outcome in gpu.values() if outcome == "passed")
        failed = [name for name, outcome in gpu.items() if outcome != "passed"]
        ran = (f"{passed}/{len(gpu)} GPU tests passed" + (
            f" (not: {', '.join(failed)})" if failed else "") if gpu
            else "CPU tests only (GPU visible)")
        rows.append((assignment, _cell(solution), _cell(stub), ran))
    lines += [markdown_table(["assignment", "solution", "stub", "what ran on the GPU"], rows), ""]
    others = [r for r in results if r.kind != "grade"]
    if others:
        lines += ["## Benchmarks, project tests, NCCL", "",
                  markdown_table(["step", "verdict", "last line", "seconds"],
                               [(r.step, r.status, r.note, f"{r.wall_s:.1f}") for r in others]),
                  ""]
    for r in results:
        if r.kind == "bench" or not r.ok:
            lines += [f"### {r.step}: {r.status}", ""]
            lines += [f"- {item}" for item in r.lost[:12]]
            if r.output_tail:
                lines += ["", "```", r.output_tail.rstrip(), "```"]
            lines.append("")
    return "\n".join(lines)


def _cell(result: StepResult | None) -> str:
    if result is None:
        return "-"
    if result.score is None:
        return result.status
    mark = "ok" if result.ok else "**FAIL**"
    return f"{mark} {result.score:g}/{result.max_score:g}" + (
        f" ({result.excluded_points:g} not graded)" if result.excluded_points else "")


def load_results(path: Path) -> tuple[list[StepResult], dict[str, str], float]:
    """What `write_reports` wrote as JSON, to render again (a report kept under docs/gpu/)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return ([StepResult(**step) for step in data["steps"]], dict(data["machine"]),
            float(data["wall_s"]))


def write_reports(out: Path, results: Sequence[StepResult], facts: dict[str, str],
                  wall_s: float) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    md, js = out / REPORT_MD, out / REPORT_JSON
    md.write_text(render_markdown(results, facts, wall_s) + "\n", encoding="utf-8")
    js.write_text(json.dumps({"machine": facts, "wall_s": round(wall_s, 1),
                              "ok": all(r.ok for r in results),
                              "steps": [asdict(r) for r in results]}, indent=2) + "\n",
                  encoding="utf-8")
    return md, js


# --- command line -----------------------------------------------------------------------------


def register(sub: argparse._SubParsersAction) -> None:
    """`python -m grader gpu-check [--dry-run] [--out DIR] [--ids ID ...]`."""
    parser = sub.add_parser("gpu-check", help="grade every solution and stub with the GPU "
                            "visible, run the GPU tests and benchmarks; a report")
    parser.add_argument("--ids", nargs="*", default=[], metavar="ID",
                        help="only these assignments (default: all, plus the project's GPU "
                        "tests and NCCL)")
    parser.add_argument("--out", type=Path, default=Path("grading"),
                        help=f"where {REPORT_MD} and {REPORT_JSON} go (default: grading/)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    parser.add_argument("--render", type=Path, default=None, metavar="JSON",
                        help=f"only write the Markdown report of a kept {REPORT_JSON} beside it")
    parser.add_argument("--force", action="store_true",
                        help="run even without CUDA (a rehearsal of the machinery on a CPU)")
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S,
                        help=f"seconds for the whole check (default: {DEFAULT_BUDGET_S:g})")
    parser.add_argument("--step-timeout", type=float, default=DEFAULT_STEP_TIMEOUT_S,
                        help="time box of one step in seconds (default: "
                        f"{DEFAULT_STEP_TIMEOUT_S:g})")
    parser.add_argument("--workers", type=int, default=None,
                        help="steps run at once besides the timed ones (default: a quarter "
                        "of the CPUs, at least 1)")
    parser.set_defaults(handler=_command)


def _command(args: argparse.Namespace, course: Course) -> int:
    if args.render is not None:
        results, facts, wall = load_results(args.render)
        target = args.render.with_suffix(".md")
        target.write_text(render_markdown(results, facts, wall) + "\n", encoding="utf-8")
        print(f"wrote {target}")
        return 0
    for assignment_id in args.ids:
        try:
            course.get(assignment_id)
        except KeyError as exc:
            print(f"error: {exc.args[0]}", file=sys.stderr)
            return 2
    steps = build_plan(course, args.root, args.ids, args.step_timeout)
    print(f"gpu-check plan: {len(steps)} steps over "
          f"{len(course.select(list(args.ids)))} assignments")
    print(describe_plan(steps))
    if args.dry_run:
        print("dry run: nothing run")
        return 0
    import torch

    if not torch.cuda.is_available() and not args.force:
        print("not run: no CUDA device on this machine (the plan above is what a GPU machine "
              "runs; --force rehearses it on the CPU)")
        return 0
    workers = args.workers or max(1, (os.cpu_count() or 1) // 4)
    start = time.perf_counter()
    results = run_plan(steps, workers=workers, budget_s=args.budget,
                       step_timeout_s=args.step_timeout)
    wall = time.perf_counter() - start
    md, js = write_reports(args.out, results, machine_facts(), wall)
    failed = [r for r in results if not r.ok]
    print(f"\n{len(results) - len(failed)}/{len(results)} steps as expected in {wall:.0f} s; "
          f"report: {md} and {js}")
    for r in failed:
        print(f"  - {r.step}: {headline(r)}", file=sys.stderr)
    return 1 if failed else 0
