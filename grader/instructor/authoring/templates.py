"""What `grader new` writes: one template per file, `string.Template` text with `$id`,
`$module`, `$title`, `$points`, `$public_points`, `$hidden_points`, `$worksheet_points`.

Each template is a working example of the house layout (a stub whose one function doubles a
tensor, its solution, a mutant, a public test, a hidden suite in the standard layout: `_ref.py`
references computed in the parent, `_ranks.py` what travels to the ranks, `_cases.py` the case
table, `test_*.py` the tests) and carries `TODO(grader new)` where the author writes the real
thing; `grader doctor` lists each marker until it is gone.
"""

from __future__ import annotations

import json
from string import Template

from grader.instructor.authoring.artefacts import TODO_MARKER

T = TODO_MARKER

MANIFEST_ENTRY = Template(f"""
[[assignment]]
# {T}: check title, part and points; fill prerequisites and topics
id = "$id"
title = "$title"
part = "$part"
points = 100
public_points = 20
worksheet_points = 10
prerequisites = []
topics = []
modules = [$modules]
provided = []
""")

README = Template(f"""# $title

<!-- {T}: write the textbook of `$id` (../shared/ASSIGNMENT.md, item 2), section by section. -->

## 1. Calculate before you code

{T}: the numbers a practitioner works out first, with a worked example at real scale.

## 2. The concept from first principles

{T}: the idea, a short pure-torch spec where one fits.

## 3. The API (`$module.py`)

{T}: every public name, what it promises (the stub's docstrings say the same).

## 4. Cost budget

{T}: messages, bytes, memory, launches, FLOPs.

## 5. Grading

| part | points | what is checked |
|---|---:|---|
| public tests (`assignments/$id/test_public.py`) | $public_points | {T}: what |
| hidden suite | $hidden_points | {T}: what |
| worksheet (`assignments/$id/worksheet.ipynb`) | $worksheet_points | {T}: what |

**Tolerances**: {T}: paste `grader.compare.describe(dtype)` for each dtype the suite compares.

## 6. Pitfalls

- {T}: the mistakes students really make, and how each shows up.

## 7. Running the tests and the benchmark

```
pytest assignments/$id                               # public tests
python -m grader grade $id                           # public + hidden (instructors)
python -m grader bench $id                           # the benchmark
```

## 8. Further reading

- {T}: papers, and the systems that do this in production.

## Changelog

Changes to the contract after a release, newest last (`- YYYY-MM-DD: what changed`).
""")

STUB = Template(f'''"""$title: what students write in `$module.py`.

{T}: say what this module provides and where the README explains it.
"""

from __future__ import annotations

import torch


def example(x: torch.Tensor) -> torch.Tensor:
    """Return `x` doubled: a new tensor of x's shape and dtype; `x` is left unchanged.

    {T}: replace with the real API, each docstring stating the whole contract.
    """
    raise NotImplementedError("example: see README §3")
''')

SOLUTION = Template(f'''"""$title: the reference `$module.py`, a worked example.

{T}: a short why above each step, and the paper or system it comes from.
"""

from __future__ import annotations

import torch


def example(x: torch.Tensor) -> torch.Tensor:
    """Return `x` doubled: a new tensor of x's shape and dtype; `x` is left unchanged.

    {T}: replace with the real API, each docstring stating the whole contract.
    """
    return x * 2
''')

MUTANT = Template(f'''"""Adds 2 instead of doubling.

{T}: at least 8 mutants, each one realistic mistake.
"""
from harness.mutation import mutate

MUTATES = "$module"
FEEDBACK = "doubled"
mutate(globals(), "$id", "$module", replace=[("return x * 2", "return x + 2")])
''')

EQUIVALENTS = Template(f"""# Generated mutants of $id reviewed as equivalent, one reason each
# (docs/authoring.md, "Marking an equivalent mutant").
# {T}: run `python -m grader mutate $id`, kill each survivor or list it here.
""")

INDEPENDENT = Template(f'''"""An independent `$module.py`, from the docstrings and the README only.

{T}: written by someone who has not read the solution; it must get every point.
"""

from __future__ import annotations


def example(x):
    """Return `x` doubled: a new tensor."""
    return x + x
''')

PUBLIC_TEST = Template(f'''"""Public tests of $id ($public_points of $points points).

Run them with `pytest assignments/$id`.

{T}: small cases that teach; messages that name the fix.
"""

from __future__ import annotations

import pytest
import torch

from grader.compare import assert_close


def rank_example(ctx, x):
    return ctx.impl_module("$id", "$module").example(x)


@pytest.mark.points($public_points)
@pytest.mark.exercises("example")
def test_example_doubles_a_small_tensor(launch):
    x = torch.arange(6, dtype=torch.float32)
    got = launch(rank_example, world_size=1, args=(x,)).values[0]
    assert_close(got, x.double() * 2, dtype=torch.float32, what="example(x)",
                 hint="return x times 2, a new tensor", hint_first=True)
''')

SUITE_INIT = Template('''"""Hidden suite of $id (never shipped to students)."""
''')

SUITE_REF = Template(f'''"""References of the $id suite, computed in the parent in float64.

{T}: one function per public name; never import the code under test here.
"""

from __future__ import annotations

import torch


def example_ref(x: torch.Tensor) -> torch.Tensor:
    return x.double() * 2
''')

SUITE_RANKS = Template(f'''"""What travels to the ranks for the $id suite: rank functions only.

{T}: one rank function per launch; cases run under `harness.cases.run_cases`, each in its
own error scope, so one stub fails only its case.
"""

from __future__ import annotations

from harness.cases import run_cases


def rank_example(ctx, inputs):
    module = ctx.impl_module("$id", "$module")
    return run_cases(ctx, [(name, lambda x=x: module.example(x)) for name, x in inputs.items()])
''')

SUITE_CASES = Template(f'''"""The case table of the $id suite: id -> parameters.

{T}: the cases the contract promises, cheap ones first.
"""

from __future__ import annotations

CASES = {{"numel=1": 1, "numel=1000": 1000}}
''')

SUITE_TEST = Template(f'''"""$id: `example` on every case of the table, in one launch.

{T}: the real tests (values, cost, discipline, bad input), each declaring what it exercises.
"""

from __future__ import annotations

import pytest
import torch

from grader.compare import assert_close
from grader.seeds import seeded_generator
from grader.suites.$id._cases import CASES
from grader.suites.$id._ranks import rank_example
from grader.suites.$id._ref import example_ref
from harness.cases import case_value


@pytest.fixture(scope="module")
def run(launch):
    generator = seeded_generator(0)
    inputs = {{name: torch.randn(numel, generator=generator) for name, numel in CASES.items()}}
    return inputs, launch(rank_example, world_size=1, args=(inputs,)).values[0]


@pytest.mark.points($hidden_points)
@pytest.mark.exercises("example")
def test_example_on_every_case(run):
    inputs, outcomes = run
    for name, x in inputs.items():
        got = case_value(outcomes[name], f"example on {{name}}")
        assert_close(got, example_ref(x), dtype=torch.float32, what=f"example, {{name}}",
                     hint="return x times 2", hint_first=True)
''')

BENCH = Template(f'''"""$id: {T} what this benchmark compares, as ratios measured side by side.

    python -m grader bench $id [--impl solutions|assignments|DIR]
"""

from __future__ import annotations

import argparse

from grader.bench import add_impl_option


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader bench $id", description=__doc__)
    add_impl_option(parser)
    args = parser.parse_args(argv)
    print(f"$id: no benchmark yet ({{args.impl.argument}})")
    return 0
''')


def worksheet(assignment_id: str, points: int, questions: int = 4) -> str:
    """An nbgrader source notebook: an introduction, a setup cell, and `questions` questions
    (text, answer, visible and hidden test), carrying `points` in all."""
    cells = [_cell("markdown", "intro", f"# {assignment_id}: calculate before you code\n\n"
                                        f"{T}: what this worksheet asks, and why.")]
    cells.append(_cell("code", "setup", "import math"))
    shares = [points // (2 * questions) + (i < points % (2 * questions))
              for i in range(2 * questions)]
    for q in range(1, questions + 1):
        name = f"q{q}"
        cells.append(_cell("markdown", f"{name}_text", f"## Question {q}\n\n{T}: the question."))
        cells.append(_cell("code", f"{name}_answer",
                           f"def answer_{q}() -> float:\n    ### BEGIN SOLUTION\n"
                           f"    return {q}.0\n    ### END SOLUTION", solution=True))
        cells.append(_cell("code", f"{name}_visible", f"assert answer_{q}() == {q}.0",
                           points=shares[2 * q - 2]))
        cells.append(_cell("code", f"{name}_hidden",
                           f"# Hidden tests. {T}: other inputs.\n### BEGIN HIDDEN TESTS\n"
                           f"assert answer_{q}() > 0\n### END HIDDEN TESTS",
                           points=shares[2 * q - 1]))
    notebook = {"cells": cells, "metadata": {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(notebook, indent=1) + "\n"


def _cell(kind: str, grade_id: str, text: str, *, solution: bool = False,
          points: int | None = None) -> dict:
    meta: dict = {"grade": points is not None, "grade_id": grade_id, "locked": not solution,
                  "schema_version": 3, "solution": solution}
    if points is not None:
        meta["points"] = points
    cell: dict = {"cell_type": kind, "id": grade_id.replace("_", "-"),
                  "metadata": {"nbgrader": meta}, "source": text.splitlines(keepends=True)}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell
