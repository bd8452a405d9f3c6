def ring_all_reduce(tensor, op="sum", group=None):
    raise ValueError("A" * 10_000_000)
