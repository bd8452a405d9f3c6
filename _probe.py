import torch, torch.distributed as dist
from torch import nn
from harness import launch

def fn(ctx, x, y):
    m = ctx.impl_module("ddp", "ddp")
    torch.manual_seed(ctx.rank)
    net = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 7), nn.Tanh(), nn.Linear(7, 3)).double()
    d = m.DistributedDataParallel(net, bucket_cap_mb=400 / 2**20)
    ctx.mark("bw")
    loss = ((d(x) - y) ** 2).mean()
    loss.backward()
    return {"layout": d.bucket_layout, "grads": [p.grad for p in net.parameters()], "p": [p.detach() for p in net.parameters()]}

if __name__ == "__main__":
    gx = torch.randn(6, 5, dtype=torch.float64); gy = torch.randn(6, 3, dtype=torch.float64)
    r = launch(fn, world_size=3, rank_args=[(gx[2*i:2*i+2], gy[2*i:2*i+2]) for i in range(3)], transport="sidecar", timeout=60, impl="solutions")
    print(r.values[0]["layout"])
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 7), nn.Tanh(), nn.Linear(7, 3)).double()
    ((net(gx) - gy) ** 2).mean().backward()
    for v in r.values:
        print(max(float((a - p.grad).abs().max()) for a, p in zip(v["grads"], net.parameters())))
    for w in r.wire[0]: print(w)
