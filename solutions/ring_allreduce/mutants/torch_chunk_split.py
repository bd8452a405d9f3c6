"""Splits like `torch.chunk`: ceil-sized chunks, so the last ones are short or missing."""
import torch

from harness.mutation import mutate

MUTATES = "ring"
FEEDBACK = "sizes differ by at most one"
mutate(globals(), "ring_allreduce", "ring")


def chunk_bounds(numel: int, world_size: int) -> list[tuple[int, int]]:
    sizes = [len(piece) for piece in torch.arange(numel).chunk(world_size)]
    sizes += [0] * (world_size - len(sizes))
    bounds, start = [], 0
    for size in sizes:
        bounds.append((start, start + size))
        start += size
    return bounds
