"""Online softmax that forgets to rescale the accumulator when the running max grows."""
from ._source import mutate_kernels

MUTATES = "kernels"
FEEDBACK = 'rescale the accumulator when the running max changes'
mutate_kernels(globals(), [
    ("acc = acc * alpha[:, None] + tl.dot(", "acc = acc + tl.dot("),
])
