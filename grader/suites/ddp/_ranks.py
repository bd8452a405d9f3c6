"""Rank side of the ddp suites: the models and the probe (the cases are in `_ranks_wrapper` and
`_ranks_trainer`, the launches' rank function in `_ranks_launches`).

Everything here runs inside rank processes (the functions travel by value). Inputs, seeds and
hyperparameters come from the parent; no expected value is computed here. Each case marks the
phases it enters (`Probe.mark`): the sidecar labels every operation it carries with the rank's
latest mark, so the parent cuts the wire log (written outside the rank) into phases: a case's
construction, each step before backward reaches the first layer ("<case> step s"), after it
("<case> step s tap"), after backward ("<case> step s end").

The first layer's output passes through `Tap`, an identity whose backward marks "... tap":
autograd runs it right before it computes the first layer's gradients, so an all-reduce carried
under the step's own label was issued before the last gradient existed (overlap).
`Probe` also wraps the sidecar's work handles' `wait` before the code under test is imported:
a wait under a step's own label is a handle waited on before backward reached the first layer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

OPTIMIZERS = {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}


# -- models (the parent builds the same ones for its references) -------------------------------
class Tap(torch.autograd.Function):
    """Identity; its backward calls `callback()` (when not None) before passing the gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, callback: Callable[[], None] | None) -> torch.Tensor:
        ctx.callback = callback
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        if ctx.callback is not None:
            ctx.callback()
        return grad, None


BUFFER_SEED = 2718


class Net(nn.Module):
    """fc1 -> tap -> tanh(+shift) [-> dropout] -> fc2 [-> norm] -> tanh -> head [+ extra].

    `spec`: sizes (in, hidden, out), norm (LayerNorm after fc2), dropout (p), extra (a second
    head used when forward gets use_extra=True, or when not told and `self.use_extra` is
    set), ghost (a layer never used). Registration
    order: fc1, fc2, [norm], head, [extra], [ghost]; one buffer `shift`.
    """

    def __init__(self, spec: dict) -> None:
        super().__init__()
        n_in, hidden, n_out = spec["sizes"]
        self.fc1 = nn.Linear(n_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden) if spec.get("norm") else None
        self.head = nn.Linear(hidden, n_out)
        self.extra = nn.Linear(hidden, n_out) if spec.get("extra") else None
        self.ghost = nn.Linear(hidden, 2) if spec.get("ghost") else None
        shift = 0.1 * torch.randn(hidden)  # drawn either way: the seed's stream stays the same
        if not spec.get("rank_buffer"):
            shift = 0.1 * torch.randn(hidden, generator=torch.Generator().manual_seed(BUFFER_SEED))
        self.register_buffer("shift", shift)
        self.p_drop = float(spec.get("dropout", 0.0))
        self.on_tap: Callable[[], None] | None = None
        self.use_extra = False  # what forward does when not told

    def forward(self, x: torch.Tensor, use_extra: bool | None = None) -> torch.Tensor:
        use_extra = self.use_extra if use_extra is None else use_extra
        h = torch.tanh(Tap.apply(self.fc1(x), self.on_tap) + self.shift)
        if self.p_drop:
            h = F.dropout(h, self.p_drop, self.training)
        h = self.fc2(h)
        if self.norm is not None:
            h = self.norm(h)
        h = torch.tanh(h)
        out = self.head(h)
        if use_extra and self.extra is not None:
            out = out + self.extra(h)
        return out


class TiedNet(nn.Module):
    """Embedding whose weight the output layer shares (a parameter under two names)."""

    def __init__(self, spec: dict) -> None:
        super().__init__()
        vocab, width = spec["sizes"]
        self.emb = nn.Embedding(vocab, width)
        self.mix = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, vocab, bias=False)
        self.out.weight = self.emb.weight
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(torch.tanh(self.mix(self.emb(x))))) * self.scale


def build_model(spec: dict, seed: int) -> nn.Module:
    """The spec's model initialised from `seed` (already shifted by the parent)."""
    torch.manual_seed(seed)
    model: nn.Module
    if spec.get("arch") == "tied":
        model = TiedNet(spec)
    elif spec.get("arch") == "seq":  # Linear layers of the given widths, biases optional
        widths, biases = spec["widths"], spec["biases"]
        model = nn.Sequential(*[nn.Linear(a, b, bias=bias)
                                for a, b, bias in zip(widths[:-1], widths[1:], biases)])
    else:
        model = Net(spec)
    model = model.to(getattr(torch, spec.get("dtype", "float64")))
    for name, p in model.named_parameters():
        p.requires_grad_(name not in spec.get("frozen", ()))
    return model


def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((out - target) ** 2).mean()


def state_of(model: nn.Module) -> dict[str, torch.Tensor]:
    """Parameters and buffers by name, detached copies."""
    out = {n: p.detach().clone() for n, p in model.named_parameters()}
    out.update({n: b.detach().clone() for n, b in model.named_buffers()})
    return out


def grads_of(model: nn.Module) -> dict[str, torch.Tensor | None]:
    return {n: (None if p.grad is None else p.grad.detach().clone())
            for n, p in model.named_parameters()}


# -- the probe ---------------------------------------------------------------------------------
class Probe:
    """Marks phases (for the wire log) and records, per mark, how many handles were waited on.

    Built before the code under test is imported: it wraps the sidecar transport's work
    handle class, the only kind of handle the ranks get with `transport="sidecar"`. A wait
    made by `get_future()` (which the transport fulfils at once) is not counted: chaining a
    future, as torch's communication hooks do, is not waiting.
    """

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.label = ""
        self.waits: dict[str, int] = {}  # label -> handles waited on
        self.futures: dict[str, int] = {}  # label -> futures asked for
        self.step = 0
        try:
            from harness import sidecar
        except ImportError:  # pragma: no cover - the harness always has it
            return
        original, original_future = sidecar.SidecarWork.wait, sidecar.SidecarWork.get_future
        probe = self
        inside_future = [False]

        def wait(work: Any, timeout: Any = None) -> bool:
            if not inside_future[0]:
                probe.waits[probe.label] = probe.waits.get(probe.label, 0) + 1
            return original(work) if timeout is None else original(work, timeout)

        def get_future(work: Any) -> Any:
            # The transport completes a future at once (it carries collectives synchronously);
            # asking for one is not waiting, so the wait inside it is not counted.
            probe.futures[probe.label] = probe.futures.get(probe.label, 0) + 1
            inside_future[0] = True
            try:
                return original_future(work)
            finally:
                inside_future[0] = False

        # Wrappers with the methods' behaviour (mypy cannot match a plain function to a method).
        sidecar.SidecarWork.wait = wait  # type: ignore[method-assign,assignment]
        sidecar.SidecarWork.get_future = get_future  # type: ignore[method-assign,assignment]

    def mark(self, label: str) -> None:
        self.label = label
        self.ctx.mark(label)

    def tap_for(self, name: str) -> Callable[[], None]:
        def tap() -> None:
            self.mark(f"{name} step {self.step} tap")
        return tap
