"""'Freeing' drops the attribute views but a list of buffers keeps every gathered unit alive."""
from harness.mutation import mutate

MUTATES = "zero3"
FEEDBACK = "free each unit"
mutate(globals(), "fsdp", "zero3", replace=[
    ("""        if self.full is not None:
            self.full.untyped_storage().resize_(0)
        self.gathered = False""",
     """        if self.full is not None:
            self.kept = getattr(self, "kept", []) + [self.full]  # a stray reference
            self.full = torch.empty_like(self.full)  # the next gather fills a new buffer
            self.full.requires_grad_(True)
            self.full.register_post_accumulate_grad_hook(self._post_backward)
        self.gathered = False"""),
])
