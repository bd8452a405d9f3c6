"""Dense attention references: the parent's KV cache for the end-to-end test (the reference
beside `_ranks_decoder.PagedCache`) and plain attention over a paged_attention case.

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


def dense_attention(case: dict) -> torch.Tensor:
    """Plain attention over each sequence's gathered keys and values (float64)."""
    q, k_cache, v_cache = case["q"], case["k_cache"], case["v_cache"]
    _, block_size, kv_heads, dim = k_cache.shape
    group = q.shape[1] // kv_heads
    scale = case.get("scale", dim ** -0.5)
    out = []
    for b, n in enumerate(case["lens"].tolist()):
        slots = [int(case["tables"][b, p // block_size]) * block_size + p % block_size
                 for p in range(n)]
        keys = k_cache.reshape(-1, kv_heads, dim)[slots].double()
        values = v_cache.reshape(-1, kv_heads, dim)[slots].double()
        keys = keys.repeat_interleave(group, dim=1)      # [n, heads, dim]
        values = values.repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,nhd->hn", q[b].double(), keys) * scale
        out.append(torch.einsum("hn,nhd->hd", torch.softmax(scores, -1), values))
    return torch.stack(out)  # float64: the tolerance then measures the code under test
