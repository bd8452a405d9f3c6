"""Ranks get inputs, never verdicts: a ledger that finds expected values sent to ranks.

A rank can read everything it is given (its arguments, its caller's frames), so an expected
value among a launch's arguments is an answer a submission can replay. This module, switched on
in a graded pytest session by the environment variable `MLSYS_LEAKCHECK` (a file to append
findings to; `selfcheck` sets it for every session it runs), records the float tensors every
launch sends to its ranks, and checks every expected value the parent compares against
(`grader.compare.assert_close`, `torch.testing.assert_close`, `torch.allclose`, `torch.equal`,
`torch.isclose`: the second argument): if all of its values, and at least `MIN_VALUES` distinct
ones with more than `MIN_BITS` significant bits (random data; low-precision test data such as
multiples of 1/8, fp16 or bf16 values collide by chance), occur in one tensor that a launch of
the same test file sent, the expected value — or a slice of it — went to the ranks. That
finding is written as one JSON line (test, launch, path of the argument).

Always on, in every graded session (the `launch` fixture): `refuse_answer_keys` fails a launch
whose arguments hold a dict key that names an answer (`ANSWER_KEYS`: "expected", "reference",
...), whatever its type — integers and strings included, which the ledger does not judge.

Checks that an input comes back unchanged (or that a rank keeps its slice of an input) compare
against an input by design; they are named in `grader/instructor/leak_echoes.py`
(`ECHO_CHECKS`: the test, the input, and why), which ships to no student: it names hidden tests.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

ENV = "MLSYS_LEAKCHECK"
MIN_VALUES = 8  # distinct precise values an expected tensor needs to be judged
MIN_BITS = 12  # significant bits a value needs to count as precise (float32 data has 24)
MAX_NUMEL = 4_000_000  # sent tensors larger than this are not kept (nothing graded is)

ANSWER_KEYS = frozenset({"expected", "reference", "answer", "answers", "golden", "want",
                         "wanted", "expected_output", "reference_output"})

_lock = threading.Lock()
_sent: list[tuple[str, str, torch.Tensor]] = []  # (test file, where, unique float64 values)
# (test file, ids of a launch's args, kwargs, rank_args) -> those objects, held so that the ids
# stay theirs (the launcher makes a new kwargs dict per launch): a shared launch
# (harness.cases.Memo) is shown again for every test that reads it, and filed once per file
_filed: dict[tuple[str, int, int, int], Any] = {}
_path: str | None = None


def active() -> bool:
    """Whether this process records launches and judges comparisons."""
    return _path is not None


def _floats(value: Any, where: str, depth: int = 0) -> Iterator[tuple[str, torch.Tensor]]:
    import torch

    if depth > 32:
        return
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() and 0 < value.numel() <= MAX_NUMEL:
            yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _floats(item, f"{where}[{key!r}]", depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _floats(item, f"{where}[{i}]", depth + 1)
    elif hasattr(value, "__dataclass_fields__"):
        for name in value.__dataclass_fields__:
            yield from _floats(getattr(value, name, None), f"{where}.{name}", depth + 1)
    elif isinstance(value, torch.nn.Module):
        for name, tensor in value.state_dict().items():
            yield from _floats(tensor, f"{where}.{name}", depth + 1)


def _values(tensor: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.unique(tensor.detach().cpu().to(torch.float64).flatten())


def observe_launch(fn_name: str, args: Any, kwargs: Any, rank_args: Any) -> None:
    """Record the float tensors a launch of `fn_name` sends (harness launch observer), filed
    under the test file of the test that made it or, for a shared launch, that reads it."""
    module = _current_test().split("::")[0]
    with _lock:
        key = (module, id(args), id(kwargs), id(rank_args))
        if key in _filed:
            return
        _filed[key] = (args, kwargs, rank_args)
    found = [*_floats(args, "args"), *_floats(kwargs, "kwargs"),
             *_floats(rank_args, "rank_args")]
    with _lock:
        for where, tensor in found:
            _sent.append((module, f"{fn_name} {where}", _values(tensor)))


def refuse_answer_keys(args: Any, kwargs: Any, rank_args: Any) -> None:
    """Raise ValueError when a launch argument holds a dict key in `ANSWER_KEYS`: ranks get
    inputs, never verdicts (strip the answers before the launch; the parent judges)."""
    todo: list[tuple[Any, str, int]] = [(args, "args", 0), (kwargs, "kwargs", 0),
                                         (rank_args, "rank_args", 0)]
    while todo:
        value, where, depth = todo.pop()
        if depth > 32:
            continue
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and key in ANSWER_KEYS:
                    raise ValueError(
                        f"launch argument {where}[{key!r}] names an answer: ranks get inputs, "
                        f"never verdicts (a rank can read what it is sent); keep it in the "
                        f"parent and judge there")
                todo.append((item, f"{where}[{key!r}]", depth + 1))
        elif isinstance(value, (list, tuple)):
            todo.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))


def _current_test() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]


def _judged(expected: torch.Tensor) -> torch.Tensor | None:
    """The distinct fractional values of `expected`, or None when it has too few to judge."""
    import torch

    if not isinstance(expected, torch.Tensor) or not expected.is_floating_point() \
            or expected.numel() > MAX_NUMEL:
        return None
    values = _values(expected)
    values = values[torch.isfinite(values)]
    mantissa, _ = torch.frexp(values)
    scaled = mantissa * 2.0 ** MIN_BITS
    precise = values[scaled != torch.round(scaled)]
    return values if precise.numel() >= MIN_VALUES else None


def compared(expected: Any) -> None:
    """Judge one expected value the parent compares a rank's answer against."""
    if _path is None:
        return
    import torch

    values = _judged(expected)
    if values is None:
        return
    test = _current_test()
    module = test.split("::")[0]
    with _lock:
        sent = [(where, pool) for file, where, pool in _sent if file == module]
    for where, pool in sent:  # every match: the instructor's side lets declared echoes through
        if pool.numel() >= values.numel() and bool(torch.isin(values, pool).all()):
            _write({"test": test, "sent": where, "values": int(values.numel())})


def _write(finding: dict[str, Any]) -> None:
    assert _path is not None
    line = json.dumps(finding) + "\n"
    fd = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _second(original: Callable[..., Any]) -> Callable[..., Any]:
    def judged(*args: Any, **kwargs: Any) -> Any:
        expected = args[1] if len(args) > 1 else kwargs.get("expected", kwargs.get("other"))
        compared(expected)
        return original(*args, **kwargs)

    judged.__wrapped__ = original  # type: ignore[attr-defined]
    return judged


def install(path: str | None = None) -> bool:
    """Switch the ledger on in this process when `path` (default: $MLSYS_LEAKCHECK) is set:
    observe every launch and wrap torch's comparisons. Returns whether it is on."""
    global _path
    path = path or os.environ.get(ENV) or None
    if path is None or _path is not None:
        return _path is not None
    import torch

    from harness import observers

    _path = path
    observers.observe_arguments(observe_launch)
    torch.testing.assert_close = _second(torch.testing.assert_close)
    for name in ("allclose", "equal", "isclose"):
        setattr(torch, name, _second(getattr(torch, name)))
    return True


def findings(path: str) -> list[dict[str, Any]]:
    """The findings written to `path` (none when it does not exist)."""
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []
