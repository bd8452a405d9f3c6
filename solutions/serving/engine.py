"""The engine loop: schedule -> forward -> sample -> update, with overlap, and disaggregated
prefill/decode on two ranks (README §5–§7).

The loop is the one at the heart of vLLM and SGLang; the overlap mode is SGLang's
zero-overhead scheduler (plan step N+1 on the CPU while step N runs on the GPU); the
two-rank mode splits prefill and decode across machines as in DistServe (Zhong et al., 2024)
and Splitwise (Patel et al., 2024).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from assignments.serving.blocks import BlockManager
from assignments.serving.request import Request, ScheduledEntry, Status

from .radix import RadixCache
from .scheduler import Scheduler

__all__ = ["Engine", "prefill_and_send", "recv_and_decode", "sample"]

SEED_STRIDE = 4096  # sampling seeds: request.seed * SEED_STRIDE + index of the output token


def sample(logits: torch.Tensor, request: Request) -> int:
    """The request's next token from the logits of its last token ([vocab] float64).

    temperature == 0: greedy, int(torch.argmax(logits)) (the first maximum on a tie).
    temperature > 0: one draw of torch.multinomial(torch.softmax(logits / temperature, -1),
    1, generator=g) with g = torch.Generator().manual_seed(request.seed * 4096 +
    len(request.output)): a fresh generator per output token, so the k-th token of a request
    is the same however the request was batched, chunked, preempted or moved between ranks.
    Reads request.output (the tokens sampled so far); changes nothing.
    """
    if request.temperature == 0:
        return int(torch.argmax(logits))
    gen = torch.Generator().manual_seed(request.seed * SEED_STRIDE + len(request.output))
    probs = torch.softmax(logits.to(torch.float64) / request.temperature, dim=-1)
    return int(torch.multinomial(probs, 1, generator=gen))


class Engine:
    """A serving engine over the provided model (README §5).

    Public attributes: `model`, `manager` (a BlockManager over model.num_blocks blocks),
    `cache` (a RadixCache when prefix_cache, else None), `scheduler` (the Scheduler, built
    over them with max_num_seqs / max_num_tokens), `overlap` (bool) and `num_steps` (forwards
    launched so far).
    """

    def __init__(self, model: Any, *, max_num_seqs: int = 8, max_num_tokens: int = 32,
                 prefix_cache: bool = False, overlap: bool = False) -> None:
        """ValueError as Scheduler's for the limits."""
        self.model = model
        self.manager = BlockManager(model.num_blocks)
        self.cache = RadixCache(self.manager) if prefix_cache else None
        self.scheduler = Scheduler(self.manager, max_num_seqs=max_num_seqs,
                                   max_num_tokens=max_num_tokens, cache=self.cache)
        self.overlap = overlap
        self.num_steps = 0
        self.scheduled_tokens = 0
        self._in_flight: tuple[list[ScheduledEntry], Any] | None = None

    def add(self, request: Request) -> None:
        """Set request.arrival_step = num_steps and hand it to the scheduler (its errors)."""
        request.arrival_step = self.num_steps
        self.scheduler.add(request)

    def has_unfinished(self) -> bool:
        """True while a request is waiting or running (or, with overlap, a forward is in
        flight)."""
        return self.scheduler.has_unfinished() or self._in_flight is not None

    def _launch(self, batch: list[ScheduledEntry]) -> tuple[list[ScheduledEntry], Any]:
        """The forward's entries are built now, so with overlap they see the token the
        previous step just sampled."""
        entries = []
        for e in batch:
            end = e.start + e.num_tokens
            entries.append((e.request.tokens[:end], e.request.blocks[:end], e.start))
        self.scheduled_tokens += sum(e.num_tokens for e in batch)
        handle = self.model.launch(entries)
        self.num_steps += 1
        return batch, (handle, self.num_steps - 1)

    def _finish_step(self, batch: list[ScheduledEntry], launched: Any) -> list[Request]:
        handle, index = launched
        logits = handle.result()
        sampled = {}
        for row, e in enumerate(batch):
            req = e.request
            # Only an entry that reached the end of the known tokens has the logits of the
            # next token; the earlier chunks of a prefill sample nothing.
            if req.status is Status.RUNNING and e.start + e.num_tokens == len(req.tokens):
                sampled[req.request_id] = sample(logits[row], req)
        return self.scheduler.update(batch, sampled, index)

    def step(self) -> list[Request]:
        """One engine step; returns the requests that finished in it.

        Plain mode: schedule() (exactly once), launch the forward of the planned entries
        (model.launch), take its result, sample each entry that reached the end of its
        request's known tokens, scheduler.update(...). Nothing to plan: returns [] without a
        forward.

        Overlap mode (README §6): the forward of step N is launched, then the schedule of
        step N+1 is made (exactly one schedule() call) BEFORE step N's result is taken; then
        step N's tokens are sampled and taken in, the entries of requests no longer running
        are dropped from plan N+1, and plan N+1 is launched (it stays in flight when step()
        returns). A step with nothing in flight first plans and launches one. What the tests
        check: the model's `events` show every schedule() call but those made with nothing in
        flight between a "launch n" and its "result n", and the outputs equal plain mode's.
        """
        if not self.overlap:
            batch = self.scheduler.schedule()
            if not batch:
                return []
            return self._finish_step(*self._launch(batch))
        if self._in_flight is None:
            batch = self.scheduler.schedule()
            if not batch:
                return []
            self._in_flight = self._launch(batch)
        batch, launched = self._in_flight
        following = self.scheduler.schedule()  # planned while step N is (notionally) running
        finished = self._finish_step(batch, launched)
        following = [e for e in following if e.request.status is Status.RUNNING]
        self._in_flight = self._launch(following) if following else None
        return finished

    def generate(self, requests: Sequence[Request]) -> dict[int, list[int]]:
        """Add every request (in order), step until none is unfinished, return
        {request_id: output}. RuntimeError if a step plans nothing while requests wait."""
        for request in requests:
            self.add(request)
        while self.has_unfinished():
            before, was_in_flight = self.num_steps, self._in_flight is not None
            self.step()
            if self.num_steps == before and not was_in_flight:
                raise RuntimeError("the scheduler planned nothing while requests wait")
        return {r.request_id: list(r.output) for r in requests}

    def stats(self) -> dict[str, float]:
        """{"steps": forwards launched, "scheduled_tokens": tokens over those forwards,
        "tokens_per_step", "hit_tokens", "lookup_tokens", "hit_rate": hit / lookup (0.0 when
        nothing was looked up)} — hit and lookup tokens are the scheduler's counters."""
        s = self.scheduler
        return {"steps": self.num_steps, "scheduled_tokens": self.scheduled_tokens,
                "tokens_per_step": self.scheduled_tokens / max(self.num_steps, 1),
                "hit_tokens": s.hit_tokens, "lookup_tokens": s.lookup_tokens,
                "hit_rate": s.hit_tokens / s.lookup_tokens if s.lookup_tokens else 0.0}


# -- disaggregated prefill / decode (README §7) ----------------------------------------------------
def prefill_and_send(model: Any, requests: Sequence[Request], dst: int = 1) -> None:
    """The prefill rank. For each request, in list order: prefill its whole prompt in one
    forward of `model` (blocks from a BlockManager of its own), sample its first token with
    `sample`, then send to rank `dst` exactly two messages with torch.distributed.send:
    the prompt's KV, model.read_kv(blocks) ([2, len(prompt), DIM] float64), then the token as
    torch.tensor([token]) (int64). Its blocks are freed after the send, so `model` needs only
    as many blocks as the longest prompt. Nothing else is sent.
    """
    manager = BlockManager(model.num_blocks)
    for req in requests:
        blocks = manager.allocate(len(req.prompt))
        logits = model.forward([(list(req.prompt), blocks, 0)])
        first = sample(logits[0], req)
        # Only this request's KV travels: len(prompt) tokens * 2 (K and V) * DIM * 8 bytes.
        dist.send(model.read_kv(blocks).contiguous(), dst)
        dist.send(torch.tensor([first], dtype=torch.int64), dst)
        manager.free(blocks)


def recv_and_decode(model: Any, requests: Sequence[Request], src: int = 0
                    ) -> dict[int, list[int]]:
    """The decode rank. For each request, in list order, receive the two messages of
    `prefill_and_send`, store the KV in blocks of its own (model.write_kv) and start the
    output with the received token; then decode every request until it ends (max_tokens, or
    its stop_token — the first token may already end it), sampling with `sample`. Returns
    {request_id: output}, equal to what one-request-at-a-time generation gives. `requests`
    is the same list (ids, prompts, limits) on both ranks. No prompt is computed again here:
    `model` computes exactly one token per output token after the first (its computed_tokens
    grows by sum(len(output) - 1)). `model` must hold every request's prompt and output at once.
    """
    manager = BlockManager(model.num_blocks)
    live = []
    for req in requests:
        n = len(req.prompt)
        kv = torch.empty(2, n, model.dim, dtype=torch.float64)
        dist.recv(kv, src)
        token = torch.empty(1, dtype=torch.int64)
        dist.recv(token, src)
        req.blocks = manager.allocate(n)
        model.write_kv(list(req.prompt), req.blocks, kv)
        req.num_computed = n
        req.output = [int(token)]
        if len(req.output) < req.max_tokens and req.output[-1] != req.stop_token:
            live.append(req)
    while live:  # every live request decodes one token per forward
        for req in live:
            req.blocks.extend(manager.allocate(1))
        entries = [(req.tokens, list(req.blocks), req.num_computed) for req in live]
        logits = model.forward(entries)
        still = []
        for row, req in enumerate(live):
            req.num_computed += 1
            token = sample(logits[row], req)
            req.output.append(token)
            if len(req.output) < req.max_tokens and token != req.stop_token:
                still.append(req)
            else:
                manager.free(req.blocks)
                req.blocks = []
        live = still
    return {req.request_id: list(req.output) for req in requests}
