"""A device mesh: ranks laid out row-major on named axes, one process group per axis line
(README §3).

Conventions used by every function below:
- A mesh shape is a dict `{axis name: size}` in order from the outermost axis to the innermost
  (Python dicts keep insertion order), e.g. `{"dp": 2, "tp": 2}`. Axis names are non-empty
  strings.
- Row-major: the innermost (last) axis varies fastest, so its groups are runs of consecutive
  ranks (one node). With sizes n_0 … n_{k−1} and coordinates c_0 … c_{k−1},
  rank = ((c_0·n_1 + c_1)·n_2 + c_2)… — for `{"dp": 2, "tp": 2}`: rank 0 = (0, 0),
  1 = (0, 1), 2 = (1, 0), 3 = (1, 1); the tp groups are [0, 1] and [2, 3], the dp groups
  [0, 2] and [1, 3].
- Ranks are global ranks of the default process group.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch.distributed as dist


def resolve_shape(shape: Mapping[str, int], world_size: int) -> dict[str, int]:
    """The mesh shape with every size known: a new dict, same axes in the same order.

    One size may be -1: it becomes world_size divided by the product of the others.

    Raises:
        ValueError: an empty shape; an axis name that is not a non-empty str; a size that is
        not an int (bool is not an int here), or < 1 other than one -1; more than one -1; a
        product of sizes that is not world_size (or, with a -1, does not divide it).
    """
    if not shape:
        raise ValueError("a mesh needs at least one axis")
    sizes: dict[str, int] = {}
    for name, size in shape.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"axis name {name!r}: must be a non-empty str")
        if isinstance(size, bool) or not isinstance(size, int) or (size < 1 and size != -1):
            raise ValueError(f"axis {name!r} has size {size!r}: sizes are ints >= 1 (or one -1)")
        sizes[name] = size
    unknown = [name for name, size in sizes.items() if size == -1]
    if len(unknown) > 1:
        raise ValueError(f"axes {unknown} are all -1: at most one size can be inferred")
    known = math.prod(size for size in sizes.values() if size != -1)
    if unknown:
        if world_size % known:
            raise ValueError(f"the other axes make {known}, which does not divide the world "
                             f"size {world_size}")
        sizes[unknown[0]] = world_size // known
    elif known != world_size:
        raise ValueError(f"mesh {sizes} holds {known} ranks, the world has {world_size}")
    return sizes


def _checked(shape: Mapping[str, int]) -> dict[str, int]:
    """`shape` checked like `resolve_shape` without a world size (no -1 allowed)."""
    if any(size == -1 for size in shape.values()):
        raise ValueError("a size of -1 needs a world size: call resolve_shape first")
    return resolve_shape(shape, math.prod(shape.values()) if shape else 0)


def mesh_coords(rank: int, shape: Mapping[str, int]) -> dict[str, int]:
    """Coordinates of global `rank` in the mesh: a new dict `{axis: coordinate}`, axes in
    shape order, row-major (module docstring).

    Raises:
        ValueError: a bad shape (as `resolve_shape`, no -1 allowed) or rank outside
        [0, product of sizes).
    """
    sizes = _checked(shape)
    if not 0 <= rank < math.prod(sizes.values()):
        raise ValueError(f"rank {rank} is outside the mesh {sizes}")
    coords: dict[str, int] = {}
    # Peel the innermost axis first: it varies fastest.
    for name in reversed(list(sizes)):
        rank, coords[name] = divmod(rank, sizes[name])
    return {name: coords[name] for name in sizes}


def mesh_rank(coords: Mapping[str, int], shape: Mapping[str, int]) -> int:
    """The global rank at `coords` (`{axis: coordinate}`, every axis of the shape, any
    order), row-major: the inverse of `mesh_coords`.

    Raises:
        ValueError: a bad shape; coords whose axes are not exactly the shape's; a coordinate
        outside [0, size).
    """
    sizes = _checked(shape)
    if set(coords) != set(sizes):
        raise ValueError(f"coordinates {dict(coords)} do not name the axes of {sizes}")
    rank = 0
    for name, size in sizes.items():
        if not 0 <= coords[name] < size:
            raise ValueError(f"coordinate {name}={coords[name]} outside [0, {size})")
        rank = rank * size + coords[name]
    return rank


def axis_groups(shape: Mapping[str, int], axis: str) -> list[list[int]]:
    """Every group of `axis`: the ranks that share all other coordinates, each list ascending,
    the lists ordered by their first rank. There are (world / size) groups of `size` ranks.

    Example: `axis_groups({"dp": 2, "tp": 2}, "dp") == [[0, 2], [1, 3]]`.

    Raises:
        ValueError: a bad shape (no -1) or an axis the shape does not have.
    """
    sizes = _checked(shape)
    if axis not in sizes:
        raise ValueError(f"no axis {axis!r} in {sizes}")
    groups: dict[int, list[int]] = {}
    for rank in range(math.prod(sizes.values())):
        coords = mesh_coords(rank, sizes)
        coords[axis] = 0
        groups.setdefault(mesh_rank(coords, sizes), []).append(rank)
    return [groups[first] for first in sorted(groups)]


class Mesh:
    """What `build_mesh` returns: the shape, this rank's place in it, a group per axis.

    Attributes:
        shape: the resolved shape (`resolve_shape`), a dict in axis order.
        coords: this rank's coordinates, `mesh_coords(dist.get_rank(), shape)`.
    """

    def __init__(self, shape: dict[str, int], coords: dict[str, int],
                 groups: dict[str, dist.ProcessGroup], ranks: dict[str, list[int]]) -> None:
        self.shape = shape
        self.coords = coords
        self._groups = groups
        self._ranks = ranks

    def group(self, axis: str) -> dist.ProcessGroup:
        """This rank's process group along `axis` (its ranks: `ranks(axis)`); ValueError for
        an unknown axis."""
        if axis not in self._groups:
            raise ValueError(f"no axis {axis!r} in {self.shape}")
        return self._groups[axis]

    def ranks(self, axis: str) -> list[int]:
        """Global ranks of this rank's group along `axis`, ascending (a new list); ValueError
        for an unknown axis."""
        if axis not in self._ranks:
            raise ValueError(f"no axis {axis!r} in {self.shape}")
        return list(self._ranks[axis])

    def size(self, axis: str) -> int:
        """Size of `axis`; ValueError for an unknown axis."""
        if axis not in self.shape:
            raise ValueError(f"no axis {axis!r} in {self.shape}")
        return self.shape[axis]

    def local_rank(self, axis: str) -> int:
        """This rank's coordinate on `axis` (= its rank inside `group(axis)`); ValueError for
        an unknown axis."""
        if axis not in self.coords:
            raise ValueError(f"no axis {axis!r} in {self.shape}")
        return self.coords[axis]


def build_mesh(shape: Mapping[str, int]) -> Mesh:
    """Build the mesh over the default process group: collective, every rank calls it with
    the same shape.

    Resolves the shape against `dist.get_world_size()` (ValueError as `resolve_shape`, raised
    before any group is created or any communication), then creates one process group for
    every group of every axis (`dist.new_group`, which every rank must call for every group in
    the same order; or torch's `init_device_mesh` with the same row-major layout), and keeps
    this rank's. Only group creation may communicate; no collective runs on the new groups.

    Returns:
        A `Mesh` whose `group(axis)` contains exactly `axis_groups(shape, axis)`'s group of
        this rank.
    """
    sizes = resolve_shape(shape, dist.get_world_size())
    me = dist.get_rank()
    groups: dict[str, dist.ProcessGroup] = {}
    ranks: dict[str, list[int]] = {}
    for axis in sizes:
        # new_group is collective over the world: every rank creates every group, in order.
        for members in axis_groups(sizes, axis):
            group = dist.new_group(members)
            if me in members:
                groups[axis], ranks[axis] = group, members
    return Mesh(sizes, mesh_coords(me, sizes), groups, ranks)
