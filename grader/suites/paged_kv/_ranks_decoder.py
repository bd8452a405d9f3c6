"""A tiny decoder (plain torch, float64) and a greedy generation loop with forks.

Both sides of the end-to-end test run the same model and the same loop; only the KV cache
differs:
- `_ref_decoder.ContiguousCache` (parent): each sequence keeps its own growing key/value
  tensors per layer, a fork copies them; attention is dense over them. This is the reference.
- `PagedCache` (rank): the allocator, `write_kv`, `copy_blocks` and `paged_attention` under
  test, with the caches `[num_blocks, block_size, heads, head_dim]` per layer.

A script is a list of events:
    ("prompt", seq, [tokens])  feed the prompt one token at a time; the next token is greedy
    ("fork", parent, child, k) the child shares the parent's cache; its next token is the
                               parent's k-th most likely one (k = 0: the greedy token)
    ("step",)                  every live sequence consumes its next token (one batch)
    ("free", seq)
`generate` returns {seq: [tokens chosen after its prompt, in order]}.
"""

from __future__ import annotations

import torch

from grader.seeds import seeded_generator

VOCAB, D_MODEL, HEADS, HEAD_DIM, LAYERS, MAX_POS = 48, 16, 2, 8, 2, 256


def make_weights(seed: int) -> dict[str, torch.Tensor]:
    gen = seeded_generator(seed)

    def rand(*shape: int, std: float) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * std

    weights = {"embed": rand(VOCAB, D_MODEL, std=1.0), "pos": rand(MAX_POS, D_MODEL, std=0.5),
               "unembed": rand(D_MODEL, VOCAB, std=0.5)}
    for layer in range(LAYERS):
        for name in ("wq", "wk", "wv", "wo"):
            weights[f"{name}{layer}"] = rand(D_MODEL, D_MODEL, std=0.5)
        weights[f"w1{layer}"] = rand(D_MODEL, 2 * D_MODEL, std=0.4)
        weights[f"w2{layer}"] = rand(2 * D_MODEL, D_MODEL, std=0.4)
    return weights


def rms_norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def forward(weights: dict[str, torch.Tensor], tokens: torch.Tensor, positions: torch.Tensor,
            attend) -> torch.Tensor:
    """Logits [batch, VOCAB] for one new token per sequence; `attend(layer, q, k, v)` gets
    [batch, HEADS, HEAD_DIM] tensors, stores k/v in the cache and returns the attention."""
    x = weights["embed"][tokens] + weights["pos"][positions]
    batch = tokens.shape[0]
    for layer in range(LAYERS):
        h = rms_norm(x)
        q, k, v = ((h @ weights[f"{n}{layer}"]).view(batch, HEADS, HEAD_DIM)
                   for n in ("wq", "wk", "wv"))
        x = x + attend(layer, q, k, v).reshape(batch, D_MODEL) @ weights[f"wo{layer}"]
        x = x + torch.tanh(rms_norm(x) @ weights[f"w1{layer}"]) @ weights[f"w2{layer}"]
    return rms_norm(x) @ weights["unembed"]


class PagedCache:
    """The implementation under test: a BlockAllocator and the paged cache functions."""

    def __init__(self, allocator_mod, cache_mod, num_blocks: int, block_size: int) -> None:
        self.alloc = allocator_mod.BlockAllocator(num_blocks, block_size)
        self.cache = cache_mod
        shape = (num_blocks, block_size, HEADS, HEAD_DIM)
        self.k_caches = [torch.zeros(shape, dtype=torch.float64) for _ in range(LAYERS)]
        self.v_caches = [torch.zeros(shape, dtype=torch.float64) for _ in range(LAYERS)]

    def add(self, seq: int) -> None:
        self.alloc.allocate(seq, 0)

    def fork(self, parent: int, child: int) -> None:
        self.alloc.fork(parent, child)

    def free(self, seq: int) -> None:
        self.alloc.free(seq)

    def length(self, seq: int) -> int:
        return self.alloc.seq_len(seq)

    def attend_fn(self, seqs: list[int]):
        slots = torch.tensor([self.alloc.append_slot(s) for s in seqs], dtype=torch.long)
        copies = self.alloc.pop_copies()
        if copies:
            for k_cache, v_cache in zip(self.k_caches, self.v_caches, strict=True):
                self.cache.copy_blocks(k_cache, v_cache, copies)
        tables = [self.alloc.block_table(s) for s in seqs]
        width = max(len(t) for t in tables) + 1  # one extra -1 column: padding must be ignored
        block_tables = torch.tensor([t + [-1] * (width - len(t)) for t in tables])
        lens = torch.tensor([self.alloc.seq_len(s) for s in seqs])

        def attend(layer, q, k, v):
            k_cache, v_cache = self.k_caches[layer], self.v_caches[layer]
            self.cache.write_kv(k_cache, v_cache, k, v, slots)
            return self.cache.paged_attention(q, k_cache, v_cache, block_tables, lens)
        return attend


def generate(weights: dict[str, torch.Tensor], cache, script: list[tuple]) -> dict[int, list[int]]:
    pending: dict[int, int] = {}         # the token each live sequence consumes next
    last_logits: dict[int, torch.Tensor] = {}
    out: dict[int, list[int]] = {}

    def run(seqs: list[int], tokens: list[int]) -> None:
        positions = torch.tensor([cache.length(s) for s in seqs])
        attend = cache.attend_fn(seqs)
        logits = forward(weights, torch.tensor(tokens), positions, attend)
        for b, seq in enumerate(seqs):
            last_logits[seq] = logits[b]
            pending[seq] = int(torch.argmax(logits[b]))
            out[seq].append(pending[seq])

    for event in script:
        kind = event[0]
        if kind == "prompt":
            _, seq, tokens = event
            cache.add(seq)
            out[seq] = []
            for token in tokens:
                run([seq], [token])
            out[seq] = out[seq][-1:]
        elif kind == "fork":
            _, parent, child, k = event
            cache.fork(parent, child)
            last_logits[child] = last_logits[parent]
            pending[child] = int(torch.argsort(last_logits[parent], descending=True)[k])
            out[child] = [pending[child]]
        elif kind == "step":
            seqs = sorted(pending)
            run(seqs, [pending[s] for s in seqs])
        elif kind == "free":
            cache.free(event[1])
            del pending[event[1]], last_logits[event[1]]
        else:
            raise ValueError(f"unknown event {event!r}")
    return out
