"""References and checks of the pipeline hidden suite for the pure functions, in the parent.

Nothing here imports the code under test. The parent keeps its own copy of every documented
schedule (`expected_schedule`), the dependency replay that turns every stage's action list into
a timeline (`replay`), and a brute-force `partition` reference; `check_schedule` and
`check_partition` judge what a rank returned with a first line that names the first difference
and the fix.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

F_UNITS, B_UNITS = 1, 2  # the replay's cost model: a backward costs twice a forward


# ---- schedules: the parent's own copy of the documented lists ------------------------------------

def expected_schedule(kind: str, p: int, m: int, s: int, v: int = 1) -> list[tuple]:
    if kind == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    if kind == "1f1b":
        w = min(p - s - 1, m)
        out: list[tuple] = [("F", i) for i in range(w)]
        for i in range(m - w):
            out += [("F", w + i), ("B", i)]
        return out + [("B", i) for i in range(m - w, m)]
    total = m * v

    def fwd(k: int) -> tuple:
        return ("F", (k // (p * v)) * p + k % p, (k % (p * v)) // p)

    def bwd(k: int) -> tuple:
        return ("B", (k // (p * v)) * p + k % p, v - 1 - (k % (p * v)) // p)

    w = min(2 * (p - s - 1) + (v - 1) * p, total)
    out = [fwd(k) for k in range(w)]
    for i in range(total - w):
        out += [fwd(w + i), bwd(i)]
    return out + [bwd(k) for k in range(total - w, total)]


def as_actions(value: Any) -> list[tuple] | None:
    """A returned schedule as a list of tuples (lists come back from the rank), or None when it
    is not a list of sequences."""
    if not isinstance(value, list):
        return None
    try:
        return [tuple(a) for a in value]
    except TypeError:
        return None


WARMUP_PART = " (in the warm-up)"
STEADY_PART = " (in the steady 1F1B part)"
COOLDOWN_PART = " (in the cool-down: the remaining backwards in micro-batch order)"
GPIPE_PART = " (all forwards in micro-batch order, then all backwards in micro-batch order)"


def _part(kind: str, p: int, m: int, s: int, i: int) -> str:
    if kind == "gpipe":
        return GPIPE_PART
    if kind != "1f1b":
        return ""
    w = min(p - s - 1, m)
    return WARMUP_PART if i < w else STEADY_PART if i < w + 2 * (m - w) else COOLDOWN_PART


def check_schedule(kind: str, p: int, m: int, s: int, got: Any, v: int = 1) -> None:
    """Raise AssertionError unless `got` is the documented list; the first line names the first
    difference, where it is (warm-up, steady state, cool-down) and the fix."""
    call = f"schedule({kind!r}, p={p}, m={m}, stage={s}" + (f", v={v})" if v > 1 else ")")
    want = expected_schedule(kind, p, m, s, v)
    actions = as_actions(got)
    if actions is None:
        raise AssertionError(f"{call} returned {type(got).__name__}, expected a list of tuples")
    if actions == want:
        return
    if kind == "1f1b":
        w = min(p - s - 1, m)
        lead = next((i for i, a in enumerate(actions) if not a or a[0] != "F"), len(actions))
        if lead != min(w + 1, m) and lead != w:
            raise AssertionError(
                f"{call} starts with {lead} forwards: the warm-up is min(p - stage - 1, m) "
                f"= {w} forwards, then F and B alternate")
    for i, (a, e) in enumerate(zip(actions, want)):
        if a != e:
            raise AssertionError(f"{call}: action {i} is {a}, expected {e}"
                                 f"{_part(kind, p, m, s, i)}")
    raise AssertionError(
        f"{call} has {len(actions)} actions, expected {len(want)} (each micro-batch"
        f"{' and chunk' if kind == 'interleaved' else ''} once as F and once as B)")


# ---- the bubble: replaying the actions with their dependencies -----------------------------------

@dataclass
class Timeline:
    makespan: Fraction
    busy: list[Fraction]
    spans: list[list[tuple[str, int, Fraction, Fraction]]] = field(default_factory=list)

    def idle_fraction(self, s: int) -> Fraction:
        return (self.makespan - self.busy[s]) / self.makespan


class ReplayStuck(Exception):
    """The actions cannot all run: some stage waits for work that never comes (a deadlock)."""


def replay(actions: Sequence[Sequence[tuple]], v: int = 1) -> Timeline:
    """Run every stage's actions in order, each as soon as the stage is free and its inputs are
    ready: F(mb) on virtual stage j after F(mb) on j-1; B(mb) on j after B(mb) on j+1 (after
    F(mb) on the last virtual stage) and after F(mb) on j. A forward costs 1/v, a backward 2/v
    (`F_UNITS`, `B_UNITS`); messages cost nothing. Raises ReplayStuck if nothing can run."""
    p = len(actions)
    last = p * v - 1
    done: dict[tuple[str, int, int], Fraction] = {}
    clock = [Fraction(0)] * p
    busy = [Fraction(0)] * p
    spans: list[list[tuple[str, int, Fraction, Fraction]]] = [[] for _ in range(p)]
    position = [0] * p
    while any(position[s] < len(actions[s]) for s in range(p)):
        moved = False
        for s in range(p):
            while position[s] < len(actions[s]):
                action = actions[s][position[s]]
                op, mb, chunk = action[0], action[1], (action[2] if len(action) > 2 else 0)
                j = chunk * p + s
                if op == "F":
                    deps = [("F", mb, j - 1)] if j > 0 else []
                else:
                    deps = [("F", mb, j)] + ([("B", mb, j + 1)] if j < last else [])
                if any(d not in done for d in deps):
                    break
                start = max([clock[s]] + [done[d] for d in deps])
                cost = Fraction(F_UNITS if op == "F" else B_UNITS, v)
                clock[s] = start + cost
                busy[s] += cost
                done[(op, mb, j)] = clock[s]
                spans[s].append((op, mb, start, clock[s]))
                position[s] += 1
                moved = True
        if not moved:
            waiting = [f"stage {s} at {tuple(actions[s][position[s]])}" for s in range(p)
                       if position[s] < len(actions[s])]
            raise ReplayStuck("; ".join(waiting[:3]))
    return Timeline(max(clock) if clock else Fraction(0), busy, spans)


# ---- partition: brute force over every cut -------------------------------------------------------

def reference_partition(costs: Sequence[int], p: int) -> list[tuple[int, int]]:
    """Every cut of len(costs) layers into p non-empty contiguous stages; the best bottleneck,
    ties broken by the longest earliest stages (lexicographically largest sizes)."""
    n = len(costs)
    best: tuple[int, tuple[int, ...]] | None = None
    for cuts in itertools.combinations(range(1, n), p - 1):
        edges = (0, *cuts, n)
        sizes = tuple(edges[i + 1] - edges[i] for i in range(p))
        worst = max(sum(costs[edges[i]:edges[i + 1]]) for i in range(p))
        key = (worst, tuple(-x for x in sizes))
        if best is None or key < (best[0], tuple(-x for x in best[1])):
            best = (worst, sizes)
    assert best is not None
    out, start = [], 0
    for size in best[1]:
        out.append((start, start + size))
        start += size
    return out


def bottleneck(costs: Sequence[int], bounds: Sequence[Sequence[int]]) -> int:
    return max(sum(costs[a:b]) for a, b in bounds)


def check_partition(costs: Sequence[int], p: int, got: Any) -> None:
    """Raise AssertionError unless `got` is the documented cut: invalid cut, worse bottleneck,
    or the tie rule, in that order."""
    call = f"partition({list(costs)}, {p})" if len(costs) <= 12 else \
        f"partition(<{len(costs)} costs>, {p})"
    want = reference_partition(costs, p)
    try:
        bounds = [tuple(int(x) for x in pair) for pair in got]
    except (TypeError, ValueError):
        raise AssertionError(f"{call} returned {got!r}, expected a list of (start, end) "
                             f"pairs") from None
    if bounds == want:
        return
    n = len(costs)
    valid = (len(bounds) == p and all(len(b) == 2 for b in bounds) and bounds[0][0] == 0
             and bounds[-1][1] == n and all(a < b for a, b in bounds)
             and all(bounds[i][1] == bounds[i + 1][0] for i in range(p - 1)))
    if not valid:
        raise AssertionError(f"{call} returned {bounds}: expected {p} contiguous non-empty "
                             f"(start, end) stages covering 0..{n}")
    if bottleneck(costs, bounds) != bottleneck(costs, want):
        raise AssertionError(
            f"{call}: largest stage cost {bottleneck(costs, bounds)}, the optimum is "
            f"{bottleneck(costs, want)}: balance the stages by their cost, not their number "
            f"of layers")
    raise AssertionError(f"{call} returned {bounds}, an optimal cut but not the documented "
                         f"one {want}: on a tie the earliest stages take as many layers as "
                         f"they can")
