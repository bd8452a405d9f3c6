"""Stub vs solution API comparison, from source text only."""

from __future__ import annotations

import textwrap

import pytest

from grader.instructor.signatures import compare_files, compare_sources, public_api


def api(source: str) -> dict[str, str]:
    return public_api(textwrap.dedent(source))


def diff(stub: str, solution: str) -> list[str]:
    return [str(d) for d in compare_sources(textwrap.dedent(stub), textwrap.dedent(solution))]


def test_functions_render_every_parameter_kind():
    surface = api("""
        def f(a, /, b: int, c=1, *args: str, d, e: "torch.Tensor" = None, **kw) -> list[int]:
            raise NotImplementedError
        async def g(x): ...
    """)
    assert surface["f"] == (
        "def f(a, /, b: int, c=1, *args: str, d, e: torch.Tensor = None, **kw) -> list[int]"
    )
    assert surface["g"] == "async def g(x)"


def test_private_names_and_imports_are_not_public():
    surface = api("""
        import torch
        from typing import Any
        _CACHE = {}
        OPS = ("sum", "max")
        def _helper(x): ...
        def run(x): ...
    """)
    assert sorted(surface) == ["OPS", "run"]


def test_literal_all_defines_the_public_names():
    surface = api("""
        from os.path import join
        __all__ = ["join", "run"]
        def run(x): ...
        def other(x): ...
    """)
    assert sorted(surface) == ["join", "run"]


def test_classes_expose_methods_properties_and_fields():
    surface = api("""
        @dataclass(frozen=True)
        class Block(Base, metaclass=Meta):
            size: int = 16
            ref_count: int
            _secret: int = 0
            KIND = "block"
            def __init__(self, size: int) -> None: ...
            def free(self) -> None: ...
            def _grow(self): ...
            @property
            def is_full(self) -> bool: ...
            @is_full.setter
            def is_full(self, value: bool) -> None: ...
            @staticmethod
            def make(n: int) -> "Block": ...
            @classmethod
            def empty(cls) -> "Block": ...
    """)
    assert surface["Block"] == "@dataclass(frozen=True) class Block(Base, metaclass=Meta)"
    assert surface["Block.size"] == "size: int = 16"
    assert surface["Block.ref_count"] == "ref_count: int"
    assert surface["Block.KIND"] == "KIND = ..."
    assert surface["Block.__init__"] == "def __init__(self, size: int) -> None"
    assert surface["Block.is_full"] == "property is_full -> bool"
    assert surface["Block.is_full.setter"] == "def is_full(self, value: bool) -> None"
    assert surface["Block.make"] == "@staticmethod def make(n: int) -> Block"
    assert surface["Block.empty"] == "@classmethod def empty(cls) -> Block"
    assert "Block._grow" not in surface and "Block._secret" not in surface


def test_equal_apis_with_different_bodies_and_docstrings_match():
    stub = '''
        def ring_shift(tensor: "torch.Tensor", group=None) -> torch.Tensor:
            """Send to the next rank."""
            raise NotImplementedError("ring_shift: see README §3")
    '''
    solution = '''
        import torch.distributed as dist
        def ring_shift(tensor: torch.Tensor, group = None) -> "torch.Tensor":
            out = tensor.clone()
            return _exchange(out, group)
        def _exchange(out, group):
            return out
    '''
    assert diff(stub, solution) == []


@pytest.mark.parametrize(
    ("solution", "expected"),
    [
        ("def f(x, group=0): ...", "f: stub has `def f(x, group=None)`, solution has "
                                   "`def f(x, group=0)`"),
        ("def f(x, grp=None): ...", "solution has `def f(x, grp=None)`"),
        ("def f(x, *, group=None): ...", "solution has `def f(x, *, group=None)`"),
        ("def f(x: int, group=None): ...", "solution has `def f(x: int, group=None)`"),
        ("def f(x, group=None) -> int: ...", "solution has `def f(x, group=None) -> int`"),
        ("async def f(x, group=None): ...", "solution has `async def f(x, group=None)`"),
        ("def f(x, group=None): ...\ndef g(): ...",
         "g: in the solution but missing from the stub (def g())"),
        ("", "f: in the stub but missing from the solution (def f(x, group=None))"),
    ],
)
def test_each_signature_change_is_reported(solution, expected):
    differences = diff("def f(x, group=None): ...", solution)
    assert len(differences) == 1, differences
    assert expected in differences[0]


def test_method_and_property_differences_name_the_member():
    stub = """
        class Cache:
            def allocate(self, n: int) -> list[int]: ...
            @property
            def num_free(self) -> int: ...
    """
    solution = """
        class Cache:
            def allocate(self, n: int, shared: bool = False) -> list[int]: ...
            def num_free(self) -> int: ...
    """
    differences = diff(stub, solution)
    assert [d.split(":")[0] for d in differences] == ["Cache.allocate", "Cache.num_free"]


def test_compare_files_reports_missing_files_and_syntax_errors(tmp_path):
    good = tmp_path / "good.py"
    good.write_text("def f(): ...\n", encoding="utf-8")
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n", encoding="utf-8")
    assert compare_files(good, good) == []
    assert compare_files(good, tmp_path / "gone.py") == [f"{tmp_path / 'gone.py'} is missing"]
    [message] = compare_files(good, broken)
    assert message.startswith(f"cannot parse {broken} line 1")


def test_an_optional_parts_opt_in_is_not_required_of_an_implementation_that_skips_it():
    from grader.instructor.signatures import only_optional_extras

    assert only_optional_extras("def __init__(self, device, expandable_segments=False)",
                                "def __init__(self, device)")
    assert only_optional_extras("def f(self, a=0, b=1)", "def f(self, a=0)")
    assert not only_optional_extras("def f(self, a, b)", "def f(self, a)")        # no default
    assert not only_optional_extras("def f(self, a=1, b=1)", "def f(self, a=0)")  # changed
    assert not only_optional_extras("def f(self, b=1)", "def f(self, a)")          # renamed
    assert not only_optional_extras("def f(self, a)", None)
