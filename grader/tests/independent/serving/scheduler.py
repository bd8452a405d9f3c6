"""An independent serving submission (scheduler), written from the stubs and README only.

A plan is built in a small working object (`_Plan`) that knows the budget left and which
request each entry belongs to, so a preemption can take a request that was already planned in
this step back out of the plan and return its tokens to the budget.
"""

from __future__ import annotations

import bisect
import itertools
from typing import Any

from assignments.serving.request import Request, ScheduledEntry, Status

__all__ = ["Scheduler"]


class _Plan:
    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.items: list[tuple[Request, int, int]] = []  # (request, start, num_tokens)
        self.preempted = False

    def add(self, req: Request, start: int, n: int) -> None:
        self.items.append((req, start, n))
        self.budget -= n

    def withdraw(self, req: Request) -> None:
        kept = []
        for item in self.items:
            if item[0] is req:
                self.budget += item[2]
            else:
                kept.append(item)
        self.items = kept

    def entries(self) -> list[ScheduledEntry]:
        return [ScheduledEntry(request=r, start=s, num_tokens=n) for r, s, n in self.items]


class Scheduler:
    def __init__(self, manager: Any, *, max_num_seqs: int, max_num_tokens: int,
                 cache: Any = None) -> None:
        for name, value in (("max_num_seqs", max_num_seqs), ("max_num_tokens", max_num_tokens)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an int, got {value!r}")
        if not 1 <= max_num_seqs <= max_num_tokens:
            raise ValueError(f"need 1 <= max_num_seqs <= max_num_tokens, got max_num_seqs="
                             f"{max_num_seqs}, max_num_tokens={max_num_tokens}")
        self.manager = manager
        self.cache = cache
        self.max_num_seqs = max_num_seqs
        self.max_num_tokens = max_num_tokens
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.hit_tokens = 0
        self.lookup_tokens = 0
        self._ids: set[int] = set()
        self._arrival: dict[int, int] = {}  # request_id -> arrival number
        self._counter = itertools.count()

    def add(self, request: Request) -> None:
        if len(request.prompt) == 0:
            raise ValueError(f"request {request.request_id}: empty prompt")
        if request.max_tokens < 1:
            raise ValueError(f"request {request.request_id}: max_tokens = "
                             f"{request.max_tokens} < 1")
        if request.request_id in self._ids:
            raise ValueError(f"request id {request.request_id} was added already")
        longest = len(request.prompt) + request.max_tokens - 1
        if longest > self.manager.num_blocks:
            raise ValueError(f"request {request.request_id} needs up to {longest} KV blocks, "
                             f"the pool has {self.manager.num_blocks}: it could never run")
        self._ids.add(request.request_id)
        self._arrival[request.request_id] = next(self._counter)
        request.status = Status.WAITING
        self.waiting.append(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting) or bool(self.running)

    # -- planning --------------------------------------------------------------------------------
    def _make_room(self, n: int) -> bool:
        """Try to have `n` blocks free, evicting from the cache if needed."""
        free = self.manager.num_free()
        if free < n and self.cache is not None:
            self.cache.evict(n - free)
        return self.manager.num_free() >= n

    def _grow(self, req: Request, n: int, plan: _Plan) -> bool:
        """Plan `n` more tokens of running `req` (steps 1 and 2), preempting the newest running
        requests while memory is short. False when `req` itself had to go."""
        while not self._make_room(n):
            victim = self.running[-1]
            self.preempt(victim)
            plan.withdraw(victim)
            plan.preempted = True
            if victim is req:
                return False
        start = req.num_computed
        req.blocks = req.blocks + self.manager.allocate(n)
        req.num_computed = start + n
        plan.add(req, start, n)
        return True

    def schedule(self) -> list[ScheduledEntry]:
        plan = _Plan(self.max_num_tokens)

        # 1. decodes, oldest first
        for req in list(self.running):
            if req.status is not Status.RUNNING:
                continue
            known = len(req.prompt) + len(req.output)
            if req.num_computed < known - 1:
                continue  # still prefilling
            if req.num_computed >= known and len(req.output) + 1 >= req.max_tokens:
                continue  # its coming token (in flight) is its last
            self._grow(req, 1, plan)

        # 2. prefills that go on, oldest first
        for req in list(self.running):
            if plan.budget <= 0:
                break
            if req.status is not Status.RUNNING:
                continue
            known = len(req.prompt) + len(req.output)
            if req.num_computed >= known - 1:
                continue
            if any(item[0] is req for item in plan.items):
                continue
            self._grow(req, min(known - req.num_computed, plan.budget), plan)

        # 3. admissions, first come first served, never after a preemption
        if not plan.preempted:
            while (self.waiting and len(self.running) < self.max_num_seqs
                   and plan.budget > 0):
                if not self._admit(self.waiting[0], plan):
                    break
        return plan.entries()

    def _admit(self, req: Request, plan: _Plan) -> bool:
        tokens = req.tokens
        cached_blocks: list[int] = []
        node = None
        if self.cache is not None:
            cached_blocks, node = self.cache.match_prefix(tokens[:-1])
            self.cache.inc_ref(node)
            self.manager.incref(cached_blocks)
        cached = len(cached_blocks)
        n = min(len(tokens) - cached, plan.budget)
        if not self._make_room(n):
            if node is not None:
                self.manager.free(cached_blocks)
                self.cache.dec_ref(node)
            return False
        self.waiting.pop(0)
        req.blocks = cached_blocks + self.manager.allocate(n)
        req.num_computed = cached + n
        req.cache_node = node
        req.status = Status.RUNNING
        self.running.append(req)
        self.hit_tokens += cached
        self.lookup_tokens += len(tokens)
        plan.add(req, cached, n)
        return True

    def _release(self, req: Request) -> None:
        if req.blocks:
            self.manager.free(req.blocks)
        req.blocks = []
        if req.cache_node is not None:
            self.cache.dec_ref(req.cache_node)
        req.cache_node = None

    def preempt(self, req: Request) -> None:
        self._release(req)
        req.num_computed = 0
        req.status = Status.WAITING
        req.num_preemptions += 1
        self.running = [r for r in self.running if r is not req]
        order = [self._arrival[r.request_id] for r in self.waiting]
        at = bisect.bisect_left(order, self._arrival[req.request_id])
        self.waiting.insert(at, req)

    # -- after a step ----------------------------------------------------------------------------
    def update(self, batch: list[ScheduledEntry], sampled: dict[int, int], step: int
               ) -> list[Request]:
        done: list[Request] = []
        for entry in batch:
            req = entry.request
            if req.request_id not in sampled or req.status is not Status.RUNNING:
                continue
            if req in done:
                continue
            token = sampled[req.request_id]
            req.output.append(token)
            req.token_steps.append(step)
            ended = len(req.output) >= req.max_tokens or (
                req.stop_token is not None and token == req.stop_token)
            if ended:
                self._finish(req)
                done.append(req)
        return done

    def _finish(self, req: Request) -> None:
        if self.cache is not None:
            tokens = req.tokens
            keep = len(tokens) - 1
            self.cache.insert(tokens[:keep], req.blocks[:keep])
        self._release(req)
        req.status = Status.FINISHED
        self.running = [r for r in self.running if r is not req]
