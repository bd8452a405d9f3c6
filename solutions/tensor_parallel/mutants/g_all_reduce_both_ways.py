"""g all-reduces in backward too: the gradient reaching each partial result is p times too big."""
from harness.mutation import mutate

FEEDBACK = "g's backward is the identity"
MUTATES = "layers"
mutate(globals(), "tensor_parallel", "layers", replace=[
    ("""    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None""",
     """    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return _all_reduce_(grad.clone(memory_format=torch.contiguous_format), ctx.group), None"""),
    ("""    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
        return _all_reduce_(""",
     """    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
        ctx.group = group
        return _all_reduce_("""),
])
