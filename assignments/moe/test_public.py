"""Public tests of moe (20 points): run `pytest assignments/moe`.

One launch of 2 ranks runs every check below; a function you have not written yet fails only its
own tests ("not implemented"). Small inputs with answers you can work out by hand come first;
then the layer, against a dense mixture of experts computed here with plain torch (all 8 experts
in one process, the same weights): each rank's output and gradients must equal the dense ones
for its tokens, and each rank's 4 experts must get the gradients of every token that reached
them. The hidden suite runs the same kind of checks on 2 and 4 ranks, top-1 and top-2, with and
without a capacity, a rank that receives no token, large logits and bad input (README §8).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from grader.compare import assert_close
from grader.seeds import seeded_generator
from harness import NotImplementedInRank, RankFailure
from harness.cases import case_values, run_cases

WORLD = 2
DTYPE = torch.float64
HIDDEN, FFN, EXPERTS, K = 4, 6, 8, 2


def randn(seed: int, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=seeded_generator(seed), dtype=DTYPE) * scale


# ---- the dense reference (parent) -------------------------------------------------------------

PARAMS = {"router": randn(1, EXPERTS, HIDDEN), "w_gate": randn(2, EXPERTS, FFN, HIDDEN, scale=0.5),
          "w_up": randn(3, EXPERTS, FFN, HIDDEN, scale=0.5),
          "w_down": randn(4, EXPERTS, HIDDEN, FFN, scale=0.4)}
XS = [randn(5, 6, HIDDEN), randn(6, 7, HIDDEN)]  # rank 0 has 6 tokens, rank 1 has 7
GRADS = [randn(7, 6, HIDDEN), randn(8, 7, HIDDEN)]


def dense_moe(x: torch.Tensor, p: dict[str, torch.Tensor]) -> torch.Tensor:
    """Top-2 of the softmax over all experts, renormalised; every expert local; no capacity."""
    probs = torch.softmax(x @ p["router"].t(), dim=-1)
    top, experts = torch.topk(probs, K, dim=-1)
    weights = top / top.sum(-1, keepdim=True)
    rows = []
    for t in range(x.shape[0]):
        row = x.new_zeros(HIDDEN)
        for j in range(K):
            e = int(experts[t, j])
            h = F.silu(x[t] @ p["w_gate"][e].t()) * (x[t] @ p["w_up"][e].t())
            row = row + weights[t, j] * (h @ p["w_down"][e].t())
        rows.append(row)
    return torch.stack(rows)


def dense_run() -> dict:
    experts = {n: PARAMS[n].clone().requires_grad_() for n in ("w_gate", "w_up", "w_down")}
    out = {"y": [], "x_grad": []}
    for x, g in zip(XS, GRADS):
        leaf = x.clone().requires_grad_()
        y = dense_moe(leaf, {"router": PARAMS["router"], **experts})
        y.backward(g)
        out["y"].append(y.detach())
        out["x_grad"].append(leaf.grad)
    out.update({n: p.grad for n, p in experts.items()})
    return out


EXPECTED = dense_run()


# ---- what runs in each rank -------------------------------------------------------------------

def rank_public(ctx, data: dict) -> dict:
    m = ctx.impl_module("moe", "moe")
    r = ctx.rank

    def route():
        logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 3.0, 1.0, 2.0]], dtype=DTYPE)
        weights, experts, probs = m.route(logits, 2)
        return {"weights": weights, "experts": experts, "probs": probs}

    def losses():
        uniform = torch.zeros(4, 4, dtype=DTYPE)
        balanced = m.load_balancing_loss(torch.softmax(uniform, -1),
                                         torch.tensor([[0], [1], [2], [3]]))
        all_on_zero = m.load_balancing_loss(torch.softmax(uniform, -1),
                                            torch.tensor([[0], [0], [0], [0]]))
        z = m.router_z_loss(torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]], dtype=DTYPE))
        return {"balanced": balanced, "all_on_zero": all_on_zero, "z": z}

    def capacity():
        caps = [m.expert_capacity(10, 4, 1, 1.0), m.expert_capacity(8, 4, 2, 1.25)]
        experts = torch.tensor([[0, 1], [0, 2], [1, 0]])
        return {"caps": caps, "keep": m.capacity_mask(experts, 3, 1),
                "no_limit": m.capacity_mask(experts, 3, None)}

    def all_to_all():
        # Rank 0 sends 1 row to itself and 2 to rank 1; rank 1 sends 3 to rank 0, 0 to itself.
        send = [[1, 2], [3, 0]][r]
        recv = [[1, 3], [2, 0]][r]
        x = (100.0 * r + torch.arange(sum(send), dtype=DTYPE)).unsqueeze(1).requires_grad_()
        ctx.mark("a2a forward")
        out = m.all_to_all_tokens(x, send, recv)
        ctx.mark("a2a backward")
        out.backward(torch.arange(out.shape[0], dtype=DTYPE).unsqueeze(1) + 10.0 * r)
        ctx.mark("a2a end")
        return {"out": out.detach(), "x_grad": x.grad}

    def layer():
        p = data["params"]
        moe = m.MoELayer.from_dense(p["router"], p["w_gate"], p["w_up"], p["w_down"], k=K)
        x = data["xs"][r].clone().requires_grad_()
        ctx.mark("layer forward")
        y, _ = moe(x)
        ctx.mark("layer backward")
        y.backward(data["grads"][r])
        ctx.mark("layer end")
        zeros = torch.zeros_like
        return {"y": y.detach(), "x_grad": x.grad,
                **{n: getattr(moe, n).grad if getattr(moe, n).grad is not None
                   else zeros(getattr(moe, n)) for n in ("w_gate", "w_up", "w_down")}}

    return run_cases(ctx, [("route", route), ("losses", losses), ("capacity", capacity),
                           ("all_to_all", all_to_all), ("layer", layer)])


@pytest.fixture(scope="module")
def run(launch):
    data = {"params": PARAMS, "xs": XS, "grads": GRADS}
    # Over the sidecars: the all-to-alls counted below are what they carried, outside the rank.
    return launch(rank_public, world_size=WORLD, args=(data,), backend="gloo",
                  transport="sidecar", timeout=60)


def where(rank: int) -> str:
    return f"[rank {rank} of {WORLD}]"


def calls(run, rank: int, window: str) -> list[str]:
    from harness.commlog import as_log, windows

    return [c.op for c in windows(as_log(run.wire[rank])).get(window, []) if c.op != "mark"]


# ---- tests ------------------------------------------------------------------------------------

@pytest.mark.exercises("route")
@pytest.mark.points(3)
def test_route(run):
    v = case_values(run.values, "route")[0]
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 3.0, 1.0, 2.0]], dtype=DTYPE)
    probs = torch.softmax(logits, -1)
    assert_close(v["probs"], probs, what="route probs", hint_first=True,
                 hint="probs is the softmax over all E experts, not only the k chosen")
    assert torch.equal(v["experts"], torch.tensor([[0, 1], [1, 3]])), (
        f"route experts: got {v['experts'].tolist()}, expected [[0, 1], [1, 3]] (the two most "
        f"probable experts, most probable first)")
    e = math.e
    want = torch.tensor([[e / (e + 1), 1 / (e + 1)]] * 2, dtype=DTYPE)
    assert_close(v["weights"], want, what="route weights", hint_first=True,
                 hint="renormalise the chosen probabilities: p1/(p1+p2) = e/(e+1) here")


@pytest.mark.exercises("load_balancing_loss", "router_z_loss")
@pytest.mark.points(3)
def test_losses(run):
    v = case_values(run.values, "losses")[0]
    one = torch.tensor(1.0, dtype=DTYPE)
    assert_close(v["balanced"], one, what="load_balancing_loss at perfect balance",
                 hint_first=True, hint="E * sum f_i * P_i = 4 * 4 * (1/4 * 1/4) = 1")
    assert_close(v["all_on_zero"], one, what="load_balancing_loss, every token on expert 0",
                 hint_first=True, hint="f = (1, 0, 0, 0), P_0 = 1/4: 4 * 1 * 1/4 = 1")
    z = (math.log(2.0) ** 2 + math.log(4.0) ** 2) / 2
    assert_close(v["z"], torch.tensor(z, dtype=DTYPE), what="router_z_loss", hint_first=True,
                 hint="square the logsumexp of each token, then take the mean: "
                      "(log(2)^2 + log(4)^2) / 2")


@pytest.mark.exercises("expert_capacity", "capacity_mask")
@pytest.mark.points(3)
def test_capacity(run):
    v = case_values(run.values, "capacity")[0]
    assert v["caps"] == [3, 5], (f"expert_capacity(10, 4, 1, 1.0), (8, 4, 2, 1.25) returned "
                                 f"{v['caps']}; ceil(2.5) = 3 and ceil(5.0) = 5")
    want = torch.tensor([[True, False], [False, True], [True, False]])
    assert torch.equal(v["keep"], want), (
        f"capacity_mask(capacity=1): every first choice comes before any second choice (token "
        f"0 takes expert 0, token 2 expert 1, then the second choices that still fit); got "
        f"{v['keep'].tolist()}, expected {want.tolist()}")
    assert bool(v["no_limit"].all()), "capacity_mask with capacity None keeps everything"


@pytest.mark.exercises("all_to_all_tokens")
@pytest.mark.points(4)
def test_all_to_all_tokens(run):
    try:
        v = case_values(run.values, "all_to_all")
    except RankFailure as exc:
        if isinstance(exc, NotImplementedInRank) or "backward" not in str(exc).split("\n")[0]:
            raise
        raise AssertionError(f"all_to_all_tokens backward failed; it is the reverse all-to-all: "
                             f"swap the splits (send by recv_splits, receive by send_splits). "
                             f"{str(exc).splitlines()[0]}") from None
    outs = [[0.0, 100.0, 101.0, 102.0], [1.0, 2.0]]
    grads = [[0.0, 10.0, 11.0], [1.0, 2.0, 3.0]]
    for r in range(WORLD):
        assert_close(v[r]["out"].flatten(), torch.tensor(outs[r], dtype=DTYPE),
                     what=f"{where(r)} all_to_all_tokens output", hint_first=True,
                     hint="the rows from rank 0 first, then rank 1")
        assert_close(v[r]["x_grad"].flatten(), torch.tensor(grads[r], dtype=DTYPE),
                     what=f"{where(r)} all_to_all_tokens input gradient", hint_first=True,
                     hint="backward is the reverse all-to-all: swap the splits")
        assert calls(run, r, "a2a forward") == ["all_to_all_single"] and \
            calls(run, r, "a2a backward") == ["all_to_all_single"], (
            f"{where(r)} all_to_all_tokens: one all_to_all_single forward and one backward; "
            f"got {calls(run, r, 'a2a forward')} and {calls(run, r, 'a2a backward')}")


@pytest.mark.exercises("MoELayer")
@pytest.mark.points(5)
def test_layer(run):
    v = case_values(run.values, "layer")
    for r in range(WORLD):
        assert_close(v[r]["y"], EXPECTED["y"][r], what=f"{where(r)} MoELayer output",
                     hint_first=True, hint="route top-2, send each token to its experts' ranks, "
                                           "SwiGLU, send back, add with the router weights")
        assert_close(v[r]["x_grad"], EXPECTED["x_grad"][r], what=f"{where(r)} input gradient",
                     hint_first=True, hint="both all-to-alls must be differentiable")
        mine = slice(r * EXPERTS // WORLD, (r + 1) * EXPERTS // WORLD)
        for name in ("w_gate", "w_up", "w_down"):
            assert_close(v[r][name], EXPECTED[name][mine], what=f"{where(r)} {name} gradient",
                         hint_first=True, hint="experts r*E/N ... of this rank, every token")


@pytest.mark.exercises("MoELayer")
@pytest.mark.points(2)
def test_layer_traffic(run):
    case_values(run.values, "layer")
    for r in range(WORLD):
        forward, backward = calls(run, r, "layer forward"), calls(run, r, "layer backward")
        assert not [op for op in forward if "gather" in op], (
            f"{where(r)} MoELayer forward made {forward}: never all_gather the tokens; send each "
            f"kept row only to its expert's rank with all_to_all_single")
        assert forward == ["all_to_all_single"] * 3 and backward == ["all_to_all_single"] * 2, (
            f"{where(r)} MoELayer made {forward} forward and {backward} backward; the budget "
            f"is three all_to_all_single forward (counts, tokens, results) and two backward")
