"""Scoring and the three report files: results.json (schema), summary.md, junit.xml."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from grader.report.gradescope import gradescope_json
from grader.report.render import (
    COMMENT_LIMIT,
    format_table,
    md_escape,
    summary_markdown,
    terminal_report,
    write_reports,
)
from grader.report.results import ResultsError, RunResult, error_summary
from grader.tests._fakes import entry, run_json, solution_tests, stub_tests

SCHEMA = json.loads(
    (Path(__file__).resolve().parent.parent / "schemas" / "results.schema.json").read_text()
)


def run_of(tests, **kwargs) -> RunResult:
    return RunResult.from_json(run_json(tests, **kwargs))


MIXED = [
    entry("test_basic", points=3, visibility="public"),
    entry("test_cost", "failed", points=5, reason="rank 2 sent 3 messages; a ring sends 2"),
    entry("test_setup", "error", points=2, reason="RuntimeError: fixture broke"),
    entry("test_skipped", "skipped", points=1, reason="needs hypothesis"),
    entry("test_speed", "skipped", points=4, not_graded_here=True,
          reason="not graded on this machine: needs a CUDA GPU"),
    entry("test_other", points=6, assignment="zero2"),
]


def validate(document: dict) -> None:
    jsonschema.validate(document, SCHEMA, cls=jsonschema.Draft202012Validator)


def test_scoring_counts_only_passes_and_drops_ungraded_gpu_points():
    run = run_of(MIXED)
    assert (run.score, run.max_score) == (9, 17)  # 3 + 6 of 3 + 5 + 2 + 1 + 6
    ring, zero2 = run.by_assignment(("zero2", "toy"))[::-1]
    assert (zero2.id, ring.id) == ("zero2", "toy")
    assert (ring.score, ring.max_score, ring.excluded_points) == (3, 11, 4)
    assert [ring.count(k) for k in ("passed", "failed", "excluded")] == [1, 3, 1]


def test_feedback_lines():
    tests = {t.name: t for t in run_of(MIXED + stub_tests()[:1]).tests}
    assert tests["test_basic"].feedback == ""
    assert tests["test_cost"].feedback == "rank 2 sent 3 messages; a ring sends 2"
    assert tests["test_skipped"].feedback == "skipped: needs hypothesis"
    assert tests["test_speed"].feedback == "not graded on this machine: needs a CUDA GPU"
    assert tests["test_add"].feedback == "not implemented yet: add: see README §1"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"outcome": "xfailed"}, r"tests\[0\]\.outcome: 'xfailed' is not one of"),
        ({"visibility": ""}, r"tests\[0\]\.visibility: '' is not public/hidden"),
        ({"points": "2"}, r"tests\[0\]\.points: expected int, got '2'"),
        ({"points": True}, r"tests\[0\]\.points: expected int, got True"),
        ({"points": -1}, r"tests\[0\]\.points: negative"),
        ({"not_implemented": 1}, r"tests\[0\]\.not_implemented: expected bool"),
        ({"duration": None}, r"tests\[0\]\.duration: expected int or float"),
    ],
)
def test_malformed_plugin_results_are_rejected_by_field(change, message):
    data = run_json([{**entry("test_a"), **change}])
    with pytest.raises(ResultsError, match=message):
        RunResult.from_json(data, "session.json")


def test_missing_results_file_is_a_results_error(tmp_path):
    with pytest.raises(ResultsError, match="wrote no results file"):
        RunResult.load(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    with pytest.raises(ResultsError, match="unreadable"):
        RunResult.load(tmp_path / "bad.json")
    with pytest.raises(ResultsError, match="exitstatus: missing"):
        RunResult.from_json({"impl": "x", "tests": [], "collection_errors": []})


@pytest.mark.parametrize("tests", [MIXED, stub_tests(), solution_tests(), []],
                         ids=["mixed", "stub", "solution", "empty"])
def test_results_json_follows_the_schema(tests):
    document = gradescope_json(run_of(tests, collection_errors=["x.py: ImportError\nline 2"]))
    validate(document)
    assert document["score"] == sum(t["score"] for t in document["tests"])


def test_results_json_for_the_stub_scores_zero_with_not_implemented():
    document = gradescope_json(run_of(stub_tests()))
    assert document["score"] == 0
    graded = [t for t in document["tests"] if t["max_score"]]
    assert graded and all(t["output"].startswith("not implemented yet") for t in graded)
    gpu = next(t for t in document["tests"] if t["name"] == "toy: test_on_gpu")
    assert (gpu["score"], gpu["max_score"], gpu["status"]) == (0, 0, "failed")
    assert "excluded from the maximum" in gpu["output"]
    assert document["extra_data"]["max_score"] == 4


def test_hidden_tests_do_not_leak_their_node_id():
    document = gradescope_json(run_of(MIXED))
    by_name = {t["name"]: t for t in document["tests"]}
    assert by_name["toy: test_basic"]["extra_data"]["nodeid"].startswith("assignments/toy/")
    assert by_name["toy: test_cost"]["extra_data"]["nodeid"] == ""


def test_md_escape_neutralises_markup_html_and_mentions():
    text = md_escape("a|b <script>x</script> @octocat `code` *bold* [link](u)\nnext")
    assert "\n" not in text and "<" not in text and "@octocat" not in text
    assert "\\|" in text and "\\`code\\`" in text and "\\*bold\\*" in text
    assert "|" not in text.replace("\\|", "")


def test_summary_has_a_table_per_assignment_and_the_gpu_note():
    summary = summary_markdown(run_of(MIXED), {"toy": "Toy | adder"})
    assert summary.startswith("## mlsys-labs grade: 9 / 17")
    assert "| toy: Toy \\| adder | 3 / 11 | 1 | 3 | 1 |" in summary
    assert "### toy: 3 / 11" in summary and "### zero2: 6 / 6" in summary
    row = "| test\\_cost | hidden | 0 / 5 | ❌ `rank 2 sent 3 messages; a ring sends 2` |"
    assert row in summary
    assert "excluded from the maximum" in summary
    for line in summary.splitlines():
        if line.startswith("| test"):
            assert line.count(" | ") == 3, line  # every row has exactly four cells


def test_summary_is_truncated_to_fit_a_comment():
    reason = "x|y " * 60
    tests = [entry(f"test_{i:04d}", "failed", reason=reason) for i in range(2000)]
    summary = summary_markdown(run_of(tests))
    assert len(summary) <= COMMENT_LIMIT
    assert "Report truncated" in summary and "of 2000 test rows shown" in summary
    small = summary_markdown(run_of(tests[:5]))
    assert "truncated" not in small


def test_collection_errors_show_where_and_the_exception_only():
    error = ("suites/toy/test_x.py: in <module>\n    SECRET = [3, 1, 4]\n"
             "E   ModuleNotFoundError: No module named 'foo'")
    expected = "suites/toy/test_x.py: ModuleNotFoundError: No module named 'foo'"
    assert error_summary(error) == expected
    summary = summary_markdown(run_of([], collection_errors=[error] * 12))
    assert "could not collect" in summary and "SECRET" not in summary
    assert summary.count("No module named") == 10 and "… and 2 more" in summary
    document = gradescope_json(run_of([], collection_errors=[error]))
    assert document["extra_data"]["collection_errors"] == [error_summary(error)]


def test_junit_xml_parses_and_counts(tmp_path):
    write_reports(run_of(MIXED), tmp_path)
    root = ET.parse(tmp_path / "junit.xml").getroot()
    toy = root.find("testsuite[@name='toy']")
    assert {k: toy.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "5", "failures": "1", "errors": "1", "skipped": "2"}
    cost = toy.find("testcase[@name='test_cost']")
    assert cost.find("failure").get("message").startswith("rank 2 sent")
    assert cost.find("properties/property[@name='points']").get("value") == "5"
    validate(json.loads((tmp_path / "results.json").read_text(encoding="utf-8")))
    assert (tmp_path / "summary.md").read_text(encoding="utf-8").startswith("## mlsys-labs")


def test_junit_xml_survives_control_characters(tmp_path):
    write_reports(run_of([entry("test_a", "failed", reason="bad\x00byte\x1b[31m")]), tmp_path)
    ET.parse(tmp_path / "junit.xml")


def test_terminal_report_shows_each_test_and_totals():
    text = terminal_report(run_of(MIXED))
    assert "test_cost" in text and "FAIL" in text and "n/a" in text
    assert "total       9/17" in text
    assert "4 points of GPU-only tests not graded on this machine" in text


def test_format_table_aligns_columns():
    table = format_table(["name", "n"], [["a", 1], ["long name", 10]])
    lines = table.splitlines()
    assert lines[0] == "name        n"
    assert lines[2] == "a           1"
    assert lines[3] == "long name  10"


def test_reports_list_public_tests_first_then_in_natural_node_order():
    tests = [entry("test_b[10]"), entry("test_b[2]"), entry("test_a", visibility="public"),
             entry("test_a")]
    [toy] = run_of(tests).by_assignment()
    assert [(t.visibility, t.name) for t in toy.tests] == [
        ("public", "test_a"), ("hidden", "test_a"), ("hidden", "test_b[2]"),
        ("hidden", "test_b[10]")]


def test_reports_follow_the_suites_order_when_known():
    """`order` (the collection index) beats the node id: teaching order, not alphabetical."""
    tests = [{**entry("test_a_integration"), "order": 3}, {**entry("test_z_unit"), "order": 2},
             {**entry("test_m", visibility="public"), "order": 9}]
    [toy] = run_of(tests).by_assignment()
    assert [t.name for t in toy.tests] == ["test_m", "test_z_unit", "test_a_integration"]
