"""Decode schedules of the cuda_graph_decode hidden suite: what a test sends to the rank.

A `spec` is a plain dict, built here and run by `_ranks.rank_decode`:
    config          DecoderConfig fields
    seed, dtype     model weights and dtype ("float64" on CPU, "float32" on a GPU)
    device, graphs  "cpu" + "emulated" (EmulatedGraph), or "cuda" + "cuda" (make_graph)
    max_batch_size, buckets (None: the default)
    history         steps decoded eagerly with model.decode before the decoder is built
    steps           steps run through GraphedDecoder.step
Each step says which rows decode at which positions, with which tokens. `answer` reads one
case of a launch that ran many (`harness.cases`), re-raising a stub as "not implemented".
"""

from __future__ import annotations

from typing import Any

import torch

from grader.seeds import seeded_generator
from harness.cases import case_value

CONFIG = {"vocab_size": 61, "hidden": 32, "num_layers": 2, "num_heads": 4, "max_batch": 12,
          "max_len": 40}
Step = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # tokens, positions, rows: int64 [batch]


def make_schedule(sizes: list[int], seed: int, lengths: list[int]) -> list[Step]:
    """Steps of the given batch sizes over random distinct rows; `lengths` is updated.

    Each chosen row decodes at its current length (the next free position), as a server would.
    """
    gen = seeded_generator(seed)
    steps = []
    for size in sizes:
        rows = torch.randperm(len(lengths), generator=gen)[:size]
        positions = torch.tensor([lengths[r] for r in rows.tolist()], dtype=torch.long)
        tokens = torch.randint(0, CONFIG["vocab_size"], (size,), generator=gen)
        for r in rows.tolist():
            lengths[r] += 1
        steps.append((tokens, positions, rows))
    return steps


def full_batch_history(num_steps: int, lengths: list[int], seed: int) -> list[Step]:
    """`num_steps` steps in which every row decodes: every row gets a history."""
    return make_schedule([len(lengths)] * num_steps, seed, lengths)


def make_spec(sizes: list[int], *, history_steps: int = 4, seed: int = 0, **overrides: Any
              ) -> dict:
    """A spec with a history and the steps of `sizes` (row lengths carried across both)."""
    config = dict(CONFIG, **overrides.pop("config", {}))
    lengths = [0] * config["max_batch"]
    spec = {"config": config, "seed": seed, "dtype": "float64", "device": "cpu",
            "graphs": "emulated", "max_batch_size": 8, "buckets": None,
            "history": full_batch_history(history_steps, lengths, seed + 1),
            "steps": make_schedule(sizes, seed + 2, lengths)}
    spec.update(overrides)
    if max(lengths) > config["max_len"]:
        raise ValueError(f"the schedule needs {max(lengths)} positions per row, more than "
                         f"max_len={config['max_len']}")
    return spec


def sizes_of(spec: dict) -> list[int]:
    return [len(step[0]) for step in spec["steps"]]


def answer(outcomes: dict, name: str, what: str, *, expect_error: bool = False) -> Any:
    """The value of case `name`; where an exception is the expected answer, the name of the
    exception it raised. A stub is re-raised as "not implemented", any other exception of a
    case that should return as "<call> raised X: ..."."""
    outcome = outcomes[name]
    error = outcome.get("error") or {}
    if outcome.get("ok") or error.get("not_implemented") or not expect_error:
        return case_value(outcome, what)
    return error.get("type", "Exception")
