"""Grade a solution with one function stubbed, and compare per test with the whole solution.

    python -m grader.tests.stub_one ring_allreduce ring ring_reduce_scatter [--select EXPR]

Copies `solutions/<id>/*.py` (the modules of the manifest) into a temporary folder laid out like
`assignments/`, replaces the body of `<function>` (a top-level def, a class, or `Class.method`)
with `raise NotImplementedError("<function>: see README")` (`grader.instructor.partial`, which
makes selfcheck's partial-credit variants the same way), grades that folder and the solution with
`python -m grader grade <id> --impl ...` (one session each, no xdist) and prints the tests whose
outcome differs, with their points and reasons. Tests that do not exercise the stubbed function
should keep passing (issue 18, per-function isolation).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from grader.instructor.partial import stubbed_source

ROOT = Path(__file__).resolve().parents[2]


def grade(assignment: str, impl: str, out: str, select: str | None) -> dict[str, dict]:
    command = [sys.executable, "-m", "grader", "grade", assignment, "--impl", impl, "--out", out,
               "-n", "0", "--no-worksheets"]
    if select:
        command += ["--select", select]
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "results.json")) as f:
        tests = json.load(f)["tests"]
    return {t["name"]: t for t in tests}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignment")
    parser.add_argument("module")
    parser.add_argument("function")
    parser.add_argument("--select", default=None)
    parser.add_argument("--baseline", default=None,
                        help="results.json of the solution (skips grading it again)")
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="stub-one-")
    try:
        folder = Path(work, "impl", args.assignment)
        folder.mkdir(parents=True)
        for path in Path(ROOT, "solutions", args.assignment).glob("*.py"):
            shutil.copy(path, folder / path.name)
        target = folder / f"{args.module}.py"
        try:
            text = stubbed_source(target.read_text(), args.function,
                                  f"{args.function}: see README")
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
        target.write_text(text)
        stubbed = grade(args.assignment, str(folder.parent), os.path.join(work, "stubbed"),
                        args.select)
        if args.baseline:
            with open(args.baseline) as f:
                solution = {t["name"]: t for t in json.load(f)["tests"]}
        else:
            solution = grade(args.assignment, "solutions", os.path.join(work, "solution"),
                             args.select)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lost = 0.0
    total = sum(float(t["max_score"]) for t in solution.values())
    for name, test in sorted(stubbed.items()):
        before = solution.get(name, {}).get("score", 0.0)
        if test["score"] != before:
            lost += float(before) - float(test["score"])
            reason = (test.get("output") or "").strip().splitlines()
            print(f"  -{float(before) - float(test['score']):g}  {name}: "
                  f"{reason[0][:150] if reason else ''}")
    score = sum(float(t["score"]) for t in stubbed.values())
    print(f"{args.assignment} with {args.function} stubbed: {score:g}/{total:g} "
          f"({lost:g} points lost)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
