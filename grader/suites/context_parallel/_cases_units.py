"""The one-rank cases of the context_parallel suite (attention with lse, merge, zigzag), with
their expected values, read from rank 0 of the 2-rank launch. Built in the parent only, never
sent to a rank with their `expected` part.
"""

from __future__ import annotations

from typing import Any

import torch

from grader.suites.context_parallel._ranks import F64
from grader.suites.context_parallel._ref import attention_tol, full_attention, randn

# (seq_len, world_size) of the zigzag cases: fixed ones, then drawn by hypothesis in the parent
# (world sizes 1..8, 1..5 positions per chunk), the same on every run.
ZIGZAG_FIXED = [(16, 2), (24, 3), (32, 4), (8, 4), (2, 1), (48, 4)]
ZIGZAG_INVALID = [(10, 2), (12, 4), (8, 0), (6, 4)]
_DRAWN: list[tuple[int, int]] = []


def zigzag_calls() -> list[tuple[int, int]]:
    if not _DRAWN:
        from hypothesis import strategies as st

        from grader.seeds import hypothesis_examples

        pairs = st.tuples(st.integers(1, 8), st.integers(1, 5))
        _DRAWN.extend((2 * n * c, n) for n, c in hypothesis_examples(pairs, 24, 3700))
    return ZIGZAG_FIXED + _DRAWN


def attn_calls() -> list[dict[str, Any]]:
    """One block of attention: (name, q, k, v, causal, q_offset, k_offset, dtype)."""
    specs = [
        ("no mask, seq_q=5 seq_k=7 dim=4 dim_v=6", (2, 3, 5, 4), 7, 6, False, 0, 0, F64, 1.0),
        ("causal, diagonal block", (1, 2, 6, 5), 6, 5, True, 0, 0, F64, 1.0),
        ("causal, q_offset=8 k_offset=4", (2, 2, 5, 4), 6, 3, True, 8, 4, F64, 1.0),
        ("causal, rows that see no key", (1, 2, 4, 4), 5, 4, True, 0, 2, F64, 1.0),
        ("float32, causal, q_offset=3", (2, 2, 6, 8), 6, 8, True, 3, 0, torch.float32, 1.0),
        ("scores near 1e3", (1, 2, 5, 4), 6, 4, False, 0, 0, F64, 25.0),
    ]
    calls = []
    for i, (name, qshape, seq_k, dim_v, causal, qo, ko, dtype, mag) in enumerate(specs):
        b, h, s, d = qshape
        q = randn(500 + 10 * i, b, h, s, d) * mag
        k = randn(501 + 10 * i, b, h, seq_k, d) * mag
        v = randn(502 + 10 * i, b, h, seq_k, dim_v)
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
        out, lse = full_attention(q, k, v, causal, qo, ko)
        tol = attention_tol(q, k, v, dtype)
        calls.append({"name": name, "args": (q, k, v, causal, qo, ko), "dtype": dtype,
                      "out": out, "lse": lse, "tol": tol})
    return calls


def merge_calls() -> list[dict[str, Any]]:
    """Partial attentions over disjoint key blocks and the full attention they must give."""
    calls = []
    for i, (cuts, causal) in enumerate([((0, 4, 9), False), ((0, 3, 6, 10), False),
                                        ((0, 5, 8, 12), True)]):
        q = randn(600 + i, 2, 2, 6, 4) * 2
        k = randn(610 + i, 2, 2, cuts[-1], 4) * 2
        v = randn(620 + i, 2, 2, cuts[-1], 3)
        parts = [full_attention(q, k[:, :, a:b], v[:, :, a:b], causal, 4, a)
                 for a, b in zip(cuts, cuts[1:])]
        full = full_attention(q, k, v, causal, 4, 0)
        calls.append({"name": f"{len(parts)} blocks{' causal' if causal else ''}",
                      "parts": parts, "out": full[0], "lse": full[1],
                      "tol": attention_tol(q, k, v, F64, len(parts))})
    return calls


def unit_cases() -> dict[str, dict]:
    attn = attn_calls()
    merges = merge_calls()
    merge_args = []  # flattened pairwise calls: the rank returns each merge's result
    for m in merges:
        merge_args.append(m["parts"])
    specs = [(randn(700, 16, 3), (16, 4), 0), (randn(701, 2, 3, 24, 2), (24, 3), 2)]
    specs += [(randn(710 + i, 2, s), (s, n), 1) for i, (s, n) in enumerate(zigzag_calls()[6:16])]
    from_split = []
    for x, (s, n), dim in specs:
        chunk = s // (2 * n)
        shards = []
        for r in range(n):
            idx = torch.cat([torch.arange(r * chunk, (r + 1) * chunk),
                             torch.arange((2 * n - 1 - r) * chunk, (2 * n - r) * chunk)])
            shards.append(x.index_select(dim, idx))
        from_split.append((shards, dim, x))
    return {
        "attn": {"kind": "attn", "calls": [c["args"] for c in attn],
                 "expected": {"calls": attn}},
        "merge": {"kind": "merge_blocks", "calls": merge_args,
                  "expected": {"calls": merges}},
        "zigzag": {"kind": "zigzag", "calls": zigzag_calls(), "expected": {}},
        "unsplit": {"kind": "unsplit", "calls": [(s, d) for s, d, _ in from_split],
                    "expected": {"x": [x for _, _, x in from_split]}},
        "zigzag invalid": {"kind": "zigzag_invalid", "calls": ZIGZAG_INVALID, "expected": {}},
        "attn default": {"kind": "attn_default", "args": attn[0]["args"][:3],
                         "expected": attn[0]},
        "unsplit default": {"kind": "unsplit_default", "shards": from_split[0][0],
                            "expected": {"x": from_split[0][2]}},
    }
