"""Selfcheck: the judging rules on fake sessions, and one real run on a toy course."""

from __future__ import annotations

import re

import pytest

import grader.instructor.sessions as sessions_module
from grader.instructor.selfcheck import (
    MARGIN_RUNS,
    MarginReport,
    judge_mutant,
    judge_points,
    judge_solution,
    judge_stub,
    mutant_names,
    plan,
    selfcheck,
)
from grader.manifest import load_manifest
from grader.report.results import RunResult
from grader.session.runner import Session
from grader.tests._fakes import (
    SOLUTION,
    entry,
    make_course,
    run_json,
    session,
    solution_tests,
    stub_tests,
)

NOT_IMPL = "not implemented yet: add: see README §1"


def test_solution_must_pass_every_graded_test():
    assert judge_solution(session(solution_tests(), impl="solutions")) == []
    failing = solution_tests()
    failing[0] = entry("test_add", "failed", points=2, reason="add(2, 3) should be 5")
    [breach] = judge_solution(session(failing, impl="solutions"))
    assert "solution fails suites/toy/test_x.py::test_add: add(2, 3) should be 5" in breach


def test_stub_must_fail_every_test_with_not_implemented():
    assert judge_stub(session(stub_tests())) == []
    tests = stub_tests()
    tests[1] = entry("test_zero[0]")  # passes on the stub
    tests[2] = entry("test_zero[7]", "failed", reason="TypeError: bad")  # a crash
    breaches = judge_stub(session(tests))
    assert len(breaches) == 2
    assert "stub passes suites/toy/test_x.py::test_zero[0]" in breaches[0]
    assert "for another reason than 'not implemented': TypeError: bad" in breaches[1]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"timed_out": True, "problem": "ran past 5 s"}, "the session hung and was killed"),
        ({"problem": "pytest exited with 4 (usage error)"}, "usage error"),
        ({"collection_errors": ["suites/toy/test_x.py: in <module>\n    x = (\nE   SyntaxError: "
                                "'(' was never closed"]},
         "collection error: suites/toy/test_x.py: SyntaxError: '(' was never closed"),
    ],
)
def test_a_broken_session_is_a_breach(kwargs, expected):
    breaches = judge_stub(session(stub_tests(), **kwargs))
    assert any(expected in b for b in breaches), breaches


def test_no_results_or_no_tests_is_a_breach():
    assert judge_solution(session(None, problem="no results file")) == [
        "solution: no results file"]
    assert judge_stub(session([])) == ["stub: no graded test was collected"]


def test_a_mutant_must_lose_points_and_the_catching_test_is_named():
    caught = [entry("test_add", "failed", points=2, reason="add(2, 3) should be 5")]
    line, breaches = judge_mutant(session(caught), "off_by_one")
    assert breaches == []
    assert line == ("mutant off_by_one: caught by suites/toy/test_x.py::test_add "
                    "(add(2, 3) should be 5)")
    line, breaches = judge_mutant(session(solution_tests()), "harmless")
    assert line == ""
    assert breaches == ["mutant harmless passes every test: no test catches it"]


def test_points_must_add_up_to_the_manifest(tmp_path):
    course = load_manifest(make_course(tmp_path, points=8) / "assignments" / "course.toml")
    toy = course.get("toy")
    assert judge_points(session(stub_tests()).result, toy) == []
    short = stub_tests()[:-1]
    public = stub_tests() + [entry("test_pub", visibility="public", points=2)]
    assert judge_points(session(short).result, toy) == [
        "suites carry 4 points, the manifest says points = 8"]
    assert judge_points(session(public).result, toy)[1] == (
        "public tests carry 2 points, the manifest says public_points = 0")


def test_plan_runs_solutions_then_stubs_then_margins_then_each_mutant(tmp_path):
    root = make_course(tmp_path, mutants={"b_bad": "MUTATES = 'toy'\n", "a_bad": ""})
    course = load_manifest(root / "assignments" / "course.toml")
    assert mutant_names("toy", root) == ["a_bad", "b_bad"]
    jobs = plan(course, [], root, root / "suites")
    assert [(j.kind, j.impl.text, j.extra_args) for j in jobs] == [
        ("solution", "solutions", ()), ("stub", "assignments", ()),
        *[("margin", "solutions", ("--seed-shift", str(shift), "--rank-threads", str(threads),
                                   "-m", "not no_tolerance"))
          for shift, threads in MARGIN_RUNS],
        ("mutant", "mutant:toy/a_bad", ()), ("mutant", "mutant:toy/b_bad", ())]
    assert jobs[0].paths == (root / "suites" / "toy",)
    assert {threads for _, threads in MARGIN_RUNS} == {1, 2} and len(MARGIN_RUNS) >= 2


def with_margin(entry_: dict, ratio: float, where: str = "out") -> dict:
    return {**entry_, "margin": ratio, "margin_at": where}


def test_margin_report_takes_the_worst_run_and_breaches_above_half():
    report = MarginReport()
    base = solution_tests()
    report.add(session([with_margin(base[0], 0.1), *base[1:]]).result, (0, 1))
    report.add(session([with_margin(base[0], 0.3, "lse"), *base[1:]]).result, (1, 2))
    assert report.breaches() == []
    assert report.worst_ratio == 0.3
    assert report.summary() == ("worst 0.30 in test_x.py::test_add: lse [seeds shifted by 1, "
                                "2 threads per rank]")
    report.add(session([with_margin(base[0], 0.7, "out[3]"), *base[1:]]).result, (2, 1))
    [breach] = report.breaches()
    assert breach.startswith("suites/toy/test_x.py::test_add: the solution uses 0.70 of its "
                             "tolerance at out[3] [seeds shifted by 2, 1 thread per rank]")
    assert "passes by luck" in breach
    assert MarginReport().summary() == "no toleranced comparison"


def fake_sessions(monkeypatch, sessions: dict):
    """Replace the pytest subprocess with canned sessions keyed by --impl (a session of several
    implementations is put together from theirs); `calls` records (impl, stops first) pairs."""
    calls = []

    def canned(impl, extra):
        key = f"{impl.text} {' '.join(extra)}".strip()
        if impl.kind == "dir" and impl.text in sessions:  # the independent implementation
            return sessions[impl.text]
        if impl.kind == "dir":  # a partial-credit variant: the solution with one name stubbed
            return sessions.get("partial", sessions.get("assignments"))
        return sessions.get(key, sessions.get(impl.text))

    def fake_run_session(paths, impl, *, stop_first=False, **kwargs):
        extra = kwargs.get("extra", ())
        if not isinstance(impl, list):
            calls.append((impl.text, stop_first))
            return canned(impl, extra)
        calls.extend((i.text, i in stop_first) for i in impl)
        parts = [canned(i, extra) for i in impl]
        results = tuple(RunResult(i.text, p.result.tests) for i, p in zip(impl, parts)
                        if p is not None and p.result is not None)
        problems = [p.problem for p in parts if p is not None and p.problem]
        return Session(1, any(p.timed_out for p in parts if p), 0.5, "",
                       results[0] if results else None, problems[0] if problems else "",
                       results)

    monkeypatch.setattr(sessions_module, "run_session", fake_run_session)
    return calls


def run_selfcheck(root, together: bool = True):
    course = load_manifest(root / "assignments" / "course.toml")
    lines: list[str] = []
    code = selfcheck(course, [], root, root / "suites", jobs=2, echo=lines.append,
                     together=together)
    return code, "\n".join(lines)


def test_selfcheck_passes_a_sound_course(tmp_path, monkeypatch):
    root = make_course(tmp_path, mutants={"off_by_one": 'FEEDBACK = "no"\n'})
    calls = fake_sessions(monkeypatch, {
        "solutions": session([with_margin(solution_tests()[0], 0.1), *solution_tests()[1:]],
                             impl="solutions"),
        "assignments": session(stub_tests()),
        "mutant:toy/off_by_one": session([entry("test_add", "failed", points=2, reason="no")]),
    })
    code, output = run_selfcheck(root)
    assert code == 0, output
    partial = [c for c in calls if c[0].endswith("/add")]
    assert len(partial) == 1 and not partial[0][1]  # one variant, run to the end
    assert sorted(c for c in calls if c not in partial) == [
        ("assignments", False), ("mutant:toy/off_by_one", True),
        *[("solutions", False)] * (1 + len(MARGIN_RUNS))]
    assert "mutant:toy/off_by_one: caught by suites/toy/test_x.py::test_add (no)" in output
    assert ("toy         ✓           ✓       ✓         ✓     -            ✓ 1/1 caught  ✓ 1/1     "
            "✓ 1/1") in output
    assert "  toy: worst 0.10 in test_x.py::test_add: out" in output
    assert "selfcheck passed in" in output.splitlines()[-1]


def test_selfcheck_reports_every_breach(tmp_path, monkeypatch):
    stub = "def add(a: int, b: int = 1) -> int:\n    raise NotImplementedError\n"
    root = make_course(tmp_path, points=9, stub=stub, mutants={"harmless": ""})
    fake_sessions(monkeypatch, {
        "solutions": session(solution_tests(), impl="solutions"),
        "assignments": session(stub_tests(), timed_out=True, problem="ran past 600 s"),
        "mutant:toy/harmless": session(solution_tests()),
    })
    code, output = run_selfcheck(root, together=False)  # the stub's hang is its own
    assert code == 1
    breaches = output.split("Breaches:")[1]
    assert "toy signatures: toy.py: add: stub has `def add(a: int, b: int = 1) -> int`" in breaches
    assert "toy points: suites carry 8 points, the manifest says points = 9" in breaches
    assert "toy stub: stub: the session hung and was killed" in breaches
    assert "toy mutants: mutant harmless passes every test" in breaches
    assert "toy         ✗           ✗       ✓         ✗     -            ✗ 0/1 caught" in output


def test_a_solution_that_fails_or_is_close_to_its_tolerance_in_a_margin_run_is_a_breach(
        tmp_path, monkeypatch):
    root = make_course(tmp_path, mutants={"off_by_one": 'FEEDBACK = "no"\n'})
    shift, threads = MARGIN_RUNS[0]
    varied = f"solutions --seed-shift {shift} --rank-threads {threads} -m not no_tolerance"
    base = solution_tests()
    failing = [entry("test_add", "failed", points=2, reason="out: differs by 3e-5"), *base[1:]]
    fake_sessions(monkeypatch, {
        "solutions": session([with_margin(base[0], 0.6, "out"), *base[1:]], impl="solutions"),
        varied: session(failing, impl="solutions"),
        "assignments": session(stub_tests()),
        "mutant:toy/off_by_one": session([entry("test_add", "failed", points=2, reason="no")]),
    })
    code, output = run_selfcheck(root)
    assert code == 1
    breaches = output.split("Breaches:")[1]
    assert (f"toy margins: with seeds shifted by {shift}, {threads} threads per rank: solution "
            "fails suites/toy/test_x.py::test_add: out: differs by 3e-5") in breaches
    assert "toy margins: suites/toy/test_x.py::test_add: the solution uses 0.60" in breaches


def test_selfcheck_needs_mutants_and_a_stub_module(tmp_path, monkeypatch):
    root = make_course(tmp_path)
    (root / "assignments" / "toy" / "toy.py").unlink()
    fake_sessions(monkeypatch, {
        "solutions": session(solution_tests(), impl="solutions"),
        "assignments": session(stub_tests()),
    })
    code, output = run_selfcheck(root)
    assert code == 1
    assert "toy.py: " in output and "toy.py is missing" in output
    assert "mutants/ has no mutant" in output


def test_an_assignment_without_any_tests_is_a_breach(tmp_path, monkeypatch):
    root = make_course(tmp_path, mutants={"m": ""})
    for path in (root / "suites" / "toy").glob("test_*.py"):
        path.unlink()
    calls = fake_sessions(monkeypatch, {})
    code, output = run_selfcheck(root)
    assert code == 1 and calls == []
    assert "toy points: no tests: neither assignments/toy/test_public.py nor" in output


def test_selfcheck_end_to_end_on_a_toy_course(tmp_path):
    """Real pytest sessions (solution and stub) through the plugin; no mutants to run here."""
    root = make_course(tmp_path)
    code, output = run_selfcheck(root)
    assert code == 1, output  # the one breach: the toy course has no mutants
    assert "toy solution: ok" in output and "toy stub: ok" in output
    assert "toy         ✓           ✓       ✓         ✓     -            ✗" in output
    assert "toy solution (seeds shifted by 1, 2 threads per rank): ok" in output
    assert "  toy: worst 0.00 in test_toy.py::test_add_close: add(0.5, 0.25)" in output
    assert output.count("\n  - ") == 1 and "has no mutant" in output
    assert "selfcheck FAILED: 1 breach(es)" in output
    assert re.search(r"Work \(pytest sessions, harness launches, tests run.*: toy \d+ / 0 / \d+",
                     output), output


def test_work_counts_sessions_launches_and_the_tests_each_implementation_ran():
    from grader.instructor.selfcheck import Job, count_work
    from harness.impl import resolve_impl

    def run(impl: str, launches: int, tests: list[dict]) -> Session:
        data = run_json(tests, impl)
        data["timing"] = {"launches": float(launches), "session": 1.0}
        return Session(1, False, 1.0, "", RunResult.from_json(data))

    solution = Job("toy", "solution", resolve_impl("solutions"), ())
    mutant = Job("toy", "mutant", resolve_impl("assignments"), ())
    work: dict[str, list[int]] = {}
    inferred = dict(entry("test_b"), inferred=True)
    count_work(work, [(solution, run("solutions", 5, solution_tests())),
                      (mutant, run("assignments", 5, [entry("test_a"), inferred]))])
    # one session, its launches once; 3 graded + 1 skipped here, and the mutant's one not inferred
    assert work == {"toy": [1, 5, 3 + 1]}


def test_a_mutant_whose_first_failure_does_not_say_its_feedback_is_a_breach(tmp_path, monkeypatch):
    root = make_course(tmp_path, mutants={
        "said": 'FEEDBACK = ("add(2, 3)", "should be 5")\n', "unsaid": 'FEEDBACK = "average"\n',
        "silent": ""})
    caught = session([entry("test_add", "failed", points=2, reason="add(2, 3) should be 5")])
    fake_sessions(monkeypatch, {
        "solutions": session(solution_tests(), impl="solutions"),
        "assignments": session(stub_tests()),
        **{f"mutant:toy/{name}": caught for name in ("said", "unsaid", "silent")},
    })
    code, output = run_selfcheck(root)
    breaches = output.split("Breaches:")[1]
    assert code == 1
    assert ("toy feedback: mutant unsaid: the first failing test says 'add(2, 3) should be 5'; "
            "a student with this bug must be told 'average'") in breaches
    assert "mutant silent" not in breaches and "mutant said" not in breaches
    assert "Mutants that state no FEEDBACK yet" in output and "  toy: silent" in output
    assert "✗ 1/2 +1?" in output


def test_partial_credit_breaches_name_the_test_that_loses_too_much_or_too_little(
        tmp_path, monkeypatch):
    root = make_course(tmp_path, mutants={"off_by_one": 'FEEDBACK = "no"\n'})
    unrelated = solution_tests()
    unrelated[1] = entry("test_zero[0]", exercises=("sub",))  # fails though it declares sub
    declared_but_passing = [entry("test_add", points=2), *solution_tests()[1:]]
    stubbed = [entry("test_add", "failed", points=2, reason="not implemented yet: add"),
               entry("test_zero[0]", "failed", reason="not implemented yet: add",
                     exercises=("sub",)),
               *stub_tests()[2:]]
    fake_sessions(monkeypatch, {
        "solutions": session(unrelated, impl="solutions"),
        "assignments": session(stub_tests()),
        "partial": session(stubbed),
        "mutant:toy/off_by_one": session([entry("test_add", "failed", points=2, reason="no")]),
    })
    code, output = run_selfcheck(root)
    breaches = output.split("Breaches:")[1]
    assert ("suites/toy/test_x.py::test_zero[0] loses 1 point(s) when only add is a stub, though "
            "it exercises ['sub']") in breaches
    fake_sessions(monkeypatch, {
        "solutions": session(solution_tests(), impl="solutions"),
        "assignments": session(stub_tests()),
        "partial": session(declared_but_passing),
        "mutant:toy/off_by_one": session([entry("test_add", "failed", points=2, reason="no")]),
    })
    code, output = run_selfcheck(root)
    assert ("suites/toy/test_x.py::test_add declares it exercises add, yet passes with add "
            "stubbed") in output


def test_margin_runs_rerun_only_the_tests_that_compared_with_a_tolerance(tmp_path):
    from grader.instructor.selfcheck import Batch, narrow_to_margins

    root = make_course(tmp_path)
    course = load_manifest(root / "assignments" / "course.toml")
    margin_jobs = [j for j in plan(course, [], root, root / "suites") if j.kind == "margin"]
    batch = Batch((margin_jobs[0],))
    run = session([with_margin(solution_tests()[0], 0.1), *solution_tests()[1:]]).result
    narrowed = narrow_to_margins(batch, run)
    assert narrowed is not None and narrowed.jobs[0].paths == ("suites/toy/test_x.py::test_add",)
    assert narrow_to_margins(batch, session(solution_tests()).result) is None
    assert narrow_to_margins(batch, None) is batch


def test_later_margin_runs_redraw_only_the_tests_near_the_limit(tmp_path):
    """The first margin run reruns every toleranced test; a later one only those whose graded
    margin reached REDRAW_FLOOR (a margin moves little between draws)."""
    from grader.instructor.sessions import REDRAW_FLOOR, Batch, narrow_to_margins

    root = make_course(tmp_path)
    course = load_manifest(root / "assignments" / "course.toml")
    first, later = [j for j in plan(course, [], root, root / "suites") if j.kind == "margin"][:2]
    assert first.variation == MARGIN_RUNS[0] and later.variation == MARGIN_RUNS[1]
    tests = solution_tests()
    low = session([with_margin(tests[0], REDRAW_FLOOR / 2), *tests[1:]]).result
    high = session([with_margin(tests[0], REDRAW_FLOOR), *tests[1:]]).result
    assert narrow_to_margins(Batch((first,)), low) is not None
    assert narrow_to_margins(Batch((later,)), low) is None
    narrowed = narrow_to_margins(Batch((later,)), high)
    assert narrowed is not None and narrowed.jobs[0].paths == ("suites/toy/test_x.py::test_add",)


def test_margin_runs_of_several_assignments_share_one_session_per_variation(tmp_path,
                                                                          monkeypatch):
    """Each assignment's margin runs wait for its solution's run; once nothing else is left to
    start, those of one variation run in one session over all the assignments that are ready,
    and each assignment judges only its own tests."""
    from grader.instructor.sessions import Batch, Job, run_all
    from harness.impl import resolve_impl

    root = make_course(tmp_path)
    solutions = resolve_impl("solutions", root)
    ids = ("a", "b", "c")
    calls: list[tuple[tuple, tuple]] = []

    def fake_run_session(paths, impl, *, stop_first=False, extra=(), **kwargs):
        calls.append((tuple(str(p) for p in paths), tuple(extra)))
        tests = [with_margin(entry("test_add", assignment=aid, points=2), 0.1)
                 for aid in ids if any(f"/{aid}/" in str(p) for p in paths)]
        return session(tests, impl="solutions")

    monkeypatch.setattr(sessions_module, "run_session", fake_run_session)
    jobs = [Job(aid, "solution", solutions, (f"suites/{aid}/",)) for aid in ids]
    jobs += [Job(aid, "margin", solutions, (f"suites/{aid}/",), variation)
             for aid in ids for variation in MARGIN_RUNS]
    seen: list[tuple[str, str, tuple[int, int], int]] = []

    def on_batch(batch: Batch, views) -> None:
        seen.extend((job.assignment, job.kind, job.variation, len(view.result.tests))
                    for job, view in views)

    sessions = [Batch((job,)) for job in jobs]
    run_all(sessions, on_batch, jobs=1, timeout=60.0, root=root, suites=None)
    margin_calls = [paths for paths, extra in calls if extra]
    assert len(calls) == 3 + len(MARGIN_RUNS) and len(margin_calls) == len(MARGIN_RUNS)
    assert all(paths == tuple(f"suites/{aid}/test_x.py::test_add" for aid in ids)
               for paths in margin_calls)
    assert sorted(seen) == sorted([(aid, "solution", (0, 1), 1) for aid in ids] + [
        (aid, "margin", variation, 1) for aid in ids for variation in MARGIN_RUNS])
    calls.clear()
    run_all(sessions, on_batch, jobs=1, timeout=60.0, root=root, suites=None,
            merge_margins=False)
    assert len(calls) == 3 + 3 * len(MARGIN_RUNS)


def test_bench_selfcheck_prints_both_ways_per_assignment_and_every_mutant(tmp_path):
    from grader.instructor.bench.selfcheck import WayResult, report, verdict_of
    from grader.instructor.sessions import Job
    from harness.impl import resolve_impl

    root = make_course(tmp_path, mutants={"off_by_one": ""})
    mutant = Job("toy", "mutant", resolve_impl("mutant:toy/off_by_one", root), ())
    caught = session([entry("test_add", "failed", points=2, reason="no")])
    assert verdict_of(mutant, caught) == "suites/toy/test_x.py::test_add"
    assert verdict_of(mutant, session(solution_tests())).startswith("NOT CAUGHT")
    stub = Job("toy", "stub", resolve_impl("assignments", root), ())
    assert verdict_of(stub, session(stub_tests())) == "ok"
    old = WayResult(wall_s=90.0, cpu_s=150.0, sessions=9, per_assignment={"toy": 180.0},
                    sessions_of={"toy": 9},
                    verdicts={"toy stub": "ok", mutant.label: "suites/toy/test_x.py::test_add"})
    new = WayResult(wall_s=30.0, cpu_s=50.0, sessions=2, per_assignment={"toy": 60.0},
                    sessions_of={"toy": 2}, verdicts=dict(old.verdicts))
    lines: list[str] = []
    assert report(old, new, (5.0, 8.0), lines.append) == 0
    text = "\n".join(lines)
    assert "speed-up: 3.00x wall (meets the 3x target), 3.00x CPU" in text
    assert "toy                    9  180.0             2   60.0  3.00x" in text
    assert "toy mutant:toy/off_by_one: suites/toy/test_x.py::test_add" in text
    assert "every verdict is the same both ways" in text
    new.verdicts[mutant.label] = "NOT CAUGHT []"
    lines.clear()
    assert report(old, new, (5.0, 8.0), lines.append) == 1
    assert "[old: suites/toy/test_x.py::test_add]" in "\n".join(lines)


def test_a_session_over_several_assignments_is_judged_per_assignment():
    tests = [entry("test_add", assignment="a"), entry("test_add", assignment="b")]
    errors = ["grader/suites/b/test_y.py: SyntaxError", "pytest: something broke"]
    merged = session(tests, impl="solutions", collection_errors=errors)
    only_a = merged.for_assignment("a")
    assert [t.assignment for t in only_a.result.tests] == ["a"]
    assert only_a.result.collection_errors == ("pytest: something broke",)
    assert merged.for_assignment("b").result.collection_errors == tuple(errors)
    assert only_a.wall_s == merged.wall_s and only_a.results == (only_a.result,)
    assert session(None, problem="no results").for_assignment("a").problem == "no results"


def test_merged_margin_runs_are_balanced_over_the_free_workers():
    """Margin runs ready together fill every free worker, the costliest first, each to the
    cheapest group so far; an assignment in SOLO_MARGINS keeps a session of its own."""
    from grader.instructor.sessions import SOLO_MARGINS, Job, balanced
    from harness.impl import resolve_impl

    solutions = resolve_impl("solutions")
    todo = [Job(aid, "margin", solutions, (f"suites/{aid}/",), MARGIN_RUNS[0])
            for aid in ("a", "b", "c", "d")]
    cost = {"a": 9.0, "b": 5.0, "c": 4.0, "d": 1.0}
    groups = balanced(todo, 2, cost)
    assert [[job.assignment for job in group] for group in groups] == [["a", "d"], ["b", "c"]]
    assert balanced(todo[:1], 3, cost) == [(todo[0],)]
    assert len(balanced(todo, 1, cost)) == 1
    assert "triton_kernels" in SOLO_MARGINS


def test_an_independent_implementation_must_get_every_point_but_what_it_skips(
        tmp_path, monkeypatch):
    """grader/tests/independent/<id>/ is graded in the solution's session; it must pass every
    test except those its NOT_ATTEMPTED lists, which must score nothing."""
    root = make_course(tmp_path, mutants={"off_by_one": 'FEEDBACK = "no"\n'})
    folder = root / "grader" / "tests" / "independent"
    (folder / "toy").mkdir(parents=True)
    (folder / "toy" / "toy.py").write_text(SOLUTION)
    base = solution_tests()
    assert len(base) > 1, "the toy suite has more than one test"
    lost = [entry(t["name"], "failed", points=t["points"], reason="differs") for t in base[1:]]
    fake_sessions(monkeypatch, {
        "solutions": session(base, impl="solutions"),
        "assignments": session(stub_tests()),
        str(folder): session([base[0], *lost], impl=str(folder)),
        "mutant:toy/off_by_one": session([entry("test_add", "failed", points=2, reason="no")]),
    })
    code, output = run_selfcheck(root)
    assert code == 1 and "independent implementation (a correct one) fails" in output, output
    (folder / "toy" / "NOT_ATTEMPTED").write_text(
        "".join(f"{t['name']}  # a stretch part\n" for t in lost))
    code, output = run_selfcheck(root)
    assert code == 0, output
    assert "toy independent implementation: ok" in output
