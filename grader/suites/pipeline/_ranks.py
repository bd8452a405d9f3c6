"""What travels to the ranks of the pipeline hidden suite: the calls of the pure functions and
the train_step cases with their memory probe.

`rank_pure` runs `partition` / `schedule` calls, each in its own error scope; `rank_train` runs
several `train_step` cases in one launch. Around every `train_step` the rank counts, with
saved-tensor hooks that the suite installs and a stage module that the suite builds, how many
micro-batches' activations are alive at once (README §6: how memory is measured). The counting
is done by suite code: the submission only calls `stage_module(x)`. Nothing here knows an
expected value: the parent judges what comes back (`_ref`, `_ref_train`).
"""

from __future__ import annotations

from typing import Any

from harness.launcher import preload

# The stages step a torch.optim optimizer, whose first use imports torch._dynamo: seconds per
# rank unless the forkserver has it.
preload("torch._dynamo")

# ---- rank side: pure functions -------------------------------------------------------------------

# (case name, function name, args, kwargs, must raise): one call of rank_pure
PureCall = tuple[str, str, list, dict, bool]


def rank_pure(ctx: Any, calls: list[PureCall]) -> dict:
    """`calls`: (case name, function name, args, kwargs, must raise), each in its own error
    scope. A call that must raise ValueError returns "ValueError" if it did, else "none"."""
    from harness.cases import run_cases

    mod = ctx.impl_module("pipeline", "pipeline")

    def attempt(fn: str, args: list, kw: dict, must_raise: bool) -> Any:
        if not must_raise:
            return getattr(mod, fn)(*args, **kw)
        try:
            getattr(mod, fn)(*args, **kw)
        except ValueError:
            return "ValueError"
        return "none"

    return run_cases(ctx, [(name, lambda f=fn, a=args, k=kw, r=bad: attempt(f, a, k, r))
                           for name, fn, args, kw, bad in calls])


# ---- rank side: train_step with the memory probe -------------------------------------------------

def rank_train(ctx: Any, cases: list[dict], datas: list[dict], with_errors: bool = False
               ) -> dict:
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
        layers: list[Any] = list(stage.layers)  # the Linear layers Stage built
        return {"weights": [layer.weight.detach().clone() for layer in layers],
                "biases": [layer.bias.detach().clone() for layer in layers],
                "weight_grads": [layer.weight.grad for layer in layers],
                "bias_grads": [layer.bias.grad for layer in layers],
                "loss": loss, "peak": probe.peak,
                "packs": [probe.packs.get(t, 0) for t in range(probe.forwards)],
                "forwards": probe.forwards, "alive_after": len(probe.live)}

    parts = train_error_cases(ctx, mod) if with_errors else []
    parts += [(c["name"], lambda c=c, d=d: run(c, d)) for c, d in zip(cases, datas)]
    return run_cases(ctx, parts)


TRAIN_ERRORS = ("interleaved", "kind=unknown", "microbatches=0", "rows-not-div")


def train_error_cases(ctx: Any, mod: Any) -> list:
    """train_step calls that must raise ValueError before any communication; each case
    returns the exception's type name, or 'none', in its log window 'case <name>'."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    s, p = ctx.rank, ctx.world_size
    rows = 8

    def attempt(name: str, **kw: Any) -> str:
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

