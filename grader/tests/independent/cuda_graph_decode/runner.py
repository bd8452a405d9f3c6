"""An independent cuda_graph_decode runner, written from the stub's docstrings and README only.

Different from the reference where the contract allows: one dict of captured (graph, logits)
per bucket, pad entries spread over distinct rows, and input checks gathered in one helper.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.graphs import graph_capture
from harness.graphs import make_graph as default_make_graph

__all__ = ["GraphedDecoder", "pick_bucket"]


def pick_bucket(batch_size: int, buckets: list[int]) -> int | None:
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    fitting = [b for b in buckets if b >= batch_size]
    return min(fitting) if fitting else None


def _default_buckets(max_batch_size: int) -> list[int]:
    sizes = [1, 2, 4, 8] + list(range(16, max_batch_size + 1, 16))
    return [s for s in sizes if s <= max_batch_size]


class GraphedDecoder:
    def __init__(self, model: Any, max_batch_size: int, buckets: list[int] | None = None,
                 make_graph: Callable[[], Any] | None = None) -> None:
        if not 1 <= max_batch_size <= model.max_batch:
            raise ValueError(f"max_batch_size must lie in [1, {model.max_batch}], got "
                             f"{max_batch_size}")
        chosen = _default_buckets(max_batch_size) if buckets is None else list(buckets)
        if not chosen:
            raise ValueError("buckets is empty")
        bad = [b for b in chosen if not 1 <= b <= max_batch_size]
        if bad:
            raise ValueError(f"buckets must lie in [1, {max_batch_size}], got {bad}")
        self.model = model
        self.max_batch_size = max_batch_size
        self.buckets = sorted(set(chosen))
        self._make_graph = make_graph or default_make_graph
        size = self.buckets[-1]
        device = model.device
        self._tokens = torch.zeros(size, dtype=torch.long, device=device)
        self._positions = torch.zeros(size, dtype=torch.long, device=device)
        self._rows = torch.zeros(size, dtype=torch.long, device=device)
        self._pad_rows = torch.arange(size, dtype=torch.long, device=device) % model.max_batch
        self._graphs: dict[int, tuple[Any, torch.Tensor]] = {}
        self._captured = False

    def _pad(self, start: int, stop: int) -> None:
        self._tokens[start:stop].fill_(0)
        self._positions[start:stop].fill_(self.model.pad_position)
        self._rows[start:stop].copy_(self._pad_rows[start:stop])

    def _static(self, size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self._tokens[:size], self._positions[:size], self._rows[:size]

    def capture(self) -> None:
        if self._captured:
            return
        for size in sorted(self.buckets, reverse=True):
            self._pad(0, size)
            self.model.decode(*self._static(size))  # eager warm-up on pad entries only
            graph = self._make_graph()
            with graph_capture(graph):
                logits = self.model.decode(*self._static(size))
            self._graphs[size] = (graph, logits)
        self._captured = True

    def _checked(self, tokens: torch.Tensor, positions: torch.Tensor,
                 rows: torch.Tensor) -> int:
        inputs = {"tokens": tokens, "positions": positions, "rows": rows}
        for name, t in inputs.items():
            if not isinstance(t, torch.Tensor) or t.dim() != 1:
                raise ValueError(f"{name} must be a 1-D tensor")
            if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
                raise ValueError(f"{name} must hold integers, not {t.dtype}")
        batch = tokens.shape[0]
        if positions.shape[0] != batch or rows.shape[0] != batch:
            raise ValueError(f"tokens, positions and rows differ in length: {batch}, "
                             f"{positions.shape[0]}, {rows.shape[0]}")
        if batch == 0:
            raise ValueError("an empty batch")
        limits = {"tokens": self.model.config.vocab_size, "positions": self.model.max_len,
                  "rows": self.model.max_batch}
        for name, t in inputs.items():
            low, high = int(t.min()), int(t.max())
            if low < 0 or high >= limits[name]:
                raise ValueError(f"{name} must lie in [0, {limits[name]}), got [{low}, {high}]")
        if torch.unique(rows).numel() != batch:
            raise ValueError("a row appears twice in the batch")
        return batch

    def step(self, tokens: torch.Tensor, positions: torch.Tensor,
             rows: torch.Tensor) -> torch.Tensor:
        batch = self._checked(tokens, positions, rows)
        if not self._captured:
            raise RuntimeError("step() before capture()")
        bucket = pick_bucket(batch, self.buckets)
        device = self.model.device
        if bucket is None:
            return self.model.decode(tokens.to(device=device, dtype=torch.long),
                                     positions.to(device=device, dtype=torch.long),
                                     rows.to(device=device, dtype=torch.long))
        self._tokens[:batch].copy_(tokens)
        self._positions[:batch].copy_(positions)
        self._rows[:batch].copy_(rows)
        self._pad(batch, bucket)
        graph, logits = self._graphs[bucket]
        graph.replay()
        return logits[:batch].clone()
