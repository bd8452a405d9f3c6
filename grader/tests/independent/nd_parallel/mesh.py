"""An independent `mesh.py`, written from the stub's docstrings and README §3 only.

Ranks sit row-major on named axes; an axis's groups are the lines of the array along it. The
arithmetic here goes through strides (the stride of an axis is the product of the sizes inside
it), and the groups are enumerated by walking every "base" rank whose coordinate on the axis
is 0.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch.distributed as dist


def _is_int(value: object) -> bool:
    """True for a real int (bool excluded)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _checked_sizes(shape: Mapping[str, int], allow_infer: bool) -> list[tuple[str, int]]:
    """The (axis, size) pairs of `shape` after the per-entry checks; -1 kept when allowed."""
    if not isinstance(shape, Mapping):
        raise ValueError(f"a mesh shape is a mapping {{axis: size}}, got {type(shape).__name__}")
    items = list(shape.items())
    if not items:
        raise ValueError("a mesh shape needs at least one axis")
    inferred = 0
    for name, size in items:
        if not isinstance(name, str) or not name:
            raise ValueError(f"axis names are non-empty strings, got {name!r}")
        if not _is_int(size):
            raise ValueError(f"axis {name!r}: size {size!r} is not an int")
        if size == -1 and allow_infer:
            inferred += 1
        elif size < 1:
            raise ValueError(f"axis {name!r}: size {size} must be >= 1"
                             + (" (or one -1)" if allow_infer else ""))
    if inferred > 1:
        raise ValueError("at most one axis size may be -1")
    return items


def _product(values: list[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def resolve_shape(shape: Mapping[str, int], world_size: int) -> dict[str, int]:
    """The mesh shape with every size known: a new dict, same axes in the same order.

    One size may be -1: it becomes world_size divided by the product of the others.

    Raises:
        ValueError: an empty shape; an axis name that is not a non-empty str; a size that is
        not an int (bool is not an int here), or < 1 other than one -1; more than one -1; a
        product of sizes that is not world_size (or, with a -1, does not divide it).
    """
    if not _is_int(world_size) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    items = _checked_sizes(shape, allow_infer=True)
    known = _product([size for _, size in items if size != -1])
    if any(size == -1 for _, size in items):
        if world_size % known != 0:
            raise ValueError(f"the known sizes of {dict(items)} (product {known}) do not "
                             f"divide the world of {world_size}")
        fill = world_size // known
        return {name: (fill if size == -1 else size) for name, size in items}
    if known != world_size:
        raise ValueError(f"the sizes of {dict(items)} multiply to {known}, "
                         f"not the world of {world_size}")
    return dict(items)


def _strides(items: list[tuple[str, int]]) -> dict[str, int]:
    """Row-major stride of each axis: the product of the sizes of the axes inside it."""
    strides: dict[str, int] = {}
    acc = 1
    for name, size in reversed(items):
        strides[name] = acc
        acc *= size
    return strides


def mesh_coords(rank: int, shape: Mapping[str, int]) -> dict[str, int]:
    """Coordinates of global `rank` in the mesh: a new dict `{axis: coordinate}`, axes in
    shape order, row-major (module docstring).

    Raises:
        ValueError: a bad shape (as `resolve_shape`, no -1 allowed) or rank outside
        [0, product of sizes).
    """
    items = _checked_sizes(shape, allow_infer=False)
    world = _product([size for _, size in items])
    if not _is_int(rank) or not 0 <= rank < world:
        raise ValueError(f"rank {rank!r} is outside [0, {world}) for the mesh {dict(items)}")
    strides = _strides(items)
    return {name: (rank // strides[name]) % size for name, size in items}


def mesh_rank(coords: Mapping[str, int], shape: Mapping[str, int]) -> int:
    """The global rank at `coords` (`{axis: coordinate}`, every axis of the shape, any
    order), row-major: the inverse of `mesh_coords`.

    Raises:
        ValueError: a bad shape; coords whose axes are not exactly the shape's; a coordinate
        outside [0, size).
    """
    items = _checked_sizes(shape, allow_infer=False)
    if not isinstance(coords, Mapping) or set(coords) != {name for name, _ in items}:
        got = sorted(map(str, coords)) if isinstance(coords, Mapping) else coords
        raise ValueError(f"coordinates need exactly the axes {[n for n, _ in items]}, "
                         f"got {got}")
    strides = _strides(items)
    rank = 0
    for name, size in items:
        c = coords[name]
        if not _is_int(c) or not 0 <= c < size:
            raise ValueError(f"coordinate {c!r} of axis {name!r} is outside [0, {size})")
        rank += c * strides[name]
    return rank


def axis_groups(shape: Mapping[str, int], axis: str) -> list[list[int]]:
    """Every group of `axis`: the ranks that share all other coordinates, each list ascending,
    the lists ordered by their first rank. There are (world / size) groups of `size` ranks.

    Example: `axis_groups({"dp": 2, "tp": 2}, "dp") == [[0, 2], [1, 3]]`.

    Raises:
        ValueError: a bad shape (no -1) or an axis the shape does not have.
    """
    items = _checked_sizes(shape, allow_infer=False)
    sizes = dict(items)
    if not isinstance(axis, str) or axis not in sizes:
        raise ValueError(f"no axis {axis!r} in the mesh {sizes}")
    world = _product(list(sizes.values()))
    stride = _strides(items)[axis]
    span = stride * sizes[axis]
    # A rank is the first of its group when its coordinate on `axis` is 0; those ranks, in
    # ascending order, are the groups' first ranks in ascending order.
    heads = [r for r in range(world) if (r % span) < stride]
    return [[head + i * stride for i in range(sizes[axis])] for head in heads]


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
    every group of every axis with `dist.new_group`, every rank the same groups in the same
    order (axes outermost first, each axis's groups by first rank), and keeps this rank's.
    No collective runs on the new groups.

    Returns:
        A `Mesh` whose `group(axis)` contains exactly `axis_groups(shape, axis)`'s group of
        this rank.
    """
    resolved = resolve_shape(shape, dist.get_world_size())
    me = dist.get_rank()
    coords = mesh_coords(me, resolved)
    layout = {axis: axis_groups(resolved, axis) for axis in resolved}
    groups: dict[str, dist.ProcessGroup] = {}
    ranks: dict[str, list[int]] = {}
    for axis, lines in layout.items():
        for line in lines:
            pg = dist.new_group(ranks=line)
            if me in line:
                assert pg is not None
                groups[axis] = pg
                ranks[axis] = list(line)
    return Mesh(resolved, coords, groups, ranks)
