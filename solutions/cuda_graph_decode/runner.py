"""Graph-captured decode with batch-size buckets (reference solution).

One graph per bucket, captured once; a step copies its inputs into the static buffers, fills
the rest of the bucket with pad entries, replays and copies the first rows of logits out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.graphs import graph_capture
from harness.graphs import make_graph as default_make_graph

__all__ = ["GraphedDecoder", "pick_bucket"]

SMALL_BUCKETS = (1, 2, 4, 8)
BUCKET_STEP = 16


def pick_bucket(batch_size: int, buckets: list[int]) -> int | None:
    """The smallest bucket >= batch_size; None when batch_size exceeds every bucket.

    `buckets` may be in any order (and empty). Raises ValueError when batch_size < 1.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    fitting = [bucket for bucket in buckets if bucket >= batch_size]
    return min(fitting) if fitting else None


def _default_buckets(max_batch_size: int) -> list[int]:
    larger = range(BUCKET_STEP, max_batch_size + 1, BUCKET_STEP)
    return [b for b in SMALL_BUCKETS if b <= max_batch_size] + list(larger)


class GraphedDecoder:
    """Decode steps of `model` replayed from one CUDA graph per batch-size bucket.

    Attributes: `model`, `max_batch_size`, `buckets` (sorted distinct sizes).
    """

    def __init__(self, model: Any, max_batch_size: int, buckets: list[int] | None = None,
                 make_graph: Callable[[], Any] | None = None) -> None:
        if not 1 <= max_batch_size <= model.max_batch:
            raise ValueError(f"max_batch_size must be in [1, {model.max_batch}] (the rows of "
                             f"the model's KV cache), got {max_batch_size}")
        chosen = _default_buckets(max_batch_size) if buckets is None else buckets
        if not chosen or any(not 1 <= b <= max_batch_size for b in chosen):
            raise ValueError(f"buckets must be a non-empty list of sizes in [1, "
                             f"{max_batch_size}], got {chosen}")
        self.model = model
        self.max_batch_size = max_batch_size
        self.buckets = sorted(set(chosen))
        self._make_graph = make_graph or default_make_graph
        largest, device = self.buckets[-1], model.device
        # Static inputs shared by every graph: bucket b reads the first b slots.
        self._tokens = torch.zeros(largest, dtype=torch.long, device=device)
        self._positions = torch.full((largest,), model.pad_position, dtype=torch.long,
                                     device=device)
        self._rows = torch.zeros(largest, dtype=torch.long, device=device)
        self._graphs: dict[int, Any] = {}
        self._logits: dict[int, torch.Tensor] = {}

    def capture(self) -> None:
        """Capture one graph per bucket, largest first, each after an eager warm-up run.

        Every slot holds a pad entry while capturing, so the warm-ups write only pad slots and
        the real rows of the KV cache are left as they were. A second call does nothing.
        """
        if self._graphs:
            return
        self._pad_from(0, self.buckets[-1])
        for bucket in reversed(self.buckets):
            inputs = (self._tokens[:bucket], self._positions[:bucket], self._rows[:bucket])
            self._warm_up(inputs)
            graph = self._make_graph()
            with graph_capture(graph):
                self._logits[bucket] = self.model.decode(*inputs)
            self._graphs[bucket] = graph

    def _warm_up(self, inputs: tuple[torch.Tensor, ...]) -> None:
        # On a GPU, warm up on a side stream as torch.cuda.graph expects (lazy init of
        # cuBLAS workspaces and the like must not happen inside the capture).
        if self.model.device.type == "cuda":
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                self.model.decode(*inputs)
            torch.cuda.current_stream().wait_stream(stream)
        else:
            self.model.decode(*inputs)

    def _pad_from(self, start: int, stop: int) -> None:
        """Slots [start, stop) become pad entries: token 0 of row 0 at the pad position."""
        self._tokens[start:stop].zero_()
        self._rows[start:stop].zero_()
        self._positions[start:stop].fill_(self.model.pad_position)

    def _check(self, tokens: torch.Tensor, positions: torch.Tensor, rows: torch.Tensor) -> int:
        batch = tokens.shape[0] if tokens.dim() == 1 else -1
        if batch < 1 or any(t.dim() != 1 or t.shape[0] != batch for t in (positions, rows)):
            raise ValueError(f"tokens, positions and rows must be 1-D of one length >= 1, got "
                             f"shapes {[tuple(t.shape) for t in (tokens, positions, rows)]}")
        limits = {"tokens": (tokens, self.model.config.vocab_size),
                  "positions": (positions, self.model.max_len),
                  "rows": (rows, self.model.max_batch)}
        for name, (values, stop) in limits.items():
            low, high = int(values.min()), int(values.max())
            if low < 0 or high >= stop:
                raise ValueError(f"{name} must be in [0, {stop}), got values in [{low}, {high}]")
        if torch.unique(rows).numel() != batch:
            raise ValueError("rows must be distinct: two entries of one step cannot share a "
                             "cache row")
        return batch

    def step(self, tokens: torch.Tensor, positions: torch.Tensor,
             rows: torch.Tensor) -> torch.Tensor:
        """Logits [batch, vocab_size] of one decode step: a new tensor the next step keeps."""
        if not self._graphs:
            raise RuntimeError("call capture() before step()")
        batch = self._check(tokens, positions, rows)
        bucket = pick_bucket(batch, self.buckets)
        device = self.model.device
        if bucket is None:  # larger than every graph: run eagerly
            return self.model.decode(*(t.to(device=device, dtype=torch.long)
                                       for t in (tokens, positions, rows)))
        # copy_, never rebind: the graph reads the buffers it saw at capture time.
        self._tokens[:batch].copy_(tokens)
        self._positions[:batch].copy_(positions)
        self._rows[:batch].copy_(rows)
        self._pad_from(batch, bucket)
        self._graphs[bucket].replay()
        # The static output is overwritten by the next replay: hand out a copy.
        return self._logits[bucket][:batch].clone()
