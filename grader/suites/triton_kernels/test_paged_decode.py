"""paged_attention_decode (hidden, 13 points): lengths 1 and at block boundaries, shuffled blocks.

Physical blocks are shuffled and the slots a sequence does not own hold large values, so
reading past a context length, through the wrong table row, or through the -1 padding changes
the result. Every case runs in one launch (Triton's interpreter, CPU, float32) against a float64
reference that gathers each sequence's tokens.
"""

from __future__ import annotations

import torch

from grader.seeds import seeded_generator
from grader.suites.triton_kernels._cases import case_tests, paged_inputs
from grader.suites.triton_kernels._ref import Case, paged_ref, paged_tolerances

LENGTH_HINT = ("mask the slots of the last block past context_lens[b], and read token t of "
               "sequence b from block block_tables[b, t // block_size]")
TABLE_HINT = "token t of sequence b lives in block block_tables[b, t // block_size]"


def build_cases() -> dict[str, Case]:
    gen = seeded_generator(50)

    def case(key: str, lengths: list[int], block_size: int, what: str = "",
             hint: str = LENGTH_HINT, scale: float | None = None,
             table_dtype: torch.dtype = torch.int32, heads: int = 2,
             dim: int = 16, layout: str = "contiguous") -> tuple[str, Case]:
        inputs = paged_inputs(gen, lengths, block_size=block_size, heads=heads, dim=dim,
                              table_dtype=table_dtype)
        kwargs = {} if scale is None else {"scale": scale}
        name = f"paged_attention_decode(lengths {lengths}, block_size {block_size}){what}"
        return key, Case(name, "paged_attention_decode", inputs,
                         paged_ref(*inputs, scale=scale), kwargs=kwargs, hint=hint,
                         tol=paged_tolerances(*inputs, scale=scale), layout=layout)

    return dict([
        case("len1", [1, 1, 1], 8, " (one token each)"),
        case("boundary", [16, 32], 16, " (lengths at block boundaries)",
             hint="a length that fills its last block exactly needs no extra block"),
        case("past_boundary", [17, 33, 15], 16, " (one past / short of a boundary)"),
        case("mixed", [3, 40, 16, 25], 8, " (several sequences)", hint=TABLE_HINT),
        case("odd_block", [7, 11, 5], 5, " (block size 5)",
             hint="block_size need not be a power of two: mask the padded slots of a block"),
        case("scale_int64", [12, 21], 4, " with scale=0.5 and int64 tables", scale=0.5,
             table_dtype=torch.int64, dim=24,
             hint="use the given scale; accept int64 block tables and context lengths"),
        case("one", [1], 1, " (heads 1, dim 1)", heads=1, dim=1,
             hint="a single query of dim 1 still needs its kernel launch"),
        case("padded", [5, 9], 4, " (dim 24; q and caches are slices of NaN-padded tensors)",
             dim=24, layout="padded",
             hint="read only the elements of q and the caches inside their shapes: mask the "
                  "head dim, and address the inputs with their strides"),
    ])


PAGED_DECODE = case_tests("paged_attention_decode", build_cases())
case_runs = PAGED_DECODE.fixture


test_length_one = PAGED_DECODE.test(2, "len1", "one")
test_lengths_at_block_boundaries = PAGED_DECODE.test(2, "boundary")
test_lengths_next_to_boundaries = PAGED_DECODE.test(2, "past_boundary")
test_several_sequences_shuffled_blocks = PAGED_DECODE.test(2, "mixed")
test_block_size_not_power_of_two = PAGED_DECODE.test(2, "odd_block")
test_scale_and_int64_tables = PAGED_DECODE.test(2, "scale_int64")
test_non_contiguous_inputs = PAGED_DECODE.test(1, "padded")
