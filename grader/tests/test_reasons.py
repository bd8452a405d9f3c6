"""Reasons built by the parent (grader/session/reasons.py) and hidden rank functions sent anonymised
(harness/forkserver.py): what a stack walk in the rank finds, and what of it reaches a reason."""

from __future__ import annotations

import pickle
import sys
import textwrap
from pathlib import Path

import pytest

from grader.report.results import REASON_CHARS
from grader.session import reasons
from harness import forkserver
from harness.errors import NotImplementedInRank, RankFailure

HIDDEN_MODULE = '''\
"""Hidden helpers. The docstring line that must never be quoted back to a student."""

SECRET_SIZES = (17, 4099)
CASE_LABEL = "the hidden case label of the sweep"


def rank_secret_probe(ctx, calls):
    """Rank function whose docstring is private too."""
    table = {"kind": "a data string long enough to be scrubbed"}
    return [table, SECRET_SIZES]


def test_public_name_of_a_test():
    assert False, "a failure message that a failing test shows anyway"
'''


@pytest.fixture
def hidden_root(tmp_path) -> Path:
    folder = tmp_path / "suites" / "toy"
    folder.mkdir(parents=True)
    (folder / "_secret_ranks.py").write_text(HIDDEN_MODULE)
    return tmp_path / "suites"


def reason(exc: BaseException, root: Path) -> str:
    return reasons.failure_reason(exc, [root], root / "toy" / "test_x.py")[0]


def rank_failure(message: str, exc_type: str = "ValueError") -> RankFailure:
    return RankFailure(f"rank 0 of 2 raised {exc_type}: {message}\n--- traceback", rank=0,
                       exc_type=exc_type, message=message, traceback="", output_tail="")


def test_paths_names_constants_and_line_numbers_are_scrubbed(hidden_root):
    path = hidden_root / "toy" / "_secret_ranks.py"
    message = (f"{path}:12 in rank_secret_probe, File \"<hidden>\", line 7, SECRET_SIZES, "
               "CASE_LABEL=the hidden case label of the sweep, a data string long enough to be "
               "scrubbed, grader.suites.toy._secret_ranks, grader/suites/toy/x.py, "
               "_secret_ranks.py:3")
    text = reason(rank_failure(message), hidden_root)
    for needle in (str(hidden_root), "rank_secret_probe", "SECRET_SIZES", "CASE_LABEL",
                   "hidden case label", "data string", "grader.suites", "grader/suites",
                   "_secret_ranks", "line 7", ":12", ":3"):
        assert needle not in text, (needle, text)
    assert text.startswith("rank 0 of 2 raised ValueError: <hidden>")


def test_code_and_frame_reprs_are_scrubbed_even_when_cut(hidden_root):
    def probe():
        return sys._getframe()

    frame = probe()
    message = f"{frame.f_code!r} {frame!r} {probe!r} <frame at 0x7f00, file '<hidden>', line"
    text = reason(rank_failure(message), hidden_root)
    assert "0x" not in text and "file" not in text and "probe" not in text, text
    assert "<code>" in text and "<frame>" in text


def test_exception_class_names_are_scrubbed_too(hidden_root):
    text = reason(rank_failure("boom", exc_type="rank_secret_probe_SECRET_SIZES"), hidden_root)
    assert "SECRET" not in text and "rank_secret_probe" not in text


def test_messages_words_and_public_names_survive(hidden_root):
    kept = "a failure message that a failing test shows anyway"
    assert reason(AssertionError(kept), hidden_root) == kept
    plain = "ring_all_reduce(op='mean') on float32 gave no error; cache full after 3 steps"
    assert reason(AssertionError(plain), hidden_root) == plain
    text, kind = reasons.failure_reason(
        NotImplementedInRank("not implemented yet: ring_all_reduce (rank 0 of 4)\n...",
                             rank=0, exc_type="NotImplementedError", message="",
                             traceback="", output_tail=""), [hidden_root])
    assert (text, kind) == ("not implemented yet: ring_all_reduce (rank 0 of 4)",
                            "not_implemented")
    assert reasons.failure_reason(KeyError("x"), [hidden_root]) == ("KeyError: 'x'", "error")


def test_provided_modules_are_public_and_editable_modules_are_not(tmp_path, monkeypatch):
    """A name only a provided module uses (students read it) is public; the modules a student
    edits are not read: in a pull request's grading they hold the student's own words."""
    from grader.manifest import load_manifest

    a = next(a for a in load_manifest().assignments if a.provided)
    folder = tmp_path / "assignments" / a.id
    folder.mkdir(parents=True)
    (folder / f"{a.provided[0]}.py").write_text("zz_provided_word_17 = 1\n", encoding="utf-8")
    (folder / f"{a.modules[0]}.py").write_text("zz_student_word_17 = 1\n", encoding="utf-8")
    monkeypatch.setattr(reasons, "REPO_ROOT", tmp_path)
    reasons._public.cache_clear()
    try:
        words, _ = reasons._public()
    finally:
        reasons._public.cache_clear()
    assert "zz_provided_word_17" in words
    assert "zz_student_word_17" not in words


def test_invisible_characters_cannot_hide_a_name_from_the_scrub(hidden_root):
    text = reason(AssertionError("rank_secret\u200b_probe SECRET\u2060_SIZES"), hidden_root)
    assert "secret" not in text.lower(), text


def test_reasons_are_capped_and_a_cut_name_is_dropped(hidden_root):
    text = reason(AssertionError("x" * 5000 + " SECRET_SIZES"), hidden_root)
    assert len(text) <= REASON_CHARS
    long = "word " * (reasons.SCRUB_INPUT_CHARS // 5 - 1) + "rank_secret_probe"
    assert "rank_sec" not in reason(AssertionError(long), hidden_root)


def test_the_real_suites_keep_their_reasons():
    root = Path(reasons.__file__).resolve().parents[1] / "suites"
    test = root / "ring_allreduce" / "test_errors.py"
    message = ("ring_all_reduce(op='mean') on float32 gave no error; an unknown op must raise "
               "ValueError (ops are case-sensitive)")
    assert reasons.failure_reason(AssertionError(message), [root], test)[0] == message
    walked = reasons.failure_reason(AssertionError("op_errors chunk_errors GAP_FILL _ranks.py"),
                                    [root], test)[0]
    assert walked == "<hidden> <hidden> <hidden> <hidden>"


def test_hidden_rank_functions_travel_anonymised(hidden_root, monkeypatch):
    """What a stack walk in the rank would read: no file, no line, no docstring, no __file__."""
    monkeypatch.syspath_prepend(str(hidden_root.parent))
    (hidden_root / "__init__.py").write_text("")
    (hidden_root / "toy" / "__init__.py").write_text("")
    monkeypatch.setattr(forkserver, "BY_VALUE_PACKAGES", ["suites"])
    import importlib

    module = importlib.import_module("suites.toy._secret_ranks")
    try:
        data = forkserver.pickle_rank_function(module.rank_secret_probe)
    finally:
        for name in [n for n in sys.modules if n == "suites" or n.startswith("suites.")]:
            del sys.modules[name]
    assert str(hidden_root).encode() not in data and b"docstring" not in data
    fn = pickle.loads(data)
    assert fn.__code__.co_filename == forkserver.HIDDEN_FILENAME
    assert fn.__code__.co_firstlineno == 1 and fn.__doc__ is None
    assert "__file__" not in fn.__globals__
    assert fn(None, []) == [{"kind": "a data string long enough to be scrubbed"}, (17, 4099)]


def test_public_rank_functions_keep_their_file(tmp_path, monkeypatch):
    (tmp_path / "public_mod.py").write_text(textwrap.dedent('''\
        def rank_public(ctx):
            """Public."""
            return 1
        '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    import public_mod

    try:
        fn = pickle.loads(forkserver.pickle_rank_function(public_mod.rank_public))
    finally:
        del sys.modules["public_mod"]
    assert fn.__code__.co_filename.endswith("public_mod.py") and fn.__doc__ == "Public."


def test_a_hint_argument_in_a_hidden_suite_is_a_message(tmp_path):
    """`hint="..."` (assert_close and the suites' helpers) is failure text: it survives."""
    folder = tmp_path / "suites" / "toy"
    folder.mkdir(parents=True)
    (folder / "test_hint.py").write_text(
        'def test_x(check):\n'
        '    check(1, 2, hint="query head h reads KV head h // group")\n'
        '    check(1, 2, "a positional hint is a constant like any other")\n')
    message = ("out: query head h reads KV head h // group; a positional hint is a constant "
               "like any other")
    text = reasons.failure_reason(AssertionError(message), [tmp_path / "suites"],
                                  folder / "test_hint.py")[0]
    assert text == "out: query head h reads KV head h // group; <hidden>"


def test_text_a_hidden_message_names_is_a_message(tmp_path):
    """`what=`, a module constant passed as a hint (defined in the same module or another of
    the suite's) and a function's returned text that a message quotes are the suite's own
    failure text: they survive; other data does not."""
    folder = tmp_path / "suites" / "toy"
    folder.mkdir(parents=True)
    (folder / "_shared.py").write_text(
        'SHARED_HINT = "keep the padding past P zero in every bucket"\n')
    (folder / "test_named.py").write_text(textwrap.dedent('''\
        from ._shared import SHARED_HINT

        HINT = ("average the gradients over the ranks "
                "before the optimizer step")
        SECRET = "a secret data string of the suite"


        def _cause(got):
            if got > 1:
                return "the norm counts the padding past P"
            return "sum the squares of every shard"


        def test_x(check, got):
            check(1, 2, what="the consolidated state of dst", hint=HINT)
            assert got == 1, f"norm {got}: {_cause(got)}"
            check(SECRET, 2, hint="other")
            check(1, 2, hint=SHARED_HINT)
        '''))
    roots, path = [tmp_path / "suites"], folder / "test_named.py"
    for message in ("the consolidated state of dst: average the gradients over the ranks "
                    "before the optimizer step",
                    "norm 2: the norm counts the padding past P",
                    "norm 0: sum the squares of every shard",
                    "out: keep the padding past P zero in every bucket"):
        assert reasons.failure_reason(AssertionError(message), roots, path)[0] == message
    leaked = "got a secret data string of the suite"
    assert reasons.failure_reason(AssertionError(leaked), roots, path)[0] == "got <hidden>"


def test_a_declared_hint_is_never_blanked(tmp_path):
    """The declared channel (grader/session/reasons.py): a hint in a local variable, one passed by
    position to a hint-like parameter (gpt's `check(got, name, what, hint)`), a method's, a
    `label`/`what` dict and a `hint(...)` marker survive whole; other data does not."""
    folder = tmp_path / "suites" / "toy"
    folder.mkdir(parents=True)
    (folder / "test_declared.py").write_text(textwrap.dedent('''\
        SECRET = "a secret data string of the suite"


        def check(got, name, what, hint):
            assert got, f"{what}: {hint}"


        class Judge:
            def judge(self, got, what, *, cause=""):
                assert got, f"{what}: {cause}"


        def test_x(got):
            hint = "divide the all-reduced sum by N before the step"
            label = {"bad": "Zero3 with a world size that does not divide the rows"}
            assert got, f"{label['bad']}: {hint}"
            check(got, SECRET, "greedy generate with the KV cache",
                  "feed only the new token at its true position")
            Judge().judge(got, "the loaded optimizer state", cause="load the step count too")
            text = hint("keep the prompt out of the prefix statistics")
            assert got, text
        '''))
    roots, path = [tmp_path / "suites"], folder / "test_declared.py"
    for message in ("fc1.weight.grad: divide the all-reduced sum by N before the step",
                    "Zero3 with a world size that does not divide the rows: expected ValueError",
                    "greedy generate with the KV cache: feed only the new token at its true "
                    "position",
                    "the loaded optimizer state: load the step count too",
                    "keep the prompt out of the prefix statistics"):
        assert reasons.failure_reason(AssertionError(message), roots, path)[0] == message
    leaked = "got a secret data string of the suite"
    assert reasons.failure_reason(AssertionError(leaked), roots, path)[0] == "got <hidden>"


def _declared_hints(tree) -> list[str]:
    """The string constants of a suite's declared hints, found independently of
    grader/session/reasons.py's walk: `hint=`-like keywords and values bound to hint-like names."""
    import ast

    found: list[str] = []

    def texts(node):
        return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
                and isinstance(n.value, str)]

    for node in ast.walk(tree):
        keyword = isinstance(node, ast.keyword) and node.arg in ("hint", "what", "cause")
        bound = isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and reasons.is_hint_name(t.id) for t in node.targets)
        if keyword or bound:
            found += texts(node.value)
    return found


@pytest.mark.parametrize("assignment", sorted(
    p.name for p in (reasons.REPO_ROOT / "grader" / "suites").iterdir()
    if p.is_dir() and not p.name.startswith("_")))
def test_no_declared_hint_of_a_real_suite_is_blanked(assignment):
    """Every declared hint of the real hidden suites comes back from the scrub as it was."""
    import ast

    root = reasons.REPO_ROOT / "grader" / "suites"
    folder = root / assignment
    blanked = []
    for path in sorted(folder.glob("*.py")):
        for text in _declared_hints(ast.parse(path.read_text())):
            line = " ".join(text.split())
            if len(line) < reasons.MIN_CONSTANT_CHARS:
                continue
            got = reasons.failure_reason(AssertionError(line[:150]), [root],
                                         folder / "test_x.py")[0]
            if reasons.HIDDEN in got:
                blanked.append(f"{path.name}: {got}")
    assert not blanked, blanked[:5]


def test_a_label_bound_by_a_loop_over_a_literal_is_a_declared_hint(tmp_path):
    """`for label, ... in ((...), ...)` binds `label` to each item's text, which a message
    shows (ring_allreduce's shift cases said "ring_shift of <hidden>"); the loop's other data
    stays scrubbed."""
    folder = tmp_path / "suites" / "toy"
    folder.mkdir(parents=True)
    (folder / "test_loop.py").write_text(textwrap.dedent('''\
        def build(world_size):
            cases = []
            for label, layout in (("a transposed float64 tensor", "a secret layout name xyz"),
                                  ("an empty float32 tensor", "another secret layout abc")):
                cases.append((f"ring_shift of {label}", layout))
            return cases
        '''))
    roots, path = [tmp_path / "suites"], folder / "test_loop.py"
    for message in ("[rank 3 of 4] ring_shift of a transposed float64 tensor on group [1, 3]",
                    "ring_shift of an empty float32 tensor: made 2 sends"):
        assert reasons.failure_reason(AssertionError(message), roots, path)[0] == message
    leaked = "layout a secret layout name xyz"
    assert reasons.failure_reason(AssertionError(leaked), roots, path)[0] == "layout <hidden>"
