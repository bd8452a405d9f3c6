"""Rank side of the gpt suites: probes of model.py, each in its own error scope, under a watch
for the forbidden calls.

A *probe* is a plain dict the parent builds (see `_cases.probe`): which public name of
model.py to call, on which inputs, in which dtype and layout, and what to differentiate. The
rank runs every probe of a launch with `harness.cases.run_cases`, so a function the student has
not written fails only its own probes.

`Watch` is the first line of the discipline check: a torch-function mode and a dispatch mode,
stacked, that see every call of `F.scaled_dot_product_attention` (however it is reached:
`torch.ops.aten`, `torch.nn.functional`), `F.rms_norm` (and so `nn.RMSNorm`) and
`F.multi_head_attention_forward` (and so `nn.MultiheadAttention`), and the fused aten kernels
behind them. A forbidden call raises at once *and* is recorded; the record travels back beside
the probe's outcome, so a submission that catches the error and falls back still fails.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from harness.cases import run_cases


def _said(*, message: str) -> str:
    """`message`, marked as text a student may read (grader/session/reasons.py keeps message=
    strings)."""
    return message


SDPA = _said(message="F.scaled_dot_product_attention")
MHA = _said(message="nn.MultiheadAttention")
RMS = _said(message="F.rms_norm / nn.RMSNorm")
# torch-function names -> what the student called (the name in the README's rule)
FORBIDDEN_FUNCTIONS = {
    "scaled_dot_product_attention": SDPA,
    "rms_norm": RMS,
    "multi_head_attention_forward": MHA,
    "_native_multi_head_attention": MHA,
}
# aten operator packets (prefixes) behind the same calls
FORBIDDEN_ATEN = (
    ("aten._scaled_dot_product", SDPA),
    ("aten._fused_sdp_choice", SDPA),
    ("aten.scaled_dot_product_attention", SDPA),
    ("aten._native_multi_head_attention", MHA),
    ("aten._fused_rms_norm", RMS),
    ("aten.rms_norm", RMS),
)


class ForbiddenCall(RuntimeError):
    """Raised in the rank at a forbidden call (the parent fails the test whatever happens)."""


class _FunctionWatch(TorchFunctionMode):
    def __init__(self, seen: list[str]) -> None:
        super().__init__()
        self.seen = seen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in FORBIDDEN_FUNCTIONS:
            what = FORBIDDEN_FUNCTIONS[name]
            self.seen.append(what)
            raise ForbiddenCall(f"{what} is forbidden in this assignment (README §5)")
        return func(*args, **(kwargs or {}))


class _DispatchWatch(TorchDispatchMode):
    def __init__(self, seen: list[str]) -> None:
        super().__init__()
        self.seen = seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = str(getattr(func, "overloadpacket", func))
        for prefix, what in FORBIDDEN_ATEN:
            if packet.startswith(prefix):
                self.seen.append(what)
                raise ForbiddenCall(f"{what} is forbidden in this assignment (README §5)")
        return func(*args, **(kwargs or {}))


class Watch:
    """`with Watch() as w:` ... `w.seen`: the forbidden calls made inside, in order."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self._modes = (_FunctionWatch(self.seen), _DispatchWatch(self.seen))

    def __enter__(self) -> Watch:
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)


# ---- inputs in the rank -------------------------------------------------------------------------

def relayout(value: Any, layout: str) -> Any:
    """The same values in another memory layout: "contiguous", "transposed" (the last two dims
    stored swapped) or "strided" (every other element of a buffer twice as long)."""
    if not isinstance(value, torch.Tensor) or layout == "contiguous" or value.dim() == 0:
        return value
    if layout == "transposed" and value.dim() >= 2:
        return value.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "strided":
        wide = torch.zeros(*value.shape[:-1], 2 * value.shape[-1], dtype=value.dtype)
        wide[..., ::2] = value
        return wide[..., ::2]
    return value


def _prepare(spec: dict[str, Any]) -> list[Any]:
    dtype = spec.get("dtype")
    args = []
    for i, a in enumerate(spec["args"]):
        if isinstance(a, torch.Tensor) and a.is_floating_point() and dtype is not None:
            a = a.to(dtype)
        a = relayout(a, spec.get("layout", "contiguous"))
        if i in spec["grad"]:
            a = a.detach().requires_grad_(True)  # a leaf; detach keeps the layout
        args.append(a)
    return args


def _backward(out: Any, spec: dict[str, Any], leaves: list[torch.Tensor]) -> list[Any]:
    first = out[0] if isinstance(out, tuple) else out
    if not isinstance(first, torch.Tensor) or not first.requires_grad:
        return ["no graph"] * len(leaves)
    weights = spec.get("weights")
    total = (first * weights.to(first.dtype)).sum() if weights is not None else first.sum()
    grads = torch.autograd.grad(total, leaves, allow_unused=True)
    return [g if g is not None else "unused" for g in grads]


def _call(model: Any, spec: dict[str, Any]) -> dict[str, Any]:
    args = _prepare(spec)
    leaves = [args[i] for i in spec["grad"]]
    kind = spec["kind"]
    params: dict[str, torch.Tensor] = {}
    if kind == "call":
        out = getattr(model, spec["fn"])(*args, **spec["kwargs"])
    elif kind == "module":
        module = getattr(model, spec["fn"])(*spec["init"])
        if spec.get("dtype") is not None:
            module = module.to(spec["dtype"])
        if spec.get("state") is not None:
            module.load_state_dict(spec["state"])
        params = dict(module.named_parameters())
        out = module(*args, **spec["kwargs"])
    elif kind == "apply":  # an autograd.Function: Fn.apply(*args)
        out = getattr(model, spec["fn"]).apply(*args)
    else:
        raise ValueError(f"unknown probe kind {kind!r}")
    grads = _backward(out, spec, leaves + list(params.values())) if spec["grad"] else []
    return {"result": out, "grads": grads[:len(leaves)],
            "param_grads": dict(zip(params, grads[len(leaves):]))}


def rank_probes(ctx: Any, probes: dict[str, dict]) -> dict[str, Any]:
    """Rank function: every probe in its own error scope and its own watch."""
    model = ctx.impl_module("gpt", "model")
    seen: dict[str, list[str]] = {}

    def case(key: str, spec: dict) -> Any:
        watch = Watch()
        seen[key] = watch.seen
        with watch:
            return RANK_KINDS.get(spec["kind"], _call)(model, spec)

    outcomes = run_cases(ctx, [(key, lambda key=key, spec=spec: case(key, spec))
                               for key, spec in probes.items()])
    return {"outcomes": outcomes, "forbidden": seen}


# ---- probes that do more than one call ----------------------------------------------------------

def _gpt(model: Any, spec: dict[str, Any]) -> Any:
    from assignments.gpt.config import GPTConfig

    torch.manual_seed(spec.get("seed", 0))
    gpt = model.GPT(GPTConfig(**spec["config"]))
    if spec.get("dtype") is not None:
        gpt = gpt.to(spec["dtype"])
    if spec.get("state") is not None:
        gpt.load_state_dict(spec["state"])
    return gpt


def _gpt_forward(model: Any, spec: dict[str, Any]) -> dict[str, Any]:
    gpt = _gpt(model, spec)
    out: dict[str, Any] = {}
    for name, (idx, targets) in spec["inputs"].items():
        logits, loss = gpt(idx, targets)
        out[name] = {"logits": logits, "loss": loss}
        if spec.get("backward") and loss is not None:
            loss.backward()
            out[name]["grads"] = {k: p.grad for k, p in gpt.named_parameters()
                                  if p.grad is not None}
    return out


def _gpt_generate(model: Any, spec: dict[str, Any]) -> dict[str, Any]:
    gpt = _gpt(model, spec)
    out: dict[str, Any] = {}
    for name, call in spec["calls"].items():
        gen = None
        if call.get("generator_seed") is not None:
            gen = torch.Generator().manual_seed(call["generator_seed"])
        gpt.train(call.get("training", False))
        options = {k: call[k] for k in ("temperature", "top_k", "use_cache") if k in call}
        tokens = gpt.generate(call["idx"], call["max_new_tokens"], generator=gen, **options)
        out[name] = {"tokens": tokens, "training_after": gpt.training}
    return out


def _gpt_structure(model: Any, spec: dict[str, Any]) -> dict[str, Any]:
    gpt = _gpt(model, spec)
    if spec.get("reinit"):  # spoil every parameter, then init_weights() must restore them
        with torch.no_grad():
            for p in gpt.parameters():
                p.fill_(5.0)
        gpt.init_weights()
    named = dict(gpt.named_parameters())
    stats = {k: {"std": float(p.detach().double().std()), "mean": float(p.detach().double().mean()),
                 "ones": bool((p.detach() == 1).all())} for k, p in named.items()}
    tied_same = gpt.lm_head.weight is gpt.tok_emb.weight
    tied_storage = gpt.lm_head.weight.data_ptr() == gpt.tok_emb.weight.data_ptr()
    return {"state": {k: list(v.shape) for k, v in gpt.state_dict().items()},
            "stats": stats, "tied_same": tied_same, "tied_storage": tied_storage,
            "distinct_parameters": sum(p.numel() for p in gpt.parameters())}


def _gpt_error(model: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Each call in `calls` must raise ValueError: its exception type, or "returned"."""
    gpt = _gpt(model, spec)
    out = {}
    for name, call in spec["calls"].items():
        try:
            if call["what"] == "forward":
                gpt(call["idx"])
            else:
                gpt.generate(call["idx"], call["max_new_tokens"], temperature=0.0)
            out[name] = "returned"
        except ValueError:
            out[name] = "ValueError"
        except NotImplementedError:
            raise
        except Exception as exc:  # noqa: BLE001 - the parent says which error it expected
            out[name] = type(exc).__name__
    return out


def _saved(model: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """RMSNormFunction under saved-tensor hooks: what its forward saved, then its backward."""
    x, weight = (a.to(spec["dtype"]) for a in spec["args"][:2])
    x = relayout(x, spec.get("layout", "contiguous")).detach().requires_grad_(True)
    weight = weight.detach().requires_grad_(True)
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = model.RMSNormFunction.apply(x, weight, spec["eps"])
    grad_out = spec["grad_out"].to(y.dtype)
    gx, gw = torch.autograd.grad(y, (x, weight), grad_out)
    return {"y": y, "grad_x": gx, "grad_w": gw,
            "saved": [{"shape": list(t.shape), "dtype": str(t.dtype), "value": t.detach()
                       if t.numel() <= spec["max_return"] else None} for t in saved]}


def _gradcheck(model: Any, spec: dict[str, Any]) -> bool:
    x, weight = (a.detach().to(torch.float64).requires_grad_(True) for a in spec["args"])
    return bool(torch.autograd.gradcheck(
        lambda a, b: model.RMSNormFunction.apply(a, b, spec["eps"]), (x, weight),
        eps=1e-6, atol=1e-5, rtol=1e-4, raise_exception=False))


def _rope_scores(model: Any, spec: dict[str, Any]) -> torch.Tensor:
    """q·k scores after rotation of one query and one key vector placed at every position."""
    head_dim, length = spec["head_dim"], spec["length"]
    cos, sin = model.rope_cache(length, head_dim, spec["base"], dtype=torch.float64)
    q = spec["q"].to(torch.float64).expand(1, 1, length, head_dim)
    k = spec["k"].to(torch.float64).expand(1, 1, length, head_dim)
    q_rot, k_rot = model.apply_rotary_pos_emb(q, k, cos, sin)
    return (q_rot[0, 0] @ k_rot[0, 0].T) / math.sqrt(head_dim)


RANK_KINDS = {"gpt_forward": _gpt_forward, "gpt_generate": _gpt_generate,
              "gpt_structure": _gpt_structure, "gpt_error": _gpt_error, "saved": _saved,
              "gradcheck": _gradcheck, "rope_scores": _rope_scores}
