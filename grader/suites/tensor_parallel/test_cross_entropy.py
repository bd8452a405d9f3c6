"""vocab_parallel_cross_entropy against F.cross_entropy over the full logits, on 2 and 4 ranks.

Targets sit in every shard, on both edges of every shard boundary. A second case has logits of
size ~1e4 (exp overflows float64 above ~709) with the largest logit of a token on one shard only,
so a max taken per shard instead of over the whole vocabulary shows. Gradients come from
sum(loss * w) with random per-token weights w, backpropagated twice through the same graph
(retain_graph=True): the second pass must add the same gradient again. Communication is read
from the harness log: only all-reduces of per-token values (at most 3 per token per call), never
the logits.
"""

from __future__ import annotations

import pytest
import torch

from grader.seeds import seeded_generator
from grader.suites.tensor_parallel._cases import (
    ALL_REDUCE_OPS,
    BACKEND,
    TIMEOUT_S,
    TRANSPORT,
    inputs_only,
)
from grader.suites.tensor_parallel._ranks import leaf
from grader.suites.tensor_parallel._ref import (
    check,
    comm_windows,
    dense_cross_entropy,
    describe,
    randn,
    shard,
)
from harness.cases import case_values, launch_cases, run_cases, where

WORLDS = (2, 4)
VOCAB = 32
SHAPE = (3, 5)  # 15 tokens
TOKENS = SHAPE[0] * SHAPE[1]
MAX_VALUES_PER_TOKEN = 3


def _targets() -> torch.Tensor:
    """Both sides of every boundary of 2 and 4 shards, then a few others."""
    edges = [0, 7, 8, 15, 16, 23, 24, 31]
    others = torch.randint(0, VOCAB, (TOKENS - len(edges),),
                           generator=seeded_generator(61)).tolist()
    return torch.tensor(edges + others, dtype=torch.int64).reshape(SHAPE)


def _large_logits() -> torch.Tensor:
    logits = randn(62, *SHAPE, VOCAB) * 1e3 + 1e4
    # Token t's largest logit sits at vocabulary id 5*t mod 32: a different shard per token.
    for t in range(TOKENS):
        logits.view(TOKENS, VOCAB)[t, (5 * t) % VOCAB] = 2e4
    return logits


def _case(logits: torch.Tensor, seed: int) -> dict:
    target = _targets()
    weight = randn(seed, *SHAPE)
    loss, grad = dense_cross_entropy(logits, target, weight)
    return {"logits": logits, "target": target, "weight": weight, "loss": loss, "grad": grad}


CASES = {"ce": _case(randn(60, *SHAPE, VOCAB) * 3, 63), "ce large": _case(_large_logits(), 64)}


def rank_cross_entropy(ctx, cases) -> dict:
    tp = ctx.impl_module("tensor_parallel", "layers")
    r, p = ctx.rank, ctx.world_size

    def run(name, data):
        logits = leaf(shard(data["logits"], r, p))
        ctx.mark(f"{name} forward")
        loss = tp.vocab_parallel_cross_entropy(logits, data["target"])
        ctx.mark(f"{name} backward")
        (loss * data["weight"]).sum().backward(retain_graph=True)
        grad = logits.grad.clone()
        # Backward again through the kept graph: the gradients add up, as for any torch op.
        (loss * data["weight"]).sum().backward()
        ctx.mark(f"{name} end")
        return {"loss": loss.detach(), "grad": grad, "grad_twice": logits.grad,
                "logits_after": logits.detach()}

    return run_cases(ctx, [(name, lambda n=name: run(n, cases[n])) for name in cases])


@pytest.fixture(scope="module")
def runs(launch):
    # A case that hangs costs only itself (harness.cases.launch_cases).
    return {p: launch_cases(lambda env, p=p: launch(
        rank_cross_entropy, world_size=p, args=(inputs_only(CASES),), backend=BACKEND,
        transport=TRANSPORT, timeout=TIMEOUT_S, env=env), list(CASES)) for p in WORLDS}


def _each(runs, name):
    for p, result in runs.items():
        for r, value in enumerate(case_values(result.values, name)):
            yield r, p, value, comm_windows(result, r)


@pytest.mark.exercises("vocab_parallel_cross_entropy")
@pytest.mark.points(3)
def test_loss_with_targets_in_every_shard(runs):
    data = CASES["ce"]
    for r, p, value, _ in _each(runs, "ce"):
        check(value["loss"], data["loss"], f"{where(r, p)} vocab_parallel_cross_entropy loss",
              hint="a target's logit lives on the rank whose vocabulary slice holds it: "
                   "subtract that rank's vocab start, and let the other ranks add zero")
        check(value["logits_after"], shard(data["logits"], r, p),
              f"{where(r, p)} logits_shard after vocab_parallel_cross_entropy",
              hint="the input must not be modified in place")


@pytest.mark.exercises("vocab_parallel_cross_entropy")
@pytest.mark.points(3)
def test_large_logits_are_stable(runs):
    data = CASES["ce large"]
    for r, p, value, _ in _each(runs, "ce large"):
        check(value["loss"], data["loss"],
              f"{where(r, p)} vocab_parallel_cross_entropy loss with logits of size 1e4",
              hint="subtract the max over the WHOLE vocabulary (all-reduce MAX of the per-shard "
                   "maxima) before exp")


@pytest.mark.exercises("vocab_parallel_cross_entropy")
@pytest.mark.points(3)
def test_gradient_is_the_dense_slice(runs):
    for name in CASES:
        data = CASES[name]
        for r, p, value, _ in _each(runs, name):
            check(value["grad"], shard(data["grad"], r, p),
                  f"{where(r, p)} gradient of the logits shard ({name.replace('ce', 'case')})",
                  hint="d loss / d logit = softmax - one_hot(target), times the loss gradient")
            check(value["grad_twice"], 2 * shard(data["grad"], r, p),
                  f"{where(r, p)} gradient of the logits shard after a second backward through "
                  f"the same graph (retain_graph=True; {name.replace('ce', 'case')})",
                  hint="backward must leave what it saved unchanged (clone before an in-place "
                       "edit), so that every backward gives the same gradient")


@pytest.mark.exercises("vocab_parallel_cross_entropy")
@pytest.mark.points(3)
def test_no_logits_cross_ranks(runs):
    limit = MAX_VALUES_PER_TOKEN * TOKENS
    for name in CASES:
        for r, p, _, win in _each(runs, name):
            for phase in ("forward", "backward"):
                records = [rec for rec in win[f"{name} {phase}"] if rec.op != "mark"]
                bad = [rec for rec in records
                       if rec.op not in ALL_REDUCE_OPS or rec.numel > limit]
                assert not bad, (
                    f"{where(r, p)} vocab_parallel_cross_entropy {phase} made "
                    f"{describe(bad)}; only all-reduces of per-token values are allowed (at "
                    f"most {MAX_VALUES_PER_TOKEN} per token, {limit} elements here): never "
                    f"gather the logits")
