"""A model torch.compile captures whole: what students write in `compile_friendly.py` (README §4).

`graph_break_model.GraphBreakMLP` (provided, read-only) computes the reference function with
habits that cost graph breaks and recompiles. `FriendlyMLP` computes the same function in one
graph for every sequence length; `compile_model` compiles it so that sequence lengths 8..64
cost at most one recompile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn


class FriendlyMLP(nn.Module):
    """`GraphBreakMLP`'s function, capturable by Dynamo with `fullgraph=True`.

    - Same constructor (`dim=16, hidden=32`) and the same parameters: `up`
      (`nn.Linear(dim, hidden)`) and `down` (`nn.Linear(hidden, dim)`), so
      `FriendlyMLP(d, h).load_state_dict(GraphBreakMLP(d, h).state_dict())` works.
    - `forward(x)`, `x` `[batch, seq, dim]` float32 with `seq >= 1`, returns what
      `GraphBreakMLP.forward` returns for the same parameters and input (float32 rounding
      apart), printing nothing.
    - Compiled with `torch.compile(model, fullgraph=True)` (any backend) it has no graph
      break: no `.item()`, no Python branch on a tensor's value, no numpy, no print. Its graph
      does not depend on the sequence length's value, so with dynamic shapes one graph serves
      every length (no Python loop over positions).
    - Differentiable like any module (gradients reach `up` and `down`).
    """

    def __init__(self, dim: int = 16, hidden: int = 32) -> None:
        super().__init__()
        self.dim, self.hidden = dim, hidden
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("FriendlyMLP.forward: see README §4")


def compile_model(model: nn.Module, backend: str | Callable[..., Any] = "inductor"
                  ) -> Callable[[torch.Tensor], torch.Tensor]:
    """Compile `model` for inputs `[batch, seq, dim]` whose `seq` varies (README §4).

    Returns a callable `f(x)` that returns `model(x)` (same values), computed by
    `torch.compile(..., backend=backend, fullgraph=True)`: `backend` is passed through
    unchanged (a name such as `"eager"`, `"aot_eager"`, `"inductor"`, or a callable
    `backend(gm, example_inputs)`). Over calls with one `batch` and `seq` taking any values
    in 8..64 in any order, Dynamo compiles at most two graphs (at most one recompile) and
    never breaks the graph, provided `model` itself has no graph break: mark the sequence
    dimension dynamic (`torch._dynamo.mark_dynamic(x, 1)`) or compile with `dynamic=True`
    or leave it to automatic dynamic shapes; never `dynamic=False`. For a `model` that has a
    graph break, `f(x)` raises (that is what `fullgraph=True` does). `model` is not changed.
    """
    raise NotImplementedError("compile_model: see README §4")
