"""RMSNorm computed with torch in the wrapper: right values, but no kernel does the work."""
import torch

from harness.mutation import mutate

MUTATES = "kernels"
FEEDBACK = 'computed with torch instead of a Triton kernel'
mutate(globals(), "triton_kernels", "kernels")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    _check_rows(x, "rms_norm")
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight).to(x.dtype)
