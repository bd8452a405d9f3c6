"""What travels to the ranks of the in-rank launches of Part 2 (mixed precision, checkpoints):
"ckpt4" on 4 ranks and "ckpt2" on 2 ranks (their launches are in `_cases`).

They run with the in-rank transport (DCP's planning uses `gather_object`), with functional
collectives left available (`functional_collectives=True`: DTensor's `full_tensor()` needs them;
elsewhere in-rank launches refuse them, harness/funcol.py); nothing here
counts communication, every verdict compares values with the parent's references.

Files: each rank saves to an fsspec in-memory folder (`memory://...`: the rank's own process
memory, so no file system is shared or even written; under the sandbox a rank may not write
/tmp), its suite code returns the files' bytes, and the parent merges them; "ckpt2" puts the
merged files into each rank's in-memory folder before `load_checkpoint`.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from grader.suites.fsdp._ranks import build_f2
from harness.cases import run_cases

ADAMW: dict[str, Any] = {"lr": 1e-2, "weight_decay": 0.01}
STEPS, SAVE_AFTER = 4, 2


class ReduceNet(nn.Module):
    """One bias-free 2 -> 1 block: the gradient of out.sum() is the input row, exactly."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(2, 1, bias=False)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks[0](x)


def local(t: torch.Tensor) -> torch.Tensor:
    return (t.to_local() if hasattr(t, "to_local") else t).detach().clone()


def snapshot(model: nn.Module, opt: torch.optim.Optimizer) -> dict:
    """Local shards of the parameters and of the optimizer state, by parameter name."""
    params = {n: local(p) for n, p in model.named_parameters()}
    state = {}
    for n, p in model.named_parameters():
        state[n] = {k: local(v) if isinstance(v, torch.Tensor) else v
                    for k, v in opt.state.get(p, {}).items()}
    return {"params": params, "state": state}


CHECKPOINT_ID = "memory://fsdp-checkpoint"


def _memory_fs():
    from fsspec.implementations.memory import MemoryFileSystem

    return MemoryFileSystem()


def read_folder(checkpoint_id: str) -> dict[str, torch.Tensor]:
    """{file name: bytes as uint8} of what DCP wrote under `checkpoint_id` in this process."""
    fs, root = _memory_fs(), checkpoint_id.removeprefix("memory:/")
    out = {}
    for path in sorted(fs.find(root)):
        data = fs.cat_file(path)
        out[path.rsplit("/", 1)[-1]] = torch.frombuffer(bytearray(data), dtype=torch.uint8).clone()
    return out


def write_folder(files: dict[str, torch.Tensor], checkpoint_id: str) -> str:
    fs, root = _memory_fs(), checkpoint_id.removeprefix("memory:/")
    for name, data in files.items():
        fs.pipe_file(f"{root}/{name}", data.numpy().tobytes())
    return checkpoint_id


def train(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
          steps: range) -> None:
    for s in steps:
        opt.zero_grad()
        ((model(x[s]) - y[s]) ** 2).mean().backward()
        opt.step()


def rank_ckpt4(ctx, seed: int, reduce_row: list, x: torch.Tensor, y: torch.Tensor) -> dict:
    fsdp2 = ctx.impl_module("fsdp", "fsdp2")
    keep: dict[str, Any] = {}

    def mp_values() -> dict:
        model = build_f2(seed)
        fsdp2.shard_model(model, "FULL_SHARD", param_dtype=torch.bfloat16,
                          reduce_dtype=torch.float32)
        out = model(x[0])
        ((out.float() - y[0]) ** 2).mean().backward()
        # the gradients are DTensors, which torch's stubs do not tell apart from tensors
        grads = {n: cast(Any, p.grad).full_tensor() for n, p in model.named_parameters()}
        return {"out": out.detach().clone(), "grads": grads,
                "param_dtypes": sorted({str(p.dtype) for p in model.parameters()})}

    def mp_reduce() -> list:
        model = ReduceNet()
        fsdp2.shard_model(model, "FULL_SHARD", param_dtype=torch.bfloat16,
                          reduce_dtype=torch.float32)
        model(torch.tensor([reduce_row])).sum().backward()
        return cast(Any, model.blocks[0]).weight.grad.full_tensor().tolist()

    def mp_param_only() -> str:
        model = ReduceNet()
        fsdp2.shard_model(model, "FULL_SHARD", param_dtype=torch.bfloat16)
        return str(model(torch.tensor([reduce_row])).dtype)

    def first_steps() -> None:
        model = build_f2(seed)
        fsdp2.shard_model(model, "FULL_SHARD")
        opt = torch.optim.AdamW(model.parameters(), **ADAMW)
        train(model, opt, x, y, range(SAVE_AFTER))
        keep["model"], keep["opt"] = model, opt

    def trained() -> None:
        """A case that needs the trained model raises what training raised (a stub: not
        implemented), not a KeyError."""
        if "model" not in keep:
            first_steps()

    def save() -> dict:
        trained()
        fsdp2.save_checkpoint(keep["model"], keep["opt"], CHECKPOINT_ID)
        return {"files": read_folder(CHECKPOINT_ID), **snapshot(keep["model"], keep["opt"])}

    def more_steps() -> dict:
        trained()
        train(keep["model"], keep["opt"], x, y, range(SAVE_AFTER, STEPS))
        return snapshot(keep["model"], keep["opt"])["params"]

    def final_state() -> dict:
        trained()
        return fsdp2.full_state_dict(keep["model"])

    return run_cases(ctx, [("mp values", mp_values), ("mp reduce", mp_reduce),
                           ("mp param only", mp_param_only),
                           ("first steps", first_steps), ("save", save),
                           ("more steps", more_steps), ("final state", final_state)])


def rank_ckpt2(ctx, seed: int, files: dict, x: torch.Tensor, y: torch.Tensor) -> dict:
    fsdp2 = ctx.impl_module("fsdp", "fsdp2")
    keep: dict[str, Any] = {}

    def load() -> dict:
        model = build_f2(seed + 1)  # other weights: only the load can make them right
        fsdp2.shard_model(model, "FULL_SHARD")
        opt = torch.optim.AdamW(model.parameters(), **ADAMW)
        fsdp2.load_checkpoint(model, opt, write_folder(files, CHECKPOINT_ID))
        keep["model"], keep["opt"] = model, opt
        return snapshot(model, opt)

    def more_steps() -> dict:
        if "model" not in keep:
            load()  # raises what the load raised
        train(keep["model"], keep["opt"], x, y, range(SAVE_AFTER, STEPS))
        return snapshot(keep["model"], keep["opt"])["params"]

    return run_cases(ctx, [("load", load), ("more steps", more_steps)])
