"""Operation sequences for the allocator, drawn with hypothesis in the parent.

Hypothesis draws *raw* operations (a kind and a few small integers); `concretize` turns them
into a valid-looking sequence by running the reference model alongside: ids mostly name live
sequences, one draw in ten is deliberately invalid (unknown id, existing id, negative count,
empty prompt), and every sequence ends by freeing whatever is still live. Invalid operations
have exactly one thing wrong, so the expected error is never ambiguous.

Draws are deterministic (`@seed`, no example database), so a run is reproducible and
selfcheck is stable. Hypothesis only generates here; the examples are batched into one launch
and judged afterwards, so there is no shrinking.
"""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from grader.suites.paged_kv._model import Model

PLAIN_KINDS = ("append",) * 4 + ("allocate",) * 2 + ("fork", "fork_append", "fork_append", "free",
                                                   "can", "burst")
PREFIX_KINDS = PLAIN_KINDS + ("prompt",) * 4
NUM_CHUNKS = 3  # distinct full-block contents prompts are built from


# Hypothesis sometimes draws integer literals it finds in the source of loaded modules; which
# modules are loaded differs between runs (one suite or all, xdist or not), so integers are
# drawn from a range no literal falls in, and the offset removed.
DRAW_OFFSET = 7 * 10**40


def raw_ops(kinds: tuple[str, ...], max_ops: int) -> st.SearchStrategy:
    """Lists of raw operations; each is one drawn integer split into fields (`decode`), which
    keeps generation cheap: one draw per operation instead of seven."""
    draw = st.integers(DRAW_OFFSET, DRAW_OFFSET + 2**40 - 1)
    return st.lists(draw, min_size=min(8, max_ops), max_size=max_ops).map(
        lambda values: [decode(kinds, v - DRAW_OFFSET) for v in values])


def decode(kinds: tuple[str, ...], value: int) -> tuple:
    """(kind, a, b, n, validity, chunks, tail) from one integer.

    The integer is scrambled first: hypothesis favours small and boundary values, which would
    otherwise all decode to the same (invalid) operation.
    """
    value = (value * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) % 2**64
    fields = []
    for size in (len(kinds), 8, 8, 13, 10, 5, 6):
        value, field_value = divmod(value, size)
        fields.append(field_value)
    kind, a, b, n, validity, num_chunks, tail = fields
    chunks = []
    for _ in range(num_chunks % 4):
        value, chunk = divmod(value, NUM_CHUNKS)
        chunks.append(chunk)
    return kinds[kind], a, b, n, validity, chunks, tail


def prompt_tokens(chunks: list[int], tail: int, block_size: int) -> list[int]:
    """Full blocks of chunk contents, then `tail` more tokens; never empty.

    A chunk's tokens do not depend on its position, so two prompts can share block 1 while
    differing in block 0: only a hash that chains the prefix tells them apart.
    """
    tokens = [100 * (c + 1) + j for c in chunks for j in range(block_size)]
    tokens += [7 + j for j in range(tail % (block_size + 1))]
    return tokens or [7]


def concretize(config: dict, raw: list[tuple]) -> list[tuple]:
    model = Model(config["num_blocks"], config["block_size"], config.get("prefix", False))
    ops: list[tuple] = []

    def emit(op: tuple) -> None:
        ops.append(op)
        model.step(op)

    for kind, a, b, n, validity, chunks, tail in raw:
        live = sorted(model.tables)
        invalid = validity == 0
        new_id = next(i for i in range(len(live) + 1) if i not in model.tables)
        unknown = model.freed_ids[-1] if model.freed_ids and a % 2 and \
            model.freed_ids[-1] not in model.tables else 50 + a
        pick = live[a % len(live)] if live else None
        if pick is None and not invalid and kind not in ("can", "prompt"):
            kind = "prompt" if config.get("prefix") and a % 2 else "allocate"
        if kind == "allocate":
            if invalid:
                emit(("allocate", pick, 0) if pick is not None else ("allocate", new_id, -1 - n))
            else:
                emit(("allocate", new_id, n))
        elif kind in ("append", "burst"):
            if invalid or pick is None:
                emit(("append", unknown))
            else:
                for _ in range(1 if kind == "append" else 1 + n % 6):
                    emit(("append", pick))
        elif kind in ("fork", "fork_append"):
            if pick is None or (invalid and a % 2):
                emit(("fork", unknown, new_id))
            elif invalid:
                emit(("fork", pick, live[b % len(live)]))
            else:
                emit(("fork", pick, new_id))
                if kind == "fork_append":  # both sides write next: copy-on-write territory
                    for seq in (new_id, pick)[:1 + b % 2]:
                        if model.expected_error(("append", seq)) is None:
                            emit(("append", seq))
        elif kind == "free":
            emit(("free", unknown if invalid or pick is None else pick))
        elif kind == "can":
            emit(("can", -1 - n if invalid else n))
        elif kind == "prompt":
            tokens = prompt_tokens(chunks, tail, config["block_size"])
            if invalid and pick is not None and model.expected_error(
                    ("prompt", new_id, tokens)) is None:
                emit(("prompt", pick, tokens))
            elif invalid:
                emit(("prompt", new_id, []))
            else:
                emit(("prompt", new_id, tokens))
    for seq in sorted(model.tables):
        emit(("free", seq))
    return ops


def draw_sequences(config: dict, count: int, max_ops: int = 30) -> list[list[tuple]]:
    """`count` concrete sequences for `config`, the same ones on every run."""
    kinds = PREFIX_KINDS if config.get("prefix") else PLAIN_KINDS
    drawn: list[list[tuple]] = []

    @seed(config["seed"])
    @settings(max_examples=count, database=None, deadline=None, derandomize=False,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(raw_ops(kinds, max_ops))
    def collect(raw: list[tuple]) -> None:
        drawn.append(concretize(config, raw))

    collect()
    return drawn
