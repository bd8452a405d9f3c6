"""How the pipeline tests explain a failure (provided: read it, do not edit it).

The public test and the hidden suite judge train_step the same way and say the same things
when it goes wrong, so the shared pieces live here:

- `P2P_ONLY`: the rule every train_step launch runs under (point-to-point calls only);
- `explain(exc)`: the first line of a hung or crashed train_step, naming the likely fix (a
  hang's first line says who waited on what, computed from the ranks' stacks by the harness);
- `grad_hint(...)`: the likely cause of a stage's gradient that differs from the
  single-process reference, read off how it differs.

Nothing here knows an expected value: the tests compute their references in the parent and
pass them in.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from harness import P2P_APIS, Forbid, RankTimeout
from harness.stacks import waiting_in

__all__ = ["HANG_RECV_HINT", "HANG_SEND_HINT", "P2P_ONLY", "explain", "grad_hint", "hang_hint"]

P2P_ONLY = Forbid(allow_only=P2P_APIS, rule=(
    "pipeline stages talk only point-to-point (isend/send, recv/irecv) to their neighbours"))

# After who waited on what (harness.stacks), in the 200 characters a reason keeps: fix first.
HANG_SEND_HINT = ("post sends with dist.isend (a blocking send waits for its neighbour, which "
                  "sends too) and wait for them at the end of the step")
HANG_RECV_HINT = ("check each stage's warm-up count, min(p - stage - 1, m) forwards; no stage "
                  "waits in a send, so one waits for a message its neighbour never sends")
USED_GRAPH_HINT = ("train_step ran a backward on a graph that was already used: keep every "
                   "in-flight micro-batch's input and output until its own B (one per "
                   "micro-batch, not only the latest)")


def hang_hint(exc: RankTimeout) -> str:
    """The likely fix of a hung train_step, from where the ranks waited (harness.stacks): the
    blocking-send hint only when a stage is blocked in a send."""
    if any(waiting_in(text)[0] == "send" for text in exc.stacks.values()):
        return HANG_SEND_HINT
    return HANG_RECV_HINT


def explain(exc: AssertionError) -> AssertionError:
    """`exc` with a first line that names the likely cause of the failures students hit most:
    a hung case's first line (who waited on what, from the stacks) followed by the fix, or a
    backward run twice on one graph. Any other failure is returned as it is."""
    text = str(exc)
    if isinstance(exc, RankTimeout):
        first, _, rest = text.partition("\n")
        return AssertionError(f"{first}: {hang_hint(exc)}\n{rest}")
    if "second time" in text or "freed" in text:
        return AssertionError(f"{USED_GRAPH_HINT}\n{text}")
    return exc


def _near(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(torch.allclose(a.to(b.dtype), b, rtol=1e-6, atol=1e-9))


def grad_hint(actual: torch.Tensor, expected: torch.Tensor, *, m: int, s: int, p: int,
              only_last: Callable[[], torch.Tensor],
              stale: torch.Tensor | None = None) -> str:
    """The likely cause when stage `s` of `p` ended a step of `m` micro-batches with the
    gradient `actual` instead of `expected` (the single-process reference); "" when they agree.

    `only_last()` is the reference gradient of the last micro-batch alone (still divided by m),
    computed only when needed; `stale` is what `.grad` held before the step, when the test put
    something there (None: it held nothing). Each hint is shown only when its evidence holds.
    """
    if _near(actual, expected):
        return ""
    if stale is not None and _near(actual, expected + stale):
        return ("what .grad held before the step is still in it: call optimizer.zero_grad() "
                "once at the start of train_step")
    if m > 1 and _near(actual, expected * m):
        return (f"{m} times the expected gradient: divide each micro-batch's loss by "
                f"num_microbatches (the step's loss is the mean over micro-batches)")
    if m > 1:
        last = only_last()
        if _near(actual, last) or _near(actual, last * m):
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
