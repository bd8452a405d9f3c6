"""GraphBreakMLP's function without its breaks (independent, from README §4)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class FriendlyMLP(nn.Module):
    """See the stub: one graph for every sequence length, no break."""

    def __init__(self, dim: int = 16, hidden: int = 32) -> None:
        super().__init__()
        self.dim, self.hidden = dim, hidden
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)
        peak = h.abs().amax()
        # divide by the peak only when it exceeds 1: max(peak, 1) does both cases at once
        h = F.gelu(h / torch.maximum(peak, torch.ones_like(peak)))
        steps = torch.arange(1, h.shape[1] + 1, dtype=h.dtype, device=h.device)
        mean = h.cumsum(dim=1) / steps.view(1, -1, 1)
        return x + self.down(mean * (1.0 / math.sqrt(self.hidden)))


def compile_model(model: nn.Module, backend: str | Callable[..., Any] = "inductor"
                  ) -> Callable[[torch.Tensor], torch.Tensor]:
    """Compiled with symbolic shapes from the start, so 8..64 is one graph."""
    return torch.compile(model, backend=backend, fullgraph=True, dynamic=True)
