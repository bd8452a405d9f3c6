"""The parent's KV cache for the end-to-end test: the reference beside `_ranks_decoder.PagedCache`.

`ContiguousCache`: each sequence keeps its own growing key/value tensors per layer, a fork
copies them; attention is dense over them. The model and the generation loop are the ones the
rank runs (`_ranks_decoder`), so only the KV cache differs.
"""

from __future__ import annotations

import torch

from grader.suites.paged_kv._ranks_decoder import HEAD_DIM, LAYERS


class ContiguousCache:
    """Per-sequence key/value lists per layer; dense attention. The parent's reference."""

    def __init__(self) -> None:
        self.keys: dict[int, list[list[torch.Tensor]]] = {}
        self.values: dict[int, list[list[torch.Tensor]]] = {}

    def add(self, seq: int) -> None:
        self.keys[seq] = [[] for _ in range(LAYERS)]
        self.values[seq] = [[] for _ in range(LAYERS)]

    def fork(self, parent: int, child: int) -> None:
        self.keys[child] = [list(layer) for layer in self.keys[parent]]
        self.values[child] = [list(layer) for layer in self.values[parent]]

    def free(self, seq: int) -> None:
        del self.keys[seq], self.values[seq]

    def length(self, seq: int) -> int:
        return len(self.keys[seq][0])

    def attend_fn(self, seqs: list[int]):
        def attend(layer, q, k, v):
            out = []
            for b, seq in enumerate(seqs):
                self.keys[seq][layer].append(k[b])
                self.values[seq][layer].append(v[b])
                keys = torch.stack(self.keys[seq][layer])      # [len, HEADS, HEAD_DIM]
                values = torch.stack(self.values[seq][layer])
                scores = torch.einsum("hd,thd->ht", q[b], keys) / HEAD_DIM ** 0.5
                out.append(torch.einsum("ht,thd->hd", torch.softmax(scores, -1), values))
            return torch.stack(out)
        return attend
