"""checkpoint keeps the forward's graph (and every intermediate it saved) to skip the replay."""
from harness.mutation import mutate

MUTATES = "autograd_memory"
FEEDBACK = "saved intermediates"
mutate(globals(), "framework", "autograd_memory", replace=[
    ("""        ctx.fn = fn
        ctx.save_for_backward(*inputs)
        # Inside Function.forward grad mode is already off: fn records and saves nothing.
        with torch.no_grad():
            return fn(*inputs)""",
     """        ctx.fn = fn
        ctx.save_for_backward(*inputs)
        with torch.enable_grad():
            ctx.kept_leaves = [t.detach().requires_grad_(t.requires_grad) for t in inputs]
            ctx.kept_out = fn(*ctx.kept_leaves)
        return ctx.kept_out.detach()"""),
    ("""        with torch.enable_grad():
            out = ctx.fn(*leaves)""",
     """        leaves, out = ctx.kept_leaves, ctx.kept_out"""),
])
