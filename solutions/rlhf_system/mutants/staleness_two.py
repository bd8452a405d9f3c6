"""Applies each received sync one batch late: batches are generated two versions stale."""
from harness.mutation import mutate

MUTATES = "placement"
FEEDBACK = "staleness"
mutate(globals(), "rlhf_system", "placement", replace=[
    ("    state = actor.state_dict()  # aliases the module's tensors: recv_weights updates the actor\n"
     "    synced = [recv_weights(state, sender, cfg.bucket_bytes)]",
     "    state = actor.state_dict()\n"
     "    staging = {k: v.clone() for k, v in state.items()}\n"
     "    synced = [recv_weights(state, sender, cfg.bucket_bytes)]\n"
     "    loaded = 0"),
    ("        exp = make_experience(actor, reference, None, make_prompts(cfg, k, rank), cfg,\n"
     "                              rollout_generator(cfg, k, rank), version=synced[-1])",
     "        exp = make_experience(actor, reference, None, make_prompts(cfg, k, rank), cfg,\n"
     "                              rollout_generator(cfg, k, rank), version=loaded)\n"
     "        if len(synced) > 1:\n"
     "            with torch.no_grad():\n"
     "                for name, t in state.items():\n"
     "                    t.copy_(staging[name])\n"
     "            loaded = synced[-1]"),
    ("            synced.append(recv_weights(state, sender, cfg.bucket_bytes))\n        _send_batch",
     "            synced.append(recv_weights(staging, sender, cfg.bucket_bytes))\n        _send_batch"),
])
