"""Public tests of rlhf_system (20 points): run `pytest assignments/rlhf_system`.

Three launches: one rank for the computation flow and the sync's pure helpers, two ranks over
the sidecar transport for one weight sync (values here, sizes from the wire log the sidecars
keep outside your rank), two ranks for a short co-located run. A part you have not written
yet fails only its own tests ("not implemented"). Expected values are computed here with plain
torch. The hidden suite checks the same kinds of things on more cases and 4 ranks, plus the
disaggregated loop, staleness and learning (README §9).
"""

from __future__ import annotations

import pytest
import torch

from assignments.rlhf_system.toy import TinyPolicy, encode_manifest
from grader.compare import assert_close
from grader.seeds import seeded_generator
from harness.cases import case_values, run_cases
from harness.commlog import as_log

F64 = torch.float64
PLAN = {"fc1.weight": "column", "fc1.bias": "column", "fc2.weight": "row"}


def rand(seed: int, *shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=seeded_generator(seed))


# ---- inputs and references (parent) ---------------------------------------------------------

LOGP, REF = -3 * rand(1, 2, 4), -3 * rand(2, 2, 4)
SCORES = torch.tensor([0.75, 0.25])
MASK = torch.tensor([[True, True, True, False], [True, True, True, True]])
BETA = 0.1


def kl_reference() -> torch.Tensor:
    want = torch.where(MASK, -BETA * (LOGP.double() - REF.double()), torch.zeros((), dtype=F64))
    want[0, 2] += 0.75  # row 0's last response token is position 2
    want[1, 3] += 0.25
    return want


REWARDS, VALUES = rand(3, 1, 3), rand(4, 1, 3)


def gae_reference(gamma: float = 0.9, lam: float = 0.8) -> tuple[torch.Tensor, torch.Tensor]:
    r, v = REWARDS.double()[0], VALUES.double()[0]
    adv = torch.zeros(3, dtype=F64)
    nxt_v = nxt_a = 0.0
    for t in (2, 1, 0):
        delta = r[t] + gamma * nxt_v - v[t]
        adv[t] = delta + gamma * lam * nxt_a
        nxt_v, nxt_a = v[t], adv[t]
    return adv[None], (adv + v)[None]


GROUP_SCORES = torch.tensor([1.0, 0.0, 0.5, 0.5, 0.2, 0.4, 0.6, 0.8])


def grpo_reference() -> torch.Tensor:
    g = GROUP_SCORES.double().view(2, 4)
    return ((g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True) + 1e-6)).view(-1)


def policy_state(seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    model = TinyPolicy(8, 8)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    state["logit_bias"] = rand(seed, 8)
    state["num_updates"] = torch.tensor(5)
    return state


STATE = policy_state(20)


def logprobs_reference(state: dict, prompts: torch.Tensor, responses: torch.Tensor):
    model = TinyPolicy(8, 8).double()
    model.load_state_dict(state)
    with torch.no_grad():
        logits = model(torch.cat([prompts[:, None], responses[:, :-1]], 1))
    return torch.log_softmax(logits, -1).gather(2, responses[..., None])[..., 0]


# ---- what runs in the ranks -----------------------------------------------------------------

def rank_flow(ctx, data: dict) -> dict:
    rl = ctx.impl_module("rlhf_system", "rlhf")
    ws = ctx.impl_module("rlhf_system", "weight_sync")

    def generate():
        policy = TinyPolicy(8, 8)
        policy.load_state_dict(data["state"])
        calls = []
        policy.register_forward_hook(lambda m, i, o: calls.append(torch.is_grad_enabled()))
        responses, logprobs = rl.generate(policy, torch.arange(6), 3,
                                          torch.Generator().manual_seed(3))
        return {"responses": responses, "logprobs": logprobs, "grad": any(calls),
                "requires_grad": logprobs.requires_grad}

    def shard():
        return [ws.shard_for_tp(n, data["state"][n], 1, 2, PLAN)
                for n in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")]

    return run_cases(ctx, [
        ("kl", lambda: rl.kl_penalized_rewards(data["logp"], data["ref"], data["scores"],
                                               data["mask"], BETA)),
        ("gae", lambda: list(rl.gae_advantages(data["rewards"], data["values"],
                                               torch.ones(1, 3, dtype=torch.bool), 0.9, 0.8))),
        ("grpo", lambda: rl.grpo_advantages(data["group_scores"], 4)),
        ("generate", generate),
        ("manifest", lambda: [list(e) for e in ws.make_manifest(data["state"])]),
        ("buckets", lambda: ws.plan_buckets(data["manifest"], 10000)),
        ("shard", shard),
    ])


def rank_sync(ctx, state: dict) -> dict:
    ws = ctx.impl_module("rlhf_system", "weight_sync")

    def sync():
        if ctx.rank == 0:
            ws.send_weights(state, [1], 2048, 3)
            return None
        mine = {k: torch.zeros_like(v) for k, v in state.items()}
        version = ws.recv_weights(mine, 0, 2048)
        return {"version": version, "state": mine}

    return run_cases(ctx, [("sync", sync)])


def rank_colocated(ctx) -> dict:
    from assignments.rlhf_system.toy import RLHFConfig

    pl = ctx.impl_module("rlhf_system", "placement")
    return run_cases(ctx, [("run", lambda: pl.run_colocated(RLHFConfig(prompts_per_rank=2), 2))])


@pytest.fixture(scope="module")
def flow(launch):
    data = {"logp": LOGP, "ref": REF, "scores": SCORES, "mask": MASK, "rewards": REWARDS,
            "values": VALUES, "group_scores": GROUP_SCORES, "state": STATE,
            "manifest": [("a", (1000,), "torch.float32"), ("b", (2000,), "torch.float32"),
                         ("c", (), "torch.int64"), ("d", (500,), "torch.float32")]}
    return launch(rank_flow, world_size=1, args=(data,), timeout=60).values


@pytest.fixture(scope="module")
def sync(launch):
    return launch(rank_sync, world_size=2, args=(STATE,), timeout=60, transport="sidecar")


@pytest.fixture(scope="module")
def colocated(launch):
    return launch(rank_colocated, world_size=2, timeout=90, transport="sidecar")


# ---- tests ----------------------------------------------------------------------------------

@pytest.mark.exercises("kl_penalized_rewards")
@pytest.mark.points(3)
def test_kl_penalized_rewards(flow):
    got = case_values(flow, "kl")[0]
    want = kl_reference()
    if isinstance(got, torch.Tensor) and got.shape == want.shape:
        diff = got.double() - want
        assert not torch.allclose(diff, 2 * BETA * (LOGP.double() - REF.double()) * MASK,
                                  atol=1e-5), \
            "kl_penalized_rewards: KL penalty sign: rewards_t = -kl_coef * (logprobs - ref_logprobs)"
        assert not torch.allclose(got[:, 0].double(), want[:, 0] + SCORES.double(), atol=1e-5), \
            "kl_penalized_rewards: the score goes on the last response token (mask[b].sum() - 1)"
    assert_close(got, want, dtype=torch.float32, what="kl_penalized_rewards",
                 hint="-kl_coef * (logprobs - ref_logprobs) on each response token, the score "
                      "added at the last response token, 0 off the mask")


@pytest.mark.exercises("gae_advantages")
@pytest.mark.points(2)
def test_gae_advantages(flow):
    adv, ret = case_values(flow, "gae")[0]
    want_adv, want_ret = gae_reference()
    assert_close(adv, want_adv, dtype=torch.float32, what="gae_advantages advantages",
                 hint="backwards: A_t = delta_t + gamma*lam*A_{t+1}, V after the last token 0")
    assert_close(ret, want_ret, dtype=torch.float32, what="gae_advantages returns",
                 hint="returns = advantages + values")


@pytest.mark.exercises("grpo_advantages")
@pytest.mark.points(3)
def test_grpo_advantages(flow):
    got = case_values(flow, "grpo")[0]
    g = GROUP_SCORES.double().view(2, 4)
    population = ((g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True, unbiased=False)
                                                   + 1e-6)).view(-1)
    assert not (isinstance(got, torch.Tensor) and got.shape == population.shape
                and torch.allclose(got.double(), population, atol=1e-5)), \
        "grpo_advantages: divide by the sample standard deviation (divisor G - 1), not G"
    assert_close(got, grpo_reference(), dtype=torch.float32, what="grpo_advantages",
                 hint="(score - group mean) / (group *sample* std + eps), consecutive groups")


@pytest.mark.exercises("generate")
@pytest.mark.points(3)
def test_generate_without_grad(flow):
    got = case_values(flow, "generate")[0]
    assert not got["grad"] and not got["requires_grad"], \
        "generate: run the sampling loop under torch.no_grad()"
    responses = got["responses"]
    assert responses.shape == (6, 3) and responses.dtype == torch.int64, \
        f"generate: responses must be [6, 3] int64, got {responses.dtype} {tuple(responses.shape)}"
    assert_close(got["logprobs"], logprobs_reference(STATE, torch.arange(6), responses),
                 dtype=torch.float32, what="generate logprobs",
                 hint="log softmax of the logits at the step that sampled each token")


@pytest.mark.exercises("make_manifest", "plan_buckets")
@pytest.mark.points(2)
def test_manifest_and_buckets(flow):
    manifest = case_values(flow, "manifest")[0]
    assert [e[0] for e in manifest] == list(STATE), \
        "make_manifest: every state_dict entry (buffers too), in the state's order"
    assert manifest[0][2] == "torch.float32" and tuple(manifest[-1][1]) == (8,), \
        "make_manifest: (name, tuple(shape), str(dtype)) per entry"
    assert case_values(flow, "buckets")[0] == [[0], [1, 2], [3]], \
        "plan_buckets: greedy in manifest order, each bucket <= bucket_bytes (README §5 example)"


@pytest.mark.exercises("shard_for_tp")
@pytest.mark.points(1)
def test_shard_for_tp(flow):
    got = case_values(flow, "shard")[0]
    want = [STATE["fc1.weight"][16:], STATE["fc1.bias"][16:], STATE["fc2.weight"][:, 16:],
            STATE["fc2.bias"]]
    for name, g, w in zip(("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"), got, want):
        assert g.shape == w.shape and torch.equal(g, w), \
            f"shard_for_tp({name}, tp_rank=1, tp_size=2): column cuts dim 0, row cuts dim 1, " \
            f"the rest is whole"


@pytest.mark.exercises("send_weights", "recv_weights")
@pytest.mark.points(3)
def test_sync_bit_identical(sync):
    got = case_values(sync.values, "sync")[1]
    assert got["version"] == 3, f"recv_weights returned version {got['version']}, sent 3"
    for name, want in STATE.items():
        assert torch.equal(got["state"][name], want), \
            f"after the sync, {name} differs from the sender's (buffers too; manifest order)"


@pytest.mark.exercises("send_weights", "recv_weights")
@pytest.mark.points(1)
def test_sync_sizes_on_the_wire(sync):
    case_values(sync.values, "sync")
    received = [r.bytes for r in as_log(sync.wire[1]) if r.op == "recv"]
    manifest = [(k, tuple(v.shape), str(v.dtype)) for k, v in STATE.items()]
    total = sum(v.numel() * v.element_size() for v in STATE.values())
    assert received[:2] == [16, encode_manifest(manifest).numel()], \
        f"first the 16-byte header, then the manifest; received {received[:2]}"
    assert sum(received[2:]) == total and max(received[2:]) <= 2048, \
        f"buckets must carry the state's {total} bytes, each at most 2048; got {received[2:]}"


@pytest.mark.exercises("run_colocated")
@pytest.mark.points(2)
def test_colocated_short_run(colocated):
    got = case_values(colocated.values, "run")
    for rank, out in enumerate(got):
        assert out["versions"] == [0, 1], f"[rank {rank} of 2] versions must be [0, 1]"
        assert len(out["scores"]) == 2, f"[rank {rank} of 2] one mean score per iteration"
    for name, value in got[0]["actor"].items():
        assert torch.equal(got[1]["actor"][name], value), \
            f"run_colocated: {name} differs between the ranks; average the gradients"
