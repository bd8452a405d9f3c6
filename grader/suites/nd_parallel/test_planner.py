"""The planner (README §6–§7), one rank: every function against the parent's evaluation of the
README's formulas within 1%, on the 70B example and on other models and clusters (MHA and GQA,
A100-40GB nodes of 4 GPUs, ZeRO 0–3, recomputation, micro-batches of 2, fewer micro-batches
than stages); ValueError for layouts that do not divide and other bad input.
"""

from __future__ import annotations

import pytest

from assignments.nd_parallel._provided_checks import COMM_HINTS, MEMORY_HINTS
from grader.suites.nd_parallel import _cases as C
from grader.suites.nd_parallel import _ref as R
from grader.suites.nd_parallel._cases_launches import case, cases_for, expected, run, values
from grader.suites.nd_parallel._ref_judge import close, close_dict

MEMORY_KEYS = ["weights", "grads", "optimizer", "activations", "total"]
COMM_KEYS = ["tp", "pp", "dp"]


def _got(launch, impl, name):
    return values(run(launch, impl, "pure"), name)[0]


@pytest.mark.points(2)
@pytest.mark.exercises("param_count")
def test_param_count(launch, impl):
    for mn in C.MODELS:
        name = f"param_count {mn}"
        got = _got(launch, impl, name)
        assert isinstance(got, int) and not isinstance(got, bool), (
            f"param_count({mn}): return an int — got {type(got).__name__}")
        close(got, expected("pure", name), f"param_count({mn})",
              "per layer 2h² + 2·h·h_kv + 3·h·f + 2h, plus 2·V·h + h (README §6.1)")


def _memory(launch, impl, labels):
    for label in labels:
        name = f"memory {label}"
        close_dict(_got(launch, impl, name), expected("pure", name), MEMORY_KEYS,
                   f"memory_per_gpu({label})", MEMORY_HINTS)


@pytest.mark.exercises("memory_per_gpu")
@pytest.mark.parametrize("labels", [
    pytest.param([k for k in C.LAYOUTS if k.startswith("70B tp=8,pp=4")], id="70B-zero=0..3",
                 marks=pytest.mark.points(2)),
    pytest.param([k for k in C.LAYOUTS if "recompute" in k], id="recompute",
                 marks=pytest.mark.points(1)),
    pytest.param([k for k in C.LAYOUTS if "recompute" not in k and
                  not k.startswith("70B tp=8,pp=4")], id="m<p-micro_batch=2-other-models",
                 marks=pytest.mark.points(1)),
])
def test_memory_per_gpu(launch, impl, labels):
    _memory(launch, impl, labels)


@pytest.mark.points(2)
@pytest.mark.exercises("collective_time")
def test_collective_time(launch, impl):
    for args in C.COLLECTIVES:
        name = f"collective {args[0]} n={args[1]:.3g} k={args[2]}"
        close(_got(launch, impl, name), expected("pure", name),
              f"collective_time{tuple(args)}",
              "all_reduce 2(k-1)α + 2(k-1)/k·n/β; all_gather, reduce_scatter (k-1)α + "
              "(k-1)/k·n/β; send α + n/β; k = 1 costs 0")


@pytest.mark.exercises("comm_time")
@pytest.mark.parametrize("labels", [
    pytest.param([k for k in C.LAYOUTS if k.startswith("70B") and "recompute" not in k],
                 id="70B", marks=pytest.mark.points(2)),
    pytest.param([k for k in C.LAYOUTS if "recompute" in k], id="recompute-zero=3",
                 marks=pytest.mark.points(1)),
    pytest.param([k for k in C.LAYOUTS if not k.startswith("70B")],
                 id="a100-inter-node-micro_batch=2", marks=pytest.mark.points(1)),
])
def test_comm_time(launch, impl, labels):
    for label in labels:
        name = f"comm {label}"
        close_dict(_got(launch, impl, name), expected("pure", name), COMM_KEYS,
                   f"comm_time({label})", COMM_HINTS)


@pytest.mark.points(2)
@pytest.mark.exercises("bubble_fraction")
def test_bubble_fraction(launch, impl):
    for p, m in C.BUBBLES:
        name = f"bubble p={p} m={m}"
        close(_got(launch, impl, name), expected("pure", name),
              f"bubble_fraction(pp={p}, micro_batches={m})",
              "the bubble is (p-1)/(m+p-1) with p stages and m micro-batches (not swapped)")


@pytest.mark.points(3)
@pytest.mark.exercises("step_time")
def test_step_time(launch, impl):
    for label in C.LAYOUTS:
        name = f"step {label}"
        close(_got(launch, impl, name), expected("pure", name), f"step_time({label})",
              "compute = k·P·batch·s/(n_gpus·peak_flops), k = 6 (8 with recompute), divided "
              "by (1 - bubble), plus comm_time's three terms")


def _judge_best(launch, impl, label):
    name = f"best {label}"
    got, want = _got(launch, impl, name), expected("pure", name)
    mn, cn, gb, mbs = C.SCENARIOS[label]
    m, c = C.MODELS[mn], C.CLUSTERS[cn]
    if want is None:
        assert got is None, (f"best_layout({label}): nothing fits in "
                             f"{c['gpu_memory'] / 1e9:.0f} GB, return None — got {got!r}")
        return
    assert isinstance(got, dict) and set(got) == set(want), (
        f"best_layout({label}): return a specs.Layout — got {got!r}")
    if got == want:
        return
    shown = {k: got[k] for k in ("tp", "pp", "dp", "zero", "recompute")}
    try:
        memory = R.memory_ref(m, got, gb)["total"]
        time = R.step_ref(m, c, got, gb)
    except (ZeroDivisionError, KeyError, TypeError):
        memory = time = None
    if memory is not None and memory > c["gpu_memory"]:
        raise AssertionError(
            f"best_layout({label}): a layout must fit before it is fast — {shown} needs "
            f"{memory / 1e9:.1f} GB of {c['gpu_memory'] / 1e9:.0f} GB")
    best_time = R.step_ref(m, c, want, gb)
    raise AssertionError(
        f"best_layout({label}): the fastest fitting layout (ties: least memory, then smallest "
        f"tp, pp, zero, recompute) — got {shown} ({time or float('nan'):.4g} s), a fitting "
        f"layout takes {best_time:.4g} s")


@pytest.mark.exercises("best_layout")
@pytest.mark.parametrize("label", [
    pytest.param("70B on 512 H100", id="70B-512-GPUs", marks=pytest.mark.points(2)),
    pytest.param("8B on 8 H100", id="8B-8-GPUs", marks=pytest.mark.points(1)),
    pytest.param("8B at 128K tokens on 64 H100", id="long-context", marks=pytest.mark.points(1)),
    pytest.param(("13B on 64 A100-40GB", "1B on 16 A100-40GB micro_batch=2",
                  "8B on 8 H100, one sequence (dp=1: ZeRO stages tie)"),
                 id="13B-A100-40GB-1B-micro_batch=2-one-sequence", marks=pytest.mark.points(1)),
    pytest.param("175B on 16 A100-40GB (nothing fits)", id="nothing-fits",
                 marks=pytest.mark.points(1)),
    pytest.param(("5B-13-layers on 8 PCIe 16GB (ZeRO-3)",
                  "8B at 128K tokens on 8 H100 (recompute)",
                  "36 heads at 16K on 64 H100 (no TP=8)"),
                 id="zero=3-recompute-tp-must-divide-heads", marks=pytest.mark.points(1)),
])
def test_best_layout(launch, impl, label):
    for one in (label,) if isinstance(label, str) else label:
        _judge_best(launch, impl, one)


def _decode_hint(label: str, got) -> str:
    mn, cn, tp, b, ctx = C.DECODES[label]
    m, c = C.MODELS[mn], C.CLUSTERS[cn]
    unsplit = R.decode_ref(m, c, tp, b, ctx, split_weights=False)
    if tp > 1 and isinstance(got, float) and abs(got - unsplit) <= 0.01 * unsplit:
        return "each GPU reads only 1/tp of the weights per token: divide the weight bytes by tp"
    return ("max((2·P + kv bytes)/(tp·hbm_bw), 2·P·batch/(tp·peak_flops)) + 2·L all-reduces "
            "of 2·batch·h bytes over tp")


@pytest.mark.points(2)
@pytest.mark.exercises("kv_cache_bytes", "decode_latency")
def test_decode_latency(launch, impl):
    for label in C.DECODES:
        close(_got(launch, impl, f"kv {label}"), expected("pure", f"kv {label}"),
              f"kv_cache_bytes({label})", "2·L·h_kv·context·batch·2 bytes (bf16 K and V)")
    for label in C.DECODES:
        got = _got(launch, impl, f"decode {label}")
        close(got, expected("pure", f"decode {label}"), f"decode_latency({label})",
              _decode_hint(label, got))


@pytest.mark.points(1)
@pytest.mark.exercises("decode_throughput")
def test_decode_throughput(launch, impl):
    for label in C.DECODES:
        close(_got(launch, impl, f"throughput {label}"), expected("pure", f"throughput {label}"),
              f"decode_throughput({label})", "tokens/s per GPU = batch / (latency · tp)")


@pytest.mark.points(2)
@pytest.mark.exercises("min_tp_for_latency")
def test_min_tp_for_latency(launch, impl):
    for label in C.TARGETS:
        got, want = _got(launch, impl, f"min_tp {label}"), expected("pure", f"min_tp {label}")
        assert got == want and (got is None or isinstance(got, int)), (
            f"min_tp_for_latency({label}): the smallest tp (dividing gpus_per_node and heads) "
            f"that fits in memory and meets the target, else None — got {got!r}, "
            f"expected {want!r}")


@pytest.mark.points(1)
@pytest.mark.exercises("param_count", "memory_per_gpu", "comm_time", "collective_time",
                       "bubble_fraction", "decode_latency", "best_layout",
                       "min_tp_for_latency")
def test_bad_input_raises_value_error(launch, impl):
    result = run(launch, impl, "pure")
    names = [n for n in cases_for("pure") if n.startswith("bad ")]
    for name in names:
        got = values(result, name)[0]
        assert got == "ValueError", (
            f"{case('pure', name)['function']} ({name[4:]}): raise ValueError for a layout "
            f"that does not divide or an out-of-range argument — {got}")
