"""What travels to the ranks for the rlhf_system suite: rank functions only.

Every case runs under `harness.cases.run_cases` in its own error scope. Ranks get inputs
(states, prompts, seeds), never expected values; the parent judges what comes back and, for
the multi-rank launches, the sidecars' wire log. `ctx.mark("case:<name>")` before each case
labels its wire records (marks only label; they are set by this suite's code).
"""

from __future__ import annotations

from typing import Any

import torch

from harness.cases import run_cases

TP_PLAN = {"fc1.weight": "column", "fc1.bias": "column", "fc2.weight": "row"}


def _raised(fn: Any) -> str:
    """The name of the exception `fn()` raised, or "" when it returned."""
    try:
        fn()
    except Exception as exc:
        if isinstance(exc, NotImplementedError):
            raise
        return type(exc).__name__
    return ""


def _policy(state: dict[str, torch.Tensor], critic: bool = False) -> torch.nn.Module:
    from assignments.rlhf_system import toy

    vocab, hidden = state["tok.weight"].shape
    model = (toy.TinyCritic if critic else toy.TinyPolicy)(vocab, hidden)
    model.load_state_dict(state)
    return model


def _flags(*tensors: Any) -> bool:
    return any(isinstance(t, torch.Tensor) and (t.requires_grad or t.grad_fn is not None)
               for t in tensors)


# ---- the computation flow (one rank) --------------------------------------------------------


def _generate_case(rl: Any, spec: dict[str, Any]) -> dict[str, Any]:
    policy = _policy(spec["state"])
    grad_seen: list[bool] = []
    policy.register_forward_hook(lambda m, i, o: grad_seen.append(torch.is_grad_enabled()))
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    runs = []
    for _ in range(2):
        gen = torch.Generator().manual_seed(spec["seed"])
        runs.append(rl.generate(policy, spec["prompts"], spec["T"], gen))
    (responses, logprobs), (responses2, logprobs2) = runs
    unchanged = all(torch.equal(before[k], v) for k, v in policy.state_dict().items())
    return {"responses": responses, "logprobs": logprobs, "repeat_equal":
            bool(torch.equal(responses, responses2) and torch.equal(logprobs, logprobs2)),
            "grad_in_forward": any(grad_seen), "requires_grad": _flags(responses, logprobs),
            "forwards": len(grad_seen), "unchanged": unchanged, "training": policy.training}


def _seqlp_case(rl: Any, spec: dict[str, Any]) -> dict[str, Any]:
    policy = _policy(spec["state"])
    out = rl.sequence_logprobs(policy, spec["prompts"], spec["responses"])
    has_graph = bool(out.requires_grad)
    with torch.no_grad():
        frozen = rl.sequence_logprobs(policy, spec["prompts"], spec["responses"])
    return {"out": out.detach(), "has_graph": has_graph, "frozen_graph": _flags(frozen)}


def _experience_case(rl: Any, spec: dict[str, Any]) -> dict[str, Any]:
    from assignments.rlhf_system import toy

    cfg = toy.RLHFConfig(**spec["cfg"])
    actor, reference = _policy(spec["actor"]), _policy(spec["frozen"])
    reference.requires_grad_(False)
    critic = _policy(spec["critic"], critic=True) if cfg.advantage == "gae" else None
    gen = torch.Generator().manual_seed(spec["seed"])
    exp = rl.make_experience(actor, reference, critic, spec["prompts"], cfg, gen,
                             version=spec["version"])
    fields = ["prompts", "responses", "mask", "old_logprobs", "ref_logprobs", "values",
              "scores", "rewards", "advantages", "returns"]
    out: dict[str, Any] = {f: getattr(exp, f) for f in fields}
    out["version"] = exp.version
    again = rl.make_experience(actor, reference, critic, spec["prompts"], cfg,
                               torch.Generator().manual_seed(spec["seed"]))
    out["default_version"] = again.version
    out["requires_grad"] = _flags(*[getattr(exp, f) for f in fields])
    return out


def _train_case(rl: Any, spec: dict[str, Any]) -> dict[str, Any]:
    from assignments.rlhf_system import toy

    cfg = toy.RLHFConfig(**spec["cfg"])
    actor, critic = _policy(spec["actor"]), _policy(spec["critic"], critic=True)
    actor_opt = torch.optim.Adam(actor.parameters(), lr=cfg.lr)
    critic_opt = torch.optim.Adam(critic.parameters(), lr=cfg.lr)
    exp = toy.Experience(**spec["exp"], version=0)
    rl.ppo_train_step(actor, critic, actor_opt, critic_opt, exp, cfg)
    return {"actor": dict(actor.state_dict()), "critic": dict(critic.state_dict())}


def rank_flow(ctx: Any, calls: list[tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
    """calls: (case name, what, spec); what selects the function under test."""
    rl = ctx.impl_module("rlhf_system", "rlhf")
    ws = ctx.impl_module("rlhf_system", "weight_sync")

    def one(what: str, s: dict[str, Any]) -> Any:
        if what == "kl":
            return rl.kl_penalized_rewards(s["logprobs"], s["ref"], s["scores"], s["mask"],
                                           s["beta"])
        if what == "gae":
            return list(rl.gae_advantages(s["rewards"], s["values"], s["mask"], s["gamma"],
                                          s["lam"]))
        if what == "grpo":
            return rl.grpo_advantages(s["scores"], s["group"], **s.get("kw", {}))
        if what == "grpo_error":
            return _raised(lambda: rl.grpo_advantages(s["scores"], s["group"]))
        if what == "generate":
            return _generate_case(rl, s)
        if what == "seqlp":
            return _seqlp_case(rl, s)
        if what == "experience":
            return _experience_case(rl, s)
        if what == "train":
            return _train_case(rl, s)
        if what == "manifest":
            return [list(e) for e in ws.make_manifest(s["state"])]
        if what == "buckets":
            return ws.plan_buckets(s["manifest"], s["limit"])
        if what == "buckets_error":
            return _raised(lambda: ws.plan_buckets(s["manifest"], s["limit"]))
        if what == "shard":
            full = s["tensor"]
            got = ws.shard_for_tp(s["name"], full, s["tp_rank"], s["tp_size"], TP_PLAN)
            shares = got.untyped_storage().data_ptr() == full.untyped_storage().data_ptr()
            return {"out": got, "shares": shares, "contiguous": got.is_contiguous(),
                    "input_intact": torch.equal(full, s["tensor_copy"])}
        if what == "shard_error":
            return _raised(lambda: ws.shard_for_tp(s["name"], s["tensor"], s["tp_rank"],
                                                   s["tp_size"], TP_PLAN))
        raise ValueError(f"unknown case kind {what}")

    return run_cases(ctx, [(name, lambda w=what, s=spec: one(w, s)) for name, what, spec in calls])


# ---- weight sync (4 ranks, sidecar) ---------------------------------------------------------


def _zeros_like(shapes: dict[str, tuple[list[int], str]]) -> dict[str, torch.Tensor]:
    return {k: torch.zeros(shape, dtype=getattr(torch, dtype.split(".")[-1]))
            for k, (shape, dtype) in shapes.items()}


def rank_sync(ctx: Any, cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Each case: a sender, its destinations, per-receiver (shapes, tp_rank, tp_size)."""
    ws = ctx.impl_module("rlhf_system", "weight_sync")

    def one(c: dict[str, Any]) -> Any:
        ctx.mark(f"case:{c['name']}")
        if ctx.rank == c["src"]:
            if c.get("expect_error"):
                return _raised(lambda: ws.send_weights(c["state"], c["dst"], c["bucket_bytes"],
                                                       c["version"]))
            ws.send_weights(c["state"], c["dst"], c["bucket_bytes"], c["version"])
            return {"intact": all(torch.equal(v, c["state_copy"][k])
                                  for k, v in c["state"].items())}
        recv = c["recv"].get(ctx.rank)
        if recv is None:
            return None
        state = _zeros_like(recv["shapes"])
        kwargs = {}
        if recv["tp_size"] > 1:
            kwargs = {"tp_rank": recv["tp_rank"], "tp_size": recv["tp_size"], "tp_plan": TP_PLAN}
        if c.get("expect_recv_error"):
            return _raised(lambda: ws.recv_weights(state, c["src"], c["bucket_bytes"]))
        version = ws.recv_weights(state, c["src"], c["bucket_bytes"], **kwargs)
        return {"version": version, "state": state}

    out = run_cases(ctx, [(c["name"], lambda c=c: one(c)) for c in cases])
    ctx.mark("end")
    return out


# ---- placements (4 ranks, sidecar) ----------------------------------------------------------


def _siblings(ctx: Any) -> None:
    """Import rlhf and weight_sync before placement, so its relative imports of them resolve
    to the implementation under test (also when placement alone is a mutant's)."""
    ctx.impl_module("rlhf_system", "rlhf")
    ctx.impl_module("rlhf_system", "weight_sync")


def _probe_forwards(toy: Any) -> list[tuple[int, bool]]:
    """Record, at every TinyPolicy forward, its fc1.weight's storage and whether grad is on."""
    seen: list[tuple[int, bool]] = []
    original = toy.TinyPolicy.forward

    def forward(self: Any, tokens: torch.Tensor) -> torch.Tensor:
        seen.append((self.fc1.weight.untyped_storage().data_ptr(), torch.is_grad_enabled()))
        return original(self, tokens)

    toy.TinyPolicy.forward = forward
    return seen


def _probe_critic(toy: Any) -> dict[int, Any]:
    """Record every TinyCritic that runs a forward (by id): the run's critic, to return."""
    seen: dict[int, Any] = {}
    original = toy.TinyCritic.forward

    def forward(self: Any, tokens: torch.Tensor) -> torch.Tensor:
        seen[id(self)] = self
        return original(self, tokens)

    toy.TinyCritic.forward = forward
    return seen


def _probe_seeding(toy: Any) -> dict[str, list[tuple[int, int]]]:
    """Record the (iteration, rank) of every toy.make_prompts and toy.rollout_generator call.
    Installed before the placement module is imported, so its imports bind the wrappers."""
    calls: dict[str, list[tuple[int, int]]] = {"make_prompts": [], "rollout_generator": []}
    for name in calls:
        original = getattr(toy, name)

        def wrapper(cfg: Any, iteration: int, rank: int, _name: str = name,
                    _original: Any = original) -> Any:
            calls[_name].append((int(iteration), int(rank)))
            return _original(cfg, iteration, rank)

        setattr(toy, name, wrapper)
    return calls


COLOCATED_CASES = ("colocated", "colocated_gae")  # rank_colocated's cases, in order
DISAGGREGATED_CASES = ("disaggregated", "bad_overlap", "bad_lengths", "bad_gae")


def rank_colocated(ctx: Any, cfg_kwargs: dict[str, Any], iterations: int,
                   gae_iterations: int) -> dict[str, Any]:
    from assignments.rlhf_system import toy

    seeding = _probe_seeding(toy)
    _siblings(ctx)
    pl = ctx.impl_module("rlhf_system", "placement")
    seen = _probe_forwards(toy)
    critics = _probe_critic(toy)

    def run() -> Any:
        seen.clear()
        for calls in seeding.values():
            calls.clear()
        out = pl.run_colocated(toy.RLHFConfig(**cfg_kwargs), iterations)
        return {"result": out, "storages": len({ptr for ptr, _ in seen}),
                "forwards": len(seen), "seeding": {k: list(v) for k, v in seeding.items()}}

    def run_gae() -> Any:
        critics.clear()
        out = pl.run_colocated(toy.RLHFConfig(**dict(cfg_kwargs, advantage="gae")),
                               gae_iterations)
        return {"result": out, "critics": len(critics),
                "critic": {k: v.detach().clone() for m in critics.values()
                           for k, v in m.state_dict().items()}}

    return run_cases(ctx, list(zip(COLOCATED_CASES, (run, run_gae))))


def rank_disaggregated(ctx: Any, cfg_kwargs: dict[str, Any], iterations: int,
                       trainers: list[int], rollouts: list[int]) -> dict[str, Any]:
    from assignments.rlhf_system import toy

    _siblings(ctx)
    pl = ctx.impl_module("rlhf_system", "placement")

    def bad(kwargs: dict[str, Any], t: list[int], r: list[int]) -> str:
        return _raised(lambda: pl.run_disaggregated(toy.RLHFConfig(**kwargs), 1, t, r))

    cases = list(zip(DISAGGREGATED_CASES, (
        lambda: pl.run_disaggregated(toy.RLHFConfig(**cfg_kwargs), iterations, trainers,
                                     rollouts),
        lambda: bad(cfg_kwargs, [0, 1], [1, 2]),
        lambda: bad(cfg_kwargs, [0], [1, 2, 3]),
        lambda: bad(dict(cfg_kwargs, advantage="gae"), trainers, rollouts))))
    marked = []
    for name, fn in cases:
        def run(name: str = name, fn: Any = fn) -> Any:
            ctx.mark(f"case:{name}")
            return fn()
        marked.append((name, run))
    return run_cases(ctx, marked)
