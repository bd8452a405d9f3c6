"""grader/instructor/mutate: operators, naming, equivalents, scores, summaries, one real run."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from grader.cli import main
from grader.instructor.mutate import generate as generate_module
from grader.instructor.mutate.cli import mutation_run
from grader.instructor.mutate.equivalents import (
    Equivalent,
    EquivalentsError,
    load_equivalents,
    parse_equivalents,
)
from grader.instructor.mutate.generate import GENERATOR_VERSION, generate, mutants_of_module
from grader.instructor.mutate.operators import OPERATORS, Edit
from grader.instructor.mutate.report import Counts, MutantResult, MutationReport
from grader.instructor.mutate.runner import BaselineFailed, Verdict, judge_session, spread
from grader.instructor.mutate.summary import (
    Summary,
    check_summary,
    load_summary,
    score_text,
    source_hash,
    write_summary,
)
from grader.manifest import REPO_ROOT, load_manifest
from grader.tests._fakes import entry, make_course, session


def changes(source: str, operator: str | None = None) -> list[str]:
    """The changed line of each mutant of `source` (of one operator), stripped."""
    source = textwrap.dedent(source)
    out = []
    for mutant in mutants_of_module("t", "m", source):
        if operator is None or mutant.operator == operator:
            out.append(mutant.one_line(source).split("  →  ")[1])
    return out


# ---- operators ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("operator", "source", "expected"), [
    ("cmp_flip", "y = a < b", ["y = a <= b"]),
    ("cmp_flip", "y = a >= b", ["y = a > b"]),
    ("cmp_flip", "y = a == b", ["y = a != b"]),
    ("cmp_flip", "y = a is None", ["y = a is not None"]),
    ("cmp_flip", "y = a not in b", ["y = a in b"]),
    ("cmp_flip", "y = (a) < (b) <= c", ["y = (a) <= (b) <= c", "y = (a) < (b) < c"]),
    ("and_or", "y = a and b", ["y = a or b"]),
    ("drop_not", "if not (a or b):\n    y = 2", ["if (a or b):"]),
    ("range_stop", "for i in range(n):\n    y = i", ["for i in range(n - 1):"]),
    ("range_stop", "for i in range(1, len(x)):\n    y = i", ["for i in range(1, len(x) - 1):"]),
    ("slice_bound", "y = x[a:b]", ["y = x[a + 1:b]", "y = x[a:b - 1]"]),
    ("drop_one", "y = x[i + 1]", ["y = x[i]"]),
    ("drop_one", "y = (a - b) - 1 < n", ["y = (a - b) < n"]),
    ("drop_div", "g = total / world_size", ["g = total"]),
    ("swap_args", "dist.send(src, dst)", ["dist.send(dst, src)"]),
    ("drop_call", "work.wait()", ["pass"]),
    ("drop_call", "buf.copy_(\n    x)", ["pass"]),
    ("drop_raise", "if x:\n    raise ValueError('bad')", ["pass"]),
    ("drop_update", "g /= world_size", ["pass"]),
    ("drop_detach", "y = (a + b).detach()", ["y = (a + b)"]),
    ("drop_clone", "y = x.clone()", ["y = x"]),
    ("reduction", "y = x.amax()", ["y = x.amin()"]),
    ("reduction", "y = torch.sum(x)", ["y = torch.mean(x)"]),
    ("dim", "y = x.sum(dim=0)", ["y = x.sum(dim=1)"]),
    ("dim", "y = torch.softmax(s, -1)", ["y = torch.softmax(s, -2)"]),
    ("dim", "y = x.unsqueeze(1)", ["y = x.unsqueeze(0)"]),
    ("dtype", "y = x.to(torch.float32)", ["y = x.to(torch.bfloat16)", "y = x.to(torch.float64)"]),
    ("dtype", "y = x.float()", ["y = x.double()"]),
    ("bool_const", "y = f(keepdim=True)", ["y = f(keepdim=False)"]),
    ("const_nudge", "n = 3", ["n = 4"]),
    ("const_nudge", "s = 0.5", ["s = 1.0"]),
    ("const_nudge", "eps = 1e-8\nz = 0.0", []),
])
def test_each_operator_makes_its_one_change(operator, source, expected):
    assert changes(source, operator) == expected


def test_a_dim_change_is_not_also_a_constant_nudge():
    # `dim=0` -> `dim=1` would be generated twice; the same source is one mutant, a `dim`.
    assert [m.operator for m in mutants_of_module("t", "m", "y = x.sum(dim=0)\n")] == [
        "reduction", "dim"]


def test_docstrings_annotations_messages_and_guards_are_never_mutated():
    source = textwrap.dedent('''\
        """Module docstring: a < b, range(n), x.sum(dim=0)."""
        from typing import Literal


        def f(x: Literal[1] = None) -> tuple[int, 2]:
            """Docstring: if a < b: raise."""
            size: Literal[3]
            message = f"{x + 1} items"
            assert x, "x must be < 4"
            raise NotImplementedError("f: see README §1")


        if __name__ == "__main__":
            f(1 < 2)
    ''')
    assert mutants_of_module("t", "m", source) == []


def test_generation_is_deterministic_and_ids_survive_a_line_shift():
    source = "def f(a, b):\n    if a < b:\n        return a + 1\n    return max(a, b)\n"
    first = mutants_of_module("t", "m", source)
    assert [m.name for m in first] == [m.name for m in mutants_of_module("t", "m", source)]
    shifted = mutants_of_module("t", "m", "def g():\n    return 7\n\n\n" + source)
    moved = {m.mutant_id: m.line for m in shifted}
    assert all(moved[m.mutant_id] == m.line + 4 for m in first)


def test_names_carry_file_line_operator_and_a_stable_id():
    [mutant] = mutants_of_module("ring", "ring", "\n\ny = a and b\n")
    assert mutant.name == f"ring.py:3:and_or:{mutant.mutant_id}"
    assert mutant.slug == f"ring_3_and_or_{mutant.mutant_id}"
    assert len(mutant.mutant_id) == 8 and int(mutant.mutant_id, 16) >= 0
    assert mutant.one_line("\n\ny = a and b\n") == "y = a and b  →  y = a or b"
    assert "-y = a and b\n+y = a or b" in mutant.diff("\n\ny = a and b\n")


def test_positions_count_utf8_bytes():
    source = 'x = "§§§"; y = a < b  # Δ\n'
    assert changes(source, "cmp_flip") == ['x = "§§§"; y = a <= b  # Δ']


def test_a_mutant_that_does_not_compile_is_stillborn_and_counted(monkeypatch):
    def broken(source):
        return [Edit("drop_call", 0, 1, "(", ""), Edit("const_nudge", 4, 5, "2", "")]

    monkeypatch.setattr(generate_module, "find_edits", broken)
    stillborn, nudged = mutants_of_module("t", "m", "y = 1\n")
    assert (stillborn.compiles, nudged.compiles) == (False, True)
    with pytest.raises(ValueError, match="unknown mutation operator"):
        Edit("no_such_operator", 0, 1, "", "")


def test_every_real_solution_generates_compiling_mutants():
    course = load_manifest()
    for assignment in course.assignments:
        generation = generate(assignment, REPO_ROOT)
        assert generation.mutants, assignment.id
        assert {m.operator for m in generation.mutants} <= set(OPERATORS)
        assert len(generation.runnable) == len(generation.mutants), assignment.id


# ---- the equivalent-mutant list ----------------------------------------------------------------

def test_equivalents_load_by_id_and_reject_malformed_entries(tmp_path):
    text = ('[[equivalent]]\nid = "3f9a21c0"\nmutant = "ring.py:88:cmp_flip"\n'
            'reason = "numel is never negative here"\n')
    assert parse_equivalents(text) == {
        "3f9a21c0": Equivalent("3f9a21c0", "numel is never negative here", "ring.py:88:cmp_flip")}
    assert load_equivalents("toy", make_course(tmp_path)) == {}
    bad = {
        '[[equivalent]]\nid = "XYZ"\nreason = "r"\n': "8 lowercase hex",
        '[[equivalent]]\nid = "3f9a21c0"\nreason = ""\n': "non-empty string",
        '[[equivalent]]\nid = "3f9a21c0"\nreason = "a\\nb"\n': "one non-empty line",
        '[[equivalent]]\nid = "3f9a21c0"\nreason = "r"\nwhy = "x"\n': "unknown field",
        '[[equivalent]]\nid = "3f9a21c0"\nreason = "r"\n' * 2: "listed twice",
        'equivalent = 3\n': "array of tables",
        'id = "3f9a21c0"\n': "unknown top-level",
        '[[equivalent]\n': "not valid TOML",
    }
    for text, message in bad.items():
        with pytest.raises(EquivalentsError, match=message):
            parse_equivalents(text)


# ---- verdicts, counts and the report -----------------------------------------------------------

def test_a_session_becomes_a_verdict():
    killed = judge_session(session([entry("test_a"), entry("test_b", "failed", reason="off")]))
    assert (killed.status, killed.killed_by, killed.reason) == (
        "killed", "suites/toy/test_x.py::test_b", "off")
    survived = judge_session(session([
        entry("test_a"), entry("test_gpu", "skipped", not_graded_here=True)]))
    assert (survived.status, survived.tests_run) == ("survived", ("suites/toy/test_x.py::test_a",))
    assert judge_session(session(None, timed_out=True, problem="hung")).status == "timed_out"
    assert judge_session(session(None, problem="no results")).status == "error"
    assert judge_session(session([], collection_errors=["x"])).status == "error"


def test_score_is_killed_over_total_minus_equivalent_minus_stillborn():
    counts = Counts.of(["killed"] * 9 + ["survived", "timed_out", "equivalent", "stillborn"])
    assert (counts.total, counts.graded, counts.killed) == (13, 11, 9)
    assert counts.score == pytest.approx(9 / 11)
    assert Counts.of(["equivalent", "stillborn"]).score is None
    with pytest.raises(ValueError, match="do not add up"):
        Counts(total=3, killed=1)


def _report(tmp_path: Path) -> MutationReport:
    source = "def f(a, b):\n    return a < b and max(a, b)\n"
    mutants = mutants_of_module("toy", "toy", source)  # cmp_flip, and_or, reduction, swap
    results = (
        MutantResult(mutants[0], "survived", Verdict("survived", tests_run=("t.py::test_a",))),
        MutantResult(mutants[1], "killed", Verdict("killed", killed_by="t.py::test_b")),
        MutantResult(mutants[2], "equivalent", note="a and b are never equal"),
    )
    return MutationReport("toy", results, {"toy": source}, "ab" * 32, wall_s=3.0,
                          stale_equivalents=(Equivalent("0badc0de", "gone", "toy.py:9:dim"),))


def test_report_shows_survivors_with_diff_and_tests_and_the_score(tmp_path):
    report = _report(tmp_path)
    assert report.counts.score == pytest.approx(0.5)
    text = report.markdown()
    assert "score 50.0% = killed 1 / (total 3 - equivalent 1 - stillborn 0)" in text
    assert "is below the target of 90%" in text
    assert "-    return a < b and max(a, b)\n+    return a <= b and max(a, b)" in text
    assert "- `t.py::test_a`" in text and "a and b are never equal" in text
    assert "0badc0de" in text and "| `t.py::test_b` | 1 |" in text
    summary = report.summary()
    assert summary.survivors == (report.results[0].mutant.name,)
    assert summary.counts["equivalent"] == 1 and summary.generator_version == GENERATOR_VERSION


# ---- the runner with a fake engine -------------------------------------------------------------

class FakeEngine:
    """Kills every mutant except `const_nudge` ones; the solution passes."""

    def __init__(self):
        self.laid_out: list[bool] = []  # each folder held <id>/toy.py when it was graded

    def run(self, impls, timeout, on_verdict):
        for key, folder in impls:
            self.laid_out.append((folder / "toy" / "toy.py").is_file())
            source = next(folder.glob("*/toy.py")).read_text()
            if key == "_solution" or "b == 1" in source:
                on_verdict(key, Verdict("survived", tests_run=("t::a",)))
            else:
                on_verdict(key, Verdict("killed", killed_by="t::a", reason="wrong"))


SOLUTION = '''\
def add(a: int, b: int = 0) -> int:
    """a + b."""
    if b == 0:
        return a
    total = a
    total += b
    return total
'''


def _toy(tmp_path: Path):
    root = make_course(tmp_path)
    (root / "solutions" / "toy" / "toy.py").write_text(SOLUTION)
    course = load_manifest(root / "assignments" / "course.toml")
    return root, course.get("toy")


def test_mutation_run_skips_equivalents_spreads_a_limit_and_checks_the_baseline(tmp_path):
    root, toy = _toy(tmp_path)
    generation = generate(toy, root)
    assert [m.operator for m in generation.mutants] == [
        "const_nudge", "cmp_flip", "const_nudge", "drop_update"]
    survivor = generation.mutants[2]
    equivalents = {survivor.mutant_id: Equivalent(survivor.mutant_id, "b == 1 takes the sum "
                                                  "path, which also returns a + b"),
                   "0badc0de": Equivalent("0badc0de", "stale")}
    engine = FakeEngine()
    report = mutation_run(engine, toy, generation, equivalents, root, echo=lambda _: None)
    assert report.counts.as_dict() == {"total": 4, "killed": 3, "survived": 0, "timed_out": 0,
                                       "error": 0, "equivalent": 1, "stillborn": 0}
    assert report.counts.score == 1.0 and report.complete
    assert [e.mutant_id for e in report.stale_equivalents] == ["0badc0de"]
    # Generated mutants are folders laid out like assignments/, never solutions/<id>/mutants/.
    assert engine.laid_out == [True] * 4  # the solution, then 3 mutants
    assert sorted(p.name for p in (root / "solutions" / "toy" / "mutants").iterdir()) == [
        "__init__.py"]
    partial = mutation_run(FakeEngine(), toy, generation, {}, root, limit=2,
                           echo=lambda _: None)
    assert (partial.counts.total, partial.skipped, partial.complete) == (2, 2, False)
    assert spread(list(generation.mutants), 2) == [generation.mutants[0], generation.mutants[2]]

    class Failing(FakeEngine):
        def run(self, impls, timeout, on_verdict):
            on_verdict(impls[0][0], Verdict("killed", killed_by="t::a", reason="broken"))

    with pytest.raises(BaselineFailed, match="does not pass: killed: t::a: broken"):
        mutation_run(Failing(), toy, generation, {}, root, echo=lambda _: None)


# ---- the committed summary ---------------------------------------------------------------------

def test_summary_goes_stale_when_the_solution_or_the_generator_changes(tmp_path):
    root, toy = _toy(tmp_path)
    assert check_summary(toy, root) == [] and score_text(toy, root) == "-"
    counts = {"total": 4, "killed": 3, "survived": 1, "timed_out": 0, "error": 0,
              "equivalent": 0, "stillborn": 0}
    write_summary(Summary("toy", GENERATOR_VERSION, source_hash(toy, root), 0.75, counts), root)
    assert load_summary("toy", root).score == 0.75
    assert check_summary(toy, root) == [] and score_text(toy, root) == "75.0% (3/4)"
    path = root / "solutions" / "toy" / "toy.py"
    path.write_text(path.read_text() + "\n# edited\n")
    [problem] = check_summary(toy, root)
    assert "the solution changed since the mutation run" in problem
    assert score_text(toy, root).endswith(" stale")
    write_summary(Summary("toy", GENERATOR_VERSION - 1, source_hash(toy, root), 0.75, counts),
                  root)
    assert "made by generator" in check_summary(toy, root)[0]


@pytest.mark.parametrize("assignment_id", load_manifest().ids)
def test_committed_mutation_summary_matches_the_solution(assignment_id):
    assignment = load_manifest().get(assignment_id)
    if load_summary(assignment_id, REPO_ROOT) is None:
        pytest.skip(f"solutions/{assignment_id}/mutation_summary.json not made yet")
    assert check_summary(assignment, REPO_ROOT) == []


# ---- end to end: the real runner on the toy course ---------------------------------------------

def test_mutate_command_runs_the_toy_course_end_to_end(tmp_path, capsys):
    root, toy = _toy(tmp_path)
    out = tmp_path / "out"
    argv = ["--root", str(root), "mutate", "toy", "--suites", str(root / "suites")]
    assert main([*argv, "--list"]) == 0
    listed = capsys.readouterr().out
    assert "toy.py:3:cmp_flip:" in listed and "if b == 0:  →  if b != 0:" in listed
    assert "toy: 4 mutants (0 stillborn, 0 listed as equivalent)" in listed

    assert main([*argv, "--out", str(out), "--timeout", "120"]) == 0
    printed = capsys.readouterr().out
    assert "] 4/4 killed" in printed and "left:" in printed
    summary = json.loads((root / "solutions" / "toy" / "mutation_summary.json").read_text())
    assert summary["counts"] == {"total": 4, "killed": 3, "survived": 1, "timed_out": 0,
                                 "error": 0, "equivalent": 0, "stillborn": 0}
    assert summary["score"] == 0.75 and len(summary["survivors"]) == 1
    assert summary["survivors"][0].startswith("toy.py:3:const_nudge:")
    report = (out / "mutation" / "toy.md").read_text()
    assert "+    if b == 1:" in report and "test_add" in report
    assert check_summary(toy, root) == []
    assert main(["--root", str(root), "list"]) == 0
    assert "75.0% (3/4)" in capsys.readouterr().out


def test_an_edit_that_leaves_the_ast_as_it_was_is_no_mutant(monkeypatch):
    # The generation compares bytecode first and the AST only where the bytecode is the same:
    # comments, spacing and redundant parentheses must still drop out, real changes stay.
    source = "def f(x):\n    return x + 1\n"
    plus = source.index("+")
    edits = [Edit("const_nudge", plus + 3, plus + 3, "  # a comment", "f"),
             Edit("const_nudge", plus - 1, plus + 2, "+", "f"),
             Edit("const_nudge", plus + 2, plus + 3, "(1)", "f"),
             Edit("const_nudge", plus + 2, plus + 3, "2", "f"),
             Edit("const_nudge", plus + 2, plus + 3, "1.0", "f")]
    monkeypatch.setattr(generate_module, "find_edits", lambda text: edits)
    found = mutants_of_module("toy", "m", source)
    assert [m.after for m in found] == ["2", "1.0"]
