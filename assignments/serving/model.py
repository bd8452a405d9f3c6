"""A tiny deterministic language model over a paged KV cache. Provided: do not edit.

One attention layer, float64, no batching tricks: every entry of a batch is computed on its
own, so a request's logits are bit-for-bit the same whatever else is in the batch, however
its prefill was chunked and whichever blocks hold its KV. That is what lets the tests demand
*token-identical* outputs from a serving engine and from one-request-at-a-time generation.

A forward takes a batch of entries `(tokens, blocks, start)`:
    tokens  the request's tokens up to the last one computed in this step (list of int)
    blocks  one KV block id per token, same length (list of int, distinct)
    start   tokens[:start] are already in the cache (at blocks[:start]); this step computes
            the keys and values of tokens[start:] and writes them to blocks[start:]
and returns the logits of the LAST token of each entry, [len(batch), vocab_size] float64.
A prefill chunk is an entry with many new tokens; a decode is an entry with one.

The model checks what it reads: every block of tokens[:start] must hold the keys and values
of that very token at that very position (it keeps a tag per block), else RuntimeError — so a
prefix reused from a freed or overwritten block, or a wrong `start`, fails loudly.

It counts what it computes: `computed_tokens` (new tokens over all forwards) and `forwards`.

Overlap. `launch(batch)` starts a forward and returns a handle; `handle.result()` gives its
logits. On a GPU, `launch` would return at once and the CPU could go on scheduling the next
step while the forward runs; here the work is done inside `launch`, and `events` records the
order of calls ("launch <n>", "result <n>", n counting forwards from 0) so a test can see what
an engine did while a forward was in flight. `forward(batch)` is `launch(batch).result()`.

    model = TinyLM(num_blocks=256, seed=0)
    logits = model.forward([(prompt, blocks, 0)])         # prefill a whole prompt
    logits = model.forward([(prompt + [t], blocks + [b], len(prompt))])   # then one decode
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = ["DIM", "MAX_POSITION", "VOCAB_SIZE", "Handle", "TinyLM"]

VOCAB_SIZE = 48
DIM = 8
MAX_POSITION = 512

Entry = tuple[Sequence[int], Sequence[int], int]


class Handle:
    """A launched forward; `result()` returns its logits (once or many times)."""

    def __init__(self, model: TinyLM, index: int, logits: torch.Tensor) -> None:
        self._model, self.index, self._logits = model, index, logits
        self._taken = False

    def result(self) -> torch.Tensor:
        if not self._taken:
            self._model.events.append(f"result {self.index}")
            self._taken = True
        return self._logits.clone()


class TinyLM:
    """The model and its KV cache of `num_blocks` one-token blocks (float64, DIM wide)."""

    def __init__(self, num_blocks: int, *, seed: int = 0, vocab_size: int = VOCAB_SIZE) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be at least 1, got {num_blocks}")
        gen = torch.Generator().manual_seed(seed)
        f64 = torch.float64

        def table(rows: int) -> torch.Tensor:
            return torch.randn(rows, DIM, generator=gen, dtype=f64)

        self.num_blocks, self.vocab_size, self.dim = num_blocks, vocab_size, DIM
        self.tok_q, self.tok_k, self.tok_v = table(vocab_size), table(vocab_size), table(vocab_size)
        self.pos_q, self.pos_k, self.pos_v = (table(MAX_POSITION), table(MAX_POSITION),
                                              table(MAX_POSITION))
        self.w_out = torch.randn(DIM, vocab_size, generator=gen, dtype=f64) * 2.0
        self.k_cache = torch.zeros(num_blocks, DIM, dtype=f64)
        self.v_cache = torch.zeros(num_blocks, DIM, dtype=f64)
        self.tags = torch.full((num_blocks, 2), -1, dtype=torch.long)  # (token, position)
        self.computed_tokens = 0
        self.forwards = 0
        self.events: list[str] = []

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of one token's keys and values: 2 * DIM * 8."""
        return 2 * self.dim * self.k_cache.element_size()

    # -- the forward -----------------------------------------------------------------------------
    def launch(self, batch: Sequence[Entry]) -> Handle:
        """Start a forward of `batch` (see the module docstring); returns its handle."""
        if len(batch) == 0:
            raise ValueError("launch of an empty batch")
        for entry in batch:
            self._validate(entry)
        rows = [self._entry(entry) for entry in batch]
        index = self.forwards
        self.forwards += 1
        self.events.append(f"launch {index}")
        return Handle(self, index, torch.stack(rows))

    def forward(self, batch: Sequence[Entry]) -> torch.Tensor:
        """`launch(batch).result()`: logits [len(batch), vocab_size] float64."""
        return self.launch(batch).result()

    def _validate(self, entry: Entry) -> None:
        tokens, blocks, start = entry
        n = len(tokens)
        if len(blocks) != n:
            raise ValueError(f"an entry has {n} tokens but {len(blocks)} blocks")
        if not 0 <= start < n:
            raise ValueError(f"start={start} must be in [0, {n}): every entry computes at "
                             "least one token")
        if n > MAX_POSITION:
            raise ValueError(f"{n} tokens: positions beyond {MAX_POSITION} are not supported")
        if len(set(blocks)) != n:
            raise ValueError("an entry uses the same KV block for two positions")
        for b in blocks:
            if not isinstance(b, int) or not 0 <= b < self.num_blocks:
                raise ValueError(f"block id {b!r} out of range [0, {self.num_blocks})")
        for t in tokens:
            if not isinstance(t, int) or not 0 <= t < self.vocab_size:
                raise ValueError(f"token id {t!r} out of range [0, {self.vocab_size})")
        for pos in range(start):
            token, held = tokens[pos], self.tags[blocks[pos]].tolist()
            if held != [token, pos]:
                raise RuntimeError(
                    f"KV block {blocks[pos]} should hold token {token} at position {pos} but "
                    f"holds {self._describe(held)}: a reused prefix block was freed and "
                    "overwritten, or `start` counts tokens that were never computed")

    @staticmethod
    def _describe(held: list[int]) -> str:
        return "nothing" if held[1] < 0 else f"token {held[0]} at position {held[1]}"

    def _entry(self, entry: Entry) -> torch.Tensor:
        tokens, blocks, start = entry
        n = len(tokens)
        new = torch.tensor(list(tokens[start:]), dtype=torch.long)
        pos = torch.arange(start, n)
        where = torch.tensor(list(blocks[start:]), dtype=torch.long)
        self.k_cache[where] = self.tok_k[new] + self.pos_k[pos]
        self.v_cache[where] = self.tok_v[new] + self.pos_v[pos]
        self.tags[where, 0] = new
        self.tags[where, 1] = pos
        self.computed_tokens += n - start
        every = torch.tensor(list(blocks), dtype=torch.long)
        q = self.tok_q[tokens[-1]] + self.pos_q[n - 1]
        scores = self.k_cache[every] @ q / math.sqrt(self.dim)
        mixed = torch.softmax(scores, dim=0) @ self.v_cache[every]
        return torch.tanh(mixed + q) @ self.w_out

    # -- moving KV between engines (disaggregation) ----------------------------------------------
    def read_kv(self, blocks: Sequence[int]) -> torch.Tensor:
        """Keys and values held in `blocks`: [2, len(blocks), DIM] float64 (a copy)."""
        where = torch.tensor(list(blocks), dtype=torch.long)
        return torch.stack([self.k_cache[where], self.v_cache[where]])

    def write_kv(self, tokens: Sequence[int], blocks: Sequence[int], kv: torch.Tensor) -> None:
        """Store received keys and values of tokens[i] at position i into blocks[i].

        kv: [2, len(tokens), DIM] float64, as `read_kv` returns it. Afterwards the blocks are
        tagged as holding those tokens, so a forward may start after them."""
        n = len(tokens)
        if len(blocks) != n or tuple(kv.shape) != (2, n, self.dim):
            raise ValueError(f"write_kv: {n} tokens, {len(blocks)} blocks and kv of shape "
                             f"{tuple(kv.shape)}; expected kv of shape (2, {n}, {self.dim})")
        if kv.dtype != self.k_cache.dtype:
            raise ValueError(f"write_kv: kv must be {self.k_cache.dtype}, got {kv.dtype}")
        where = torch.tensor(list(blocks), dtype=torch.long)
        self.k_cache[where] = kv[0]
        self.v_cache[where] = kv[1]
        self.tags[where, 0] = torch.tensor(list(tokens), dtype=torch.long)
        self.tags[where, 1] = torch.arange(n)
