"""Train a tiny GPT on the shipped corpus (README §9). Provided: do not edit.

    python -m assignments.gpt.train                # your model.py: 250 steps, a few seconds
    python -m assignments.gpt.train --impl solutions

The hidden learning test calls `train` with `LEARNING` below and the tokens of corpus.txt, and
passes when the held-out loss after the last step is below `LEARNING.target`. Everything is
counted in steps, never seconds, and seeded, so the same model.py gives the same losses on any
CPU (up to the order of floating-point sums).
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from dataclasses import dataclass, field
from types import ModuleType

import torch

from assignments.gpt.config import GPTConfig


@dataclass(frozen=True)
class TrainConfig:
    """One training run: `steps` AdamW steps on random windows of the first 90% of the tokens,
    then the mean loss over `eval_batches` fixed windows of the last 10% (the held-out loss)."""

    model: GPTConfig = field(default_factory=lambda: GPTConfig(
        vocab_size=256, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=48))
    steps: int = 250
    batch_size: int = 16
    seq_len: int = 48
    lr: float = 3e-3
    warmup: int = 20
    grad_clip: float = 1.0
    eval_batches: int = 8
    target: float = 1.00  # nats per byte, held out; a model that learnt nothing pays 5.55


LEARNING = TrainConfig()


@dataclass
class TrainResult:
    losses: list[float]  # training loss of every step
    eval_loss: float  # held-out loss after the last step
    parameters: int  # distinct parameters (the tied head counted once)


def _windows(tokens: torch.Tensor, starts: torch.Tensor, seq_len: int
             ) -> tuple[torch.Tensor, torch.Tensor]:
    offsets = torch.arange(seq_len + 1)
    rows = tokens[starts[:, None] + offsets[None, :]]
    return rows[:, :-1], rows[:, 1:]


def train(model_module: ModuleType, tokens: torch.Tensor, config: TrainConfig = LEARNING,
          seed: int = 0, log: bool = False) -> TrainResult:
    """Build `model_module.GPT(config.model)` under `torch.manual_seed(seed)`, train it, and
    return the losses. `tokens` is a 1-D torch.long tensor (data.encode of the corpus)."""
    torch.manual_seed(seed)
    model = model_module.GPT(config.model)
    split = int(0.9 * len(tokens))
    train_tokens, held_out = tokens[:split], tokens[split:]
    gen = torch.Generator().manual_seed(seed + 1)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": rest, "weight_decay": 0.0}],
                                  lr=config.lr, betas=(0.9, 0.95))
    losses = []
    model.train()
    for step in range(config.steps):
        # linear warm-up, then cosine decay to a tenth of the peak
        if step < config.warmup:
            lr = config.lr * (step + 1) / config.warmup
        else:
            progress = (step - config.warmup) / max(1, config.steps - config.warmup)
            lr = config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        for group in optimizer.param_groups:
            group["lr"] = lr
        starts = torch.randint(0, len(train_tokens) - config.seq_len - 1,
                               (config.batch_size,), generator=gen)
        x, y = _windows(train_tokens, starts, config.seq_len)
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        losses.append(float(loss.detach()))
        if log and (step % 50 == 0 or step == config.steps - 1):
            print(f"step {step:4d}  lr {lr:.2e}  loss {losses[-1]:.3f}")
    model.eval()
    stride = (len(held_out) - config.seq_len - 1) // config.eval_batches
    starts = torch.arange(config.eval_batches * config.batch_size) * \
        max(1, stride // config.batch_size)
    with torch.no_grad():
        total = 0.0
        for batch in starts.split(config.batch_size):
            x, y = _windows(held_out, batch, config.seq_len)
            total += float(model(x, y)[1])
    parameters = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    return TrainResult(losses, total / config.eval_batches, parameters)


def main(argv: list[str] | None = None) -> int:
    from assignments.gpt.data import encode, load_corpus

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", default="assignments", help="assignments or solutions")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    module = importlib.import_module(f"{args.impl}.gpt.model")
    result = train(module, encode(load_corpus()), seed=args.seed, log=True)
    verdict = "passes" if result.eval_loss < LEARNING.target else "does NOT pass"
    print(f"{result.parameters:,} parameters; held-out loss {result.eval_loss:.3f} nats/byte "
          f"after {LEARNING.steps} steps: {verdict} (target {LEARNING.target})")
    return 0 if result.eval_loss < LEARNING.target else 1


if __name__ == "__main__":
    sys.exit(main())
