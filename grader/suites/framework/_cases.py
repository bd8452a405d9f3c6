"""The case tables of the framework suite: names that say what they vary, tensors drawn here.

Every tensor is drawn in the parent with `grader.seeds.seeded_generator` (selfcheck's margin
runs shift the seeds) and travels to the rank as an input; references are computed from the
same tensors in `_ref.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from grader.seeds import seeded_generator

F32 = torch.float32


def _draw(seed: int, shapes: Sequence[tuple[int, ...]], dtype: torch.dtype = F32,
          scale: float = 1.0) -> list[torch.Tensor]:
    generator = seeded_generator(seed)
    return [scale * torch.randn(*shape, generator=generator, dtype=dtype) for shape in shapes]


def _case(seed: int, program: str, shapes: list[tuple[int, ...]], grads: list[bool],
          out_shape: tuple[int, ...], via: str = "FlopCounter") -> dict[str, Any]:
    tensors = _draw(seed, shapes)
    (grad_out,) = _draw(seed + 1, [out_shape])
    return {"program": program, "tensors": tensors, "grads": grads, "grad_out": grad_out,
            "via": via}


# name -> case; the op families each test judges are the name prefixes below.
def flop_cases() -> dict[str, dict[str, Any]]:
    return {
        "mm-m=7-k=13-n=5": _case(11, "mm", [(7, 13), (13, 5)], [True, True], (7, 5)),
        "mm-only-a-requires-grad": _case(12, "mm", [(4, 9), (9, 6)], [True, False], (4, 6)),
        "addmm-linear-2d": _case(13, "linear", [(9, 16), (8, 16), (8,)], [True, True, True],
                                 (9, 8)),
        "addmm-linear-3d": _case(14, "linear", [(2, 5, 16), (8, 16), (8,)], [True, True, False],
                                 (2, 5, 8)),
        "bmm-batch=5": _case(15, "bmm", [(5, 3, 7), (5, 7, 4)], [True, True], (5, 3, 4)),
        "bmm-baddbmm-batch=3": _case(16, "baddbmm", [(3, 4, 6), (3, 4, 5), (3, 5, 6)],
                                     [False, True, True], (3, 4, 6)),
        "conv-2d-stride=2-input-without-grad": _case(17, "conv2d",
                                                     [(2, 3, 9, 9), (8, 3, 3, 3), (8,)],
                                                     [False, True, True], (2, 8, 5, 5)),
        "conv-1d-input-and-weight-grads": _case(18, "conv1d", [(2, 4, 17), (6, 4, 5)],
                                                [True, True], (2, 6, 17)),
        "uncounted-elementwise": _case(19, "uncounted", [(3, 6), (3, 6)], [True, True], (3, 6)),
        "model-mlp": _case(20, "mlp", [(2, 6, 16), (48, 16), (48,), (16, 48), (16,)],
                           [True, True, True, True, True], (2, 6, 16), "forward_backward_flops"),
        "model-cnn": _case(21, "cnn", [(2, 3, 8, 8), (4, 3, 3, 3), (6, 4, 3, 3), (5, 54), (5,)],
                           [False, True, True, True, True], (2, 5), "forward_backward_flops"),
        "model-attention": _case(22, "attention", [(2, 6, 8), (24, 8), (8, 8)],
                                 [True, True, True], (2, 6, 8), "forward_backward_flops"),
    }


def _saved(seed: int, fn: str, shapes: list[tuple[int, ...]], grads: list[bool]) -> dict:
    return {"run": "saved", "fn": fn, "tensors": _draw(seed, shapes), "grads": grads}


def memory_cases() -> dict[str, dict[str, Any]]:
    g = seeded_generator
    cases: dict[str, dict[str, Any]] = {
        "saved-exp-keeps-its-output": _saved(31, "exp", [(16, 12)], [True]),
        "saved-mul-both-operands": _saved(32, "mul", [(8, 5), (8, 5)], [True, True]),
        "saved-views-count-whole-storages": _saved(33, "views", [(6, 10), (8, 8)], [True, True]),
        "saved-input-saved-twice": _saved(34, "saved_twice", [(7, 9)], [True]),
        "saved-linear-parameters": _saved(35, "linear", [(5, 6), (4, 6), (4,)],
                                          [True, True, True]),
        "saved-chain": _saved(36, "chain", [(6, 8), (8, 24), (24, 4)], [True, True, True]),
        "saved-nothing-without-grad": _saved(37, "no_grad", [(4, 4), (4, 4)], [False, False]),
        "saved-one-byte-mask": {"run": "saved", "fn": "where",
                                "tensors": [*_draw(38, [(1,), (1,)]), torch.tensor([True])],
                                "grads": [True, True, False]},
    }
    for name, fn, shapes, grads, out, seed in (
            ("checkpoint-mlp", "mlp", [(16, 8), (8, 64), (64, 64), (64, 4)],
             [True, True, True, True], (16, 4), 41),
            ("checkpoint-input-without-grad", "gated", [(12, 6), (6, 40), (3,)],
             [False, True, True], (12, 40), 42)):
        tensors = _draw(seed, shapes, scale=0.5)
        cases[name] = {"run": "checkpoint", "fn": fn, "tensors": tensors, "grads": grads,
                       "grad_out": torch.randn(*out, generator=g(seed + 1))}
    gate, up = _draw(43, [(6, 33), (6, 33)], scale=2.0)
    cases["swiglu-float32"] = {"run": "swiglu", "tensors": [gate, up], "grads": [True, True],
                               "grad_out": torch.randn(6, 33, generator=g(44))}
    gate64, up64 = _draw(45, [(4, 7), (4, 7)], dtype=torch.float64, scale=2.0)
    cases["swiglu-float64"] = {"run": "swiglu", "tensors": [gate64, up64],
                               "grads": [True, True],
                               "grad_out": torch.randn(4, 7, generator=g(46),
                                                       dtype=torch.float64)}
    for name, grads in (("gradcheck-both", [True, True]), ("gradcheck-gate-only", [True, False]),
                        ("gradcheck-up-only", [False, True])):
        small = _draw(47, [(3, 5), (3, 5)], dtype=torch.float64, scale=2.0)
        cases[name] = {"run": "gradcheck", "tensors": small, "grads": grads}
    return cases


DIM, HIDDEN = 16, 32
FRIENDLY_LENGTHS = (1, 5, 19)
GRAPH_LENGTHS = (8, 13, 21)
COMPILE_LENGTHS = (8, 64, 23, 41, 9)


def _state(seed: int) -> dict[str, torch.Tensor]:
    w_up, b_up, w_down, b_down = _draw(seed, [(HIDDEN, DIM), (HIDDEN,), (DIM, HIDDEN), (DIM,)],
                                       scale=0.5)
    return {"up.weight": w_up, "up.bias": b_up, "down.weight": w_down, "down.bias": b_down}


def _inputs(seed: int, lengths: tuple[int, ...], scale: float) -> list[torch.Tensor]:
    return _draw(seed, [(2, length, DIM) for length in lengths], scale=scale)


def friendly_cases() -> dict[str, dict[str, Any]]:
    base = {"dim": DIM, "hidden": HIDDEN}
    return {
        # large inputs: max |h| > 1, the branch that divides
        "friendly-values-large": {**base, "run": "friendly_values", "state": _state(51),
                                  "inputs": _inputs(52, FRIENDLY_LENGTHS, 3.0)},
        # tiny inputs and weights: max |h| < 1, the branch that leaves h alone
        "friendly-values-small": {**base, "run": "friendly_values", "defaults": True,
                                  "state": {k: 0.05 * v for k, v in _state(53).items()},
                                  "inputs": _inputs(54, FRIENDLY_LENGTHS, 0.1)},
        "friendly-graphs": {**base, "run": "friendly_graphs", "state": _state(55),
                            "inputs": _inputs(56, GRAPH_LENGTHS, 2.0)},
    }


def compile_cases() -> dict[str, dict[str, Any]]:
    state = {k.replace("up.", "0.").replace("down.", "2."): v for k, v in _state(61).items()}
    return {"compile-model-lengths-8-to-64": {"run": "compile_model", "dim": DIM,
                                              "hidden": HIDDEN, "state": state,
                                              "inputs": _inputs(62, COMPILE_LENGTHS, 1.0)},
            "compile-model-fullgraph": {"run": "compile_breaking",
                                        "inputs": _inputs(63, (8,), 1.0)}}


# FX: the node kinds each rewritten graph must have (README §5), counted by hand from
# `_ranks_programs.py`: silu, add_relu, sigmoid, mul, add, relu (anything else is unchanged).
FX_EXPECTED = {
    "silu_forms": {"silu": 4, "add_relu": 0, "sigmoid": 0, "mul": 0, "add": 0, "relu": 0},
    "add_relu_forms": {"silu": 0, "add_relu": 4, "sigmoid": 0, "mul": 0, "add": 0, "relu": 0},
    "shared": {"silu": 0, "add_relu": 0, "sigmoid": 3, "mul": 3, "add": 12, "relu": 3},
    "mixed": {"silu": 1, "add_relu": 2, "sigmoid": 1, "mul": 2, "add": 3, "relu": 0},
}
FX_INPUTS: dict[str, list[tuple[int, ...]]] = {
    "silu_forms": [(5, 4)], "add_relu_forms": [(3, 6), (3, 6)], "shared": [(4, 5), (4, 5)],
    "mixed": [(6,), (6,)]}


def fx_cases() -> dict[str, dict[str, Any]]:
    return {f"fx-{fn}": {"run": "fuse", "fn": fn, "inputs": _draw(70 + i, FX_INPUTS[fn])}
            for i, fn in enumerate(FX_EXPECTED)}


def backend_cases() -> dict[str, dict[str, Any]]:
    return {"backend-mixed": {"run": "backend", "fn": "mixed",
                              "inputs": _draw(80, FX_INPUTS["mixed"])}}
