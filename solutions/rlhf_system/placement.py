"""Reference solution: the RLHF loop co-located and disaggregated (README §7).

Co-located ("hybrid engine": DeepSpeed-Chat, verl) runs generation and training on the same
ranks one after the other, so the rollout reads the trainer's weights in place. Disaggregated
(OpenRLHF's separate vLLM engines, asynchronous RLHF as in Noukhovitch et al., 2024) gives each
phase its own ranks, syncs weights after every update and overlaps the next generation with
the current training, at the price of rollouts one version stale.
"""

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

from .rlhf import make_experience, ppo_train_step
from .weight_sync import recv_weights, send_weights


def _optimizers(actor: torch.nn.Module, critic: torch.nn.Module, cfg: RLHFConfig
                ) -> tuple[torch.optim.Optimizer, torch.optim.Optimizer | None]:
    actor_opt = torch.optim.Adam(actor.parameters(), lr=cfg.lr)
    critic_opt = torch.optim.Adam(critic.parameters(), lr=cfg.lr) if cfg.advantage == "gae" \
        else None
    return actor_opt, critic_opt


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def run_colocated(cfg: RLHFConfig, iterations: int) -> dict[str, Any]:
    """Co-located placement: every rank alternates generation and training on one actor."""
    rank = dist.get_rank()
    actor, critic, reference = build_models(cfg)
    actor_opt, critic_opt = _optimizers(actor, critic, cfg)
    scores: list[float] = []
    versions: list[int] = []
    for k in range(iterations):
        # Generation phase: the actor module itself samples, so the weights it reads are
        # the ones the last optimizer step wrote (version k); nothing to sync, nothing copied.
        exp = make_experience(actor, reference, critic if cfg.advantage == "gae" else None,
                              make_prompts(cfg, k, rank), cfg, rollout_generator(cfg, k, rank),
                              version=k)
        scores.append(float(exp.scores.mean()))
        versions.append(exp.version)
        # Training phase: data parallel over every rank, so every actor stays identical.
        ppo_train_step(actor, critic, actor_opt, critic_opt, exp, cfg, group=dist.group.WORLD)
    return {"scores": scores, "versions": versions, "actor": _state(actor)}


# ---- disaggregated: a batch's two messages (rollout -> trainer) -----------------------------


def _send_batch(exp: Experience, dst: int) -> None:
    # The rollout's whole product in two messages: the tokens, and every per-token float with
    # the score and the version that generated it in two extra columns.
    B = exp.prompts.shape[0]
    dist.send(torch.cat([exp.prompts[:, None], exp.responses], dim=1), dst=dst)
    dist.send(torch.cat([exp.old_logprobs, exp.ref_logprobs, exp.rewards, exp.advantages,
                         exp.scores[:, None], torch.full((B, 1), float(exp.version))], dim=1),
              dst=dst)


def _recv_batch(cfg: RLHFConfig, src: int) -> Experience:
    B, T = cfg.prompts_per_rank * cfg.group_size, cfg.response_len
    tokens = torch.empty(B, T + 1, dtype=torch.int64)
    dist.recv(tokens, src=src)
    floats = torch.empty(B, 4 * T + 2)
    dist.recv(floats, src=src)
    old, ref, rewards, adv = floats[:, :4 * T].split(T, dim=1)
    return Experience(prompts=tokens[:, 0].clone(), responses=tokens[:, 1:].clone(),
                      mask=torch.ones(B, T, dtype=torch.bool), old_logprobs=old.clone(),
                      ref_logprobs=ref.clone(), values=None, scores=floats[:, 4 * T].clone(),
                      rewards=rewards.clone(), advantages=adv.clone(), returns=None,
                      version=int(floats[0, 4 * T + 1]))


def _check(cfg: RLHFConfig, trainer_ranks: Sequence[int], rollout_ranks: Sequence[int]) -> None:
    world = dist.get_world_size()
    if cfg.advantage != "grpo":
        raise ValueError(f"run_disaggregated trains with 'grpo' only, not {cfg.advantage!r}")
    if not trainer_ranks or len(trainer_ranks) != len(rollout_ranks):
        raise ValueError(f"trainer_ranks {list(trainer_ranks)} and rollout_ranks "
                         f"{list(rollout_ranks)} must be non-empty and of equal length")
    if sorted([*trainer_ranks, *rollout_ranks]) != list(range(world)):
        raise ValueError(f"trainer_ranks {list(trainer_ranks)} and rollout_ranks "
                         f"{list(rollout_ranks)} must split the {world} ranks without overlap")


def run_disaggregated(cfg: RLHFConfig, iterations: int, trainer_ranks: Sequence[int],
                      rollout_ranks: Sequence[int]) -> dict[str, Any]:
    """Disaggregated placement: trainer ranks train, rollout ranks generate, weights are synced."""
    _check(cfg, trainer_ranks, rollout_ranks)
    rank = dist.get_rank()
    trainers = dist.new_group(list(trainer_ranks))
    actor, critic, reference = build_models(cfg)
    if rank in trainer_ranks:
        return _trainer(cfg, iterations, actor, trainers, list(trainer_ranks),
                        list(rollout_ranks))
    return _rollout(cfg, iterations, actor, reference, trainer_ranks[0],
                    trainer_ranks[list(rollout_ranks).index(rank)])


def _trainer(cfg: RLHFConfig, iterations: int, actor: torch.nn.Module,
             group: dist.ProcessGroup, trainer_ranks: list[int],
             rollout_ranks: list[int]) -> dict[str, Any]:
    rank = dist.get_rank()
    partner = rollout_ranks[trainer_ranks.index(rank)]
    is_sender = rank == trainer_ranks[0]
    actor_opt = torch.optim.Adam(actor.parameters(), lr=cfg.lr)
    if is_sender:  # version 0: the rollout ranks start from the trainers' initial weights
        send_weights(actor.state_dict(), rollout_ranks, cfg.bucket_bytes, 0)
    scores: list[float] = []
    versions: list[int] = []
    for k in range(iterations):
        # Iteration k: the trainers hold version k; the batch was generated with k-1 or k.
        exp = _recv_batch(cfg, partner)
        scores.append(float(exp.scores.mean()))
        versions.append(exp.version)
        ppo_train_step(actor, None, actor_opt, None, exp, cfg, group=group)
        # While this sync travels, the rollout ranks are already generating batch k+1 with
        # version k: that overlap is the point of disaggregation, and staleness one its price.
        if is_sender:
            send_weights(actor.state_dict(), rollout_ranks, cfg.bucket_bytes, k + 1)
    return {"role": "trainer", "scores": scores, "versions": versions, "actor": _state(actor)}


def _rollout(cfg: RLHFConfig, iterations: int, actor: torch.nn.Module,
             reference: torch.nn.Module, sender: int, partner: int) -> dict[str, Any]:
    rank = dist.get_rank()
    state = actor.state_dict()  # aliases the module's tensors: recv_weights updates the actor
    synced = [recv_weights(state, sender, cfg.bucket_bytes)]
    versions: list[int] = []
    for k in range(iterations):
        # Batch k is generated with the newest weights received: version k-1 (k >= 1), the
        # trainers meanwhile train on batch k-1.
        exp = make_experience(actor, reference, None, make_prompts(cfg, k, rank), cfg,
                              rollout_generator(cfg, k, rank), version=synced[-1])
        versions.append(exp.version)
        if k >= 1:
            # Version k arrives once the trainers finished batch k-1; receiving it before
            # sending batch k keeps every send matched by a posted receive on the other side.
            synced.append(recv_weights(state, sender, cfg.bucket_bytes))
        _send_batch(exp, partner)
    synced.append(recv_weights(state, sender, cfg.bucket_bytes))
    return {"role": "rollout", "versions": versions, "synced": synced, "actor": _state(actor)}
