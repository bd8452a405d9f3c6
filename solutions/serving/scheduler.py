"""Continuous batching with chunked prefill, preemption and a prefix cache (README §2–§3).

Each call of `schedule()` plans one forward: running requests decode first (one token each),
then a prefill that did not finish goes on, then waiting prompts are admitted in arrival
order into what is left of the token budget, the last of them chunked if it does not fit.
This is the policy of vLLM's scheduler (Kwon et al., 2023) with Sarathi-style chunked prefill
(Agrawal et al., 2024). When the KV pool runs out, the newest running request is preempted:
its blocks are freed and it is recomputed later (vLLM's "recompute" preemption).
"""

from __future__ import annotations

from typing import Any

from assignments.serving.request import Request, ScheduledEntry, Status

__all__ = ["Scheduler"]


class Scheduler:
    """Decides, step by step, which tokens of which requests the next forward computes.

    Public attributes (the tests read them between steps):
        manager         the BlockManager the KV blocks come from
        cache           the RadixCache, or None without prefix caching
        max_num_seqs    at most this many requests are RUNNING at any time
        max_num_tokens  at most this many tokens per forward (the token budget)
        waiting         list[Request]: WAITING requests in arrival order (the order of `add`);
                        a preempted request goes back to its arrival place, which is ahead
                        of every request never admitted
        running         list[Request]: RUNNING requests in admission order, oldest first (a
                        re-admitted request counts from its latest admission)
        hit_tokens      total prefix-cache hits: tokens taken from the cache at admissions
        lookup_tokens   total tokens of the requests at their admissions (for the hit rate)
    """

    def __init__(self, manager: Any, *, max_num_seqs: int, max_num_tokens: int,
                 cache: Any = None) -> None:
        """ValueError unless 1 <= max_num_seqs <= max_num_tokens (so the decodes of every
        running request always fit in the budget)."""
        if not 1 <= max_num_seqs <= max_num_tokens:
            raise ValueError(f"need 1 <= max_num_seqs <= max_num_tokens, got max_num_seqs="
                             f"{max_num_seqs}, max_num_tokens={max_num_tokens}")
        self.manager, self.cache = manager, cache
        self.max_num_seqs, self.max_num_tokens = max_num_seqs, max_num_tokens
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.hit_tokens = 0
        self.lookup_tokens = 0
        self._arrival: dict[int, int] = {}
        self._preemptions = 0

    def add(self, request: Request) -> None:
        """Queue a new request (status WAITING, at the back of `waiting`).

        ValueError for an empty prompt, max_tokens < 1, a request_id already added, or a
        request that could never fit: len(prompt) + max_tokens - 1 > manager.num_blocks."""
        if not request.prompt or request.max_tokens < 1:
            raise ValueError(f"request {request.request_id}: needs a non-empty prompt and "
                             f"max_tokens >= 1")
        if request.request_id in self._arrival:
            raise ValueError(f"request id {request.request_id} was already added")
        if len(request.prompt) + request.max_tokens - 1 > self.manager.num_blocks:
            raise ValueError(f"request {request.request_id} needs up to "
                             f"{len(request.prompt) + request.max_tokens - 1} KV blocks, more "
                             f"than the pool's {self.manager.num_blocks}")
        self._arrival[request.request_id] = len(self._arrival)
        request.status = Status.WAITING
        self.waiting.append(request)

    def has_unfinished(self) -> bool:
        """True while any request is waiting or running."""
        return bool(self.waiting or self.running)

    # -- planning a step -------------------------------------------------------------------------
    def schedule(self) -> list[ScheduledEntry]:
        """Plan the next forward (README §3); returns its entries, empty when there is nothing
        to run. In this order:

        1. Decodes. Each running request that is decoding, i.e. num_computed >=
           len(tokens) - 1, oldest first, gets one token (start = num_computed). With overlap
           a request may have num_computed == len(tokens): its next token is still being
           sampled by the forward in flight; it is planned for that coming token all the
           same, unless that token will be its last (len(output) + 1 == max_tokens): then
           it gets nothing.
        2. Prefills that go on: each running request still prefilling, oldest first, gets
           min(len(tokens) - num_computed, tokens left in the budget), if any are left.
        3. Admission, only when steps 1 and 2 preempted nobody (as in vLLM: memory is short,
           so admitting more would only thrash): while requests wait, fewer than
           max_num_seqs run and budget is left, the first waiting request is admitted:
           with a cache, its cached prefix is
           `cache.match_prefix(tokens[:-1])` (never the whole: at least one token must be
           computed to get logits), referenced with `cache.inc_ref(node)` and its blocks with
           `manager.incref`; it gets min(len(tokens) - cached, budget left) tokens. The
           admission adds len(tokens) to lookup_tokens and the cached length to hit_tokens.
           If its blocks cannot be found (below), it stays first in line, with nothing
           counted or held, and admission stops: first come, first served.

        Every planned token needs a new KV block. When too few are free, the cache evicts
        (`cache.evict(shortfall)`) first. If still short, in steps 1 and 2 the newest running
        request (the last of `running`) is preempted and the step tries again, until the
        request being planned is itself the newest: then it is preempted and gets nothing.
        Preemption frees the request's blocks and its cache reference, sets num_computed = 0
        and status WAITING, counts num_preemptions, keeps its output, and puts it back in
        `waiting` at its arrival place. Admission never preempts.

        A planned request's `blocks` grow by the new blocks and its num_computed by the
        tokens planned, at once (so a plan made while a forward is in flight sees it).
        """
        budget = self.max_num_tokens
        preemptions_before = self._preemptions
        batch: list[ScheduledEntry] = []
        planned: set[int] = set()
        # 1. Decodes first: a decode is one token, and delaying it stalls a user mid-answer.
        for req in list(self.running):
            if req.status is not Status.RUNNING or req.num_computed < len(req.prompt) \
                    + len(req.output) - 1:
                continue
            if req.num_computed == len(req.prompt) + len(req.output) \
                    and len(req.output) + 1 >= req.max_tokens:
                continue  # the token in flight is its last: it finishes when it lands
            if self._grow(req, 1):
                batch.append(ScheduledEntry(req, req.num_computed - 1, 1))
                planned.add(req.request_id)
                budget -= 1
        # 2. A prefill that did not finish (chunked) goes on with what budget is left.
        for req in list(self.running):
            if budget == 0:
                break
            if req.status is not Status.RUNNING or req.request_id in planned:
                continue
            remaining = len(req.prompt) + len(req.output) - req.num_computed
            if remaining <= 1:
                continue  # a decoding request that step 1 planned or skipped
            take = min(remaining, budget)
            start = req.num_computed
            if self._grow(req, take):
                batch.append(ScheduledEntry(req, start, take))
                planned.add(req.request_id)
                budget -= take
        # 3. Admit waiting prompts first come, first served, into what is left -- unless
        # memory was short enough to preempt someone this step.
        preempted_now = self._preemptions != preemptions_before
        while not preempted_now and self.waiting and budget > 0 \
                and len(self.running) < self.max_num_seqs:
            entry = self._admit(self.waiting[0], budget)
            if entry is None:
                break
            batch.append(entry)
            budget -= entry.num_tokens
        return batch

    def _grow(self, req: Request, n: int) -> bool:
        """Give a running request n more blocks, preempting the newest as needed (README §3).
        False when `req` itself had to be preempted."""
        while not self._reserve(n):
            victim = self.running[-1]
            self.preempt(victim)
            if victim is req:
                return False
        req.blocks.extend(self.manager.allocate(n))
        req.num_computed += n
        return True

    def _reserve(self, n: int) -> bool:
        """True when n blocks are free, after evicting from the cache if need be."""
        short = n - self.manager.num_free()
        if short > 0 and self.cache is not None:
            self.cache.evict(short)
        return self.manager.num_free() >= n

    def _admit(self, req: Request, budget: int) -> ScheduledEntry | None:
        tokens = req.tokens
        cached: list[int] = []
        node = None
        if self.cache is not None:
            cached, node = self.cache.match_prefix(tokens[:-1])
            self.cache.inc_ref(node)  # lock it before evicting, or we could evict our own hit
            self.manager.incref(cached)
        take = min(len(tokens) - len(cached), budget)
        if not self._reserve(take):
            if self.cache is not None:
                self.manager.free(cached)
                self.cache.dec_ref(node)
            return None
        self.waiting.pop(0)
        self.lookup_tokens += len(tokens)
        self.hit_tokens += len(cached)
        req.blocks = list(cached) + self.manager.allocate(take)
        req.cache_node = node
        req.num_computed = len(cached) + take
        req.status = Status.RUNNING
        self.running.append(req)
        return ScheduledEntry(req, len(cached), take)

    def preempt(self, req: Request) -> None:
        """Move a running request back to waiting (README §3): blocks and cache reference
        released, num_computed = 0, output kept, num_preemptions + 1, back at its arrival
        place in `waiting`."""
        self._release(req)
        self._preemptions += 1
        req.num_computed = 0
        req.status = Status.WAITING
        req.num_preemptions += 1
        self.running.remove(req)
        place = 0
        while place < len(self.waiting) and \
                self._arrival[self.waiting[place].request_id] < self._arrival[req.request_id]:
            place += 1
        self.waiting.insert(place, req)

    def _release(self, req: Request) -> None:
        self.manager.free(req.blocks)
        req.blocks = []
        if req.cache_node is not None and self.cache is not None:
            self.cache.dec_ref(req.cache_node)
        req.cache_node = None

    # -- after a step ----------------------------------------------------------------------------
    def update(self, batch: list[ScheduledEntry], sampled: dict[int, int], step: int
               ) -> list[Request]:
        """Take in one forward's sampled tokens; returns the requests that finished, in batch
        order.

        sampled: request_id -> token, for the entries that reached the end of their known
        tokens (the engine samples those, and only those). For each such request still
        RUNNING (with overlap it may have been preempted since it was planned: then the token
        is dropped, and recomputed later), the token is appended to `output` and `step` to
        `token_steps`. A request whose output reaches max_tokens, or whose token is its
        stop_token, finishes: with a cache, its tokens but the last are inserted
        (`cache.insert(tokens[:-1], blocks[:len(tokens) - 1])`: every one of them has its KV
        computed); then its blocks and cache reference are released, it leaves `running` and
        its status is FINISHED.
        """
        finished = []
        for entry in batch:
            req = entry.request
            if req.request_id not in sampled or req.status is not Status.RUNNING:
                continue
            token = sampled[req.request_id]
            req.output.append(token)
            req.token_steps.append(step)
            if len(req.output) >= req.max_tokens or token == req.stop_token:
                self._finish(req)
                finished.append(req)
        return finished

    def _finish(self, req: Request) -> None:
        if self.cache is not None:
            done = len(req.prompt) + len(req.output) - 1
            self.cache.insert(req.tokens[:done], req.blocks[:done])
        self._release(req)
        req.status = Status.FINISHED
        self.running.remove(req)
