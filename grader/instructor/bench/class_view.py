"""The class report (`python -m grader class`) on a generated class: students x assignments.

    python -m grader bench class_view [--students 300] [--assignments 13] [--keep DIR]

Generates a class in a temporary folder (not timed): per student and assignment one
results.json in the schema (tests passed or failed at random, a few recurring reasons) and the
editable modules, each a mix of the solution's and the stub's top-level definitions under a
few renamings, so that many pairs share code. Then times reading (validation included),
statistics, similarity and writing, as `python -m grader class` runs them. Instructors only,
like the rest of grader/instructor/ (a student release leaves it out).
"""

from __future__ import annotations

import argparse
import ast
import random
import sys
import tempfile
import time
from pathlib import Path

from grader.manifest import REPO_ROOT, load_manifest

VARIANTS = 12  # distinct codes per assignment the students draw from
REASONS = ("values differ from the reference: check the chunk indices",
           "deadlocked: post the receive before the send",
           "raised RuntimeError: process group not initialised")


def _mixed(solution: str, stub: str, rng: random.Random) -> str:
    """The solution with some top-level functions taken from the stub instead."""
    from grader.instructor.classview.synthetic import renamed_copy

    ours, theirs = ast.parse(solution), ast.parse(stub)
    stubbed = {n.name: n for n in theirs.body if isinstance(n, ast.FunctionDef)}
    ours.body = [stubbed[n.name] if isinstance(n, ast.FunctionDef) and n.name in stubbed
                 and rng.random() < 0.3 else n for n in ours.body]
    return renamed_copy(ast.unparse(ours), seed=rng.randrange(1000))


def generate(folder: Path, students: int, assignments: int, seed: int = 0) -> None:
    """Write the class under `folder` (see the module docstring)."""
    from grader.instructor.classview.synthetic import declared_tests, outcome, write_submission

    course = load_manifest()
    rng = random.Random(seed)
    chosen = course.assignments[:assignments]
    variants, tests = {}, {}
    for a in chosen:
        solution = {m: (REPO_ROOT / "solutions" / a.id / f"{m}.py").read_text()
                    for m in a.modules}
        stub = {m: (REPO_ROOT / "assignments" / a.id / f"{m}.py").read_text() for m in a.modules}
        variants[a.id] = [{m: _mixed(solution[m], stub[m], rng) for m in a.modules}
                          for _ in range(VARIANTS)]
        tests[a.id] = declared_tests(a.id)
    for number in range(students):
        student = f"student-{number:04d}"
        for a in chosen:
            results = [outcome(a.id, t, None if rng.random() < 0.8 else rng.choice(REASONS))
                       for t in tests[a.id]]
            code = dict(rng.choice(variants[a.id]))
            first = a.modules[0]
            code[first] += f"\n# {student}\nSTUDENT_{number} = {number}\n"
            write_submission(folder / student / a.id, course, {a.id: results}, {a.id: code},
                             student)
        if (number + 1) % 50 == 0:
            print(f"generated {number + 1}/{students} students", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    """Generate, then time the report's stages; prints seconds per stage."""
    parser = argparse.ArgumentParser(prog="python -m grader bench class_view")
    parser.add_argument("--students", type=int, default=300)
    parser.add_argument("--assignments", type=int, default=13)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--keep", type=Path, default=None,
                        help="generate into (and keep) this folder instead of a temporary one")
    args = parser.parse_args(argv)
    from grader.instructor.classview.collect import read_class

    with tempfile.TemporaryDirectory(prefix="class-bench-") as temp:
        base = args.keep or Path(temp)
        folder, out = base / "class", base / "report"
        started = time.perf_counter()
        generate(folder, args.students, args.assignments)
        print(f"generated {args.students} x {args.assignments} in "
              f"{time.perf_counter() - started:.1f} s (not part of the report's time)")
        return _timed(folder, out, args.workers, read_class)


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its finished children (the forked workers)."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _timed(folder: Path, out: Path, workers: int, read_class) -> int:
    from grader.instructor.classview.render import write_report
    from grader.instructor.classview.similarity import similar_pairs
    from grader.instructor.classview.stats import assignment_stats

    course = load_manifest()
    stages = {}
    cpu_start = _cpu_seconds()
    start = time.perf_counter()
    data = read_class(folder, course, every=500)
    stages["read + validate"] = time.perf_counter() - start
    ids = [a for a in course.ids if any(k[1] == a for k in data.submissions)]
    by_assignment = {a: data.of_assignment(a) for a in ids}
    mark = time.perf_counter()
    stats = {a: assignment_stats(a, subs) for a, subs in by_assignment.items()}
    stages["statistics"] = time.perf_counter() - mark
    mark = time.perf_counter()
    pairs = similar_pairs([course.get(a) for a in ids], by_assignment, workers=workers)
    stages["similarity"] = time.perf_counter() - mark
    mark = time.perf_counter()
    pages = write_report(out, data, stats, pairs)
    stages["write report"] = time.perf_counter() - mark
    total = time.perf_counter() - start
    print(f"{len(data.students)} students, {len(data.submissions)} submissions, "
          f"{len(data.skipped)} skipped, {len(pages)} pages")
    for name, seconds in stages.items():
        print(f"  {name:<16} {seconds:7.1f} s")
    print(f"  {'total':<16} {total:7.1f} s ({workers} fingerprinting workers); CPU time "
          f"{_cpu_seconds() - cpu_start:.1f} s, workers included (on a loaded machine, the "
          "CPU time over the cores is the better estimate)")
    return 0
