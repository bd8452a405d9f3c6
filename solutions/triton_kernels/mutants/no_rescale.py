"""Online softmax that forgets to rescale the accumulator when the running max grows."""
from harness.mutation import mutate

MUTATES = "kernels"
mutate(globals(), "triton_kernels", "kernels", replace=[
    ("acc = acc * alpha[:, None] + tl.dot(", "acc = acc + tl.dot("),
])
