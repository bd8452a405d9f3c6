"""Shared pieces of the cuda_graph_decode hidden suite.

Parent side: decode schedules (which rows decode at which positions, with which tokens) and the
eager reference, computed with the provided model (trusted code, built from the same seed).
Rank side: `rank_decode` builds the same model, decodes a history eagerly, captures the
decoder under test (on the emulator logging the order of warm-ups and captures) and runs the
schedule through it, recording per step what `harness.graphs.watch()` saw.

A `spec` is a plain dict:
    config          DecoderConfig fields
    seed, dtype     model weights and dtype ("float64" on CPU, "float32" on a GPU)
    device, graphs  "cpu" + "emulated" (EmulatedGraph), or "cuda" + "cuda" (make_graph)
    max_batch_size, buckets (None: the default)
    history         steps decoded eagerly with model.decode before the decoder is built
    steps           steps run through GraphedDecoder.step
"""

from __future__ import annotations

from typing import Any

import torch

from grader.compare import assert_close
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


def reference(spec: dict) -> dict[str, Any]:
    """Eager results in this process: logits per step and the real slots of both caches."""
    from assignments.cuda_graph_decode.model import DecoderConfig, build_model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny ops: threads only contend with the ranks
    try:
        device = torch.device(spec["device"])
        model = build_model(DecoderConfig(**spec["config"]), seed=spec["seed"],
                            dtype=getattr(torch, spec["dtype"]), device=device)
        for step in spec["history"]:
            model.decode(*(t.to(device) for t in step))
        logits = [model.decode(*(t.to(device) for t in step)).cpu() for step in spec["steps"]]
    finally:
        torch.set_num_threads(threads)
    max_len = spec["config"]["max_len"]
    return {"logits": logits, "k_cache": model.k_cache[:, :, :max_len].cpu(),
            "v_cache": model.v_cache[:, :, :max_len].cpu()}


def rank_decode(ctx, spec: dict) -> dict[str, Any]:
    """Rank side: history eagerly, then capture and the steps through the decoder under test."""
    from assignments.cuda_graph_decode.model import DecoderConfig, build_model
    from harness import graphs

    runner = ctx.impl_module("cuda_graph_decode", "runner")
    device = torch.device(spec["device"])
    model = build_model(DecoderConfig(**spec["config"]), seed=spec["seed"],
                        dtype=getattr(torch, spec["dtype"]), device=device)
    for tokens, positions, rows in spec["history"]:
        model.decode(tokens.to(device), positions.to(device), rows.to(device))
    # On the emulator, what capture() does in order: "warm-up <batch>" for an eager
    # model.decode, "capture <batch>" for the one inside a capture (README §5: largest first,
    # each right after an eager warm-up).
    events: list[str] = []
    capturing = [False]

    class LoggedGraph(graphs.EmulatedGraph):
        def capture_begin(self) -> None:
            super().capture_begin()
            capturing[0] = True

        def capture_end(self) -> None:
            capturing[0] = False
            super().capture_end()

        def abort_capture(self) -> None:
            capturing[0] = False
            super().abort_capture()

    eager_decode = model.decode

    def logged_decode(tokens: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        events.append(f"{'capture' if capturing[0] else 'warm-up'} {tokens.shape[0]}")
        return eager_decode(tokens, *rest)

    emulated = spec["graphs"] == "emulated"
    factory = LoggedGraph if emulated else graphs.make_graph
    decoder = runner.GraphedDecoder(model, spec["max_batch_size"], buckets=spec["buckets"],
                                    make_graph=factory)
    max_len = spec["config"]["max_len"]
    before = (model.k_cache[:, :, :max_len].clone(), model.v_cache[:, :, :max_len].clone())
    if emulated:
        model.decode = logged_decode
    with graphs.watch() as w:
        decoder.capture()
    if emulated:
        del model.decode  # the steps call the model's own method again
    captures = w.captures
    after = (model.k_cache[:, :, :max_len], model.v_cache[:, :, :max_len])
    capture_change = max(float((a - b).abs().max()) for a, b in zip(after, before))
    logits, per_step = [], []
    for tokens, positions, rows in spec["steps"]:
        with graphs.watch() as w:
            out = decoder.step(tokens, positions, rows)
        logits.append(out)
        per_step.append({"captures": w.captures, "replays": w.replays,
                         "float_allocations": [a.op for a in w.allocated
                                               if a.dtype.is_floating_point]})
    return {"buckets": list(decoder.buckets), "captures": captures, "capture_events": events,
            "capture_change": capture_change, "logits": logits, "per_step": per_step,
            "k_cache": model.k_cache[:, :, :max_len], "v_cache": model.v_cache[:, :, :max_len]}


def sizes_of(spec: dict) -> list[int]:
    return [len(step[0]) for step in spec["steps"]]


def assert_step_logits(run: dict, ref: dict, spec: dict, index: int, *, hint: str = "",
                       scale: float = 1.0) -> None:
    """Step `index` of the decoder's logits equals the eager reference."""
    size = sizes_of(spec)[index]
    assert_close(run["logits"][index], ref["logits"][index], scale=scale, hint=hint,
                 what=f"logits of step {index + 1} (batch of {size})")


def assert_caches(run: dict, ref: dict, *, hint: str, scale: float = 1.0) -> None:
    for name in ("k_cache", "v_cache"):
        assert_close(run[name], ref[name], scale=scale, hint=hint,
                     what=f"{name} (real slots) after the last step")


def answer(outcomes: dict, name: str, what: str, *, expect_error: bool = False) -> Any:
    """The value of case `name`; where an exception is the expected answer, the name of the
    exception it raised. A stub is re-raised as "not implemented", any other exception of a
    case that should return as "<call> raised X: ..."."""
    outcome = outcomes[name]
    error = outcome.get("error") or {}
    if outcome.get("ok") or error.get("not_implemented") or not expect_error:
        return case_value(outcome, what)
    return error.get("type", "Exception")


def capture_order_problem(run: dict) -> str:
    """Why capture()'s warm-ups and captures break README §5 (largest bucket first, each
    capture right after an eager warm-up of that bucket); "" when they do not."""
    events = run["capture_events"]
    captured = [int(e.split()[1]) for e in events if e.startswith("capture")]
    want = sorted(run["buckets"], reverse=True)
    if captured != want:
        return (f"capture() captured model.decode for batches {captured}; expected one capture "
                f"per bucket, largest first: {want}")
    for index, event in enumerate(events):
        if event.startswith("capture") and (index == 0 or events[index - 1] !=
                                            event.replace("capture", "warm-up")):
            before = events[index - 1] if index else "nothing"
            return (f"capture() captured a batch of {event.split()[1]} right after {before}; "
                    f"each capture must follow an eager warm-up model.decode of the same "
                    f"bucket (the first run initialises what may not be set up inside a "
                    f"capture). Calls in order: {', '.join(events)}")
    return ""
