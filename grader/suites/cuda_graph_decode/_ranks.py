"""Rank side of the cuda_graph_decode hidden suite (what runs inside rank processes).

`rank_decode(ctx, spec)` builds the provided model from the spec's seed, decodes the history
eagerly, captures the decoder under test (on the emulator logging the order of warm-ups and
captures) and runs the schedule through it, recording per step what `harness.graphs.watch()`
saw. A `spec` is described in `_cases.py`; no expected value is part of it.
"""

from __future__ import annotations

from typing import Any

import torch


def real_slots(model: Any, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Views of the real slots of the model's `k_cache` and `v_cache` buffers (the pad slot
    at `max_len` left out)."""
    return (model.get_buffer("k_cache")[:, :, :max_len],
            model.get_buffer("v_cache")[:, :, :max_len])


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
    before = tuple(cache.clone() for cache in real_slots(model, max_len))
    if emulated:
        # An instance attribute shadows the method while capture() runs, then goes again.
        model.decode = logged_decode  # type: ignore[method-assign,assignment]
    with graphs.watch() as w:
        decoder.capture()
    if emulated:
        del model.decode  # the steps call the model's own method again
    captures = w.captures
    after = real_slots(model, max_len)
    capture_change = max(float((a - b).abs().max()) for a, b in zip(after, before))
    logits, per_step = [], []
    for tokens, positions, rows in spec["steps"]:
        with graphs.watch() as w:
            out = decoder.step(tokens, positions, rows)
        logits.append(out)
        per_step.append({"captures": w.captures, "replays": w.replays,
                         "float_allocations": [a.op for a in w.allocated
                                               if a.dtype.is_floating_point]})
    k_cache, v_cache = real_slots(model, max_len)
    return {"buckets": list(decoder.buckets), "captures": captures, "capture_events": events,
            "capture_change": capture_change, "logits": logits, "per_step": per_step,
            "k_cache": k_cache, "v_cache": v_cache}
