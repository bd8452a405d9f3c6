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
    raise NotImplementedError("resolve_shape: see README §3")


def mesh_coords(rank: int, shape: Mapping[str, int]) -> dict[str, int]:
    """Coordinates of global `rank` in the mesh: a new dict `{axis: coordinate}`, axes in
    shape order, row-major (module docstring).

    Raises:
        ValueError: a bad shape (as `resolve_shape`, no -1 allowed) or rank outside
        [0, product of sizes).
    """
    raise NotImplementedError("mesh_coords: see README §3")


def mesh_rank(coords: Mapping[str, int], shape: Mapping[str, int]) -> int:
    """The global rank at `coords` (`{axis: coordinate}`, every axis of the shape, any
    order), row-major: the inverse of `mesh_coords`.

    Raises:
        ValueError: a bad shape; coords whose axes are not exactly the shape's; a coordinate
        outside [0, size).
    """
    raise NotImplementedError("mesh_rank: see README §3")


def axis_groups(shape: Mapping[str, int], axis: str) -> list[list[int]]:
    """Every group of `axis`: the ranks that share all other coordinates, each list ascending,
    the lists ordered by their first rank. There are (world / size) groups of `size` ranks.

    Example: `axis_groups({"dp": 2, "tp": 2}, "dp") == [[0, 2], [1, 3]]`.

    Raises:
        ValueError: a bad shape (no -1) or an axis the shape does not have.
    """
    raise NotImplementedError("axis_groups: see README §3")


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
    raise NotImplementedError("build_mesh: see README §3")
