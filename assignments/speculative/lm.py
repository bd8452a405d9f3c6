"""Tiny causal language models with a KV cache that can be rolled back (README §3).
Provided: do not edit.

Both models follow one protocol, `CausalLM`:

    model.vocab_size          V, the number of token ids (0 .. V-1)
    model.cache_len           how many tokens the cache holds (positions 0 .. cache_len-1)
    model.forward(tokens)     feed a 1-D LongTensor of n >= 1 new tokens at positions
                              cache_len .. cache_len+n-1; returns float64 logits [n, V]: row i
                              scores the token that comes after new token i, given every token
                              before it. cache_len grows by n.
    model.rollback(length)    forget every position >= length (0 <= length <= cache_len, else
                              ValueError); the next forward continues at position `length`
    model.reset()             rollback(0)
    model.forward_calls       forward() calls since the model was built (never reset)

Both take `max_calls` (default None, no limit): forward raises RuntimeError once it has been
called that many times, so that a generation loop that stops making progress fails instead of
running for ever (the tests set it well above what a correct loop needs).

`TinyLM` is a one-layer, one-head attention model over its whole cache: its next-token
distribution depends on every token in the cache, so a cache that still holds a rejected token
(or lost an accepted one) changes what it predicts. `ConstantLM` predicts the same logits at
every position whatever the tokens; its cache only counts positions. Both compute in float64
and are deterministic: the same tokens give the same logits, fed at once or one by one.

`next_token_probs(logits, temperature)` is the one way to turn logits into a distribution in
this assignment: softmax(logits / T) for T > 0, and for T = 0 the one-hot distribution of the
argmax (the lowest index among equal maxima).
"""

from __future__ import annotations

import math
from typing import Protocol

import torch

F64 = torch.float64


class CausalLM(Protocol):
    """What speculative_generate and constrained_generate may call on a model."""

    @property
    def vocab_size(self) -> int: ...

    @property
    def cache_len(self) -> int: ...

    @property
    def forward_calls(self) -> int: ...

    def forward(self, tokens: torch.Tensor) -> torch.Tensor: ...

    def rollback(self, length: int) -> None: ...

    def reset(self) -> None: ...


def next_token_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Probabilities (float64, same shape) from logits [..., V] at `temperature` >= 0:
    softmax(logits / T) over the last dimension for T > 0; for T = 0 a one-hot row at the
    argmax, the lowest index among equal maxima. A negative temperature is a ValueError."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    logits = logits.to(F64)
    if temperature == 0:
        top = torch.argmax(logits, dim=-1, keepdim=True)  # the first maximum
        return torch.zeros_like(logits).scatter_(-1, top, 1.0)
    return torch.softmax(logits / temperature, dim=-1)


class _Cache:
    """Positions 0 .. length-1 of a model's state, in a buffer of `max_len` rows."""

    def __init__(self, max_len: int, max_calls: int | None) -> None:
        self.max_len = max_len
        self.max_calls = max_calls
        self.length = 0
        self.calls = 0

    def grow(self, tokens: torch.Tensor) -> tuple[torch.Tensor, int]:
        """Validate a forward's tokens; returns them as a flat LongTensor and the start position."""
        if not isinstance(tokens, torch.Tensor):
            tokens = torch.as_tensor(tokens)
        tokens = tokens.reshape(-1).to(torch.long)
        if self.max_calls is not None and self.calls >= self.max_calls:
            raise RuntimeError(f"forward called more than {self.max_calls} times: a generation "
                               f"loop that emits no token in a step never ends")
        if tokens.numel() == 0:
            raise ValueError("forward needs at least one token")
        if self.length + tokens.numel() > self.max_len:
            raise ValueError(f"forward of {tokens.numel()} tokens at position {self.length} "
                             f"passes the cache's {self.max_len} positions")
        start = self.length
        self.length += tokens.numel()
        self.calls += 1
        return tokens, start

    def rollback(self, length: int) -> None:
        if not 0 <= int(length) <= self.length:
            raise ValueError(f"rollback({length}) with {self.length} positions cached: the "
                             f"length must lie in 0..{self.length}")
        self.length = int(length)


class TinyLM:
    """A one-layer, one-head causal attention language model with a KV cache (float64).

    TinyLM(vocab_size, seed, dim=8, scale=2.0, max_len=64, noise=0.0, noise_seed=0,
    max_calls=None): the
    weights (token and position embeddings, the attention's projections, the output head) are
    drawn from a torch.Generator seeded with `seed`, so two models with the same arguments are
    the same model. `noise` > 0 adds noise times a second set of weights drawn with
    `noise_seed`: TinyLM(V, s, noise=0.3, noise_seed=1) is a draft that roughly agrees with
    TinyLM(V, s). `scale` multiplies the logits (larger: peakier distributions). `max_len` is
    the number of positions the cache holds.
    """

    def __init__(self, vocab_size: int, seed: int, dim: int = 8, scale: float = 2.0,
                 max_len: int = 64, noise: float = 0.0, noise_seed: int = 0,
                 max_calls: int | None = None) -> None:
        if vocab_size < 1 or dim < 1 or max_len < 1:
            raise ValueError("vocab_size, dim and max_len must be positive")
        weights = self._draw(vocab_size, dim, max_len, seed)
        if noise:
            extra = self._draw(vocab_size, dim, max_len, noise_seed)
            weights = [w + noise * e for w, e in zip(weights, extra, strict=True)]
        self.embed, self.pos, self.wq, self.wk, self.wv, self.wout = weights
        self._vocab_size = vocab_size
        self.dim = dim
        self.scale = scale
        self._cache = _Cache(max_len, max_calls)
        self._keys = torch.zeros(max_len, dim, dtype=F64)
        self._values = torch.zeros(max_len, dim, dtype=F64)

    @staticmethod
    def _draw(vocab_size: int, dim: int, max_len: int, seed: int) -> list[torch.Tensor]:
        gen = torch.Generator().manual_seed(int(seed))

        def draw(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=gen, dtype=F64) / math.sqrt(shape[0])

        return [torch.randn(vocab_size, dim, generator=gen, dtype=F64),
                torch.randn(max_len, dim, generator=gen, dtype=F64),
                draw(dim, dim), draw(dim, dim), draw(dim, dim), draw(dim, vocab_size)]

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def cache_len(self) -> int:
        return self._cache.length

    @property
    def forward_calls(self) -> int:
        return self._cache.calls

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits [n, V] after each of the n new tokens (see the module doc)."""
        tokens, start = self._cache.grow(tokens)
        if int(tokens.min()) < 0 or int(tokens.max()) >= self._vocab_size:
            self._cache.length = start
            raise ValueError(f"token ids must lie in 0..{self._vocab_size - 1}")
        n, end = tokens.numel(), start + tokens.numel()
        x = self.embed[tokens] + self.pos[start:end]
        self._keys[start:end] = x @ self.wk
        self._values[start:end] = x @ self.wv
        scores = (x @ self.wq) @ self._keys[:end].T / math.sqrt(self.dim)
        visible = torch.arange(end).unsqueeze(0) <= torch.arange(start, end).unsqueeze(1)
        weights = torch.softmax(scores.masked_fill(~visible, -math.inf), dim=-1)
        hidden = x + weights @ self._values[:end]
        return self.scale * (hidden @ self.wout).reshape(n, self._vocab_size)

    def rollback(self, length: int) -> None:
        self._cache.rollback(length)

    def reset(self) -> None:
        self._cache.rollback(0)


class ConstantLM:
    """A model that predicts `logits` (a 1-D tensor of V scores) at every position, whatever
    the tokens; it keeps a cache length like TinyLM so that rollback works the same way."""

    def __init__(self, logits: torch.Tensor, max_len: int = 100_000,
                 max_calls: int | None = None) -> None:
        self.logits = torch.as_tensor(logits, dtype=F64).reshape(-1).clone()
        self._cache = _Cache(max_len, max_calls)

    @property
    def vocab_size(self) -> int:
        return int(self.logits.numel())

    @property
    def cache_len(self) -> int:
        return self._cache.length

    @property
    def forward_calls(self) -> int:
        return self._cache.calls

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens, _ = self._cache.grow(tokens)
        return self.logits.expand(tokens.numel(), -1).clone()

    def rollback(self, length: int) -> None:
        self._cache.rollback(length)

    def reset(self) -> None:
        self._cache.rollback(0)
