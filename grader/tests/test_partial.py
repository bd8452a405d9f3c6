"""Stubbing one public name (grader/instructor/partial.py): the one owner of it, used by
selfcheck's partial-credit variants and by `python -m grader.tests.stub_one`."""

from __future__ import annotations

import ast

import pytest

from grader.instructor.partial import STUB_MESSAGE, stubbed_source

SOURCE = '''
class Pool:
    """A pool."""

    def allocate(self, n):
        """Take n blocks."""
        return n

    def free(self, n):
        return -n


def helper(x):
    return x + 1
'''


def _bodies(source: str) -> dict[str, str]:
    """{qualified name: unparsed body} of every function in `source`."""
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = ast.unparse(node.body)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    found[f"{node.name}.{item.name}"] = ast.unparse(item.body)
    return found


def test_a_function_is_stubbed_alone_with_the_partial_credit_message():
    bodies = _bodies(stubbed_source(SOURCE, "helper"))
    assert bodies["helper"] == f"raise NotImplementedError({STUB_MESSAGE.format(name='helper')!r})"
    assert bodies["Pool.allocate"] == _bodies(SOURCE)["Pool.allocate"]


def test_a_class_loses_every_method_and_keeps_its_docstrings():
    bodies = _bodies(stubbed_source(SOURCE, "Pool"))
    assert bodies["Pool.allocate"].startswith("'Take n blocks.'\nraise NotImplementedError(")
    assert bodies["Pool.free"].startswith("raise NotImplementedError(")
    assert bodies["helper"] == "return x + 1"


def test_one_method_is_stubbed_with_the_given_message():
    bodies = _bodies(stubbed_source(SOURCE, "Pool.free", "Pool.free: see README"))
    assert bodies["Pool.free"] == "raise NotImplementedError('Pool.free: see README')"
    assert bodies["Pool.allocate"] == _bodies(SOURCE)["Pool.allocate"]


@pytest.mark.parametrize("name", ["missing", "Pool.missing", "Missing.free"])
def test_a_name_the_source_lacks_is_refused(name):
    with pytest.raises(ValueError, match="to stub"):
        stubbed_source(SOURCE, name)


def test_a_mostly_hidden_first_line_is_a_feedback_breach():
    """A reason the scrub blanked teaches nothing, whatever FEEDBACK it happens to contain."""
    from grader.instructor.partial import feedback_breach, mostly_hidden

    blanked = "<hidden>: <hidden> — first differs at new token 2"
    assert mostly_hidden(blanked) and mostly_hidden("top-k: <hidden> <hidden> at 2")
    assert feedback_breach("topk", ("differs",), blanked)
    said = "top-k sampling: keep the top_k largest logits — first differs at new token 2"
    assert not mostly_hidden(said) and feedback_breach("topk", ("top_k",), said) == ""
