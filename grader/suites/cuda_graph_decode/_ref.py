"""Parent side of the cuda_graph_decode hidden suite: the eager reference and the checks.

The reference is the provided model (trusted code) built from the spec's seed and run eagerly
in this process; `assert_step_logits` and `assert_caches` compare what the rank returned with
it, and `capture_order_problem` says how capture()'s calls break README §5.
"""

from __future__ import annotations

from typing import Any

import torch

from grader.compare import assert_close
from grader.suites.cuda_graph_decode._cases import sizes_of
from grader.suites.cuda_graph_decode._ranks import real_slots


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
    k_cache, v_cache = real_slots(model, max_len)
    return {"logits": logits, "k_cache": k_cache.cpu(), "v_cache": v_cache.cpu()}


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
