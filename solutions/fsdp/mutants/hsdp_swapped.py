"""HSDP's mesh laid out column-major: shard groups {0, 2} and {1, 3} span nodes, the
replicas sit inside one."""
from harness.mutation import mutate

MUTATES = "fsdp2"
FEEDBACK = "swapped"
mutate(globals(), "fsdp", "fsdp2", replace=[
    ("""    return init_device_mesh("cpu", (world_size // shard_size, shard_size),
                            mesh_dim_names=("replicate", "shard"))""",
     """    ranks = torch.arange(world_size).reshape(shard_size, world_size // shard_size).T
    return DeviceMesh("cpu", ranks, mesh_dim_names=("replicate", "shard"))"""),
])
