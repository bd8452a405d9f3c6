"""Shared pieces of the pipeline hidden suite: parent-side references and the rank functions.

Nothing here imports the code under test. The parent keeps its own copy of every documented
schedule (`expected_schedule`), a brute-force `partition` reference, the dependency replay
that turns a stage's action list into a timeline (`replay`), and the single-process training
step that the pipelined step must reproduce (`reference_step`).

Rank side: `rank_pure` runs `partition` / `schedule` calls, each in its own error scope;
`rank_train` runs several `train_step` cases in one launch. Around every `train_step` the rank
counts, with saved-tensor hooks that the suite installs and a stage module that the suite
builds, how many micro-batches' activations are alive at once (README §6: how memory is
measured). The counting is done by suite code: the submission only calls `stage_module(x)`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any

import torch
import torch.nn.functional as F

from grader.compare import assert_close, tolerance
from grader.seeds import seeded_generator
from harness import P2P_APIS, Forbid, RankTimeout
from harness.cases import Memo, case_values, launch_cases
from harness.launcher import preload
from harness.stacks import waiting_in

# The stages step a torch.optim optimizer, whose first use imports torch._dynamo: seconds per
# rank unless the forkserver has it.
preload("torch._dynamo")

DTYPE = torch.float64
BACKEND = "gloo"
TRANSPORT = "sidecar"  # the wire log that decides order and bytes is kept outside the rank
TIMEOUT_S = 90.0  # a wall-clock limit for a loop that spins; a deadlock is found by the stall
# watch (every rank asleep), and a hung case is left out of the launch made again
LR = 0.1
P2P_ONLY = Forbid(allow_only=P2P_APIS, rule=(
    "pipeline stages talk only point-to-point (isend/send, recv/irecv) to their neighbours"))
SEND_OPS = ("send", "isend")
RECV_OPS = ("recv", "irecv")
F_UNITS, B_UNITS = 1, 2  # the replay's cost model: a backward costs twice a forward


# ---- schedules: the parent's own copy of the documented lists ------------------------------------

def expected_schedule(kind: str, p: int, m: int, s: int, v: int = 1) -> list[tuple]:
    if kind == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    if kind == "1f1b":
        w = min(p - s - 1, m)
        out: list[tuple] = [("F", i) for i in range(w)]
        for i in range(m - w):
            out += [("F", w + i), ("B", i)]
        return out + [("B", i) for i in range(m - w, m)]
    total = m * v

    def fwd(k: int) -> tuple:
        return ("F", (k // (p * v)) * p + k % p, (k % (p * v)) // p)

    def bwd(k: int) -> tuple:
        return ("B", (k // (p * v)) * p + k % p, v - 1 - (k % (p * v)) // p)

    w = min(2 * (p - s - 1) + (v - 1) * p, total)
    out = [fwd(k) for k in range(w)]
    for i in range(total - w):
        out += [fwd(w + i), bwd(i)]
    return out + [bwd(k) for k in range(total - w, total)]


def as_actions(value: Any) -> list[tuple] | None:
    """A returned schedule as a list of tuples (lists come back from the rank), or None when it
    is not a list of sequences."""
    if not isinstance(value, list):
        return None
    try:
        return [tuple(a) for a in value]
    except TypeError:
        return None


WARMUP_PART = " (in the warm-up)"
STEADY_PART = " (in the steady 1F1B part)"
COOLDOWN_PART = " (in the cool-down: the remaining backwards in micro-batch order)"
GPIPE_PART = " (all forwards in micro-batch order, then all backwards in micro-batch order)"


def _part(kind: str, p: int, m: int, s: int, i: int) -> str:
    if kind == "gpipe":
        return GPIPE_PART
    if kind != "1f1b":
        return ""
    w = min(p - s - 1, m)
    return WARMUP_PART if i < w else STEADY_PART if i < w + 2 * (m - w) else COOLDOWN_PART


def check_schedule(kind: str, p: int, m: int, s: int, got: Any, v: int = 1) -> None:
    """Raise AssertionError unless `got` is the documented list; the first line names the first
    difference, where it is (warm-up, steady state, cool-down) and the fix."""
    call = f"schedule({kind!r}, p={p}, m={m}, stage={s}" + (f", v={v})" if v > 1 else ")")
    want = expected_schedule(kind, p, m, s, v)
    actions = as_actions(got)
    if actions is None:
        raise AssertionError(f"{call} returned {type(got).__name__}, expected a list of tuples")
    if actions == want:
        return
    if kind == "1f1b":
        w = min(p - s - 1, m)
        lead = next((i for i, a in enumerate(actions) if not a or a[0] != "F"), len(actions))
        if lead != min(w + 1, m) and lead != w:
            raise AssertionError(
                f"{call} starts with {lead} forwards: the warm-up is min(p - stage - 1, m) "
                f"= {w} forwards, then F and B alternate")
    for i, (a, e) in enumerate(zip(actions, want)):
        if a != e:
            raise AssertionError(f"{call}: action {i} is {a}, expected {e}"
                                 f"{_part(kind, p, m, s, i)}")
    raise AssertionError(
        f"{call} has {len(actions)} actions, expected {len(want)} (each micro-batch"
        f"{' and chunk' if kind == 'interleaved' else ''} once as F and once as B)")


# ---- the bubble: replaying the actions with their dependencies -----------------------------------

@dataclass
class Timeline:
    makespan: Fraction
    busy: list[Fraction]
    spans: list[list[tuple[str, int, Fraction, Fraction]]] = field(default_factory=list)

    def idle_fraction(self, s: int) -> Fraction:
        return (self.makespan - self.busy[s]) / self.makespan


class ReplayStuck(Exception):
    """The actions cannot all run: some stage waits for work that never comes (a deadlock)."""


def replay(actions: Sequence[Sequence[tuple]], v: int = 1) -> Timeline:
    """Run every stage's actions in order, each as soon as the stage is free and its inputs are
    ready: F(mb) on virtual stage j after F(mb) on j-1; B(mb) on j after B(mb) on j+1 (after
    F(mb) on the last virtual stage) and after F(mb) on j. A forward costs 1/v, a backward 2/v
    (`F_UNITS`, `B_UNITS`); messages cost nothing. Raises ReplayStuck if nothing can run."""
    p = len(actions)
    last = p * v - 1
    done: dict[tuple[str, int, int], Fraction] = {}
    clock = [Fraction(0)] * p
    busy = [Fraction(0)] * p
    spans: list[list[tuple[str, int, Fraction, Fraction]]] = [[] for _ in range(p)]
    position = [0] * p
    while any(position[s] < len(actions[s]) for s in range(p)):
        moved = False
        for s in range(p):
            while position[s] < len(actions[s]):
                action = actions[s][position[s]]
                op, mb, chunk = action[0], action[1], (action[2] if len(action) > 2 else 0)
                j = chunk * p + s
                if op == "F":
                    deps = [("F", mb, j - 1)] if j > 0 else []
                else:
                    deps = [("F", mb, j)] + ([("B", mb, j + 1)] if j < last else [])
                if any(d not in done for d in deps):
                    break
                start = max([clock[s]] + [done[d] for d in deps])
                cost = Fraction(F_UNITS if op == "F" else B_UNITS, v)
                clock[s] = start + cost
                busy[s] += cost
                done[(op, mb, j)] = clock[s]
                spans[s].append((op, mb, start, clock[s]))
                position[s] += 1
                moved = True
        if not moved:
            waiting = [f"stage {s} at {tuple(actions[s][position[s]])}" for s in range(p)
                       if position[s] < len(actions[s])]
            raise ReplayStuck("; ".join(waiting[:3]))
    return Timeline(max(clock) if clock else Fraction(0), busy, spans)


# ---- partition: brute force over every cut -------------------------------------------------------

def reference_partition(costs: Sequence[int], p: int) -> list[tuple[int, int]]:
    """Every cut of len(costs) layers into p non-empty contiguous stages; the best bottleneck,
    ties broken by the longest earliest stages (lexicographically largest sizes)."""
    n = len(costs)
    best: tuple[int, tuple[int, ...]] | None = None
    for cuts in itertools.combinations(range(1, n), p - 1):
        edges = (0, *cuts, n)
        sizes = tuple(edges[i + 1] - edges[i] for i in range(p))
        worst = max(sum(costs[edges[i]:edges[i + 1]]) for i in range(p))
        key = (worst, tuple(-x for x in sizes))
        if best is None or key < (best[0], tuple(-x for x in best[1])):
            best = (worst, sizes)
    assert best is not None
    out, start = [], 0
    for size in best[1]:
        out.append((start, start + size))
        start += size
    return out


def bottleneck(costs: Sequence[int], bounds: Sequence[Sequence[int]]) -> int:
    return max(sum(costs[a:b]) for a, b in bounds)


def check_partition(costs: Sequence[int], p: int, got: Any) -> None:
    """Raise AssertionError unless `got` is the documented cut: invalid cut, worse bottleneck,
    or the tie rule, in that order."""
    call = f"partition({list(costs)}, {p})" if len(costs) <= 12 else \
        f"partition(<{len(costs)} costs>, {p})"
    want = reference_partition(costs, p)
    try:
        bounds = [tuple(int(x) for x in pair) for pair in got]
    except (TypeError, ValueError):
        raise AssertionError(f"{call} returned {got!r}, expected a list of (start, end) "
                             f"pairs") from None
    if bounds == want:
        return
    n = len(costs)
    valid = (len(bounds) == p and all(len(b) == 2 for b in bounds) and bounds[0][0] == 0
             and bounds[-1][1] == n and all(a < b for a, b in bounds)
             and all(bounds[i][1] == bounds[i + 1][0] for i in range(p - 1)))
    if not valid:
        raise AssertionError(f"{call} returned {bounds}: expected {p} contiguous non-empty "
                             f"(start, end) stages covering 0..{n}")
    if bottleneck(costs, bounds) != bottleneck(costs, want):
        raise AssertionError(
            f"{call}: largest stage cost {bottleneck(costs, bounds)}, the optimum is "
            f"{bottleneck(costs, want)}: balance the stages by their cost, not their number "
            f"of layers")
    raise AssertionError(f"{call} returned {bounds}, an optimal cut but not the documented "
                         f"one {want}: on a tie the earliest stages take as many layers as "
                         f"they can")


# ---- rank side: pure functions -------------------------------------------------------------------

def rank_pure(ctx, calls: list[tuple[str, str, list, dict, bool]]) -> dict:
    """`calls`: (case name, function name, args, kwargs, must raise), each in its own error
    scope. A call that must raise ValueError returns "ValueError" if it did, else "none"."""
    from harness.cases import run_cases

    mod = ctx.impl_module("pipeline", "pipeline")

    def attempt(fn: str, args: list, kw: dict, must_raise: bool):
        if not must_raise:
            return getattr(mod, fn)(*args, **kw)
        try:
            getattr(mod, fn)(*args, **kw)
        except ValueError:
            return "ValueError"
        return "none"

    return run_cases(ctx, [(name, lambda f=fn, a=args, k=kw, r=bad: attempt(f, a, k, r))
                           for name, fn, args, kw, bad in calls])


# ---- the model: layers, stages, the single-process reference -------------------------------------

@dataclass(frozen=True)
class TrainCase:
    """One train_step call on every rank: the model's layers are Linear(width, width) + tanh;
    `layers[s]` of them on stage s; a batch of `rows` rows cut into `m` micro-batches."""

    kind: str
    m: int
    layers: tuple[int, ...]
    width: int = 4
    rows: int = 8
    seed: int = 0
    float32: bool = False  # a float32 model, train_step called without `dtype` (its default)

    @property
    def p(self) -> int:
        return len(self.layers)

    @property
    def name(self) -> str:
        return (f"{self.kind}-m={self.m}-layers={'+'.join(map(str, self.layers))}"
                f"{'-float32-default-dtype' if self.float32 else ''}")

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32 if self.float32 else DTYPE

    @property
    def itemsize(self) -> int:
        return 4 if self.float32 else 8


def make_data(case: TrainCase) -> dict[str, Any]:
    """Weights of every layer, the batch and the targets, drawn from the case's seed."""
    gen = seeded_generator(1000 + case.seed)
    n = sum(case.layers)
    weights = [torch.randn(case.width, case.width, generator=gen, dtype=DTYPE) * 0.7
               for _ in range(n)]
    biases = [torch.randn(case.width, generator=gen, dtype=DTYPE) * 0.1 for _ in range(n)]
    batch = torch.randn(case.rows, case.width, generator=gen, dtype=DTYPE)
    targets = torch.randn(case.rows, case.width, generator=gen, dtype=DTYPE)
    data = {"weights": weights, "biases": biases, "batch": batch, "targets": targets}
    if case.float32:  # values a float32 rank holds exactly; the reference stays float64
        data = {k: ([t.float().double() for t in v] if isinstance(v, list) else v.float().double())
                for k, v in data.items()}
    return data


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
    loss = sum(losses) / case.m
    loss.backward()
    return ([w.grad for w in weights], [b.grad for b in biases],
            float(sum(float(x.detach()) for x in losses) / case.m))


def stage_layers(case: TrainCase, s: int) -> range:
    start = sum(case.layers[:s])
    return range(start, start + case.layers[s])


# ---- rank side: train_step with the memory probe -------------------------------------------------

def rank_train(ctx, cases: list[dict], datas: list[dict], with_errors: bool = False) -> dict:
    """Every case in its own error scope and log window ('case <name>'): the stage's parameters
    and gradients after the step, the returned loss, and the memory probe's readings. With
    `with_errors`, the bad-argument cases of `train_error_cases` run first."""
    import weakref

    import torch
    import torch.nn.functional as F
    from torch import nn

    from harness.cases import run_cases

    # Bound before the submission is imported, so nothing it does at import can replace them.
    hooks = torch.autograd.graph.saved_tensors_hooks
    finalize = weakref.finalize

    class Probe:
        """Live saved tensors per micro-batch, packed by this stage's module forward."""

        def __init__(self) -> None:
            self.current: int | None = None
            self.live: dict[int, int] = {}
            self.peak = 0
            self.packs: dict[int, int] = {}  # saved tensors per forward call
            self.forwards = 0

        def release(self, tag: int) -> None:
            self.live[tag] -= 1
            if not self.live[tag]:
                del self.live[tag]

    class Held:
        __slots__ = ("tensor", "__weakref__")

        def __init__(self, tensor: torch.Tensor) -> None:
            self.tensor = tensor

    class Stage(nn.Module):
        def __init__(self, weights, biases, probe: Probe) -> None:
            super().__init__()
            self.layers = nn.ModuleList()
            for w, b in zip(weights, biases):
                layer = nn.Linear(w.shape[1], w.shape[0], dtype=w.dtype)
                with torch.no_grad():
                    layer.weight.copy_(w)
                    layer.bias.copy_(b)
                self.layers.append(layer)
            self.probe = probe

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.probe.current = self.probe.forwards
            self.probe.forwards += 1
            try:
                for layer in self.layers:
                    x = torch.tanh(layer(x))
            finally:
                self.probe.current = None
            return x

    mod = ctx.impl_module("pipeline", "pipeline")
    s, p = ctx.rank, ctx.world_size

    def run(case: dict, data: dict) -> dict:
        probe = Probe()
        start = sum(case['layers'][:s])
        mine = range(start, start + case['layers'][s])
        stage = Stage([data["weights"][i] for i in mine], [data["biases"][i] for i in mine],
                      probe)
        optimizer = torch.optim.SGD(stage.parameters(), lr=0.1)
        for param in stage.parameters():  # left from an earlier step: train_step discards it
            param.grad = torch.ones_like(param)

        def pack(t: torch.Tensor):
            if probe.current is None:
                return t
            held = Held(t)
            tag = probe.current
            probe.live[tag] = probe.live.get(tag, 0) + 1
            probe.packs[tag] = probe.packs.get(tag, 0) + 1
            finalize(held, probe.release, tag)
            probe.peak = max(probe.peak, len(probe.live))
            return held

        def unpack(x):
            return x.tensor if isinstance(x, Held) else x

        b = case['rows'] // case['m']
        batch, targets = data["batch"], data["targets"]
        extra = {"dtype": torch.float64}
        if case["float32"]:  # the documented default dtype, float32, for a float32 model
            stage.float()
            batch, targets, extra = batch.float(), targets.float(), {}
        ctx.mark(f"case {case['name']}")
        with hooks(pack, unpack):
            loss = mod.train_step(
                stage, optimizer, kind=case['kind'], num_microbatches=case['m'],
                in_shape=(b, case['width']), batch=batch if s == 0 else None,
                targets=targets if s == p - 1 else None,
                loss_fn=F.mse_loss if s == p - 1 else None, **extra)
        ctx.mark(f"end {case['name']}")
        return {"weights": [layer.weight.detach().clone() for layer in stage.layers],
                "biases": [layer.bias.detach().clone() for layer in stage.layers],
                "weight_grads": [layer.weight.grad for layer in stage.layers],
                "bias_grads": [layer.bias.grad for layer in stage.layers],
                "loss": loss, "peak": probe.peak,
                "packs": [probe.packs.get(t, 0) for t in range(probe.forwards)],
                "forwards": probe.forwards, "alive_after": len(probe.live)}

    parts = train_error_cases(ctx, mod) if with_errors else []
    parts += [(c["name"], lambda c=c, d=d: run(c, d)) for c, d in zip(cases, datas)]
    return run_cases(ctx, parts)


TRAIN_ERRORS = ("interleaved", "kind=unknown", "microbatches=0", "rows-not-div")


def train_error_cases(ctx, mod) -> list:
    """train_step calls that must raise ValueError before any communication; each case
    returns the exception's type name, or 'none', in its log window 'case <name>'."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    s, p = ctx.rank, ctx.world_size
    rows = 8

    def attempt(name: str, **kw) -> str:
        ctx.mark(f"case {name}")
        torch.manual_seed(0)
        stage = nn.Linear(4, 4, dtype=torch.float64)
        optimizer = torch.optim.SGD(stage.parameters(), lr=0.1)
        data = torch.zeros(rows, 4, dtype=torch.float64)
        args = dict(kind="gpipe", num_microbatches=2, in_shape=(rows // 2, 4),
                    batch=data if s == 0 else None, targets=data if s == p - 1 else None,
                    loss_fn=F.mse_loss if s == p - 1 else None, dtype=torch.float64)
        args.update(kw)
        try:
            mod.train_step(stage, optimizer, **args)
        except ValueError:
            return "ValueError"
        return "none"

    changes = [{"kind": "interleaved"}, {"kind": "zigzag"}, {"num_microbatches": 0},
               {"num_microbatches": 3}]
    return [(name, lambda n=name, kw=kw: attempt(n, **kw))
            for name, kw in zip(TRAIN_ERRORS, changes)]


# After who waited on what (harness.stacks), in the 200 characters a reason keeps: fix first.
HANG_SEND_HINT = ("post sends with dist.isend (a blocking send waits for its neighbour, which "
                  "sends too) and wait for them at the end of the step")
HANG_RECV_HINT = ("check each stage's warm-up count, min(p - stage - 1, m) forwards; no stage "
                  "waits in a send, so one waits for a message its neighbour never sends")


def hang_hint(exc: RankTimeout) -> str:
    """The likely fix of a hung train_step, from where the ranks waited (harness.stacks): the
    blocking-send hint only when a stage is blocked in a send."""
    if any(waiting_in(text)[0] == "send" for text in exc.stacks.values()):
        return HANG_SEND_HINT
    return HANG_RECV_HINT


def explain(exc: AssertionError) -> AssertionError:
    """A first line that names the likely cause of the failures students hit most. A hung
    case's first line is who waited on what (from the stacks, `harness.cases`), then the fix."""
    text = str(exc)
    if isinstance(exc, RankTimeout):
        first, _, rest = text.partition("\n")
        return AssertionError(f"{first}: {hang_hint(exc)}\n{rest}")
    if "second time" in text or "freed" in text:
        return AssertionError(
            "train_step ran a backward on a graph that was already used: keep every in-flight "
            "micro-batch's input and output until its own B (one per micro-batch, not only "
            f"the latest)\n{text}")
    return exc


TRAIN = Memo(explain=explain)


def train_runs(launch: Callable[..., Any], impl: Any, cases: Sequence[TrainCase]) -> Any:
    """One launch (sidecar transport, point-to-point only) for cases of the same p, memoised
    per implementation (`impl`, the session's --impl); the 2-stage one runs the bad-argument
    cases first. A case that hangs costs only itself: the launch is made again without it
    (`harness.cases.launch_cases`), and judging it raises its RankTimeout."""
    key = (impl, tuple(cases))
    p = cases[0].p
    names = [*(TRAIN_ERRORS if p == 2 else ()), *(c.name for c in cases)]
    return TRAIN.get(key, lambda: launch_cases(lambda env: launch(
        rank_train, p, args=([{**asdict(c), "name": c.name} for c in cases],
                             [make_data(c) for c in cases], p == 2),
        backend=BACKEND, transport=TRANSPORT, forbid=P2P_ONLY, timeout=TIMEOUT_S, env=env),
        names))


def train_values(result: Any, name: str, what: str) -> list[Any]:
    """`case_values` of one train_step case, a hang's or a used graph's error explained."""
    try:
        return case_values(result.values, name, what)
    except AssertionError as exc:
        raise explain(exc) from None


# ---- judging train_step --------------------------------------------------------------------------

def where(s: int, p: int) -> str:
    return f"[stage {s} of {p}]"


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
                assert_close(actual, expected, what=f"{where(s, p)} {case.name}: layer {i} "
                             f"{what}", hint=_grad_hint(case, data, s, i, what, actual,
                                                          expected), hint_first=True,
                             dtype=case.dtype)
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


def _near(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(torch.allclose(a.to(DTYPE), b, rtol=1e-6, atol=1e-9))


def _grad_hint(case: TrainCase, data: dict, s: int, i: int, what: str, actual: torch.Tensor,
               expected: torch.Tensor) -> str:
    """The likely cause when `actual` is not `expected` (checked only on a mismatch)."""
    if _near(actual, expected):
        return ""
    m, p = case.m, case.p
    if _near(actual, expected + 1):
        return ("what .grad held before the step is still in it: call optimizer.zero_grad() "
                "once at the start of train_step")
    index = 0 if what == "weight grad" else 1
    if m > 1 and _near(actual, expected * m):
        return (f"{m} times the expected gradient: divide each micro-batch's loss by "
                f"num_microbatches (the step's loss is the mean over micro-batches)")
    if m > 1:
        only_last = reference_grads(case, data, only=[m - 1])[index][i]
        if _near(actual, only_last) or _near(actual, only_last * m):
            return ("only the last micro-batch's gradient is left: gradients must accumulate "
                    "over micro-batches (zero_grad once per step, not per micro-batch)")
    if s < p - 1 and not bool(actual.abs().max() > 0):
        return (f"no gradient reached stage {s}: the activation it received back must be a leaf "
                f"that requires grad, and stage {s + 1} sends that input's .grad")
    if s < p - 1:
        # No evidence tells a wrong gradient sent back from a backward run on another
        # micro-batch's activation: name both, the gradient first (the commoner of the two).
        return (f"stage {s} is wrong, later ones right: stage {s + 1} must send back the .grad "
                f"of the input it received, and each backward use its own micro-batch's saved "
                f"activation")
    return "compare with one process training the whole model on the whole batch"
