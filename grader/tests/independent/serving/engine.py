"""An independent serving submission (engine), written from the stubs and README only.

The engine keeps at most one launched forward as a small record (`_Flight`: the handle, the
entries it ran, which of them sample, and its index). Plain mode launches and lands a flight
inside one step; overlap mode lands the previous flight after planning the next one. The decode
rank of disaggregation decodes all its requests together, one batched forward per token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from assignments.serving.blocks import BlockManager
from assignments.serving.model import DIM
from assignments.serving.request import Request, ScheduledEntry, Status

from .radix import RadixCache
from .scheduler import Scheduler

__all__ = ["Engine", "prefill_and_send", "recv_and_decode", "sample"]

SEED_STRIDE = 4096


def sample(logits: torch.Tensor, request: Request) -> int:
    temperature = float(request.temperature)
    if temperature < 0:
        raise ValueError(f"request {request.request_id}: temperature {temperature} < 0")
    if temperature == 0:
        return int(torch.argmax(logits))
    g = torch.Generator()
    g.manual_seed(request.seed * SEED_STRIDE + len(request.output))
    probs = torch.softmax(logits / temperature, -1)
    return int(torch.multinomial(probs, 1, generator=g))


class _Flight:
    def __init__(self, handle: Any, entries: list[ScheduledEntry], samples: list[bool],
                 index: int) -> None:
        self.handle, self.entries, self.samples, self.index = handle, entries, samples, index


class Engine:
    def __init__(self, model: Any, *, max_num_seqs: int = 8, max_num_tokens: int = 32,
                 prefix_cache: bool = False, overlap: bool = False) -> None:
        self.model = model
        self.manager = BlockManager(model.num_blocks)
        self.cache = RadixCache(self.manager) if prefix_cache else None
        self.scheduler = Scheduler(self.manager, max_num_seqs=max_num_seqs,
                                   max_num_tokens=max_num_tokens, cache=self.cache)
        self.overlap = bool(overlap)
        self.num_steps = 0
        self._scheduled_tokens = 0
        self._flight: _Flight | None = None

    def add(self, request: Request) -> None:
        request.arrival_step = self.num_steps
        self.scheduler.add(request)

    def has_unfinished(self) -> bool:
        return self._flight is not None or self.scheduler.has_unfinished()

    # -- launching and landing forwards ------------------------------------------------------------
    def _launch(self, entries: list[ScheduledEntry]) -> _Flight | None:
        if not entries:
            return None
        batch, samples = [], []
        for e in entries:
            tokens = e.request.tokens
            end = e.start + e.num_tokens
            batch.append((tokens[:end], e.request.blocks[:end], e.start))
            samples.append(end == len(tokens))
        handle = self.model.launch(batch)
        flight = _Flight(handle, entries, samples, self.num_steps)
        self.num_steps += 1
        self._scheduled_tokens += sum(e.num_tokens for e in entries)
        return flight

    def _land(self, flight: _Flight) -> list[Request]:
        logits = flight.handle.result()
        sampled: dict[int, int] = {}
        for row, (entry, samples) in enumerate(zip(flight.entries, flight.samples)):
            req = entry.request
            if samples and req.status is Status.RUNNING:
                sampled[req.request_id] = sample(logits[row], req)
        return self.scheduler.update(flight.entries, sampled, flight.index)

    def step(self) -> list[Request]:
        if not self.overlap:
            flight = self._launch(self.scheduler.schedule())
            return [] if flight is None else self._land(flight)

        if self._flight is None:
            self._flight = self._launch(self.scheduler.schedule())
            if self._flight is None:
                return []
        current = self._flight
        upcoming = self.scheduler.schedule()  # planned while `current` is in flight
        finished = self._land(current)
        upcoming = [e for e in upcoming if e.request.status is Status.RUNNING]
        self._flight = self._launch(upcoming)
        return finished

    def generate(self, requests: Sequence[Request]) -> dict[int, list[int]]:
        for req in requests:
            self.add(req)
        while self.has_unfinished():
            launched, landing = self.num_steps, self._flight is not None
            self.step()
            # Progress is a forward launched or one landed (with overlap, the plan made while
            # the last forward flew may be empty: its requests were about to finish).
            if self.num_steps == launched and not landing:
                raise RuntimeError("a step planned nothing while requests are waiting")
        return {req.request_id: list(req.output) for req in requests}

    def stats(self) -> dict[str, float]:
        hit, lookup = self.scheduler.hit_tokens, self.scheduler.lookup_tokens
        steps = self.num_steps
        return {"steps": steps, "scheduled_tokens": self._scheduled_tokens,
                "tokens_per_step": self._scheduled_tokens / steps if steps else 0.0,
                "hit_tokens": hit, "lookup_tokens": lookup,
                "hit_rate": hit / lookup if lookup else 0.0}


# -- disaggregated prefill / decode --------------------------------------------------------------
def prefill_and_send(model: Any, requests: Sequence[Request], dst: int = 1) -> None:
    manager = BlockManager(model.num_blocks)
    for req in requests:
        prompt = list(req.prompt)
        blocks = manager.allocate(len(prompt))
        logits = model.forward([(prompt, blocks, 0)])[0]
        probe = Request(req.request_id, prompt, req.max_tokens, stop_token=req.stop_token,
                        temperature=req.temperature, seed=req.seed)
        token = sample(logits, probe)
        dist.send(model.read_kv(blocks).contiguous(), dst)
        dist.send(torch.tensor([token], dtype=torch.int64), dst)
        manager.free(blocks)


def recv_and_decode(model: Any, requests: Sequence[Request], src: int = 0
                    ) -> dict[int, list[int]]:
    manager = BlockManager(model.num_blocks)
    live: list[Request] = []
    for req in requests:
        prompt = list(req.prompt)
        kv = torch.empty(2, len(prompt), DIM, dtype=torch.float64)
        dist.recv(kv, src)
        first = torch.empty(1, dtype=torch.int64)
        dist.recv(first, src)
        mine = Request(req.request_id, prompt, req.max_tokens, stop_token=req.stop_token,
                       temperature=req.temperature, seed=req.seed)
        mine.blocks = manager.allocate(len(prompt))
        model.write_kv(prompt, mine.blocks, kv)
        mine.output = [int(first.item())]
        live.append(mine)

    def ended(r: Request) -> bool:
        return len(r.output) >= r.max_tokens or (
            r.stop_token is not None and r.output[-1] == r.stop_token)

    active = []
    for r in live:
        if ended(r):
            manager.free(r.blocks)
            r.blocks = []
        else:
            active.append(r)
    while active:
        batch = []
        for r in active:
            r.blocks = r.blocks + manager.allocate(1)
            tokens = r.tokens
            batch.append((tokens, r.blocks, len(tokens) - 1))
        logits = model.forward(batch)
        still = []
        for row, r in enumerate(active):
            r.output.append(sample(logits[row], r))
            if ended(r):
                manager.free(r.blocks)
                r.blocks = []
            else:
                still.append(r)
        active = still
    return {r.request_id: list(r.output) for r in live}
