"""Graph-captured decode with batch-size buckets: the module you write (README §4–§5).

`GraphedDecoder` captures one graph of `model.decode` per batch-size bucket and replays the
smallest graph that fits each step. Graphs come from the factory `make_graph` (default
`harness.graphs.make_graph`: a real CUDA graph on a GPU, the CPU emulator elsewhere) and are
captured with `harness.graphs.graph_capture(graph)`:

    from harness.graphs import graph_capture
    graph = make_graph()
    with graph_capture(graph):
        static_logits = model.decode(static_tokens, static_positions, static_rows)
    graph.replay()          # re-runs the captured step on whatever the static buffers hold now
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["GraphedDecoder", "pick_bucket"]


def pick_bucket(batch_size: int, buckets: list[int]) -> int | None:
    """The smallest bucket >= batch_size; None when batch_size exceeds every bucket (README §4).

    `buckets` may be in any order, and may be empty (then None). Raises ValueError when
    batch_size < 1.

    >>> pick_bucket(3, [1, 2, 4, 8]), pick_bucket(9, [1, 2, 4, 8])
    (4, None)
    """
    raise NotImplementedError("pick_bucket: see README §4")


class GraphedDecoder:
    """Decode steps of `model` replayed from one graph per batch-size bucket (README §5).

    Public attributes: `model`, `max_batch_size` (int) and `buckets` (list[int], the sorted
    distinct bucket sizes in use).
    """

    def __init__(self, model: Any, max_batch_size: int, buckets: list[int] | None = None,
                 make_graph: Callable[[], Any] | None = None) -> None:
        """Allocate the static buffers; capture nothing yet.

        model: a `TinyDecoder` (assignments.cuda_graph_decode.model); inputs and buffers go on
            `model.device`.
        max_batch_size: the largest batch to run from a graph, in [1, model.max_batch].
        buckets: the batch sizes to capture, each in [1, max_batch_size]; default 1, 2, 4, 8,
            then the multiples of 16, keeping those <= max_batch_size (so 8 gives [1, 2, 4, 8]
            and 40 gives [1, 2, 4, 8, 16, 32]).
        make_graph: a zero-argument factory of graphs; default harness.graphs.make_graph.

        Raises ValueError for a max_batch_size or a bucket out of range, or an empty list.
        """
        raise NotImplementedError("GraphedDecoder.__init__: see README §5")

    def capture(self) -> None:
        """Capture one graph per bucket, largest first, each right after an eager warm-up run.

        Exactly len(buckets) captures (a second call captures nothing). Capturing leaves every
        real slot of the KV cache (positions < max_len) as it was: the warm-ups run on pad
        entries, which write only the pad slot.
        """
        raise NotImplementedError("GraphedDecoder.capture: see README §5")

    def step(self, tokens: torch.Tensor, positions: torch.Tensor,
             rows: torch.Tensor) -> torch.Tensor:
        """One decode step of `batch` entries; the same result as `model.decode` (README §5).

        tokens, positions, rows: 1-D integer tensors of one length `batch` (on any device,
        typically the CPU): entry i is token tokens[i] at position positions[i] of the
        sequence in cache row rows[i].

        Batches up to the largest bucket replay the graph of `pick_bucket(batch, buckets)`:
        copy the inputs into the static buffers, fill the other slots of the bucket with pad
        entries (position `model.pad_position`, so they change no real row's cache), replay
        once. No capture, and no floating-point tensor allocated other than the returned one.
        Larger batches run `model.decode` eagerly (no replay).

        Returns a new tensor [batch, vocab_size] in the model's dtype on `model.device`: the
        caller keeps it, later steps never overwrite it. The KV cache afterwards equals what
        `model.decode` would have left.

        Raises ValueError for an empty batch, inputs that are not 1-D of one length, tokens
        outside [0, vocab_size), positions outside [0, max_len), rows outside
        [0, model.max_batch), or a row repeated within the batch; RuntimeError when
        `capture()` has not been called yet (whatever the batch size).
        """
        raise NotImplementedError("GraphedDecoder.step: see README §5")
