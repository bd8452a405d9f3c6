def ring_all_reduce(tensor, op="sum", group=None):
    return tensor  # does nothing: every rank keeps its own input
