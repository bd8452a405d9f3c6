"""PPO's GAE: the implementation under test against a step-by-step Python loop, as a ratio.

    python -m grader bench ppo [--impl solutions|assignments|DIR] [--steps 256] [--envs 64]
                               [--rounds 5]

`compute_gae` of the chosen implementation and the obvious alternative — the recursion of
README §4 written element by element in Python — run in alternating rounds on the same rollout
(random rewards and values, episodes ending at random steps), so both see the same machine
load. Prints the median seconds of each, their ratio, and the largest difference between their
advantages (a check that both computed the same thing); asserts nothing about time.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from grader.bench import add_impl_option


def loop_gae(rewards: torch.Tensor, values: torch.Tensor, terminated: torch.Tensor,
             truncated: torch.Tensor, next_values: torch.Tensor, gamma: float,
             lam: float) -> torch.Tensor:
    """The recursion of the docstring, one element at a time (the baseline)."""
    steps, envs = rewards.shape
    advantages = torch.zeros_like(values)
    for e in range(envs):
        following = 0.0
        for t in reversed(range(steps)):
            ended = bool(terminated[t, e])
            bootstrap = 0.0 if ended else float(next_values[t, e])
            delta = float(rewards[t, e]) + gamma * bootstrap - float(values[t, e])
            carry = 0.0 if ended or bool(truncated[t, e]) else following
            following = delta + gamma * lam * carry
            advantages[t, e] = following
    return advantages


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader bench ppo", description=__doc__)
    add_impl_option(parser)
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    from harness.impl import load_module

    ppo = load_module(args.impl, "ppo", "ppo")
    generator = torch.Generator().manual_seed(0)
    shape = (args.steps, args.envs)
    rewards, values, next_values = (torch.randn(shape, generator=generator) for _ in range(3))
    terminated = torch.rand(shape, generator=generator) < 0.02
    truncated = (torch.rand(shape, generator=generator) < 0.01) & ~terminated
    rollout = (rewards, values, terminated, truncated, next_values)
    seconds: dict[str, list[float]] = {"implementation": [], "python loop": []}
    for _ in range(args.rounds):
        start = time.perf_counter()
        advantages, _returns = ppo.compute_gae(*rollout, gamma=0.99, lam=0.95)
        seconds["implementation"].append(time.perf_counter() - start)
        start = time.perf_counter()
        expected = loop_gae(*rollout, gamma=0.99, lam=0.95)
        seconds["python loop"].append(time.perf_counter() - start)
    median = {name: statistics.median(s) for name, s in seconds.items()}
    print(f"compute_gae over {args.steps} steps x {args.envs} envs, {args.rounds} rounds "
          f"({args.impl.argument})")
    for name, value in median.items():
        print(f"  {name:<15} {1e3 * value:9.2f} ms")
    ratio = median["python loop"] / max(median["implementation"], 1e-9)
    print(f"  speed-up over the loop: {ratio:.1f}x; largest |difference| of the advantages: "
          f"{float((advantages - expected).abs().max()):.2e}")
    return 0
