"""Provided, read-only: a small model written the way eager code often is, and what it costs
torch.compile (README §4). Do not edit: `compile_friendly.FriendlyMLP` must compute the same
function without these habits.

Input `x` is `[batch, seq, dim]` float32; the output has the same shape. Step by step:

1. `print` of the input shape: Dynamo cannot put a Python side effect in a graph (a break).
2. `h = up(x)`, then the largest |h| read into Python with `.item()` (a break: the value leaves
   the graph), and a Python `if` on it: when that maximum exceeds 1, `h` is divided by it
   (so `h` ends with max |h| <= 1); otherwise `h` is left as it is.
3. `h = gelu(h)` (the tanh approximation is *not* used: exact erf gelu).
4. A causal running mean over positions written as a Python loop over `seq`: position `t`
   holds the mean of `h[:, :t+1]`. The loop's trip count is the sequence length, a Python
   int, so Dynamo unrolls it and specialises on the length (a recompile per length).
5. A numpy call: the per-feature scale `1 / sqrt(hidden)` made with numpy, a constant.
6. `y = down(mean * scale)`, returned with `x` added (a residual): `x + y`.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class GraphBreakMLP(nn.Module):
    """The reference function: `[batch, seq, dim] -> [batch, seq, dim]`, float32.

    Parameters: `up` (`nn.Linear(dim, hidden)`) and `down` (`nn.Linear(hidden, dim)`), with
    biases; `FriendlyMLP` uses the same names and shapes, so one `state_dict` fits both.
    """

    def __init__(self, dim: int = 16, hidden: int = 32) -> None:
        super().__init__()
        self.dim, self.hidden = dim, hidden
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        print("GraphBreakMLP input", tuple(x.shape))  # 1. a side effect
        h = self.up(x)
        largest = h.abs().max().item()  # 2. a value leaves the graph...
        if largest > 1.0:  # ...and Python branches on it
            h = h / largest
        h = F.gelu(h)  # 3.
        running = []  # 4. a loop whose trip count is the sequence length
        total = torch.zeros_like(h[:, 0])
        for t in range(x.shape[1]):
            total = total + h[:, t]
            running.append(total / (t + 1))
        mean = torch.stack(running, dim=1)
        scale = float(1.0 / np.sqrt(self.hidden))  # 5. numpy
        return x + self.down(mean * scale)  # 6.
