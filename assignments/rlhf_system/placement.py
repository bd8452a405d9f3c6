"""Two placements of the RLHF loop on a group of ranks (README §7).

Both functions are called by *every* rank of the default process group (a launch of N ranks)
with the same arguments, and return a plain dict describing what this rank did. They build their
models with `toy.build_models(cfg)`, their prompts with `toy.make_prompts(cfg, k, rank)` and
their sampling generator with `toy.rollout_generator(cfg, k, rank)` (k the iteration, rank the
*global* rank that generates), optimizers `torch.optim.Adam(params, lr=cfg.lr)` for the actor
and (for cfg.advantage == "gae") the critic, and one iteration is
`rlhf.make_experience(...)` followed by `rlhf.ppo_train_step(...)`.

The "version" of the actor's weights is the number of `ppo_train_step` calls they have seen:
the initial weights are version 0, after iteration k's update they are version k + 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from assignments.rlhf_system.toy import RLHFConfig


def run_colocated(cfg: RLHFConfig, iterations: int) -> dict[str, Any]:
    """Co-located placement: every rank alternates generation and training on one actor.

    Each iteration k = 0 .. iterations - 1, on every rank: generate and score this rank's batch
    with the actor itself (`make_experience` with version k), then `ppo_train_step` with
    group = the default group (gradients averaged over all ranks, so the actors stay identical).
    The rank holds exactly one copy of the actor's weights the whole time: generation reads the
    very tensors the optimizer updates (no second rollout copy, no state_dict copy); the frozen
    reference is the only other `TinyPolicy`. No weight sync is needed, and none is sent.

    Returns:
        {"scores": [float] * iterations, the mean of exp.scores of this rank's batch in each
         iteration; "versions": [int] * iterations, the version each batch was generated with
         (k); "actor": the final actor's state_dict (name -> tensor, parameters and buffers)}.
    """
    raise NotImplementedError("run_colocated: see README §7")


def run_disaggregated(cfg: RLHFConfig, iterations: int, trainer_ranks: Sequence[int],
                      rollout_ranks: Sequence[int]) -> dict[str, Any]:
    """Disaggregated placement: trainer ranks train, rollout ranks generate, weights are synced.

    Rank sets: `trainer_ranks` and `rollout_ranks` are disjoint lists of global ranks of equal
    length n >= 1 that together are every rank. rollout_ranks[i] sends its batches to
    trainer_ranks[i]. After checking its arguments, every rank calls
    `dist.new_group(list(trainer_ranks))` once (the trainers' data-parallel group, passed to
    `ppo_train_step`), before any other communication.

    Roles: a rollout rank holds an actor (kept current by weight syncs) and the frozen
    reference, and turns each batch into a whole `Experience` with `make_experience(actor,
    reference, None, ...)` (generation, reward model, KL-penalised rewards, GRPO advantages):
    disaggregation here trains with cfg.advantage == "grpo" only. It sends the experience to
    its trainer with `dist.send` (in a format of your choice; it must carry every tensor
    `ppo_train_step` reads, and the version that generated it). A trainer rank holds the actor
    and its Adam optimizer and calls `ppo_train_step(actor, None, opt, None, exp, cfg,
    group=the trainers' group)` on each batch it receives.

    Weights: trainer_ranks[0] syncs its actor's state_dict to every rollout rank with
    `send_weights(actor.state_dict(), rollout_ranks, cfg.bucket_bytes, version)`; each rollout
    rank calls `recv_weights(its actor's state_dict(), trainer_ranks[0], cfg.bucket_bytes)`.
    Syncs carry versions 0 (the initial weights, before any generation), 1, ..., iterations
    (after each update): iterations + 1 syncs in all, each received by every rollout rank, so
    a rollout rank ends holding the trainers' final weights.

    Schedule, with staleness at most one: the batch the trainers consume in iteration k
    (k = 0 .. iterations - 1, trainer weights at version k) was generated with version k - 1
    or k, and a rollout rank sends batch k only after it has received version k - 1 (k >= 1).
    The overlapping schedule (README §7): rollout ranks generate batch k with version k - 1
    while the trainers train on batch k - 1. Messages must be ordered so that no two ranks
    wait on each other (README §7 gives an order that works); every message is a blocking
    `dist.send`/`dist.recv` (or isend/irecv + wait) between a trainer and a rollout rank, and
    the trainers' gradient averaging stays inside their own group. Every batch travels as the
    same number of messages, sent one batch after the other.

    Returns, on a trainer rank:
        {"role": "trainer", "scores": [float] * iterations (mean exp.scores of each consumed
         batch), "versions": [int] * iterations (the version that generated each consumed
         batch), "actor": final actor state_dict}.
    On a rollout rank:
        {"role": "rollout", "versions": [int] * iterations (the version each of its batches
         was generated with), "synced": [int] * (iterations + 1) (the versions recv_weights
         returned, in order), "actor": its actor's state_dict after the last sync}.

    Raises:
        ValueError (before any communication): cfg.advantage is not "grpo", or the rank sets
        overlap, differ in length, are empty, or do not cover the world.
    """
    raise NotImplementedError("run_disaggregated: see README §7")
