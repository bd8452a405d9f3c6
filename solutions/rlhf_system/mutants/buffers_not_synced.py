"""Disaggregated: syncs `named_parameters()` instead of the state_dict, so buffers go stale."""
from harness.mutation import mutate

MUTATES = "placement"
FEEDBACK = "buffer"
mutate(globals(), "rlhf_system", "placement", replace=[
    ("        send_weights(actor.state_dict(), rollout_ranks, cfg.bucket_bytes, 0)",
     "        send_weights(dict(actor.named_parameters()), rollout_ranks, cfg.bucket_bytes, 0)"),
    ("            send_weights(actor.state_dict(), rollout_ranks, cfg.bucket_bytes, k + 1)",
     "            send_weights(dict(actor.named_parameters()), rollout_ranks, cfg.bucket_bytes,\n"
     "                         k + 1)"),
    ("    state = actor.state_dict()  # aliases the module's tensors: recv_weights updates the actor",
     "    state = dict(actor.named_parameters())"),
])
