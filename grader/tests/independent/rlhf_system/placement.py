"""Co-located and disaggregated RLHF loops (independent implementation, README §7)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from assignments.rlhf_system.toy import (
    Experience,
    RLHFConfig,
    build_models,
    make_prompts,
    rollout_generator,
)

from . import rlhf
from .weight_sync import recv_weights, send_weights


def _snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def run_colocated(cfg: RLHFConfig, iterations: int) -> dict[str, Any]:
    """Every rank generates with its own actor, then all train together."""
    rank = dist.get_rank()
    actor, critic, reference = build_models(cfg)
    with_critic = cfg.advantage == "gae"
    actor_opt = torch.optim.Adam(actor.parameters(), lr=cfg.lr)
    critic_opt = torch.optim.Adam(critic.parameters(), lr=cfg.lr) if with_critic else None
    scores: list[float] = []
    versions: list[int] = []
    for k in range(iterations):
        exp = rlhf.make_experience(actor, reference, critic if with_critic else None,
                                   make_prompts(cfg, k, rank), cfg,
                                   rollout_generator(cfg, k, rank), version=k)
        scores.append(float(exp.scores.mean()))
        versions.append(exp.version)
        rlhf.ppo_train_step(actor, critic if with_critic else None, actor_opt, critic_opt,
                            exp, cfg, group=dist.group.WORLD)
    return {"scores": scores, "versions": versions, "actor": _snapshot(actor)}


# An experience travels as two messages: integers (version, prompts, responses) and floats.
def _send_batch(exp: Experience, dst: int) -> None:
    ints = torch.cat([torch.tensor([exp.version]), exp.prompts.long(),
                      exp.responses.long().reshape(-1)])
    floats = torch.cat([exp.old_logprobs.reshape(-1), exp.ref_logprobs.reshape(-1),
                        exp.scores, exp.rewards.reshape(-1), exp.advantages.reshape(-1)])
    dist.send(ints, dst)
    dist.send(floats.float(), dst)


def _recv_batch(cfg: RLHFConfig, src: int) -> Experience:
    b, t = cfg.prompts_per_rank * cfg.group_size, cfg.response_len
    ints = torch.empty(1 + b + b * t, dtype=torch.int64)
    floats = torch.empty(4 * b * t + b, dtype=torch.float32)
    dist.recv(ints, src)
    dist.recv(floats, src)
    old, ref, scores, rewards, adv = torch.split(floats, [b * t, b * t, b, b * t, b * t])
    return Experience(prompts=ints[1:1 + b].clone(), responses=ints[1 + b:].reshape(b, t),
                      mask=torch.ones(b, t, dtype=torch.bool), old_logprobs=old.reshape(b, t),
                      ref_logprobs=ref.reshape(b, t), values=None, scores=scores.clone(),
                      rewards=rewards.reshape(b, t), advantages=adv.reshape(b, t),
                      returns=None, version=int(ints[0]))


def _check(cfg: RLHFConfig, trainers: Sequence[int], rollouts: Sequence[int]) -> None:
    if cfg.advantage != "grpo":
        raise ValueError("the disaggregated loop trains with advantage='grpo' only")
    if not trainers or not rollouts:
        raise ValueError("trainer_ranks and rollout_ranks must not be empty")
    if len(trainers) != len(rollouts):
        raise ValueError("trainer_ranks and rollout_ranks must have the same length")
    if set(trainers) & set(rollouts):
        raise ValueError("a rank cannot be both trainer and rollout")
    everyone = list(trainers) + list(rollouts)
    if len(set(everyone)) != len(everyone) or set(everyone) != set(range(dist.get_world_size())):
        raise ValueError("trainer_ranks and rollout_ranks must cover the world exactly once")


def run_disaggregated(cfg: RLHFConfig, iterations: int, trainer_ranks: Sequence[int],
                      rollout_ranks: Sequence[int]) -> dict[str, Any]:
    """Trainers train on batch k while rollouts generate batch k+1 (staleness one)."""
    _check(cfg, trainer_ranks, rollout_ranks)
    trainers_group = dist.new_group(list(trainer_ranks))
    rank = dist.get_rank()
    actor, _, reference = build_models(cfg)
    lead = trainer_ranks[0]
    if rank in trainer_ranks:
        partner = rollout_ranks[list(trainer_ranks).index(rank)]
        opt = torch.optim.Adam(actor.parameters(), lr=cfg.lr)
        if rank == lead:
            send_weights(actor.state_dict(), rollout_ranks, cfg.bucket_bytes, 0)
        scores: list[float] = []
        versions: list[int] = []
        for k in range(iterations):
            exp = _recv_batch(cfg, partner)
            scores.append(float(exp.scores.mean()))
            versions.append(exp.version)
            rlhf.ppo_train_step(actor, None, opt, None, exp, cfg, group=trainers_group)
            if rank == lead:
                send_weights(actor.state_dict(), rollout_ranks, cfg.bucket_bytes, k + 1)
        return {"role": "trainer", "scores": scores, "versions": versions,
                "actor": _snapshot(actor)}

    partner = trainer_ranks[list(rollout_ranks).index(rank)]
    synced = [recv_weights(actor.state_dict(), lead, cfg.bucket_bytes)]
    generated: list[int] = []
    for k in range(iterations):
        exp = rlhf.make_experience(actor, reference, None, make_prompts(cfg, k, rank), cfg,
                                   rollout_generator(cfg, k, rank), version=synced[-1])
        generated.append(exp.version)
        if k >= 1:  # version k arrives while batch k waits: staleness stays at one
            synced.append(recv_weights(actor.state_dict(), lead, cfg.bucket_bytes))
        _send_batch(exp, partner)
    synced.append(recv_weights(actor.state_dict(), lead, cfg.bucket_bytes))
    return {"role": "rollout", "versions": generated, "synced": synced,
            "actor": _snapshot(actor)}
