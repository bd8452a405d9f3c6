"""A model torch.compile captures whole: the reference `compile_friendly.py` (README §4).

Each habit of `GraphBreakMLP` is replaced by tensor code that computes the same values and that
Dynamo can put into one graph whose shape is symbolic in the sequence length.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class FriendlyMLP(nn.Module):
    """`GraphBreakMLP`'s function in one graph (the stub's docstring is the contract)."""

    def __init__(self, dim: int = 16, hidden: int = 32) -> None:
        super().__init__()
        self.dim, self.hidden = dim, hidden
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # No print: a side effect would end the graph.
        h = self.up(x)
        # `.item()` + `if` becomes a tensor op: dividing by max(largest, 1) is dividing by
        # `largest` when it exceeds 1 and by 1 (no change) otherwise.
        largest = h.abs().amax()
        h = h / torch.clamp(largest, min=1.0)
        h = F.gelu(h)
        # The loop over positions becomes one cumulative sum: its graph does not depend on
        # the length, so a symbolic length serves every value.
        positions = torch.arange(1, x.shape[1] + 1, dtype=h.dtype, device=h.device)
        mean = torch.cumsum(h, dim=1) / positions[:, None]
        # The numpy constant is a Python float: math folds into the graph as a constant.
        scale = 1.0 / math.sqrt(self.hidden)
        return x + self.down(mean * scale)


def compile_model(model: nn.Module, backend: str | Callable[..., Any] = "inductor"
                  ) -> Callable[[torch.Tensor], torch.Tensor]:
    """Compile `model` for a varying sequence length (the stub's docstring)."""
    compiled = torch.compile(model, backend=backend, fullgraph=True)

    def run(x: torch.Tensor) -> torch.Tensor:
        # Symbolic from the first call: one graph for every length, no recompile at all.
        torch._dynamo.mark_dynamic(x, 1)
        return compiled(x)

    return run
