"""Mixture of experts with expert parallelism: the module you write.

Read assignments/moe/README.md first. Conventions used by every function below:

- T tokens, hidden size H, E experts, k experts per token (1 <= k <= E). Token tensors are 2-D,
  [T, H]; a token is a row.
- `group` is the expert-parallel process group (None: the default group). N is its size,
  `dist.get_world_size(group)`, and r this rank's position in it, `dist.get_rank(group)`.
  E must be divisible by N; rank r holds the E/N experts r*E/N, ..., (r+1)*E/N - 1 (expert e
  lives on rank e // (E/N)).
- Every communication is a `dist.all_to_all_single` on `group`; no other torch.distributed
  function is called. Tensors are CPU tensors under gloo.
- Functions return new tensors and never modify their inputs in place.
- Floating dtypes: any (the tests use float64); outputs keep the input's dtype.
- Ties between router logits are never tested: any tie-breaking is accepted.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

# ---- routing and the auxiliary losses (README §2, §3) -----------------------------------------


def route(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-k routing, Mixtral-style: softmax over all E experts, keep the k largest, renormalise.

    Args:
        logits: [T, E] router logits (any floating dtype). Not modified.
        k: experts per token, 1 <= k <= E.

    Returns:
        (weights, experts, probs):
        - probs: [T, E], softmax of `logits` over all E experts (each row sums to 1), same
          dtype, differentiable with respect to `logits`.
        - experts: [T, k] int64, the k experts of largest probability per token, in descending
          order of probability (column 0 is the token's first choice).
        - weights: [T, k], same dtype, the chosen probabilities divided by their sum over the k
          chosen (each row sums to 1; with k = 1 every weight is exactly 1), in the order of
          `experts`; differentiable with respect to `logits`.

    Raises:
        ValueError: `logits` is not 2-D, or k is not in [1, E] (the message names k and E).
    """
    raise NotImplementedError("route: see README §2")


def load_balancing_loss(probs: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
    """The Switch/GShard auxiliary loss E * sum_i f_i * P_i; 1.0 at perfect balance.

    Args:
        probs: [T, E] router probabilities (softmax over all E experts, as `route` returns).
        experts: [T, k] int64, the chosen experts (as `route` returns), before any capacity
            drop: every (token, choice) assignment counts.

    Returns:
        A 0-dim tensor of probs' dtype. f_i is the fraction of the T*k assignments that chose
        expert i (a count: it carries no gradient); P_i is the mean over the T tokens of
        probs[:, i]. The gradient flows to `probs` through P only.
    """
    raise NotImplementedError("load_balancing_loss: see README §3")


def router_z_loss(logits: torch.Tensor) -> torch.Tensor:
    """The ST-MoE router z-loss: the mean over tokens of logsumexp(logits[t])**2.

    Args:
        logits: [T, E] router logits. Not modified.

    Returns:
        A 0-dim tensor of logits' dtype, differentiable with respect to `logits`. Computed
        stably: large logits (|logit| ~ 1e3) give a finite, correct value.
    """
    raise NotImplementedError("router_z_loss: see README §3")


# ---- capacity (README §4) ---------------------------------------------------------------------


def expert_capacity(num_tokens: int, num_experts: int, k: int,
                    capacity_factor: float) -> int:
    """Slots per expert: ceil(k * num_tokens * capacity_factor / num_experts).

    Computed as `math.ceil(k * num_tokens * capacity_factor / num_experts)` in Python floats
    (the tests use factors exactly representable in binary, such as 1.0, 1.25, 1.5, 2.0).

    Raises:
        ValueError: capacity_factor <= 0, num_experts < 1, k < 1 or num_tokens < 0.
    """
    raise NotImplementedError("expert_capacity: see README §4")


def capacity_mask(experts: torch.Tensor, num_experts: int, capacity: int | None) -> torch.Tensor:
    """Which (token, choice) assignments fit in their expert's `capacity` slots.

    Priority (GShard): every first choice before any second choice, and so on; within one
    choice column, lower token index first. That is, assignment (t, j) comes before (t', j')
    when j < j', or j == j' and t < t'. Each expert keeps the first `capacity` assignments
    that chose it in this order and drops the rest.

    Args:
        experts: [T, k] int64 in [0, num_experts), as `route` returns.
        num_experts: E.
        capacity: slots per expert (>= 0), or None for no limit (nothing is dropped).

    Returns:
        keep: [T, k] bool, a new tensor; True where the assignment is kept. No expert has more
        than `capacity` True entries.
    """
    raise NotImplementedError("capacity_mask: see README §4")


# ---- the all-to-all with autograd (README §5) -------------------------------------------------


def all_to_all_tokens(x: torch.Tensor, send_splits: list[int], recv_splits: list[int],
                      group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Uneven all-to-all of rows, differentiable: backward is the reverse all-to-all.

    Rows [sum(send_splits[:j]), sum(send_splits[:j+1])) of `x` go to group rank j; the output
    holds, in group-rank order, the rows every rank sent to this one.

    Args:
        x: [n, ...] with n == sum(send_splits); any trailing shape. Not modified.
        send_splits: N ints >= 0, rows for each group rank (this rank's own share included).
        recv_splits: N ints >= 0, rows coming from each group rank; recv_splits[j] on this rank
            must equal send_splits[r] on rank j (the caller exchanged the counts).

    Returns:
        [sum(recv_splits), ...], a new tensor of x's dtype: exactly one `dist.all_to_all_single`
        in forward. In backward, the gradient of the output goes back the way the rows came:
        exactly one `dist.all_to_all_single` with the splits swapped, so the gradient of x's
        row i is the gradient of the output row that x's row i became on its destination rank.
        Zero-row splits (and n == 0) are allowed.

    Raises:
        ValueError: len(send_splits) or len(recv_splits) != N, or sum(send_splits) != n.
    """
    raise NotImplementedError("all_to_all_tokens: see README §5")


# ---- the layer (README §6) --------------------------------------------------------------------


class MoELayer(nn.Module):
    """A top-k mixture-of-experts FFN whose E experts are spread over the N ranks of `group`.

    Attributes:
        router: nn.Linear(H, E, bias=False), replicated: the same weight [E, H] on every rank.
        w_gate, w_up: nn.Parameter [E/N, F, H]; w_down: nn.Parameter [E/N, H, F]: this rank's
            experts only; index j is global expert r*E/N + j. Nothing else the size of an
            expert is held (the other ranks' experts never come here).
        k, capacity_factor, num_experts, group: as given.

    Expert e computes the SwiGLU FFN (Shazeer 2020):
        expert_e(x) = (silu(x @ w_gate[e].T) * (x @ w_up[e].T)) @ w_down[e].T

    forward(x), x: [T, H] this rank's tokens (T may differ between ranks, T >= 1). Returns
    (y, logits):
        - logits = router(x), [T, E], so the caller can add the auxiliary losses.
        - y: [T, H], y[t] = sum over kept choices j of weights[t, j] * expert_{experts[t, j]}(x[t]),
          with (weights, experts) = route(logits, k) and the kept choices those of
          capacity_mask(experts, E, C). C = expert_capacity(T, E, k, capacity_factor) counts
          this rank's T tokens (each rank drops its own tokens, before sending); None means no
          dropping. A dropped choice contributes nothing and the weights of the kept ones are
          not renormalised; a token with every choice dropped gets a zero row (the caller's
          residual connection carries it). y does not include x (no residual inside).
        Communication (README §7): forward makes exactly three `dist.all_to_all_single` calls
        on `group`: first the counts (an integer tensor of N or E elements), then the tokens
        (rows of x, H elements each, nothing else), then the results back (rows of H). The
        token buffers hold only kept assignments, each token at most once per kept choice; rows
        for this rank's own experts may go through the all-to-all (split r) or stay local.
        Backward makes exactly two, both floating: the results' and the tokens' reverse. A rank
        that receives no tokens still takes part in every call.
        Gradients: the router's weight gradient is that of this rank's tokens only (no
        all-reduce: syncing replicated weights is the data-parallel layer's job); each local
        expert's gradients sum over the tokens of every rank that reached it. An expert that
        received no token may have a zero or a None gradient.
    """

    def __init__(self, hidden: int, ffn: int, num_experts: int, k: int = 2,
                 capacity_factor: float | None = None,
                 group: dist.ProcessGroup | None = None) -> None:
        """Random initialisation, float32: router like nn.Linear(hidden, num_experts,
        bias=False); expert weights drawn from U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in
        H for w_gate and w_up and F for w_down.

        Raises:
            ValueError: num_experts is not divisible by N, or k is not in [1, num_experts]
                (the messages name the numbers).
        """
        super().__init__()
        raise NotImplementedError("MoELayer: see README §6")

    @classmethod
    def from_dense(cls, router_weight: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
                   w_down: torch.Tensor, k: int = 2, capacity_factor: float | None = None,
                   group: dist.ProcessGroup | None = None) -> MoELayer:
        """This rank's share of a dense MoE: router_weight [E, H] (copied whole), w_gate and
        w_up [E, F, H], w_down [E, H, F] (experts r*E/N ... (r+1)*E/N - 1 copied). The new
        module's parameters are copies (never views of the arguments), of their dtype.

        Raises:
            ValueError: as __init__, or the shapes disagree (the message names them).
        """
        raise NotImplementedError("MoELayer.from_dense: see README §6")

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError("MoELayer.forward: see README §6")
