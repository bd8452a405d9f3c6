"""References and checks of the zero2 hidden suite, in the parent.

The single-process reference (plain torch, the mean loss over the global batch); parameters
against it (a mismatch diagnosed before the numbers: ranks that disagree, a parameter wrong from
a shard boundary on, errors proportional to the weights), and the accounting of the
communication log against ZeRO-2's cost model (see the stub's cost contract).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from grader.suites.zero2._ranks import OPTIMIZERS, build_model, loss_fn, param_groups, snapshot
from harness import CommRecord
from harness.cases import where


def trainable_numel(spec: dict) -> int:
    model = build_model(spec)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def shard_numel(spec: dict, world_size: int) -> int:
    return -(-trainable_numel(spec) // world_size)


# -- the single-process reference (parent) ----------------------------------------------------
@dataclass
class Reference:
    history: list[dict[str, torch.Tensor]]  # parameters after each step
    norms: list[float]  # clip_grad_norm_ results, one per step when spec["clip"]
    states: dict[int, dict]  # optimizer state_dict after step k (for k in `state_after`)
    initial: dict[str, torch.Tensor]


def reference_run(spec: dict, x: torch.Tensor, y: torch.Tensor,
                  state_after: tuple[int, ...] = ()) -> Reference:
    """Train `optimizer_class` on one process over the whole global batch (mean loss)."""
    model = build_model(spec)
    initial = snapshot(model)
    opt = OPTIMIZERS[spec["optimizer"]](param_groups(spec, model), **spec["defaults"])
    trainable = [p for p in model.parameters() if p.requires_grad]
    history, norms, states = [], [], {}
    for step in range(x.shape[0]):
        opt.zero_grad()
        loss_fn(model(x[step]), y[step]).backward()
        if spec.get("clip") is not None:
            norms.append(float(torch.nn.utils.clip_grad_norm_(trainable, spec["clip"])))
        opt.step()
        history.append(snapshot(model))
        if step + 1 in state_after:
            states[step + 1] = copy.deepcopy(opt.state_dict())
    return Reference(history, norms, states, initial)


# Names a rank may use for each half of the traffic (see the stub's cost contract).
REDUCE_SCATTER_OPS = frozenset({"reduce_scatter", "reduce_scatter_tensor",
                                "reduce_scatter_single", "_reduce_scatter_base"})


ALL_GATHER_OPS = frozenset({"all_gather", "all_gather_into_tensor", "all_gather_single",
                            "_all_gather_base"})
SEND_OPS = frozenset({"send", "isend"})
RECV_OPS = frozenset({"recv", "irecv"})
FREE_OPS = frozenset({"mark", "barrier"})


# The usual causes of a training mismatch, when `diagnose` finds none that stands out.
TRAINING_HINT = ("check the average over ranks (divide the sum by N), the offsets of parameters "
                 "cut by a shard boundary, and that each piece keeps its own group's lr and "
                 "weight decay")


def flat_layout(spec: dict) -> list[tuple[str, int, int]]:
    """(name, start, numel) of each trainable parameter in the flat space: param-group order,
    then order within the group, frozen parameters left out (the stub's layout contract)."""
    model = build_model(spec)
    named = dict(model.named_parameters())
    order = list(named) if spec.get("groups") is None else [
        n for g in spec["groups"] for n in g["names"]]
    out, start = [], 0
    for name in order:
        if named[name].requires_grad:
            out.append((name, start, named[name].numel()))
            start += named[name].numel()
    return out


def diagnose(got: list[dict[str, torch.Tensor]], step: int, ref: Reference, spec: dict,
             world_size: int) -> str:
    """The likely cause of a mismatch after `step` (0-based), from every rank's parameters
    `got[r]`: ranks that disagree, a parameter wrong from a shard boundary on, or errors
    proportional to the weights (weight decay). "" when none of them stands out."""
    from grader.compare import tolerance

    for rank in range(1, len(got)):
        for name, tensor in got[0].items():
            if not torch.equal(got[rank][name], tensor):
                return (f"rank {rank} and rank 0 hold different {name}: all-gather every shard "
                        f"so that every rank copies the same updated values")
    expected, before = ref.history[step], ref.history[step - 1] if step else ref.initial
    size = shard_numel(spec, world_size)
    ratios: dict[str, torch.Tensor] = {}
    for name, start, _numel in flat_layout(spec):
        error = (got[0][name] - expected[name]).flatten()
        tol = tolerance(expected[name].dtype, 10.0 * (step + 1))
        bad = error.abs() > tol.atol + tol.rtol * expected[name].abs().flatten()
        if not bool(bad.any()):
            continue
        first = start + int(torch.argmax(bad.to(torch.int8)))
        if first % size == 0 and start < first:  # wrong from a boundary inside it, right before
            return (f"{name} is cut by the shard boundary at flat index {first} and is wrong "
                    f"from its element {first - start} on: the piece after the boundary starts "
                    f"{first - start} elements into the parameter")
        weights = before[name].flatten()
        usable = weights.abs() > 1e-3
        if int(usable.sum()) >= 2:
            ratios[name] = error[usable] / weights[usable]
    proportional = [name for name, r in ratios.items()
                    if float(r.abs().min()) > 0
                    and float(r.max() - r.min()) <= 1e-6 * float(r.abs().max())]
    if proportional and len(proportional) == len(ratios):
        name = proportional[0]
        return (f"the errors are proportional to the weights ({name}: {float(ratios[name][0]):.3g}"
                f" x its values): give each piece its own group's weight_decay (and lr)")
    return ""


def assert_history(values: list[dict], ref: Reference, world_size: int, *, hint: str,
                   first_step: int = 0, key: str = "history", spec: dict | None = None) -> None:
    """Every rank's parameters after every step equal the reference's (dtype tolerance, scaled).

    Steps in order, every rank at each step. With `spec`, a mismatch is first diagnosed
    (`diagnose`) and a cause found leads the message in place of `hint`."""
    from grader.compare import assert_close

    for i in range(len(values[0][key])):
        step = first_step + i
        got = [value[key][i] for value in values]
        for rank, params in enumerate(got):
            for name, expected in ref.history[step].items():
                what = f"{where(rank, world_size)} parameter {name} after step {step + 1}"
                scale = 10.0 * (step + 1)
                try:
                    assert_close(params[name], expected, scale=scale, hint=hint, what=what)
                except AssertionError:
                    cause = diagnose(got, step, ref, spec, world_size) if spec else ""
                    if not cause:
                        raise
                    assert_close(params[name], expected, scale=scale, hint=cause,
                                 hint_first=True, what=what)
                    raise


# -- communication accounting (parent) ---------------------------------------------------------
@dataclass
class Traffic:
    """One window of one rank's log, in bytes each rank puts on the wire (see the stub)."""

    reduce_scatter: float = 0.0
    all_gather: float = 0.0
    p2p: float = 0.0
    scalars: int = 0
    unexpected: list[str] | None = None

    @property
    def total(self) -> float:
        return self.reduce_scatter + self.all_gather + self.p2p


def traffic(records: list[CommRecord], world_size: int) -> Traffic:
    """Cost model: reduce-scatter (N-1)/N of its input, all-gather (N-1) x its input, p2p
    the bytes sent; all-reduces of at most one element are free; anything else is unexpected."""
    t = Traffic(unexpected=[])
    frac = (world_size - 1) / world_size
    for rec in records:
        if rec.op in REDUCE_SCATTER_OPS:
            t.reduce_scatter += frac * rec.bytes
        elif rec.op in ALL_GATHER_OPS:
            t.all_gather += (world_size - 1) * rec.bytes
        elif rec.op in SEND_OPS:
            t.p2p += rec.bytes
        elif rec.op == "all_reduce" and rec.numel <= 1:
            t.scalars += 1
        elif rec.op not in RECV_OPS and rec.op not in FREE_OPS:
            t.unexpected.append(f"{rec.op} of {rec.numel} elements")  # type: ignore[union-attr]
    return t


def expected_bytes(numel: int, world_size: int, element_size: int) -> tuple[float, float]:
    """DDP's 2(N-1)/N x P x element size, for P unpadded and padded to a multiple of N."""
    padded = -(-numel // world_size) * world_size
    frac = 2 * (world_size - 1) / world_size
    return frac * numel * element_size, frac * padded * element_size


def check_step_traffic(records: list[CommRecord], world_size: int, numel: int,
                       element_size: int, what: str) -> Traffic:
    """AssertionError unless one step's traffic is a reduce-scatter plus an all-gather of P."""
    t = traffic(records, world_size)
    if t.unexpected:
        raise AssertionError(
            f"{what} called {', '.join(t.unexpected[:3])}: ZeRO-2 moves gradients with a "
            f"reduce-scatter and parameters with an all-gather (all-reduce only for one-element "
            f"scalars such as the squared norm)")
    lo, hi = expected_bytes(numel, world_size, element_size)
    if not 0.99 * lo <= t.total <= 1.01 * hi:
        raise AssertionError(
            f"{what} put {t.total:.0f} bytes on the wire; ZeRO-2 moves 2(N-1)/N x P x element "
            f"size = {lo:.0f} bytes per rank per step, the same as DDP "
            f"(reduce-scatter {t.reduce_scatter:.0f}, all-gather {t.all_gather:.0f}, "
            f"p2p {t.p2p:.0f}); a second pass over the gradients, or a missing all-gather?")
    return t
