"""References and checks of train_step in the pipeline hidden suite, in the parent.

`reference_grads` is the single-process step that the pipelined step must reproduce: the mean
over micro-batches of each micro-batch's MSE, on the whole model, in float64. `check_parity`
compares each stage's parameters, accumulated gradients and returned loss with it; on a
mismatch the first line names the likely cause (`grad_hint`, the provided checks shared with
the public test).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from assignments.pipeline._provided_checks import grad_hint
from grader.compare import assert_close, tolerance
from grader.suites.pipeline._cases import DTYPE, LR, TrainCase, make_data, where


def _forward(weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor],
             x: torch.Tensor) -> torch.Tensor:
    for w, b in zip(weights, biases):
        x = torch.tanh(F.linear(x, w, b))
    return x


def reference_grads(case: TrainCase, data: dict[str, Any], only: Sequence[int] | None = None
                    ) -> tuple[list[torch.Tensor], list[torch.Tensor], float]:
    """Gradients (weights, biases) of the mean over micro-batches of each micro-batch's MSE, and
    that loss; with `only`, the sum runs over those micro-batches alone (still divided by m)."""
    weights = [w.clone().requires_grad_() for w in data["weights"]]
    biases = [b.clone().requires_grad_() for b in data["biases"]]
    xs = data["batch"].split(case.rows // case.m)
    ys = data["targets"].split(case.rows // case.m)
    chosen = range(case.m) if only is None else only
    losses = [F.mse_loss(_forward(weights, biases, xs[i]), ys[i]) for i in chosen]
    loss = functools.reduce(operator.add, losses) / case.m
    loss.backward()
    return ([w.grad for w in weights], [b.grad for b in biases],
            float(sum(float(x.detach()) for x in losses) / case.m))


def stage_layers(case: TrainCase, s: int) -> range:
    start = sum(case.layers[:s])
    return range(start, start + case.layers[s])


def check_parity(case: TrainCase, values: Sequence[dict]) -> None:
    """Parameters after the step and accumulated gradients against the single-process step; a
    first line that names the likely cause when they differ."""
    data = make_data(case)
    gw, gb, loss = reference_grads(case, data)
    p = case.p
    last = p - 1
    got_loss = values[last]["loss"]
    for s in range(p):
        if s != last and values[s]["loss"] is not None:
            raise AssertionError(f"{where(s, p)} {case.name}: train_step returned "
                                 f"{values[s]['loss']!r}; only the last stage returns the loss")
    # The most telling stage first: the last one sees the loss directly.
    for s in reversed(range(p)):
        got = values[s]
        for k, i in enumerate(stage_layers(case, s)):
            for what, actual, expected in (("weight grad", got["weight_grads"][k], gw[i]),
                                           ("bias grad", got["bias_grads"][k], gb[i])):
                if actual is None:
                    raise AssertionError(f"{where(s, p)} {case.name}: layer {i}'s {what} is None"
                                         f": train_step must backpropagate into every stage")
                # .grad held ones before the step (the rank's leftover): zero_grad drops them
                hint = grad_hint(actual, expected, m=case.m, s=s, p=p,
                                 stale=torch.ones_like(expected),
                                 only_last=lambda w=what, i=i: _only_last(case, data, w, i))
                assert_close(actual, expected, what=f"{where(s, p)} {case.name}: layer {i} "
                             f"{what}", hint=hint, hint_first=True, dtype=case.dtype)
    for s in range(p):
        got = values[s]
        for k, i in enumerate(stage_layers(case, s)):
            assert_close(got["weights"][k], data["weights"][i] - LR * gw[i],
                         what=f"{where(s, p)} {case.name}: layer {i} weight after the step",
                         hint="call optimizer.step() exactly once, after the last backward",
                         hint_first=True, dtype=case.dtype)
            assert_close(got["biases"][k], data["biases"][i] - LR * gb[i],
                         what=f"{where(s, p)} {case.name}: layer {i} bias after the step",
                         dtype=case.dtype)
    if not isinstance(got_loss, float):
        raise AssertionError(f"{where(last, p)} {case.name}: train_step returned "
                             f"{type(got_loss).__name__}, expected the loss as a float")
    assert_close(torch.tensor(got_loss, dtype=DTYPE), torch.tensor(loss, dtype=DTYPE),
                 what=f"{where(last, p)} {case.name}: returned loss",
                 hint="the mean over micro-batches of loss_fn's values", hint_first=True,
                 tol=tolerance(case.dtype))



def _only_last(case: TrainCase, data: dict[str, Any], what: str, i: int) -> torch.Tensor:
    """Layer i's reference `what` ("weight grad" or "bias grad") from the last micro-batch alone
    (still divided by m)."""
    weight_grads, bias_grads, _ = reference_grads(case, data, only=[case.m - 1])
    return (weight_grads if what == "weight grad" else bias_grads)[i]
