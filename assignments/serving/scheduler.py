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

from assignments.serving.request import Request, ScheduledEntry

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
        raise NotImplementedError("Scheduler.__init__: see README §3")

    def add(self, request: Request) -> None:
        """Queue a new request (status WAITING, at the back of `waiting`).

        ValueError for an empty prompt, max_tokens < 1, a request_id already added, or a
        request that could never fit: len(prompt) + max_tokens - 1 > manager.num_blocks."""
        raise NotImplementedError("Scheduler.add: see README §3")

    def has_unfinished(self) -> bool:
        """True while any request is waiting or running."""
        raise NotImplementedError("Scheduler.has_unfinished: see README §3")

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
        raise NotImplementedError("Scheduler.schedule: see README §3")




    def preempt(self, req: Request) -> None:
        """Move a running request back to waiting (README §3): blocks and cache reference
        released, num_computed = 0, output kept, num_preemptions + 1, back at its arrival
        place in `waiting`."""
        raise NotImplementedError("Scheduler.preempt: see README §3")


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
        raise NotImplementedError("Scheduler.update: see README §3")

