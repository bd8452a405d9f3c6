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

from assignments.serving.request import Request

# Your Engine builds on your own radix.py and scheduler.py; import them relatively, so the
# grader loads the versions beside this file:
#     from .radix import RadixCache
#     from .scheduler import Scheduler
# and the provided helpers absolutely (assignments.serving.blocks / .request / .model).

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
    raise NotImplementedError("sample: see README §5")


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
        raise NotImplementedError("Engine.__init__: see README §5")

    def add(self, request: Request) -> None:
        """Set request.arrival_step = num_steps and hand it to the scheduler (its errors)."""
        raise NotImplementedError("Engine.add: see README §5")

    def has_unfinished(self) -> bool:
        """True while a request is waiting or running (or, with overlap, a forward is in
        flight)."""
        raise NotImplementedError("Engine.has_unfinished: see README §5")



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
        raise NotImplementedError("Engine.step: see README §5")

    def generate(self, requests: Sequence[Request]) -> dict[int, list[int]]:
        """Add every request (in order), step until none is unfinished, return
        {request_id: output}. RuntimeError if a step plans nothing while requests wait."""
        raise NotImplementedError("Engine.generate: see README §5")

    def stats(self) -> dict[str, float]:
        """{"steps": forwards launched, "scheduled_tokens": tokens over those forwards,
        "tokens_per_step", "hit_tokens", "lookup_tokens", "hit_rate": hit / lookup (0.0 when
        nothing was looked up)} — hit and lookup tokens are the scheduler's counters."""
        raise NotImplementedError("Engine.stats: see README §5")


# -- disaggregated prefill / decode (README §7) ----------------------------------------------------
def prefill_and_send(model: Any, requests: Sequence[Request], dst: int = 1) -> None:
    """The prefill rank. For each request, in list order: prefill its whole prompt in one
    forward of `model` (blocks from a BlockManager of its own), sample its first token with
    `sample`, then send to rank `dst` exactly two messages with torch.distributed.send:
    the prompt's KV, model.read_kv(blocks) ([2, len(prompt), DIM] float64), then the token as
    torch.tensor([token]) (int64). Its blocks are freed after the send, so `model` needs only
    as many blocks as the longest prompt. Nothing else is sent.
    """
    raise NotImplementedError("prefill_and_send: see README §7")


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
    raise NotImplementedError("recv_and_decode: see README §7")
