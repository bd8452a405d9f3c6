"""Requests and scheduled batch entries: the data the scheduler and the engine share.
Provided: do not edit (your code sets these fields; the tests read them).

Life of a request (README §2):

    WAITING --admitted by schedule()--> RUNNING --last token sampled--> FINISHED
       ^                                   |
       +------ preempted (blocks freed, recomputed later, outputs kept) -+

A RUNNING request is prefilling while `num_computed < len(prompt)` (its prompt may take
several steps: chunked prefill) and decoding afterwards.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Request", "ScheduledEntry", "Status"]


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Request:
    """One generation request and its state.

    Given by the caller:
        request_id   unique int
        prompt       token ids, at least one
        max_tokens   output tokens to generate at most (>= 1)
        stop_token   generation also ends right after this token is sampled (it is kept in
                     `output`); None: only max_tokens ends it
        temperature  0.0: greedy; > 0: sampled (engine.sample says exactly how)
        seed         the request's sampling seed
    Kept by the scheduler and the engine:
        status        Status
        output        sampled tokens so far
        num_computed  tokens of `tokens` whose KV is computed or scheduled to be computed by a
                      forward already launched (or, with overlap, planned); 0 after preemption
        blocks        the KV blocks the request owns a reference to, one per token position
                      0..len(blocks)-1 (so len(blocks) == num_computed while running); empty
                      while waiting and once finished
        cache_node    the radix-cache node the request holds a reference on (None: none)
        arrival_step  engine.num_steps when the request was added
        token_steps   token_steps[i]: the index of the forward (0-based, counting the engine's
                      launches) whose logits produced output[i]
        num_preemptions  times it was preempted
    """

    request_id: int
    prompt: list[int]
    max_tokens: int
    stop_token: int | None = None
    temperature: float = 0.0
    seed: int = 0
    status: Status = Status.WAITING
    output: list[int] = field(default_factory=list)
    num_computed: int = 0
    blocks: list[int] = field(default_factory=list)
    cache_node: Any = None
    arrival_step: int = 0
    token_steps: list[int] = field(default_factory=list)
    num_preemptions: int = 0

    @property
    def tokens(self) -> list[int]:
        """prompt + output (a new list)."""
        return list(self.prompt) + list(self.output)

    @property
    def finished(self) -> bool:
        return self.status is Status.FINISHED

    def ttft(self) -> int:
        """Time to first token, in steps: token_steps[0] - arrival_step + 1 (a request whose
        whole prompt is prefilled in the first forward after it arrived has TTFT 1)."""
        if not self.token_steps:
            raise ValueError(f"request {self.request_id} has no output token yet")
        return self.token_steps[0] - self.arrival_step + 1

    def tpot(self) -> float:
        """Time per output token after the first, in steps (0.0 with one token)."""
        if len(self.token_steps) < 2:
            return 0.0
        return (self.token_steps[-1] - self.token_steps[0]) / (len(self.token_steps) - 1)


@dataclass(frozen=True, eq=False)
class ScheduledEntry:
    """One request's share of a step: compute the KV of tokens[start : start + num_tokens].

    The forward's entry for it is (tokens[:start + num_tokens], blocks[:start + num_tokens],
    start). When start + num_tokens reaches the end of the request's known tokens when the
    forward is launched, the step samples the request's next output token from its logits.
    """

    request: Request
    start: int
    num_tokens: int
